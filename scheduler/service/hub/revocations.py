"""Job tokens revoked after their jobs' ends are reported, kept in the store until the hub
has revoked them (docs/service.md, "A job's own token").

An attempt's token is revoked when the attempt ends. Revoking before the end is reported
made every end wait for the hub: a reclaim that stops 500 jobs waited for 500 revocations,
``TOKEN_REQUESTS_AT_ONCE`` at a time (about 3 to 5 s on a 2-core machine), before the
scheduler heard that their GPUs were free. So an ended attempt's token is first written to
the store's ``pending_revocations`` table (committed before the end is reported to the
scheduling loop), then revoked in the background, and its row deleted once the hub has
revoked it. What enforces the promise that an ended job's token does not outlive it:

- a service that stops (or dies) between the report and the revocation finds the rows at
  its next start and revokes them (``Revocations.resume``, at the backend's first poll);
- a revocation the hub refused or did not answer (after ``HubTokens``' own tries) stays in
  the table and is tried again every ``RETRY_SECONDS``, with a warning in the log each time,
  until it succeeds or the token's lifetime has passed (then it has expired: the row goes,
  and the log says so).

A revocation the hub answers with 404 (the token or its user is gone already) is what was
asked. Without a store (the tests that wrap a backend alone) the rows live in memory only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from sqlalchemy import delete, select
from sqlalchemy.exc import SQLAlchemyError

from scheduler.service.persistence.orm import RevocationRecord
from scheduler.service.persistence.store import Store

RETRY_SECONDS = 30.0
"""Seconds between tries of the revocations the hub refused or did not answer."""


class TokenRevoker(Protocol):
    """What revokes a token (``jobtokens.HubTokens``): done, or an error to try again."""

    async def revoke(self, user: str, token_id: str) -> None: ...


class Revocations:
    """The job tokens still to be revoked, stored (``store``) and revoked in the background.

    ``keep`` stores the tokens of attempts that ended (committed at once) and starts their
    revocation; ``poll`` (every backend poll) revokes what a previous incarnation left in
    the table, the first time, and what failed, once ``RETRY_SECONDS`` have passed.
    """

    def __init__(
        self,
        tokens: TokenRevoker,
        store: Store | None,
        lifetime: float,
        log: logging.Logger,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.tokens = tokens
        self.store = store
        self.lifetime = lifetime
        self.log = log
        self.clock = clock
        self._pending: dict[str, tuple[str, float]] = {}
        """Token id -> (user, since): every token stored and not yet revoked."""
        self._busy: set[str] = set()
        """Token ids whose revocation is under way."""
        self._failed: set[str] = set()
        """Token ids the hub did not revoke: tried again at ``_retry_at``."""
        self._resumed = False
        self._retry_at = 0.0
        self._tasks: set[asyncio.Task] = set()

    @property
    def pending(self) -> dict[str, str]:
        """Token id -> user of the tokens not revoked yet (stored, or under way)."""
        return {token_id: user for token_id, (user, _) in self._pending.items()}

    def keep(self, issued: Iterable[tuple[str, str]]) -> None:
        """Store the tokens (user, token id) of attempts that just ended, committed before
        the caller reports their ends, and start revoking them."""
        now = self.clock()
        new = [(user, token_id) for user, token_id in issued if token_id not in self._pending]
        if not new:
            return
        if self.store is not None:
            try:
                self.store.add(
                    *(RevocationRecord(token_id=tid, user=user, since=now) for user, tid in new)
                )
                self.store.commit()
            except SQLAlchemyError as error:  # the ends are reported all the same
                self.log.warning(
                    "%d ended job(s)' token(s) could not be stored before their revocation "
                    "(a restart before it would leave them valid until they expire): %s",
                    len(new),
                    error,
                )
        for user, token_id in new:
            self._pending[token_id] = (user, now)
        self._start([token_id for _, token_id in new])

    def poll(self) -> None:
        """At each backend poll: the first time, load what a previous incarnation left to
        revoke; later, try again what failed, every ``RETRY_SECONDS``."""
        now = self.clock()
        if not self._resumed:
            if now >= self._retry_at:
                self._resumed = self.resume()
                self._retry_at = 0.0 if self._resumed else now + RETRY_SECONDS
            return
        if not self._failed or now < self._retry_at:
            return
        waiting = [token_id for token_id in self._failed if token_id not in self._busy]
        self._failed.clear()
        expired = [t for t in waiting if now - self._pending[t][1] > self.lifetime]
        if expired:
            self.log.warning(
                "%d job token(s) the hub would not revoke have expired by now", len(expired)
            )
            self._forget(expired)
        self._start([t for t in waiting if t not in expired])

    def resume(self) -> bool:
        """Revoke the tokens the table holds from before this start; False when the store
        could not be read (``poll`` tries again after ``RETRY_SECONDS``)."""
        if self.store is None:
            return True
        try:
            rows = self.store.session.execute(select(RevocationRecord)).scalars().all()
        except SQLAlchemyError as error:
            self.store.rollback()
            self.log.warning("the job tokens left to revoke could not be read: %s", error)
            return False
        for row in rows:
            self._pending.setdefault(row.token_id, (row.user, row.since))
        if rows:
            self.log.info("revoking %d job token(s) left from before the restart", len(rows))
        self._start([row.token_id for row in rows])
        return True

    async def settle(self) -> None:
        """Wait for the revocations under way (tests; ``close``)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Stop revoking; what is not revoked yet stays stored for the next start."""
        for task in list(self._tasks):
            task.cancel()
        await self.settle()

    def _start(self, token_ids: list[str]) -> None:
        token_ids = [t for t in token_ids if t in self._pending and t not in self._busy]
        if not token_ids:
            return
        self._busy.update(token_ids)
        task = asyncio.get_running_loop().create_task(self._revoke_all(token_ids))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _revoke_all(self, token_ids: list[str]) -> None:
        failed: list[str] = []

        async def one(token_id: str) -> str | None:
            user = self._pending[token_id][0]
            try:
                await self.tokens.revoke(user, token_id)
            except Exception as error:  # kept: tried again after RETRY_SECONDS
                self.log.warning(
                    "a job token of %s (id %s) is not revoked yet (trying again in %.0f s): %s",
                    user,
                    token_id,
                    RETRY_SECONDS,
                    error,
                )
                failed.append(token_id)
                return None
            return token_id

        try:
            done = await asyncio.gather(*(one(token_id) for token_id in token_ids))
            self._forget([token_id for token_id in done if token_id is not None])
        finally:
            self._busy.difference_update(token_ids)
        if failed:
            self._failed.update(failed)
            self._retry_at = self.clock() + RETRY_SECONDS

    def _forget(self, token_ids: list[str]) -> None:
        """Revoked (or expired): out of the table and out of memory."""
        if not token_ids:
            return
        if self.store is not None:
            try:
                self.store.session.execute(
                    delete(RevocationRecord).where(RevocationRecord.token_id.in_(token_ids))
                )
                self.store.commit()
            except SQLAlchemyError as error:  # revoked all the same; a restart asks again
                self.store.rollback()
                self.log.warning("revoked job tokens stay listed as pending: %s", error)
        for token_id in token_ids:
            self._pending.pop(token_id, None)
