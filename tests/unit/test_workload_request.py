"""``WorkloadRequest``: what was asked, with rule 7's defaults, made into the engine's
``Workload`` in one place; and what the never-starts check reads of it."""

from __future__ import annotations

import pytest

from scheduler.engine import Kind, Request, Workload, WorkloadRequest
from scheduler.engine.feasibility import shape

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "kind, preemptible, priority, expected",
    [
        (Kind.TRAINING, None, None, (True, 50)),
        (Kind.INFERENCE, None, None, (False, 125)),
        (Kind.INTERACTIVE, None, None, (False, 100)),
        (Kind.INTERACTIVE, True, None, (True, 75)),
        (Kind.TRAINING, False, 7, (False, 7)),
    ],
)
def test_defaults_follow_the_kind_unless_asked(kind, preemptible, priority, expected) -> None:
    ask = WorkloadRequest.of(kind, Request(gpus=1.0), preemptible=preemptible, priority=priority)
    assert (ask.preemptible, ask.priority) == expected


def test_the_engine_sees_what_was_asked() -> None:
    request = Request(gpus=0.5, gpu_models=frozenset({"A100"}))
    ask = WorkloadRequest.of(
        Kind.TRAINING, request, project="vision", user="alice", checkpoint_interval=600.0
    )
    assert ask.workload("7", seq=7, submitted_at=3.0) == Workload(
        name="7",
        queue="vision",
        kind=Kind.TRAINING,
        request=request,
        priority=50,
        preemptible=True,
        submitted_at=3.0,
        seq=7,
        min_runtime=0.0,
        user="alice",
        checkpoint_interval=600.0,
    )


def test_whether_it_can_start_depends_on_its_shape_not_on_who_asked() -> None:
    ask = WorkloadRequest.of(Kind.TRAINING, Request(gpus=1.0), project="vision")
    mine = WorkloadRequest.of(
        Kind.TRAINING,
        Request(gpus=1.0),
        project="vision",
        user="alice",
        min_runtime=60.0,
        max_runtime=3600.0,
        checkpoint_interval=600.0,
    )
    assert shape(mine) == shape(ask)
    assert shape(WorkloadRequest.of(Kind.TRAINING, Request(gpus=2.0), project="vision")) != (
        shape(ask)
    )
