"""Idle GPU notebooks: warn, then stop their servers through the hub (the I/O around
``idle_policy``, which decides).

A notebook server that holds a GPU share and sits unused keeps that share from everyone
else, since notebooks are never preempted. An allocation may carry an idle limit
(``idle_timeout_seconds``, the spawner's profile limit); ``IdlePoller`` enforces it, in the
shape of jupyterhub-idle-culler with deciding and acting split:

1. at start and then every ``interval`` seconds, list the servers the hub has
   (``GET /users?state=active``, following the hub's pagination) with their ``last_activity``;
2. judge each running allocation with a limit (``idle_policy.judge``, pure) and write what
   changed — the activity seen, the projected stop, a warning with its event — in one commit;
3. stop the servers that are due (``DELETE /users/{user}/server`` or ``.../servers/{name}``).
   The spawner's stop then releases the allocation, as for any stopped server. The poller
   releases an allocation itself only when the hub says its server is gone (the hub no
   longer lists it, or answers 404 to the stop): an allocation must not outlive its server.
   That check covers every running allocation, with an idle limit or not: the hub stops its
   managed services before its servers at shutdown, so those servers' spawners cannot
   release their shares, and this is what gives them back.

Idle by the GPU (``FracHubService.idle_by_gpu``, on by default): when the GPU use sampler
has figures for a notebook (``loop.gpu_usage``, ``runtime/gpu_history.py``), its activity is
the last sample in which it kept its GPU at least ``GpuMetrics.busy_percent`` busy (or, never
busy, its first sample), not the hub's: kernels busy on the CPU with an idle GPU hold a share
no one uses, and a user away while the notebook trains is using it. Without figures (no
NVML, the sampler off, a notebook not sampled yet) the hub's activity decides, as before.

The service's token needs ``list:users``, ``read:users``, ``read:users:activity``,
``read:servers`` and ``delete:servers`` (``scheduler/common/scopes.py``). A failing hub is
logged and tried again next round; nothing is stopped on a guess.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote, urlencode

from tornado.httpclient import HTTPClientError

from scheduler.common.quantities import gpus
from scheduler.common.states import WorkloadState
from scheduler.service.hub.hubapi import HubApi
from scheduler.service.persistence.orm import WorkloadRecord
from scheduler.service.policies.idle_policy import (
    DEFAULT_WARNING_FRACTION,
    GivenWarning,
    Verdict,
    judge,
    warning_text,
)
from scheduler.service.scheduling.effects import held_gpus
from scheduler.service.scheduling.loop import SchedulingLoop

FIRST_RETRY_SECONDS = 1.0
"""The first pause when the hub does not answer the start-up round (doubling to the
interval)."""
PAGINATION = "application/jupyterhub-pagination+json"
PAGE_SIZE = 200


class HubError(RuntimeError):
    """The hub could not be asked (unreachable, refused, or an answer we cannot read)."""


@dataclass(frozen=True)
class Server:
    """A server the hub has (running, starting or stopping), as the poller needs it."""

    last_activity: float | None
    pending: str | None


def parse_time(value: str | None) -> float | None:
    """The hub's ISO 8601 times ("2026-11-22T14:05:00.123456Z") as Unix seconds."""
    if not value:
        return None
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


