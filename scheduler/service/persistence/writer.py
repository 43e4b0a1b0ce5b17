"""The store's writer thread: new workloads are inserted and committed there, while the event
loop goes on answering requests and applying cycles.

A submission's commit used to run on the event loop, which waited for it: on PostgreSQL that
is several round trips per group of submissions. Here the loop hands the rows to one thread
and awaits it; it takes the rows into its own session (``Store.adopt``), its lifecycle and its
indexes only once they are committed, so a 201 still means stored, and a failed commit leaves
nothing behind, neither in the database (rolled back) nor in memory (never taken in). Every
transaction the thread opens ends in a commit or a rollback before its next job.

The rows are written with SQLAlchemy Core, not the ORM's unit of work: one multi-row
``INSERT ... RETURNING id`` for a group's workloads, one ``executemany`` for their events,
and an ``UPDATE`` only for what ``prepare`` changed once the ids were known (a default name,
a sweep's members). The ORM's flush cost about as much CPU as the rest of a submission
(its bookkeeping per object and per attribute), and the threads share one interpreter lock.
Core writes no ORM event, so the length check the ORM runs before each insert and update
(``orm.refuse_too_long``) is called here for every row and every change. Once committed, each
workload becomes a detached ORM object with its identity, every column loaded, as if read
back (``make_transient_to_detached``), which the loop's session adopts without SQL.

One thread, so the commits keep their order. On SQLite the thread's transactions and the
loop's take turns for the one write lock; both are short, and the loop's own end before it
yields (``Store.end``), so neither waits on the other for longer than a commit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy import bindparam, insert, inspect, null, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import make_transient_to_detached

from scheduler.service.persistence.orm import EventRecord, WorkloadRecord, refuse_too_long


class NewEvents:
    """What ``prepare`` adds besides the rows: their events, written with the workloads in
    one ``executemany`` (``add`` takes an ``EventRecord``, as a session would)."""

    def __init__(self) -> None:
        self.events: list[EventRecord] = []

    def add(self, event: EventRecord) -> None:
        if not isinstance(event, EventRecord):
            raise TypeError(f"the writer stores new workloads' events only, not {event!r}")
        self.events.append(event)


Prepare = Callable[[list[WorkloadRecord], NewEvents], None]
"""Runs on the writer thread between the rows' insert (they have their ids) and the commit:
what must land in the same transaction (names, events: ``events.add(EventRecord(...))``)."""


class _Columns:
    """A table's columns as an ORM class maps them: (attribute, column key, default)."""

    def __init__(self, cls: type) -> None:
        mapper = inspect(cls)
        self.mapper = mapper
        self.table = mapper.local_table
        self.columns: list[tuple[str, str, Callable[[], Any] | None]] = []
        for attribute in mapper.column_attrs:
            column = attribute.columns[0]
            if column.primary_key:
                continue
            self.columns.append((attribute.key, column.key, _python_default(column)))
        self.null_json = frozenset(
            column.key for column in self.table.columns if column.type.should_evaluate_none
        )
        """Columns (JSON without ``none_as_null``) to which a bound None is JSON ``null``;
        the ORM leaves an unset one out, so it is SQL NULL: ``params`` says so."""

    def params(self, row: dict[str, Any]) -> dict[str, Any]:
        """``row`` as bound parameters: None is SQL NULL in every column, as the ORM writes
        an attribute never set (a new workload's ``handle``)."""
        if not any(row.get(key) is None for key in self.null_json):
            return row
        return {
            key: null() if value is None and key in self.null_json else value
            for key, value in row.items()
        }

    def row(self, record: Any) -> dict[str, Any]:
        """The values ``record`` is inserted with, by column key: what it holds, else the
        column's default (the ORM leaves out a None so that its default applies)."""
        values = record.__dict__
        row = {}
        for attribute, key, default in self.columns:
            value = values.get(attribute)
            if value is None and default is not None:
                value = default()
            row[key] = value
        return row

    def changes(self, before: dict[str, Any], record: Any) -> dict[str, Any]:
        """The columns ``record`` holds another value in than ``before`` (its inserted row)."""
        after = self.row(record)
        return {key: value for key, value in after.items() if value != before[key]}


def _python_default(column: Any) -> Callable[[], Any] | None:
    """The column's Python-side default as a function of nothing; a column with a server
    default only is always given a value by ``WorkloadRecord.asking`` (checked: it raises)."""
    default = column.default
    if default is None:
        if column.server_default is not None and not column.nullable:

            def missing() -> Any:
                raise ValueError(f"{column.table.name}.{column.name} must be set before insert")

            return missing
        return None
    if default.is_scalar:
        return lambda: default.arg
    return lambda: default.arg(None)  # SQLAlchemy wraps dict/list to take a context


class StoreWriter:
    """One thread that inserts new workloads, with one connection at a time from the pool."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="frachub-store-writer")
        self._workloads = _Columns(WorkloadRecord)
        self._events = _Columns(EventRecord)
        table = self._workloads.table
        self._insert = insert(table).returning(table.c.id, sort_by_parameter_order=True)

    async def insert(self, records: list[WorkloadRecord], prepare: Prepare) -> None:
        """Insert ``records``, ``prepare`` them, and commit, on the writer thread. After a
        commit the rows are detached ORM objects with their ids and every column loaded;
        after a rollback (which re-raises the error) they are as they were, less the ids'
        being set (``GroupCommit`` clears them)."""
        running = asyncio.get_running_loop()
        await running.run_in_executor(self._thread, self._write, records, prepare)

    def _write(self, records: list[WorkloadRecord], prepare: Prepare) -> None:
        workloads = self._workloads
        rows = [workloads.row(record) for record in records]
        for row in rows:
            refuse_too_long(workloads.mapper, row)
        with self._engine.connect() as connection, connection.begin():
            params = [workloads.params(row) for row in rows]
            ids = connection.execute(self._insert, params).scalars().all()
            for record, new_id in zip(records, ids, strict=True):
                record.id = new_id
            events = NewEvents()
            prepare(records, events)
            self._update(connection, records, rows)
            if events.events:
                written = [self._events.row(event) for event in events.events]
                for row in written:
                    refuse_too_long(self._events.mapper, row)
                connection.execute(
                    insert(self._events.table), [self._events.params(row) for row in written]
                )
        # committed: each row as if read back (the defaults it was given included)
        for record, row in zip(records, rows, strict=True):
            stored = record.__dict__
            for attribute, key, _ in workloads.columns:
                stored[attribute] = row[key]
            make_transient_to_detached(record)

    def _update(
        self, connection: Connection, records: list[WorkloadRecord], rows: list[dict[str, Any]]
    ) -> None:
        """Write what ``prepare`` changed (a default name, a sweep's names and environment),
        one ``executemany`` per set of changed columns; ``rows`` become the stored values."""
        table = self._workloads.table
        by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for record, row in zip(records, rows, strict=True):
            changed = self._workloads.changes(row, record)
            if not changed:
                continue
            refuse_too_long(self._workloads.mapper, changed)
            row.update(changed)
            bound = self._workloads.params(changed)
            by_columns.setdefault(tuple(sorted(changed)), []).append(
                {"_id": record.id, **{f"_{key}": value for key, value in bound.items()}}
            )
        for columns, params in by_columns.items():
            statement = (
                update(table)
                .where(table.c.id == bindparam("_id"))
                .values({column: bindparam(f"_{column}") for column in columns})
            )
            connection.execute(statement, params)

    def close(self) -> None:
        """Wait for the commit under way and refuse new ones."""
        self._thread.shutdown(wait=True)
