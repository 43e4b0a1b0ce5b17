"""The store's length check (``orm._refuse_too_long``) on a row's update too, and on a row
the session reloaded after a rollback: the columns it checks are found once per table, and
the values read are those the row holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.engine import Kind, Request, WorkloadRequest
from scheduler.service.persistence.orm import NAME_LENGTH, TooLong, WorkloadRecord
from scheduler.service.persistence.store import open_store


def test_a_name_grown_past_its_column_is_refused_on_update(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    ask = WorkloadRequest.of(Kind.TRAINING, Request(gpus=0.5), project="vision", user="alice")
    record = WorkloadRecord.asking(
        ask, name="short", state="pending", command="true", env={}, submitted_at=1.0
    )
    store.add(record)
    store.commit()
    record.name = "n" * (NAME_LENGTH + 1)
    with pytest.raises(TooLong, match=r"workloads\.name: 256 characters, more than the 255"):
        store.commit()
    # the rollback expired the row: it reloads as stored, and a fitting change commits
    assert record.name == "short"
    record.user = "u" * NAME_LENGTH
    store.commit()
    store.session.expire_all()
    assert store.workload(record.id).user == "u" * NAME_LENGTH
    store.close()
