"""The store's schema migrations, on SQLite and on PostgreSQL: an older database is upgraded
in place with its rows intact, and a database from a newer FracHub is refused with a clear
message."""

from __future__ import annotations

from dataclasses import replace

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, insert, inspect
from sqlalchemy.exc import IntegrityError

from scheduler.engine import Kind, Request, WorkloadRequest
from scheduler.service.persistence.orm import (
    Base,
    EventRecord,
    UsageRecord,
    UsageSampleRecord,
    WorkloadRecord,
)
from scheduler.service.persistence.store import (
    MIGRATIONS,
    StoreError,
    _alembic_config,
    engine_url,
    open_store,
)

from .conftest import DATABASES

HEAD = ScriptDirectory(str(MIGRATIONS)).get_current_head()
"""The newest revision: every upgrade test ends there, whatever migration came last."""


@pytest.fixture(params=DATABASES)
def url(request, tmp_path) -> str:
    """An empty database: a SQLite file, or a new database on the session's PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite'}"
    return request.getfixturevalue("postgres").database()


def sql(url: str, statement: str) -> list[tuple]:
    """Run one statement in its own transaction; its rows (if it returns any)."""
    engine = create_engine(engine_url(url))
    try:
        with engine.begin() as connection:
            result = connection.exec_driver_sql(statement)
            return [tuple(row) for row in result] if result.returns_rows else []
    finally:
        engine.dispose()


def at_revision(url: str, revision: str, insert: str) -> None:
    engine = create_engine(engine_url(url))
    with engine.begin() as connection:
        command.upgrade(_alembic_config(connection), revision)
        connection.exec_driver_sql(insert)
    engine.dispose()


def test_an_old_database_is_upgraded_with_its_rows(url) -> None:
    at_revision(
        url,
        "0001",
        'INSERT INTO workloads (name, "user", project, kind, state, command, env, replicas,'
        " priority, preemptible, min_runtime, submitted_at, start_seq, placement,"
        " restart_count, preemptions, message) VALUES ('job-1', 'alice', 'vision',"
        " 'training', 'pending', '\"sleep 1\"', '{}', 1, 50, TRUE, 0, 1.0, 0, '[]', 0, 0, '')",
    )
    store = open_store(url)
    [record] = store.active_workloads()
    assert (record.name, record.user, record.command, record.claimant_id) == (
        "job-1",
        "alice",
        "sleep 1",
        None,
    )
    store.close()
    assert sql(url, "SELECT version_num FROM alembic_version") == [(HEAD,)]


def test_a_0002_database_gains_the_idle_columns_and_keeps_its_rows(url) -> None:
    """0003 adds the idle limit and warning to workloads; allocations from before have none."""
    at_revision(
        url,
        "0002",
        'INSERT INTO workloads (name, "user", project, kind, state, command, env, server_name,'
        " gpus, replicas, priority, preemptible, min_runtime, submitted_at, started_at,"
        " start_seq, placement, restart_count, preemptions, claimant_id, message) VALUES"
        " ('notebook-alice', 'alice', 'vision', 'interactive', 'running', NULL, '{}', 'gpu',"
        ' 0.5, 1, 100, FALSE, 0, 1.0, 2.0, 1, \'[{"node": "ws", "gpus": [[0, 500]]}]\','
        " 0, 0, NULL, '')",
    )
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
    assert record.gpu_model is None  # 0004: any GPU model
    assert (record.checkpoint_interval, record.checkpointed_at) == (None, None)  # 0005
    record.idle_timeout = 3600.0
    record.idle_warning = "idle since 14:05 UTC; ..."
    store.commit()
    store.close()
    assert sql(url, "SELECT version_num FROM alembic_version") == [(HEAD,)]
    assert sql(url, "SELECT idle_timeout, idle_warning FROM workloads") == [
        (3600.0, "idle since 14:05 UTC; ...")
    ]


def _rows(count: int) -> dict:
    """``count`` workloads of three users (a third of them finished, some of them in one
    sweep) with their events and usage intervals, as Core rows for each table."""
    workloads, events, usage = [], [], []
    for i in range(1, count + 1):
        final = i % 3 == 0
        workloads.append(
            dict(
                id=i, name=f"job-{i}", user=f"user-{i % 3}", project=("vision", "nlp")[i % 2],
                kind="training", state="succeeded" if final else "pending", command=["true"],
                env={"I": str(i)}, gpus=0.25, replicas=1, priority=50, preemptible=True,
                min_runtime=0.0, submitted_at=float(i), finished_at=i + 0.5 if final else None,
                start_seq=i, placement=[], restart_count=0, preemptions=0, message=f"m{i}",
                sweep_id=1 if i <= 4 else None, sweep_parallel=2 if i <= 4 else None,
            )
        )  # fmt: skip
        events.append(dict(workload_id=i, time=float(i), type="submitted", message=f"e{i}"))
        if final:
            usage.append(dict(workload_id=i, user=f"user-{i % 3}", project="vision", gpus=0.25,
                              start=float(i), end=i + 0.5))  # fmt: skip
    return {WorkloadRecord.__table__: workloads, EventRecord.__table__: events,
            UsageRecord.__table__: usage}  # fmt: skip


def _dump(url: str) -> dict[str, list[tuple]]:
    return {
        table: sql(url, f"SELECT * FROM {table} ORDER BY id")
        for table in ("workloads", "events", "usage")
    }


def _columns_of(before: dict[str, list[tuple]], dump: dict[str, list[tuple]]) -> dict:
    """``dump`` with only the columns ``before`` had: a later migration adds columns at the
    end of a table (0009: the idempotency key), which the rows from before leave empty."""
    return {table: [row[: len(before[table][0])] for row in rows] for table, rows in dump.items()}


def _indexes(url: str) -> dict[str, list[str]]:
    engine = create_engine(engine_url(url))
    try:
        return {
            index["name"]: index["column_names"]
            for index in inspect(engine).get_indexes("workloads")
        }
    finally:
        engine.dispose()


def test_a_0007_database_gains_the_list_indexes_and_keeps_every_row(url) -> None:
    """0008 replaces the single-column indexes of the list filters by (column, id) ones
    and indexes the finish time; every row of every table stays as it was, the lists read
    the new indexes, and a downgrade puts the old ones back."""
    engine = create_engine(engine_url(url))
    with engine.begin() as connection:
        command.upgrade(_alembic_config(connection), "0007")
        for table, rows in _rows(300).items():
            connection.execute(insert(table), rows)
    engine.dispose()
    if url.startswith("postgresql"):  # ids given explicitly: move the sequence past them
        sql(url, "SELECT setval('workloads_id_seq', 300)")
    before = _dump(url)
    assert len(before["workloads"]) == 300 and len(before["usage"]) == 100
    assert {"ix_workloads_user", "ix_workloads_state"} <= set(_indexes(url))

    store = open_store(url)
    assert _columns_of(before, _dump(url)) == before
    indexes = _indexes(url)
    assert indexes["ix_workloads_user_id_state"] == ["user", "id", "state"]
    assert indexes["ix_workloads_project_id_state"] == ["project", "id", "state"]
    assert indexes["ix_workloads_state_id"] == ["state", "id"]
    for column in ("user", "project", "state"):
        assert f"ix_workloads_{column}" not in indexes
    assert indexes["ix_workloads_finished_at"] == ["finished_at"]
    with store.engine.connect() as connection:  # the schema is the one the ORM declares
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert not [d for d in differences if d[0] in ("add_index", "remove_index")], differences
    page = store.workloads(users=["user-1"], before=100, limit=5)
    assert [record.id for record in page.records] == [97, 94, 91, 88, 85] and page.more
    assert len(store.active_workloads()) == 200 and len(store.sweep_members(1)) == 4
    store.add(_job(name="after"))
    store.commit()
    assert store.workloads(limit=1).records[0].id == 301
    if url.startswith("sqlite"):
        plan = sql(
            url,
            "EXPLAIN QUERY PLAN SELECT * FROM workloads WHERE user = 'user-1' AND id < 100"
            " ORDER BY id DESC LIMIT 5",
        )
        assert any("ix_workloads_user_id_state" in row[-1] for row in plan), plan
    store.close()

    engine = create_engine(engine_url(url))
    with engine.begin() as connection:
        command.downgrade(_alembic_config(connection), "0007")
    engine.dispose()
    assert {"ix_workloads_user", "ix_workloads_project", "ix_workloads_state"} <= set(_indexes(url))
    assert "ix_workloads_user_id_state" not in _indexes(url)
    assert len(sql(url, "SELECT id FROM workloads")) == 301


def test_a_0008_database_gains_idempotency_keys_and_keeps_every_row(url) -> None:
    """0009 adds each workload's idempotency key and body digest, unique per user: the rows
    from before have none (and many NULL keys never collide), a key finds its workload, the
    same key is refused for a second workload of the same user but not of another, and a
    downgrade takes the columns away again."""
    engine = create_engine(engine_url(url))
    with engine.begin() as connection:
        command.upgrade(_alembic_config(connection), "0008")
        for table, rows in _rows(30).items():
            connection.execute(insert(table), rows)
    engine.dispose()
    if url.startswith("postgresql"):
        sql(url, "SELECT setval('workloads_id_seq', 30)")
    before = _dump(url)

    store = open_store(url)
    assert sql(url, "SELECT version_num FROM alembic_version") == [(HEAD,)]
    assert sql(url, "SELECT count(*) FROM workloads WHERE idempotency_key IS NULL") == [(30,)]
    after = _dump(url)
    assert _columns_of(before, after) == before
    assert {row[len(before["workloads"][0]) :] for row in after["workloads"]} == {(None, None)}
    assert _indexes(url)["ix_workloads_user_idempotency_key"] == ["user", "idempotency_key"]
    with store.engine.connect() as connection:  # the schema is the one the ORM declares
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    added = ("add_index", "remove_index", "add_column", "remove_column")
    assert not [d for d in differences if d[0] in added], differences
    first = _job(name="keyed", idempotency_key="k-1", request_digest="d" * 64)
    store.add(first, _job(name="bob's", user="bob", idempotency_key="k-1"), _job(name="none"))
    store.commit()
    assert store.submitted_with("alice", "k-1") is first
    assert store.submitted_with("bob", "k-1").name == "bob's"
    assert store.submitted_with("alice", "k-2") is None
    assert len(store.active_workloads()) == 23
    store.add(_job(name="again", idempotency_key="k-1"))
    with pytest.raises(IntegrityError):
        store.flush()
    store.end(failed=True)
    assert [r.name for r in store.workloads(users=["alice"], limit=5).records] == ["none", "keyed"]
    store.close()

    engine = create_engine(engine_url(url))
    with engine.begin() as connection:
        command.downgrade(_alembic_config(connection), "0008")
    engine.dispose()
    assert "ix_workloads_user_idempotency_key" not in _indexes(url)
    assert len(sql(url, "SELECT id FROM workloads")) == 33


def test_a_newer_database_is_refused(url) -> None:
    open_store(url).close()
    sql(url, "UPDATE alembic_version SET version_num = '9999'")
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


def test_a_postgresql_url_uses_the_psycopg_driver() -> None:
    """What the chart's docs write (postgresql://user@host/db) needs no driver name."""
    assert engine_url("postgresql://frachub@db/frachub") == (
        "postgresql+psycopg://frachub@db/frachub"
    )
    assert engine_url("postgres://u@h/d") == "postgresql+psycopg://u@h/d"
    assert engine_url("sqlite:///x.sqlite") == "sqlite:///x.sqlite"


