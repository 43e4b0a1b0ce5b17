"""Group commit: the submissions that arrive in one turn of the event loop share one
transaction.

The first submission of a burst schedules the commit for the end of this turn of the event
loop, and every caller is answered once the one transaction holding its workloads has
committed, so a 201 still means stored. Should the shared transaction fail, each submission
is tried again in a transaction of its own, so one cannot fail another.

Submissions that carry the same idempotency key take turns (``KeyTurns``): a retry that
arrives while the first is still being stored waits for it, then finds its row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Hashable

from scheduler.service.persistence.orm import WorkloadRecord

BeforeCommit = Callable[[list[WorkloadRecord]], None]
"""Sees a submission's rows with their ids, before they are committed."""

AddAll = Callable[..., list[WorkloadRecord]]
"""Stores rows in one transaction: ``add_all(records, before_commit=...)``."""


class GroupCommit:
    """Batches submissions into one ``add_all`` per turn of the event loop."""

    def __init__(self, add_all: AddAll, log: logging.Logger) -> None:
        self.add_all = add_all
        self.log = log
        self._submissions: list[
            tuple[list[WorkloadRecord], BeforeCommit | None, asyncio.Future]
        ] = []

    async def submit(
        self, records: list[WorkloadRecord], before_commit: BeforeCommit | None = None
    ) -> list[WorkloadRecord]:
        """Store ``records`` together with the submissions that arrive alongside; returns
        them once committed."""
        running = asyncio.get_running_loop()
        future = running.create_future()
        self._submissions.append((records, before_commit, future))
        if len(self._submissions) == 1:
            running.call_soon(self._commit)
        return await future

    def _commit(self) -> None:
        batch, self._submissions = self._submissions, []
        if len(batch) > 1:
            everything = [record for records, _, _ in batch for record in records]
            names = [record.name for record in everything]
            hooks = [(records, before) for records, before, _ in batch if before is not None]

            def before_commit(_: list[WorkloadRecord]) -> None:
                for records, before in hooks:
                    before(records)

            try:
                self.add_all(everything, before_commit=before_commit)
            except Exception:
                self.log.warning("a group commit of %d submissions failed; one by one", len(batch))
                for record, name in zip(everything, names, strict=True):
                    record.id, record.name = None, name
            else:
                for records, _, future in batch:
                    if not future.done():
                        future.set_result(records)
                return
        for records, before, future in batch:
            try:
                self.add_all(records, before_commit=before)
            except Exception as error:
                if not future.done():
                    future.set_exception(error)
            else:
                if not future.done():
                    future.set_result(records)


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
