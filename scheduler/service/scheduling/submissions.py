"""Group commit: the submissions that arrive while the store's writer thread is busy share
its next transaction.

The first submission of a burst starts a commit at the end of this turn of the event loop, on
the writer thread (``scheduler/service/persistence/writer.py``); those that arrive while it
commits wait for the next one, so the busier the store, the larger the groups. Every caller
is answered once the one transaction holding its workloads has committed and the loop has
taken them in, so a 201 still means stored. Should the shared transaction fail, each
submission is tried again in a transaction of its own, so one cannot fail another.

Submissions that carry the same idempotency key take turns (``KeyTurns``): a retry that
arrives while the first is still being stored waits for it, then finds its row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable

from scheduler.service.persistence.orm import WorkloadRecord

BeforeCommit = Callable[[list[WorkloadRecord]], None]
"""Sees a submission's rows with their ids, before they are committed (on the writer
thread: it may only change the rows)."""

Write = Callable[[list[WorkloadRecord], BeforeCommit | None], Awaitable[None]]
"""Stores rows in one transaction (``write(records, before_commit)``), or raises having
stored none of them and left them without ids."""

TakeIn = Callable[[list[WorkloadRecord]], None]
"""The loop takes committed rows in (its session, lifecycle, indexes)."""

Batch = list[tuple[list[WorkloadRecord], BeforeCommit | None, asyncio.Future]]


class GroupCommit:
    """Batches submissions into one ``write`` at a time."""

    def __init__(self, write: Write, take_in: TakeIn, log: logging.Logger) -> None:
        self.write = write
        self.take_in = take_in
        self.log = log
        self._submissions: Batch = []
        self._draining: asyncio.Task | None = None

    async def submit(
        self, records: list[WorkloadRecord], before_commit: BeforeCommit | None = None
    ) -> list[WorkloadRecord]:
        """Store ``records`` together with the submissions that arrive alongside; returns
        them once committed and taken in."""
        running = asyncio.get_running_loop()
        future = running.create_future()
        self._submissions.append((records, before_commit, future))
        if self._draining is None:
            self._draining = running.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            await asyncio.sleep(0)  # the rest of this turn's submissions join the first
            while self._submissions:
                batch, self._submissions = self._submissions, []
                await self._commit(batch)
        finally:
            self._draining = None
            for _, _, future in self._submissions:  # cancelled (the service stops)
                if not future.done():
                    future.set_exception(RuntimeError("the service is stopping"))
            self._submissions = []

    async def _commit(self, batch: Batch) -> None:
        if len(batch) > 1:
            everything = [record for records, _, _ in batch for record in records]
            names = [record.name for record in everything]
            hooks = [(records, before) for records, before, _ in batch if before is not None]

            def before_commit(_: list[WorkloadRecord]) -> None:
                for records, before in hooks:
                    before(records)

            try:
                await self.write(everything, before_commit)
            except Exception:
                self.log.warning("a group commit of %d submissions failed; one by one", len(batch))
                for record, name in zip(everything, names, strict=True):
                    record.id, record.name = None, name
            else:
                self._taken(everything, batch)
                return
        for submission in batch:
            records, before, future = submission
            try:
                await self.write(records, before)
            except Exception as error:
                if not future.done():
                    future.set_exception(error)
            else:
                self._taken(records, [submission])

    def _taken(self, records: list[WorkloadRecord], batch: Batch) -> None:
        """Committed: the loop takes them in, and their callers are answered (stored, even
        should taking them in fail: the loop then reloads what it keeps)."""
        try:
            self.take_in(records)
        except Exception:
            self.log.exception("taking in %d stored submissions failed", len(records))
        for stored, _, future in batch:
            if not future.done():
                future.set_result(stored)


class KeyTurns:
    """One request at a time per key: a retried submission (same user, same
    ``Idempotency-Key``) that arrives while the first is still between its look-up and its
    commit (asking the hub for groups, waiting for the group commit) waits its turn, and
    then finds the first one's row instead of storing a second. Locks exist only while a
    request holds or awaits them."""

    def __init__(self) -> None:
        self._locks: dict[Hashable, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def turn(self, key: Hashable) -> AsyncIterator[None]:
        lock, holders = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, holders + 1)
        try:
            async with lock:
                yield
        finally:
            lock, holders = self._locks[key]
            if holders == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, holders - 1)

    def __len__(self) -> int:
        """Keys held or awaited now."""
        return len(self._locks)