def test_usage_sums_each_intervals_overlap_with_the_range(url) -> None:
    """GPU-hours are summed by the database: each interval counts only within [start, end),
    an open one runs to now, and one wholly outside counts nothing."""
    store = open_store(url)
    jobs = [_job(user=user, project=project) for user, project in
            (("alice", "vision"), ("bob", "vision"), ("alice", "nlp"))]  # fmt: skip
    store.add(*jobs)
    store.flush()
    hour = 3600.0
    intervals = [
        (jobs[0], 2.0, 1 * hour, 2 * hour),  # within: 2 GPU-hours
        (jobs[0], 1.0, 0.5 * hour, 1.5 * hour),  # straddles start: half an hour of it
        (jobs[0], 0.5, 3.5 * hour, 5 * hour),  # straddles end: half an hour of it
        (jobs[1], 1.0, 0.0, 0.9 * hour),  # ended before start: nothing
        (jobs[1], 0.25, 2 * hour, None),  # open: runs to now (3 h): 1 hour
        (jobs[2], 1.0, 4 * hour, None),  # open, started at end: nothing
        (jobs[2], 1.0, 3 * hour, 3 * hour),  # no length: nothing
    ]
    for job, gpus, start, end in intervals:
        store.add(UsageRecord(workload_id=job.id, user=job.user, project=job.project,
                              gpus=gpus, start=start, end=end))  # fmt: skip
    store.commit()
    rows = store.usage(1 * hour, 4 * hour, now=3 * hour)
    assert [(row.project, row.user) for row in rows] == [("vision", "alice"), ("vision", "bob")]
    assert [round(row.gpu_hours, 9) for row in rows] == [2.0 + 0.5 + 0.25, 0.25]
    [bob] = store.usage(1 * hour, 4 * hour, now=3 * hour, users=["bob"])
    assert bob.user == "bob" and round(bob.gpu_hours, 9) == 0.25
    assert store.usage(1 * hour, 4 * hour, now=3 * hour, projects=["nlp"]) == []
    store.close()


