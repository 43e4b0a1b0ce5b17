"""The one way FracHub words placements and durations and reads memory sizes
(``scheduler/common/``), which the service, the spawner, the CLI and the fleet report share."""

from __future__ import annotations

import pytest

from scheduler.common.messages import event_line, pending_headline
from scheduler.common.placement import (
    GpuShare,
    ReplicaPlacement,
    describe_placement,
    placement_from_api,
)
from scheduler.common.quantities import format_duration, gpus, memory_gib, plural


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
    assert placement_from_api(api) == engine
    assert describe_placement(engine) == "a GPU 1 (0.5); b GPUs 0, 1; c GPU 3"
    assert describe_placement(placement_from_api(None)) == ""


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


@pytest.mark.parametrize(
    "count, noun, words",
    [
        (1, "time", "1 time"),
        (2, "time", "2 times"),
        (0, "time", "0 times"),
        (0.5, "GPU", "0.5 GPU"),
        (4, "GPU", "4 GPUs"),
        (0, "GPU", "0 GPUs"),
        (3, "replica", "3 replicas"),
    ],
)
def test_one_plural_rule_for_every_count(count: float, noun: str, words: str) -> None:
    assert plural(count, noun) == words
    if noun == "GPU":
        assert gpus(count) == words


def test_timeline_lines_read_as_sentences() -> None:
    assert event_line("preempting", "for nlp/notebook-carol (x); grace period 30s") == (
        "preempted for nlp/notebook-carol (x); grace period 30s"
    )
    assert event_line("started", "on ws GPU 0") == "started on ws GPU 0"
    assert event_line("restarted", "attempt 2 on ws GPU 0") == "restarted: attempt 2 on ws GPU 0"
    assert event_line("succeeded", "exit code 0") == "succeeded: exit code 0"
    assert event_line("submitted", "") == "submitted"


def test_a_lost_attempt_reads_as_what_happened() -> None:
    """A process that vanished is "lost its process"; an attempt the cluster could not start
    says so in the backend's own sentence, not as a lost process."""
    assert event_line("lost", "its process vanished") == "lost its process: its process vanished"
    stuck = "Kubernetes found no node for its pod p for 300 s: 0/1 nodes are available; requeued"
    assert event_line("lost", stuck) == stuck


def test_a_pending_headline_says_the_plain_reason_first() -> None:
    dense = (
        "needs 1 GPU; no node has a wholly free GPU; with it vision would use 1.5 GPUs, above "
        "its fair share of 1 GPU, so nothing is reclaimed for it"
    )
    assert pending_headline(dense, "vision", 1.0, 1.0) == (
        "waiting: vision is using its 1-GPU quota; borrowed GPUs are all taken"
    )
    assert pending_headline("needs 1 GPU; no node has a wholly free GPU", "nlp", 0, 1) == (
        "waiting for room: no node has a wholly free GPU"
    )
    lowered = dense.replace("1 GPU, so", "1 GPU (lowered from 3 GPUs by its recent use), so")
    assert pending_headline(lowered, "vision", 1.0, 1.0) == (
        "waiting: vision is using its 1-GPU quota; borrowed GPUs are all taken; its recent use "
        "lowered its fair share"
    )
    never = "needs 9 GPUs on one node; the largest node has 2 GPUs, so it can never start"
    assert pending_headline(never, "vision", 0, 1) == "can never start: the largest node has 2 GPUs"
