"""The store's writer thread: new workloads are inserted and committed there, in a session of
its own, while the event loop goes on answering requests and applying cycles.

A submission's commit (SQLAlchemy's flush of the rows, their events and their default names,
then the database's commit) used to run on the event loop, which waited for it: on PostgreSQL
that is several round trips per group of submissions. Here the loop hands the rows to one
thread and awaits it; it takes the rows into its own session (``Store.adopt``), its lifecycle
and its indexes only once they are committed, so a 201 still means stored, and a failed
commit leaves nothing behind, neither in the database (rolled back) nor in memory (never taken
in). Every transaction the thread opens ends in a commit or a rollback before its next job.

One thread, so the commits keep their order. On SQLite the thread's transactions and the
loop's take turns for the one write lock; both are short, and the loop's own end before it
yields (``Store.end``), so neither waits on the other for longer than a commit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from scheduler.service.persistence.orm import WorkloadRecord

Prepare = Callable[[list[WorkloadRecord], Session], None]
"""Runs on the writer thread between the rows' insert (they have their ids) and the commit:
what must land in the same transaction (names, events)."""


class StoreWriter:
    """One thread and one session that insert new workloads."""

    def __init__(self, engine: Engine) -> None:
        self._session = Session(engine, expire_on_commit=False)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="frachub-store-writer")

    async def insert(self, records: list[WorkloadRecord], prepare: Prepare) -> None:
        """Insert ``records``, ``prepare`` them, and commit, on the writer thread. Either way
        the rows leave its session: detached and stored after a commit, transient after a
        rollback (which re-raises the error)."""
        running = asyncio.get_running_loop()
        await running.run_in_executor(self._thread, self._insert, records, prepare)

    def _insert(self, records: list[WorkloadRecord], prepare: Prepare) -> None:
        session = self._session
        try:
            session.add_all(records)
            session.flush()
            prepare(records, session)
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.expunge_all()

    def close(self) -> None:
        """Wait for the commit under way, refuse new ones, and close the session."""
        self._thread.shutdown(wait=True)
        self._session.close()