def test_sample_buckets_keep_each_buckets_peak_and_count(url) -> None:
    """A bucket's mean hides a one-sample spike; its peak and its sample count keep it, so
    the history names the true peak and weighs means right. The oldest sample's time is the
    first of all projects'."""
    store = open_store(url)
    assert store.first_sample_time() is None
    used = [1.0, 1.0, 2.0, 1.0, 0.5, 0.5]  # three to a bucket of 3 minutes
    # within the first half of each bucket: SQLite truncates the bucket number, PostgreSQL
    # rounds it, and both must put these in the same buckets
    times = [60.0 + offset for start in (0.0, 180.0) for offset in (start, start + 18, start + 36)]
    store.add_samples(
        UsageSampleRecord(time=times[k], project="vision", allocated_gpus=gpus,
                          deserved_gpus=1.0, fair_share_gpus=1.5, running=1, pending=k % 2,
                          cluster_gpus=2.0)
        for k, gpus in enumerate(used)
    )  # fmt: skip
    store.add_samples(
        [UsageSampleRecord(time=30.0, project="nlp", allocated_gpus=0.0, deserved_gpus=1.0,
                           fair_share_gpus=1.0, running=0, pending=0, cluster_gpus=2.0)]
    )  # fmt: skip
    store.commit()
    buckets = store.sample_buckets(60.0, 420.0, 180.0, ["vision"])
    assert [(b.samples, round(b.allocated_gpus, 6), b.peak_allocated_gpus) for b in buckets] == [
        (3, round(4.0 / 3, 6), 2.0),
        (3, round(2.0 / 3, 6), 1.0),
    ]
    assert [b.pending for b in buckets] == [1, 1]
    assert store.first_sample_time() == 30.0
    store.close()


