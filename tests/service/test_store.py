"""The store's schema migrations: an older database is upgraded in place with its rows
intact, and a database from a newer FracHub is refused with a clear message."""

from __future__ import annotations

import sqlite3

import pytest
from alembic import command
from sqlalchemy import create_engine

from scheduler.service.orm import WorkloadRecord
from scheduler.service.store import StoreError, _alembic_config, open_store


def test_an_old_database_is_upgraded_with_its_rows(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    engine = create_engine(url)
    with engine.begin() as connection:
        command.upgrade(_alembic_config(connection), "0001")
        connection.exec_driver_sql(
            "INSERT INTO workloads (name, user, project, kind, state, command, env, replicas,"
            " priority, preemptible, min_runtime, submitted_at, start_seq, placement,"
            " restart_count, preemptions, message) VALUES ('job-1', 'alice', 'vision',"
            " 'training', 'pending', '\"sleep 1\"', '{}', 1, 50, 1, 0, 1.0, 0, '[]', 0, 0, '')"
        )
    engine.dispose()
    store = open_store(url)
    [record] = store.active_workloads()
    assert (record.name, record.user, record.command, record.claimant_id) == (
        "job-1",
        "alice",
        "sleep 1",
        None,
    )
    store.close()
    with sqlite3.connect(tmp_path / "old.sqlite") as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchone() == ("0004",)


def test_a_0002_database_gains_the_idle_columns_and_keeps_its_rows(tmp_path) -> None:
    """0003 adds the idle limit and warning to workloads; allocations from before have none."""
    url = f"sqlite:///{tmp_path / 'v2.sqlite'}"
    engine = create_engine(url)
    with engine.begin() as connection:
        command.upgrade(_alembic_config(connection), "0002")
        connection.exec_driver_sql(
            "INSERT INTO workloads (name, user, project, kind, state, command, env, server_name,"
            " gpus, replicas, priority, preemptible, min_runtime, submitted_at, started_at,"
            " start_seq, placement, restart_count, preemptions, claimant_id, message) VALUES"
            " ('notebook-alice', 'alice', 'vision', 'interactive', 'running', NULL, '{}', 'gpu',"
            ' 0.5, 1, 100, 0, 0, 1.0, 2.0, 1, \'[{"node": "ws", "gpus": [[0, 500]]}]\','
            " 0, 0, NULL, '')"
        )
    engine.dispose()
    store = open_store(url)
    [record] = store.active_workloads()
    assert (record.name, record.server_name, record.state, record.is_allocation) == (
        "notebook-alice",
        "gpu",
        "running",
        True,
    )
    assert record.placement[0].gpus[0].milli == 500
    assert (record.idle_timeout, record.last_activity, record.idle_stop_at) == (None, None, None)
    assert record.idle_warning is None
    record.idle_timeout = 3600.0
    record.idle_warning = "idle since 14:05 UTC; ..."
    store.commit()
    store.close()
    with sqlite3.connect(tmp_path / "v2.sqlite") as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchone() == ("0004",)
        row = db.execute("SELECT idle_timeout, idle_warning FROM workloads").fetchone()
        assert row == (3600.0, "idle since 14:05 UTC; ...")


def test_a_newer_database_is_refused(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'new.sqlite'}"
    open_store(url).close()
    with sqlite3.connect(tmp_path / "new.sqlite") as db:
        db.execute("UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(StoreError, match="newer version"):
        open_store(url)


def _job(**fields) -> WorkloadRecord:
    values = dict(
        name="job", user="alice", project="vision", kind="training", state="pending",
        command="true", env={}, gpus=0.25, replicas=1, priority=50, preemptible=True,
        min_runtime=0.0, submitted_at=1.0, start_seq=0, placement=(), restart_count=0,
        preemptions=0, message="",
    )  # fmt: skip
    return WorkloadRecord(**{**values, **fields})


def test_a_failed_flush_is_rolled_back_and_the_next_request_works(tmp_path) -> None:
    """The database refusing one request's rows (an integer beyond 64 bits) must not leave
    the shared session unusable for every request and cycle after it."""
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    kept = _job(name="kept")
    store.add(kept)
    store.commit()
    store.add(_job(name="poison", priority=-(10**20)))
    with pytest.raises(OverflowError):
        store.flush()
    store.end(failed=True)
    assert [record.name for record in store.active_workloads()] == ["kept"]
    store.add(_job(name="next"))
    store.commit()
    assert [record.name for record in store.active_workloads()] == ["kept", "next"]
    store.close()


def test_a_request_ends_in_commit_or_rollback(tmp_path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    record = _job(name="first")
    store.add(record)
    store.commit()
    record.message = "half-way"  # a request that failed after changing a row
    store.end(failed=True)
    assert record.message == ""  # rolled back: the row as stored
    record.message = "done"  # one that succeeded
    store.end(failed=False)
    store.session.expire_all()
    assert store.workload(record.id).message == "done"
    assert store.active_workloads()  # a clean read leaves nothing open
    store.end(failed=True)
    assert not store.session.in_transaction()
    store.close()
