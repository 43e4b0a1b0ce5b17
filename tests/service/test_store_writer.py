"""The store's writer thread (``scheduler/service/persistence/writer.py``), on SQLite and on
PostgreSQL: new workloads are committed off the event loop, a commit the database refuses
leaves nothing behind, a committed row joins the scheduler's session even when a list read
it back meanwhile, and the thread stops with the service, keeping every workload answered
201 across a restart.

The database refuses a commit for real: a trigger rejects workloads named ``doomed``."""

from __future__ import annotations

import asyncio
import signal
import threading
from pathlib import Path

import httpx
import pytest
from hubharness import API_PATH, Hub
from service_client import service_config
from sqlalchemy import create_engine, inspect, select
from sqlalchemy.exc import DBAPIError

from scheduler.engine import Kind, Request, WorkloadRequest
from scheduler.service.persistence.orm import EventRecord, TooLong, WorkloadRecord
from scheduler.service.persistence.store import engine_url, open_store
from scheduler.service.persistence.writer import StoreWriter

from .conftest import DATABASES

SQLITE_TRIGGER = """
CREATE TRIGGER refuse_doomed BEFORE INSERT ON workloads WHEN NEW.name = 'doomed'
BEGIN SELECT RAISE(ABORT, 'doomed workloads are refused'); END
"""
POSTGRES_TRIGGER = [
    """
    CREATE FUNCTION refuse_doomed() RETURNS trigger AS $$
    BEGIN
        IF NEW.name = 'doomed' THEN RAISE EXCEPTION 'doomed workloads are refused'; END IF;
        RETURN NEW;
    END $$ LANGUAGE plpgsql
    """,
    """
    CREATE TRIGGER refuse_doomed BEFORE INSERT ON workloads
    FOR EACH ROW EXECUTE FUNCTION refuse_doomed()
    """,
]


def refuse_doomed(url: str) -> None:
    engine = create_engine(engine_url(url))
    try:
        with engine.begin() as connection:
            if engine.dialect.name == "sqlite":
                connection.exec_driver_sql(SQLITE_TRIGGER)
            else:
                for statement in POSTGRES_TRIGGER:
                    connection.exec_driver_sql(statement)
    finally:
        engine.dispose()


@pytest.fixture(params=DATABASES)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite'}"
    return request.getfixturevalue("postgres").database()


def new_record(name: str) -> WorkloadRecord:
    ask = WorkloadRequest.of(Kind.TRAINING, Request(gpus=0.5), project="vision", user="alice")
    return WorkloadRecord.asking(
        ask, name=name, state="pending", command="true", env={}, submitted_at=1.0
    )


def add_event(records: list[WorkloadRecord], session) -> None:
    for record in records:
        session.add(EventRecord(workload_id=record.id, time=1.0, type="submitted", message=""))


def test_a_committed_row_joins_the_scheduler_session_even_after_a_list_read_it(url: str) -> None:
    store = open_store(url)
    writer = StoreWriter(store.engine)
    record = new_record("first")
    asyncio.run(writer.insert([record], add_event))
    assert record.id is not None
    # a list reads the new row back into the scheduler's session before the loop takes it in
    (copy,) = store.workloads().records
    assert copy is not record and copy.id == record.id
    store.adopt([record])
    assert store.workload(record.id) is record
    record.state = "running"
    store.commit()
    with store.engine.connect() as connection:
        state = connection.execute(select(WorkloadRecord.state)).scalar_one()
        events = connection.execute(select(EventRecord.workload_id)).scalars().all()
    assert state == "running" and events == [record.id]
    writer.close()
    store.close()


def test_a_refused_commit_stores_nothing_and_the_next_one_goes_through(url: str) -> None:
    store = open_store(url)
    refuse_doomed(url)
    writer = StoreWriter(store.engine)
    doomed, kept = new_record("doomed"), new_record("kept")
    with pytest.raises(DBAPIError, match="doomed workloads are refused"):
        asyncio.run(writer.insert([kept, doomed], add_event))
    kept.id = doomed.id = None
    asyncio.run(writer.insert([kept], add_event))
    with store.engine.connect() as connection:
        names = connection.execute(select(WorkloadRecord.name)).scalars().all()
        events = connection.execute(select(EventRecord.workload_id)).scalars().all()
    assert names == ["kept"] and events == [kept.id]
    writer.close()
    store.close()


def test_a_group_gets_its_ids_in_order_and_what_prepare_changes_is_stored(url: str) -> None:
    """The rows go in by one multi-row insert: each gets its own id back, in the order
    given; a name ``prepare`` sets from the id (as a default name is) and a sweep's fields
    are written by an update in the same transaction; defaults left unset are stored and
    loaded, so the committed rows are detached objects needing no SQL to read."""
    store = open_store(url)
    writer = StoreWriter(store.engine)
    records = [new_record(name) for name in ("a", "", "c", "")]
    records[2].env = None  # a column's default (an empty mapping) applies, as in the ORM

    def prepare(records: list[WorkloadRecord], session) -> None:
        add_event(records, session)
        for record in records:
            if not record.name:
                record.name = f"job-{record.id}"
        records[0].sweep_id = records[0].id

    asyncio.run(writer.insert(records, prepare))
    ids = [record.id for record in records]
    assert ids == sorted(ids) and len(set(ids)) == 4
    for record in records:
        state = inspect(record)
        assert state.detached and state.key is not None and not state.expired_attributes
        assert not state.unloaded  # every column there: reading one runs no SQL
    with store.engine.connect() as connection:
        stored = connection.execute(
            select(
                WorkloadRecord.id, WorkloadRecord.name, WorkloadRecord.env, WorkloadRecord.sweep_id
            ).order_by(WorkloadRecord.id)
        ).all()
        events = connection.execute(select(EventRecord.workload_id)).scalars().all()
        # never set, so SQL NULL as the ORM wrote it (not JSON's null)
        without = (
            select(WorkloadRecord.id)
            .where(WorkloadRecord.handle.is_(None))
            .order_by(WorkloadRecord.id)
        )
        assert connection.execute(without).scalars().all() == ids
    assert [tuple(row) for row in stored] == [
        (ids[0], "a", {}, ids[0]),
        (ids[1], f"job-{ids[1]}", {}, None),
        (ids[2], "c", {}, None),
        (ids[3], f"job-{ids[3]}", {}, None),
    ]
    assert [record.env for record in records] == [{}, {}, {}, {}]
    assert sorted(events) == ids
    store.adopt(records)  # and the scheduler's session takes them without a query
    assert store.workload(ids[1]) is records[1] and records[1].name == f"job-{ids[1]}"
    writer.close()
    store.close()