class HubServers(HubApi):
    """The part of the Hub REST API the poller uses, with the service's own token."""

    async def active(self) -> dict[tuple[str, str], Server]:
        """Every server the hub has, keyed by (user, server name; '' for the default)."""
        servers: dict[tuple[str, str], Server] = {}
        offset = 0
        while True:
            query = urlencode({"state": "active", "offset": offset, "limit": PAGE_SIZE})
            try:
                response = await self.fetch("GET", f"/users?{query}", accept=PAGINATION)
                page = json.loads(response.body)
            except HTTPClientError as error:
                raise HubError(f"the hub refused the list of active servers: {error}") from None
            except (OSError, ValueError) as error:
                raise HubError(f"the hub's list of active servers failed: {error}") from None
            users = page["items"] if isinstance(page, dict) else page
            for user in users:
                if "servers" not in user:
                    raise HubError(
                        "the hub does not show the service its users' servers: its role "
                        "needs read:servers"
                    )
                for name, server in user["servers"].items():
                    servers[(user["name"], name)] = Server(
                        parse_time(server.get("last_activity")), server.get("pending")
                    )
            following = page.get("_pagination", {}).get("next") if isinstance(page, dict) else None
            if not following:
                return servers
            offset = following["offset"]

    async def stop(self, user: str, server_name: str) -> bool:
        """Ask the hub to stop a server; False when the hub has no such server or user."""
        path = f"/users/{quote(user, safe='')}/server"
        if server_name:
            path = f"/users/{quote(user, safe='')}/servers/{quote(server_name, safe='')}"
        try:
            await self.fetch("DELETE", path)
        except HTTPClientError as error:
            if error.code == 404:
                return False
            raise HubError(f"the hub refused to stop {user}'s server: {error}") from None
        except OSError as error:
            raise HubError(f"the hub is unreachable: {error}") from None
        return True


@dataclass(frozen=True)
class IdleSettings:
    """The poller's knobs, copied from the service's traits at start-up."""

    interval: float = 60.0
    warning_fraction: float = DEFAULT_WARNING_FRACTION
    by_gpu: bool = True
    """Judge by the GPU's activity where the sampler has it (``idle_by_gpu``)."""


def share_words(record: WorkloadRecord) -> str:
    """ "0.5 GPU", "2 GPUs": the share a running allocation holds."""
    return gpus(held_gpus(record.placement))


def server_words(record: WorkloadRecord) -> str:
    """ "alice's default server", "alice's server 'gpu'": for events and the log."""
    if not record.server_name:
        return f"{record.user}'s default server"
    return f"{record.user}'s server {record.server_name!r}"


def held(record: WorkloadRecord) -> bool:
    """A running allocation: its server must exist, whatever its idle limit."""
    return record.is_allocation and record.state == WorkloadState.RUNNING


def watched(record: WorkloadRecord) -> bool:
    """A running allocation with an idle limit: its server's activity is judged too."""
    return held(record) and bool(record.idle_timeout)


