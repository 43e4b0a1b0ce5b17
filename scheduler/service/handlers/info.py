"""The small read-only resources: service info, the caller, nodes, usage, metrics and the
OpenAPI document."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime, timezone
from pathlib import Path

from tornado import web

from scheduler import __version__
from scheduler.common.limits import shown
from scheduler.common.projects import projects_of
from scheduler.common.scopes import ADMIN_GROUP
from scheduler.fields import InvalidSpec
from scheduler.service.access import ADMIN, READ, SUBMIT
from scheduler.service.handlers.base import APIHandler, JSONErrors
from scheduler.service.persistence.store import UsageRow
from scheduler.service.views import iso, nodes_json

OPENAPI = Path(__file__).resolve().parent.parent / "openapi.json"
LATEST = datetime(9999, 1, 1, tzinfo=timezone.utc).timestamp()
"""Usage times stop short of what ``datetime`` can print in any time zone."""


class RootHandler(APIHandler):
    async def get(self) -> None:
        inventory = self.loop.inventory
        self.write_json(
            {
                "name": "frachub",
                "version": __version__,
                "backend": self.settings["backend_name"],
                "inventory": inventory.source,
                "nodes": len(inventory.nodes),
                "gpus": len(inventory.gpus),
            }
        )


class UserHandler(APIHandler):
    """Who the token belongs to, its projects and what it may do: what the CLI and the
    magics show as ``quota``."""

    async def get(self) -> None:
        caller = self.caller
        projects = projects_of(caller.name, caller.groups, self.loop.queues, self.loop.members)
        self.write_json(
            {
                "name": caller.name,
                "kind": caller.kind,
                "projects": projects,
                "read": caller.has(READ),
                "submit": caller.has(SUBMIT),
                "admin": caller.is_admin,
                "in_admin_group": ADMIN_GROUP in caller.groups,
            }
        )


class NodesHandler(APIHandler):
    async def get(self) -> None:
        self.require(READ)
        self.write_json(nodes_json(self.loop, self.caller.name, self.caller.is_admin))


class UsageHandler(APIHandler):
    """GPU-hours, CPU core-hours and memory GiB-hours per project and user between ``start``
    and ``end`` (ISO 8601; default: the last 30 days). Users see their own rows; admins see
    everyone's."""

    max_days: float | None = None
    """The longest range a request may ask for (None: any)."""

    async def get(self) -> None:
        self.require(READ)
        start, end, rows = await self.usage_rows()
        self.write_json(
            {
                "start": iso(start),
                "end": iso(end),
                "rows": [
                    {
                        "project": r.project,
                        "user": r.user,
                        "gpu_hours": round(r.gpu_hours, 6),
                        "cpu_hours": round(r.cpu_hours, 6),
                        "memory_gib_hours": round(r.memory_gib_hours, 6),
                    }
                    for r in rows
                ],
                "total_gpu_hours": round(sum(r.gpu_hours for r in rows), 6),
                "total_cpu_hours": round(sum(r.cpu_hours for r in rows), 6),
                "total_memory_gib_hours": round(sum(r.memory_gib_hours for r in rows), 6),
            }
        )

    async def usage_rows(self) -> tuple[float, float, list[UsageRow]]:
        """The caller's rows (everyone's for an admin) in the range the request names, read
        in a thread: a month of everyone's usage must not hold up other requests."""
        now = time.time()
        end = self._time("end", now)
        start = self._time("start", end - 30 * 86400)
        if start >= end:
            raise InvalidSpec("start", "must be before end")
        if self.max_days is not None and end - start > self.max_days * 86400:
            raise InvalidSpec("start", f"must be at most {self.max_days:g} days before end")
        users = self.list_argument("user")
        if not self.caller.is_admin:
            if any(user != self.caller.name for user in users):
                raise web.HTTPError(403, f"other users' usage needs {ADMIN}: {self.lacks(ADMIN)}")
            users = [self.caller.name]
        projects = self.list_argument("project")
        rows = await asyncio.get_running_loop().run_in_executor(
            None, self.loop.store.usage, start, end, now, projects, users
        )
        return start, end, rows

    def _time(self, name: str, default: float) -> float:
        raw = self.get_argument(name, None)
        if raw is None:
            return default
        try:
            moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidSpec(name, f"must be an ISO 8601 time, got {shown(raw)}") from None
        if moment.tzinfo is None:
            raise InvalidSpec(name, f"needs a time zone (for example {shown(raw)}Z)")
        try:
            value = moment.timestamp()
        except (OverflowError, ValueError):
            value = -1.0
        if not 0 <= value <= LATEST:
            raise InvalidSpec(name, f"must be between 1970 and 9998, got {shown(raw)}")
        return value


class MetricsHandler(APIHandler):
    """Prometheus text format; scrape with a token holding the read scope."""

    async def get(self) -> None:
        self.require(READ)
        self.set_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.finish(self.settings["metrics"].render())


class OpenAPIHandler(JSONErrors):
    """The API's description is public, like the hub's own REST API documentation."""

    def get(self) -> None:
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish(OPENAPI.read_bytes())


class HealthHandler(JSONErrors):
    """Readiness, without a token (the chart's readinessProbe): 200 while this replica
    schedules; 503 on a standby that waits for the leader Lease, or one that has lost it,
    so that a Service sends requests only to the replica that acts."""

    def get(self) -> None:
        standby = self.settings.get("standby_reason")
        reason = standby() if standby is not None else ""
        if reason:
            raise web.HTTPError(503, "%s", reason)
        body: dict[str, object] = {"status": "ok"}
        sharing = self.settings.get("gpu_sharing")
        if sharing is not None:
            # a dead MPS daemon leaves its GPU's new clients unlimited: "degraded", still 200
            # (the service schedules; restarting it would not bring the daemon back sooner)
            body["gpu_sharing"] = state = sharing()
            if any(not daemon["up"] for daemon in state.get("daemons", ())):
                body["status"] = "degraded"
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish(json.dumps(body))


class StandbyHandler(JSONErrors):
    """Every other path of a standby replica (not routed in the service's own app)."""

    def prepare(self) -> None:
        raise web.HTTPError(503, "%s", self.settings["standby_reason"]())


default_handlers = [
    (r"/api/v1/?", RootHandler),
    (r"/api/v1/user/?", UserHandler),
    (r"/api/v1/nodes/?", NodesHandler),
    (r"/api/v1/usage/?", UsageHandler),
    (r"/api/v1/openapi\.json", OpenAPIHandler),
    (r"/api/v1/health/?", HealthHandler),
    (r"/metrics", MetricsHandler),
]