@pytest.mark.parametrize(
    "request_",
    [
        Request(gpus=0.25),
        Request(gpus=2.0, replicas=3, gpu_models=frozenset({"A100", "H100"})),
        Request(gpu_memory_mib=12 * 1024),
    ],
    ids=["fraction", "gang-on-models", "memory"],
)
def test_what_was_asked_is_stored_and_read_back_unchanged(tmp_path, request_) -> None:
    """The store maps a request once each way: what a row reads back is what was asked."""
    ask = WorkloadRequest.of(
        Kind.TRAINING,
        request_,
        project="vision",
        user="alice",
        min_runtime=60.0,
        max_runtime=3600.0,
        checkpoint_interval=600.0,
    )
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    record = WorkloadRecord.asking(
        ask, name="job", state="pending", command="true", env={}, submitted_at=1.0
    )
    store.add(record)
    store.commit()
    store.session.expire_all()
    assert store.workload(record.id).asked() == ask
    store.close()


def test_a_postgresql_server_that_never_answers_is_given_up_on(monkeypatch) -> None:
    """A server that accepts the connection and then says nothing (a stalled host, a full
    backlog behind a proxy) ends in StoreError after the connect timeout, not a hang."""
    import socket
    import threading

    from scheduler.service.persistence import store as store_module

    monkeypatch.setattr(store_module, "CONNECT_TIMEOUT", 1)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    outcome: list[BaseException | None] = []

    def attempt() -> None:
        try:
            open_store(f"postgresql://frachub@127.0.0.1:{port}/frachub")
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(60)  # generous: the point is that it ends at all
    listener.close()
    assert outcome, "open_store hung on a server that never answers"
    assert isinstance(outcome[0], StoreError)
    assert "timeout" in str(outcome[0]).lower()