class IdlePoller:
    """Checks the servers of running allocations every ``interval`` seconds: every one must
    still exist, and those with an idle limit must be in use (``start``/``stop`` run and end
    it with the service)."""

    def __init__(
        self,
        loop: SchedulingLoop,
        hub: HubServers,
        settings: IdleSettings,
        *,
        clock: Callable[[], float] = time.time,
        log: logging.Logger | None = None,
    ) -> None:
        self.loop = loop
        self.hub = hub
        self.settings = settings
        self.clock = clock
        self.log = log or logging.getLogger("frachub")
        self._task: asyncio.Task | None = None
        self._stopping: set[int] = set()
        """Allocations whose server the poller has asked the hub to stop (event written)."""

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        """The first round runs at once: a restarted service gives back the shares of servers
        that stopped while it was down (at hub shutdown the service stops first, so their
        spawners could not release them) instead of showing them running for a whole
        interval. Until the hub first answers (it may be starting too) rounds come sooner."""
        delay, answered = 0.0, False
        while True:
            await asyncio.sleep(delay)
            try:
                await self.check()
                answered = True
            except HubError as error:
                if not answered:
                    delay = min(self.settings.interval, max(2 * delay, FIRST_RETRY_SECONDS))
                self.log.warning("idle notebooks: %s; trying again in %gs", error, delay)
                continue
            except Exception:
                self.loop.store.rollback()
                self.log.exception("idle notebooks: the check failed; trying again")
            delay = self.settings.interval

    async def check(self) -> None:
        """One round: ask the hub, judge, write, then stop or release."""
        if not any(held(record) for record in self.loop.records.values()):
            self._stopping.clear()
            return
        listed_at = self.clock()
        servers = await self.hub.active()
        now = self.clock()
        due: list[WorkloadRecord] = []
        gone: list[WorkloadRecord] = []
        for record in [r for r in self.loop.records.values() if held(r)]:
            server = servers.get((record.user, record.server_name or ""))
            if server is None:
                # an allocation asked for after the list was made may belong to a server
                # the list does not show yet; anything older has lost its server (the hub
                # stops its managed services before its servers, so a server stopped at hub
                # shutdown could not release its share itself)
                if record.submitted_at < listed_at:
                    gone.append(record)
                continue
            if watched(record) and self._judge(record, server, now):
                due.append(record)
        self.loop.store.commit()
        for record in due:
            try:
                exists = await self.hub.stop(record.user, record.server_name or "")
            except HubError as error:
                self.log.warning("idle notebooks: %s; trying again next round", error)
                continue
            if not exists:
                gone.append(record)
        for record in gone:
            await self._release(record)
        self._stopping &= set(self.loop.records)

    def _judge(self, record: WorkloadRecord, server: Server, now: float) -> bool:
        """Apply the policy to one allocation's record; True when its server is due to stop."""
        assert record.idle_timeout is not None and record.started_at is not None
        activity = server.last_activity or record.started_at
        by_gpu = self._gpu_activity(record)
        if by_gpu is not None:
            activity = by_gpu
        if server.pending == "spawn":
            activity = now  # still starting: not idle yet
        activity = max(activity, record.started_at)
        warning = None
        if record.idle_warning and record.last_activity and record.idle_stop_at:
            warning = GivenWarning(record.last_activity, record.idle_stop_at)
        judged = judge(
            timeout=record.idle_timeout,
            last_activity=activity,
            now=now,
            warning=warning,
            warning_fraction=self.settings.warning_fraction,
        )
        record.last_activity = judged.idle_since
        record.idle_stop_at = judged.stop_at
        where = f"{server_words(record)} (allocation {record.id})"
        if judged.verdict is Verdict.FINE:
            if record.idle_warning is not None:
                record.idle_warning = None
                self.loop.store.event(record, now, "idle-cleared", "used again; not stopped")
                self.log.info("idle notebooks: %s is used again; warning withdrawn", where)
            return False
        if record.idle_warning is None:
            record.idle_warning = warning_text(
                judged.idle_since, judged.stop_at, share_words(record), by_gpu=by_gpu is not None
            )
            self.loop.store.event(record, now, "idle-warning", record.idle_warning)
            self.log.info("idle notebooks: warned %s: %s", where, record.idle_warning)
        if judged.verdict is Verdict.WARNED:
            return False
        if record.id not in self._stopping:
            self._stopping.add(record.id)
            limit = f"{record.idle_timeout:g}s"
            self.loop.store.event(
                record, now, "idle-stop", f"idle longer than {limit}; stopping the server"
            )
            self.log.info("idle notebooks: stopping %s, idle longer than %s", where, limit)
        return True

    def _gpu_activity(self, record: WorkloadRecord) -> float | None:
        """The last time the notebook kept its GPU busy, where the sampler can say."""
        history = getattr(self.loop, "gpu_usage", None)
        if not self.settings.by_gpu or history is None:
            return None
        return history.gpu_active_since(record.id)

    async def _release(self, record: WorkloadRecord) -> None:
        """Release an allocation whose server the hub no longer has."""
        if record.state != WorkloadState.RUNNING:
            return  # the spawner released it meanwhile
        now = self.clock()
        why = f"the hub no longer has {server_words(record)}"
        self.log.info("idle notebooks: releasing allocation %d: %s", record.id, why)
        self.loop.store.event(record, now, "server-gone", why)
        await self.loop.cancel(record, by="the idle check")
