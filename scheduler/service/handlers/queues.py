"""``/api/v1/queues``: the project/department tree with quotas, use and fair share.

Everyone with the read scope sees the tree; admins create, change and delete queues. Queues
defined in the configuration file are changed there (the API refuses with 409), so the file
and the database cannot disagree about them.
"""

from __future__ import annotations

from tornado import web

from scheduler.common.limits import shown
from scheduler.service.access import ADMIN, READ
from scheduler.service.handlers.base import APIHandler
from scheduler.service.persistence.orm import QueueRecord
from scheduler.service.requests import parse_members, parse_queue, parse_time_limits
from scheduler.service.views import queue_json


class QueueAccess(APIHandler):
    def records(self) -> list[QueueRecord]:
        return self.loop.store.queues()

    def find_queue(self, name: str) -> QueueRecord:
        for record in self.records():
            if record.name == name:
                return record
        raise web.HTTPError(404, f"queue {name} not found")

    def view(self, record: QueueRecord, records: list[QueueRecord]) -> dict:
        children = [other.name for other in records if other.parent == record.name]
        return queue_json(record, self.loop.queue_status.get(record.name), children)

    def editable(self, record: QueueRecord) -> None:
        if record.source == "config":
            raise web.HTTPError(
                409, f"queue {record.name} is defined in the configuration file; change it there"
            )


class QueueListHandler(QueueAccess):
    async def get(self) -> None:
        self.require(READ)
        records = self.records()
        self.write_json([self.view(record, records) for record in records])

    async def post(self) -> None:
        self.require(ADMIN)
        body = self.json_body()
        records = self.records()
        name = body.get("name") if isinstance(body, dict) else None
        if any(record.name == name for record in records):
            raise web.HTTPError(409, f"a queue named {shown(name)} exists")
        queue = parse_queue(body, self.loop.queues)
        members = parse_members(body) or []
        default_limit, max_limit = parse_time_limits(body)
        record = QueueRecord(
            name=queue.name,
            members=members,
            source="api",
            position=max((r.position for r in records), default=-1) + 1,
            default_time_limit=default_limit,
            max_time_limit=max_limit,
        )
        record.set_quota(queue)
        self.loop.store.add(record)
        self.loop.store.commit()
        self.loop.queues_changed()
        self.set_header("Location", f"{self.request.path.rstrip('/')}/{record.name}")
        self.write_json(self.view(record, [*records, record]), status=201)


class QueueHandler(QueueAccess):
    async def get(self, name: str) -> None:
        self.require(READ)
        self.write_json(self.view(self.find_queue(name), self.records()))

    async def patch(self, name: str) -> None:
        self.require(ADMIN)
        record = self.find_queue(name)
        self.editable(record)
        if not self.request.body:
            raise web.HTTPError(400, "body: is required: the fields to change")
        body = self.json_body()
        queue = parse_queue(body, self.loop.queues, name=name)
        members = parse_members(body) if isinstance(body, dict) else None
        current = (record.default_time_limit, record.max_time_limit)
        limits = parse_time_limits(body, current) if isinstance(body, dict) else current
        record.set_quota(queue)
        record.default_time_limit, record.max_time_limit = limits
        if members is not None:
            record.members = members
        self.loop.store.commit()
        self.loop.queues_changed()
        self.write_json(self.view(record, self.records()))

    async def delete(self, name: str) -> None:
        self.require(ADMIN)
        record = self.find_queue(name)
        self.editable(record)
        records = self.records()
        children = [other.name for other in records if other.parent == name]
        if children:
            raise web.HTTPError(409, f"queue {name} still has child queues: {', '.join(children)}")
        active = sum(r.project == name for r in self.loop.records.values())
        if active:
            raise web.HTTPError(
                409, f"queue {name} still holds {active} active workloads; cancel them first"
            )
        self.loop.store.delete(record)
        self.loop.store.commit()
        self.loop.queues_changed()
        self.set_status(204)
        self.finish()


default_handlers = [
    (r"/api/v1/queues/?", QueueListHandler),
    (r"/api/v1/queues/([^/]+)/?", QueueHandler),
]
