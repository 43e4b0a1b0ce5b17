"""The store's row of a workload keeps its lifecycle: every field the lifecycle keeps has a
column of the same name, so a row read back gives the same life (needs SQLAlchemy)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.common.placement import GpuShare, ReplicaPlacement
from scheduler.engine import EvictReason, Kind, Request, Workload
from scheduler.engine.lifecycle import KEPT_FIELDS, Life, Lifecycle
from scheduler.service.persistence.orm import WorkloadRecord

pytestmark = pytest.mark.unit

ONE = (ReplicaPlacement("n", (GpuShare(0, 1000),)),)


def life(name: str, seq: int) -> Life:
    ask = Workload(
        name=name,
        queue="a",
        kind=Kind.TRAINING,
        request=Request(gpus=1),
        priority=0,
        preemptible=True,
        submitted_at=float(seq),
        seq=seq,
    )
    return Life(ask, title=f"job-{name}")


def test_the_store_row_keeps_every_kept_field_under_its_name() -> None:
    """Adding a ``KEPT`` field to ``Life`` needs a column of that name, nothing else."""
    lifecycle = Lifecycle(grace_seconds=30)
    lifecycle.submit(life("7", 7), 0)
    lifecycle.submit(life("8", 8), 0)
    lifecycle.start("7", ONE, 3)
    lifecycle.evict("7", EvictReason.RECLAIM, "8", 4)
    record = WorkloadRecord(
        id=7,
        name="job-7",
        user="u",
        project="a",
        kind="training",
        command=["true"],
        gpus=1.0,
        replicas=1,
        priority=0,
        preemptible=True,
        min_runtime=0.0,
        submitted_at=7.0,
    )
    record.keep(lifecycle["7"])
    assert (record.state, record.claimant_id) == ("preempting", 8)
    again = record.as_life()
    assert set(KEPT_FIELDS) <= set(vars(Life(again.ask)))
    assert again.kept_values() == lifecycle["7"].kept_values()
    assert again.ask == replace(life("7", 7).ask, user="u")
