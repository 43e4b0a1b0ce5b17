"""``/api/v1/allocations``: a notebook server's GPU share.

The spawner asks for a share on the user's behalf, waits for it (long-poll with ``wait`` and
``version``, or server-sent events from ``.../events``) while showing the queue position and
reason on the spawn page, and releases it when the server stops. An allocation is a workload
of kind ``interactive`` without a command: the engine schedules it like any other, and the
backend runs nothing for it (the spawner starts the server).

An allocation that can never start (a shape no GPU here holds, or a notebook larger than the
deserved quota it must stay inside) is refused at once with 409 and the numbers, so the spawn
page says why instead of waiting out the hub's timeout. With ``idle_timeout_seconds`` the
server is warned and then stopped when idle that long (``scheduler/service/hub/idle.py``).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import replace

from tornado import web
from tornado.iostream import StreamClosedError

from scheduler.common.limits import shown
from scheduler.common.states import WorkloadState
from scheduler.engine.lifecycle import CANCELLABLE
from scheduler.fields import InvalidSpec
from scheduler.service.access import ADMIN, READ, SUBMIT
from scheduler.service.handlers.workloads import STATES, WorkloadAccess
from scheduler.service.persistence.orm import NAME_LENGTH, WorkloadRecord
from scheduler.service.requests import parse_allocation
from scheduler.service.views import workload_json

MAX_WAIT = 60.0
HASH_LENGTH = 8


def notebook_name(user: str, server_name: str) -> str:
    """``notebook-<user>``, or ``notebook-<user>-<server>`` for a named server, as the
    lists show it. A user and a server name may each be 255 characters, more than the name
    column holds together: a longer name keeps its first characters and ends in a short hash
    of the whole, so it fits the column on every database and two long names still differ.
    The full server name is stored on its own (``server_name``)."""
    name = f"notebook-{user}" + (f"-{server_name}" if server_name else "")
    if len(name) <= NAME_LENGTH:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:HASH_LENGTH]
    return f"{name[: NAME_LENGTH - HASH_LENGTH - 1]}-{digest}"


class AllocationAccess(WorkloadAccess):
    def find_allocation(self, allocation_id: str) -> WorkloadRecord:
        record = self.find(allocation_id)
        if not record.is_allocation:
            raise web.HTTPError(404, f"allocation {allocation_id} not found (it is a job)")
        return record

    def view(self, record: WorkloadRecord) -> dict:
        value = workload_json(record, self.loop)
        value["version"] = self.loop.version
        return value


class AllocationListHandler(AllocationAccess):
    async def get(self) -> None:
        self.require(READ)
        user = self.get_argument("user", self.caller.name)
        if user != self.caller.name and not self.caller.is_admin:
            raise web.HTTPError(
                403, f"listing other users' allocations needs {ADMIN}: {self.lacks(ADMIN)}"
            )
        asked = self.page()
        states = self.list_argument("state")
        unknown = [state for state in states if state not in STATES]
        if unknown:
            raise InvalidSpec("state", f"unknown state {unknown[0]!r}; one of {', '.join(STATES)}")
        page = self.loop.store.workloads(
            users=[user],
            allocations=True,
            states=states,
            before=asked.before,
            offset=asked.offset,
            limit=asked.limit,
            count=self.paginated(),
        )
        live = self.loop.records
        self.write_page(
            [self.view(live.get(record.id, record)) for record in page.records], asked, page
        )

    async def post(self) -> None:
        self.require(SUBMIT)
        request = parse_allocation(self.json_body(), self.settings["resource_defaults"])
        user = self.acting_for(request.ask.user, "allocating")
        record = self.loop.allocation(user, request.server_name)
        if record is not None:
            raise web.HTTPError(
                409,
                f"{user}'s server {request.server_name!r} already holds allocation "
                f"{record.id} ({record.state}); release it first",
            )
        project = await self.project_for(request.ask.project, user)
        ask = replace(request.ask, project=project, user=user)
        self.refuse_never_starting(ask)
        record = WorkloadRecord.asking(
            ask,
            name=notebook_name(user, request.server_name),
            command=None,
            working_dir=None,
            env={},
            server_name=request.server_name,
            idle_timeout=request.idle_timeout,
        )
        await self.loop.submit([record])
        self.set_header("Location", f"{self.request.path.rstrip('/')}/{record.id}")
        self.write_json(self.view(record), status=201)


class AllocationHandler(AllocationAccess):
    async def get(self, allocation_id: str) -> None:
        """With ``wait=S`` (and the ``version`` last seen), answer when something changed or
        after S seconds, whichever comes first."""
        self.require(READ)
        record = self.find_allocation(allocation_id)
        wait = self._float_argument("wait", 0.0)
        seen = self._float_argument("version", -1)
        deadline = time.monotonic() + min(wait, MAX_WAIT)
        while (
            record.state == WorkloadState.PENDING
            and seen == self.loop.version
            and not self.client_gone
            and (left := deadline - time.monotonic()) > 0
        ):
            await self.wait_unless_gone(self.loop.wait_for_change(left), left)
        if not self.client_gone:
            self.write_json(self.view(record))

    async def delete(self, allocation_id: str) -> None:
        self.require(SUBMIT)
        record = self.find_allocation(allocation_id)
        if record.state not in CANCELLABLE:
            raise web.HTTPError(409, f"allocation {allocation_id} is already {record.state}")
        await self.loop.cancel(record, by=self.actor(record))
        self.write_json(self.view(record))

    def _float_argument(self, name: str, default: float) -> float:
        raw = self.get_argument(name, None)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise InvalidSpec(name, f"must be a number, got {shown(raw)}")
        return value


class AllocationEventsHandler(AllocationAccess):
    """Server-sent events: one ``data:`` line (the allocation as JSON) whenever its state,
    reason or queue position changes, until it is no longer pending."""

    async def get(self, allocation_id: str) -> None:
        self.require(READ)
        record = self.find_allocation(allocation_id)
        self.set_header("Content-Type", "text/event-stream")
        self.set_header("X-Accel-Buffering", "no")
        last = None
        while True:
            view = self.view(record)
            key = (view["state"], view["pending_reason"], view["queue_position"])
            if key != last:
                last = key
                self.write(f"data: {json.dumps(view)}\n\n")
                try:
                    await self.flush()
                except StreamClosedError:
                    return
            if record.state != WorkloadState.PENDING:
                break
            await self.wait_unless_gone(self.loop.wait_for_change(15.0), 15.0)
            if self.client_gone:
                return
        self.finish()


default_handlers = [
    (r"/api/v1/allocations/?", AllocationListHandler),
    (r"/api/v1/allocations/([0-9]+)/?", AllocationHandler),
    (r"/api/v1/allocations/([0-9]+)/events/?", AllocationEventsHandler),
]
