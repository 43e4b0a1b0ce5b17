"""The one way FracHub words placements and durations and reads memory sizes
(``scheduler/display.py``), which the service, the spawner, the CLI and the fleet report share."""

from __future__ import annotations

import pytest

from scheduler.display import describe_placement, format_duration, memory_gib, placement_of
from scheduler.engine.model import GpuShare, ReplicaPlacement


def test_placements_read_the_same_from_the_engine_and_from_the_api() -> None:
    engine = (
        ReplicaPlacement("a", (GpuShare(1, 500),)),
        ReplicaPlacement("b", (GpuShare(0, 1000), GpuShare(1, 1000))),
        ReplicaPlacement("c", (GpuShare(3, 1000),)),
    )
    api = [
        {"node": "a", "gpus": [{"index": 1, "share": 0.5, "uuid": "GPU-x"}]},
        {"node": "b", "gpus": [{"index": 0, "share": 1.0}, {"index": 1, "share": 1.0}]},
        {"node": "c", "gpus": [{"index": 3, "share": 1}]},
    ]
    assert placement_of(api) == engine
    assert describe_placement(engine) == "a GPU 1 (0.5); b GPUs 0, 1; c GPU 3"
    assert describe_placement(placement_of(None)) == ""


@pytest.mark.parametrize(
    "text, bare, gib",
    [
        ("20GiB", None, 20.0),
        ("20 gb", None, 20.0),
        ("20Gi", None, 20.0),
        ("512MiB", None, 0.5),
        ("512m", None, 0.5),
        ("20", None, None),  # in a profile a bare number is a GPU count
        ("20", "G", 20.0),  # on the command line it is GiB
        ("2048", "M", 2.0),
        ("20TB", "G", None),
        ("lots", "G", None),
    ],
)
def test_one_memory_grammar(text: str, bare: str | None, gib: float | None) -> None:
    assert memory_gib(text, bare=bare) == gib


def test_durations_round_down_to_two_units() -> None:
    assert [format_duration(s) for s in (59.9, 3599, 86399, 90061)] == [
        "59s",
        "59m59s",
        "23h59m",
        "1d01h",
    ]