def test_a_value_longer_than_its_column_is_refused_on_insert_and_on_update(url: str) -> None:
    """The rows bypass the ORM, whose hook checked lengths: the writer checks each row and
    each change itself, so PostgreSQL and SQLite refuse alike and nothing is stored."""
    store = open_store(url)
    writer = StoreWriter(store.engine)
    with pytest.raises(TooLong, match=r"workloads\.name: 256 characters"):
        asyncio.run(writer.insert([new_record("x" * 256)], add_event))

    def too_long_name(records: list[WorkloadRecord], session) -> None:
        records[0].name = "y" * 300

    with pytest.raises(TooLong, match=r"workloads\.name: 300 characters"):
        asyncio.run(writer.insert([new_record("short")], too_long_name))

    def too_long_event(records: list[WorkloadRecord], session) -> None:
        session.add(EventRecord(workload_id=records[0].id, time=1.0, type="t" * 33))

    with pytest.raises(TooLong, match=r"events\.type: 33 characters"):
        asyncio.run(writer.insert([new_record("short")], too_long_event))
    with store.engine.connect() as connection:
        assert connection.execute(select(WorkloadRecord.id)).all() == []
        assert connection.execute(select(EventRecord.id)).all() == []
    writer.close()
    store.close()


def test_the_writer_thread_ends_with_close_and_takes_no_more_work(url: str) -> None:
    store = open_store(url)
    writer = StoreWriter(store.engine)
    asyncio.run(writer.insert([new_record("one")], add_event))
    assert any(t.name.startswith("frachub-store-writer") for t in threading.enumerate())
    writer.close()
    assert not any(t.name.startswith("frachub-store-writer") for t in threading.enumerate())
    with pytest.raises(RuntimeError):
        asyncio.run(writer.insert([new_record("two")], add_event))
    store.close()


def listed(client: httpx.Client) -> dict[str, dict]:
    items = client.get("workloads", params={"limit": 100}).json()
    return {item["name"]: item for item in items}


@pytest.mark.parametrize("kind", DATABASES)
def test_a_refused_submission_answers_500_and_its_group_is_stored_and_survives_a_restart(
    kind: str,
    hub: Hub,
    start_service,
    make_user,
    api,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    """Six submissions at once share the writer's commits; the database refuses one. It
    answers 500 in the error shape and is nowhere, the others answer 201, each with its
    ``submitted`` event; a SIGTERM during a burst stops the service (and its writer thread)
    cleanly, and after the restart every workload answered 201 is there, nothing else."""
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'writer.sqlite'}"
    else:
        url = request.getfixturevalue("postgres").database()
    service = start_service(service_config(gpus=2, extra=f"\nc.FracHubService.db_url = {url!r}\n"))
    refuse_doomed(url)
    _, token = make_user(groups=["vision"])

    async def burst(names: list[str], stop_after: float | None = None) -> list[object]:
        """POST them all at once; with ``stop_after``, SIGTERM the service that many seconds
        in (and return its exit status last)."""

        async def stop() -> int | None:
            await asyncio.sleep(stop_after or 0)
            return await asyncio.to_thread(service.kill, signal.SIGTERM)

        async with httpx.AsyncClient(
            base_url=hub.service_url(API_PATH),
            headers={"Authorization": f"token {token}"},
            timeout=30,
        ) as client:
            posts = [
                client.post("workloads", json={"gpus": 1, "command": "sleep 60", "name": name})
                for name in names
            ]
            stops = [stop()] if stop_after is not None else []
            return await asyncio.gather(*posts, *stops, return_exceptions=True)

    names = ["a", "b", "doomed", "c", "d", "e"]
    answers = dict(zip(names, asyncio.run(burst(names)), strict=True))
    refused = answers.pop("doomed")
    assert refused.status_code == 500
    assert refused.json() == {"status": 500, "message": "Internal Server Error"}
    assert {name: answer.status_code for name, answer in answers.items()} == dict.fromkeys(
        answers, 201
    )
    client = api(token)
    before = listed(client)
    assert set(before) == set(answers)
    for name, item in before.items():
        events = client.get(f"workloads/{item['id']}").json()["events"]
        assert [event["type"] for event in events][:1] == ["submitted"], name

    late = [f"late-{i}" for i in range(20)]
    *posted, status = asyncio.run(burst(late, stop_after=0.05))
    assert status == 0  # it stopped by itself, its writer thread with it
    service.start()
    after = listed(client)
    stored = {
        name
        for name, answer in zip(late, posted, strict=True)
        if isinstance(answer, httpx.Response) and answer.status_code == 201
    }
    assert stored <= set(after)
    assert "doomed" not in after
    assert {name: after[name]["id"] for name in before} == {
        name: item["id"] for name, item in before.items()
    }