def test_a_0009_database_gains_cpu_and_memory_quotas_and_keeps_its_queues(url) -> None:
    """0010 adds each queue's CPU and memory quota, limit and weight (rule 3b): queues from
    before have none (unlimited), a quota set through the ORM is read back by the engine's
    ``Queue`` in its units, and a downgrade takes the columns away and keeps the queues."""
    at_revision(
        url,
        "0009",
        "INSERT INTO queues (name, parent, deserved_gpus, over_quota_weight, limit_gpus,"
        " priority, members, source, position) VALUES"
        " ('vision', NULL, 4, 1, 6, 0, '[\"alice\"]', 'config', 0),"
        " ('nlp', NULL, 2, 2, NULL, 1, '[]', 'api', 1)",
    )
    store = open_store(url)
    assert sql(url, "SELECT version_num FROM alembic_version") == [(HEAD,)]
    queues = {record.name: record.as_queue() for record in store.queues()}
    assert (queues["vision"].deserved_gpus, queues["vision"].limit_gpus) == (4, 6)
    assert not queues["vision"].has_host_quota and not queues["nlp"].has_host_quota
    with store.engine.connect() as connection:  # the schema is the one the ORM declares
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert not [d for d in differences if d[0] in ("add_column", "remove_column")], differences
    record = next(r for r in store.queues() if r.name == "vision")
    record.set_quota(replace(record.as_queue(), deserved_cpu_milli=32_000, limit_memory_mib=2**40))
    store.commit()
    store.close()
    store = open_store(url)
    vision = next(r for r in store.queues() if r.name == "vision").as_queue()
    assert (vision.deserved_cpu_milli, vision.limit_memory_mib) == (32_000, 2**40)
    assert vision.limit_cpu_milli is None and vision.over_quota_weight_cpu is None
    store.close()

    engine = create_engine(engine_url(url))
    with engine.begin() as connection:
        command.downgrade(_alembic_config(connection), "0009")
    engine.dispose()
    assert sql(url, "SELECT name, deserved_gpus FROM queues ORDER BY position") == [
        ("vision", 4),
        ("nlp", 2),
    ]
