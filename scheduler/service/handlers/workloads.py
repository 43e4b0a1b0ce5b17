"""``/api/v1/workloads``: submit, list, inspect, cancel training; read its logs."""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace

from tornado import web
from tornado.iostream import StreamClosedError

from scheduler.common.files import open_own_file
from scheduler.common.limits import MAX_ID
from scheduler.common.projects import leaf_projects, projects_of
from scheduler.common.quantities import slurm_time
from scheduler.common.scopes import IDEMPOTENCY_HEADER
from scheduler.common.states import WorkloadState
from scheduler.engine import WorkloadRequest, default_priority, feasibility
from scheduler.engine.lifecycle import CANCELLABLE, LifecycleError
from scheduler.fields import InvalidSpec
from scheduler.service.access import ADMIN, READ, SUBMIT
from scheduler.service.handlers.base import APIHandler
from scheduler.service.hub.directory import HubDirectoryError
from scheduler.service.hub.jobtokens import token_id_of
from scheduler.service.idempotency import REPLAYED_HEADER, body_digest, idempotency_key
from scheduler.service.persistence.orm import ACTIVE_STATES, FINAL_STATES, WorkloadRecord
from scheduler.service.policies.dependencies import check_dependency
from scheduler.service.policies.sweeps import member_env
from scheduler.service.requests import (
    Submission,
    parse_count,
    parse_submission,
)
from scheduler.service.runtime.gpu_watch import share_bytes
from scheduler.service.views import iso, workload_json

STATES = (*ACTIVE_STATES, *FINAL_STATES)
KINDS = ("training", "inference", "interactive")
LOG_CHUNK = 64 * 1024


class NeverCache:
    """The never-starts answers by request shape, while the queues and nodes stay the same.

    Each answer decides the request on an empty cluster (a session and a cycle), about 1 ms:
    as much as the rest of a submission. A burst of submissions asks about a handful of
    shapes, so each shape is decided once per quota or inventory change."""

    LIMIT = 4096

    def __init__(self) -> None:
        self.queues: object = None
        self.nodes: object = None
        self.answers: dict[tuple[WorkloadRequest, bool], str | None] = {}

    def answer(self, ask: WorkloadRequest, queues: tuple, nodes: tuple, grow: bool) -> str | None:
        if queues is not self.queues or (nodes is not self.nodes and nodes != self.nodes):
            self.answers.clear()
            self.queues = queues
        self.nodes = nodes
        shape = feasibility.shape(ask)
        key = (shape, grow)
        if key not in self.answers:
            if len(self.answers) >= self.LIMIT:
                self.answers.clear()
            self.answers[key] = feasibility.never_starts(
                shape, queues, nodes, cluster_may_grow=grow
            )
        return self.answers[key]


NEVER = NeverCache()


class WorkloadAccess(APIHandler):
    """Finding one workload the caller may see: another user's answers 404, like the hub; so
    does, to a job's own token (``require(..., job=True)``), every workload but its job."""

    def find(self, workload_id: str) -> WorkloadRecord:
        number = int(workload_id) if len(workload_id) <= 19 else MAX_ID + 1
        record = None
        if number <= MAX_ID:  # what the database cannot hold it does not have
            record = self.loop.records.get(number) or self.loop.store.workload(number)
        if (
            record is None
            or not (self.caller.is_admin or record.user == self.caller.name)
            or (self.as_job and not self.caller.is_token_of(token_id_of(record.handle)))
        ):
            shown_id = workload_id if len(workload_id) <= 40 else f"{workload_id[:20]}…"
            raise web.HTTPError(404, f"workload {shown_id} not found")
        return record

    def actor(self, record: WorkloadRecord) -> str:
        """Who is acting on ``record``, in the words of its events."""
        if self.caller.kind == "service":
            return f"the {self.caller.name} service for {record.user}"
        if self.caller.name == record.user:
            return "its owner"
        return f"admin {self.caller.name}"

    def acting_for(self, requested: str | None, doing: str) -> str:
        """The user a request acts for: the caller, or (admins only) the one it names;
        ``doing`` words the refusal ("allocating" for another user needs admin)."""
        user = requested or self.caller.name
        if user != self.caller.name and not self.caller.is_admin:
            raise web.HTTPError(403, f"{doing} for another user needs {ADMIN}: {self.lacks(ADMIN)}")
        return user

    def time_limit(self, asked: float | None, project: str) -> float | None:
        """A job's time limit in ``project``: the one asked for, at most the project's
        maximum (400 beyond it); else the project's default, else its maximum, else none."""
        default, most = self.loop.time_limits.get(project, (None, None))
        if asked is None:
            return default if default is not None else most
        if most is not None and asked > most:
            raise InvalidSpec(
                "time_limit",
                f"must be at most {slurm_time(most)} in project {project} (its max_time_limit), "
                f"got {slurm_time(asked)}",
            )
        return asked

    @property
    def cluster_may_grow(self) -> bool:
        """An admin's setting: a cluster that may grow refuses no shape as never-starting."""
        return bool(self.settings.get("cluster_may_grow", False))

    def refuse_never_starting(self, ask: WorkloadRequest) -> None:
        """409 in the engine's words when ``ask`` (its project resolved) can never start on
        this cluster (``scheduler.engine.feasibility``)."""
        hopeless = NEVER.answer(
            ask, self.loop.queues, self.loop.inventory.nodes, self.cluster_may_grow
        )
        if hopeless is not None:
            raise web.HTTPError(409, hopeless)

    async def project_for(self, requested: str | None, user: str) -> str:
        """The project a workload goes to: the one asked for if ``user`` belongs to it, or the
        user's only project when none was named. An admin's own workloads may go to any
        project; acting for another user (the spawner does, with the service's token), the
        project must be one of that user's, so nobody is charged to a project they are not in.
        """
        if user == self.caller.name:
            groups = self.caller.groups
        else:
            try:
                groups = await self.directory.groups_of(user)
            except HubDirectoryError as error:
                raise web.HTTPError(503, str(error)) from None
        mine = projects_of(user, groups, self.loop.queues, self.loop.members)
        if requested is None:
            if len(mine) == 1:
                return mine[0]
            if not mine and user == self.caller.name and self.caller.is_admin:
                # an admin's own work may go to any project: say so, not "ask an admin"
                raise InvalidSpec(
                    "project",
                    f"is required: {user} is in no project, and as an admin may name any of "
                    + ", ".join(leaf_projects(self.loop.queues)),
                )
            if not mine:
                raise web.HTTPError(
                    403, f"{user} is not a member of any project; ask an admin to add them"
                )
            raise InvalidSpec("project", f"is required: {user} is in {', '.join(mine)}")
        if requested not in leaf_projects(self.loop.queues):
            raise InvalidSpec("project", f"no such project {requested!r}")
        own_as_admin = user == self.caller.name and self.caller.is_admin
        if requested not in mine and not own_as_admin:
            raise web.HTTPError(
                403,
                f"{user} is not a member of project {requested}"
                + (f"; their projects: {', '.join(mine)}" if mine else ""),
            )
        return requested


class WorkloadListHandler(WorkloadAccess):
    async def get(self) -> None:
        self.require(READ)
        users = self.list_argument("user")
        if not self.caller.is_admin:
            if any(user != self.caller.name for user in users):
                raise web.HTTPError(
                    403, f"listing other users' workloads needs {ADMIN}: {self.lacks(ADMIN)}"
                )
            users = [self.caller.name]
        states = self.list_argument("state")
        kinds = self.list_argument("kind")
        for name, values, known in (("state", states, STATES), ("kind", kinds, KINDS)):
            unknown = [value for value in values if value not in known]
            if unknown:
                raise InvalidSpec(name, f"unknown {name} {unknown[0]!r}; one of {', '.join(known)}")
        if self.flag_argument("active"):
            states = states or list(ACTIVE_STATES)
        asked = self.page()
        page = self.loop.store.workloads(
            states=states,
            projects=self.list_argument("project"),
            users=users,
            kinds=kinds,
            before=asked.before,
            offset=asked.offset,
            limit=asked.limit,
            count=self.paginated(),
        )
        live = self.loop.records
        items = [workload_json(live.get(record.id, record), self.loop) for record in page.records]
        self.write_page(items, asked, page)

    async def post(self) -> None:
        self.require(SUBMIT)
        key = idempotency_key(self.request.headers.get_list(IDEMPOTENCY_HEADER))
        body = self.json_body()
        if key is None:
            stored = await self._submit(body)
        else:
            # a retry arriving while the first is still being stored waits, then finds it
            async with self.loop.key_turns.turn((self.caller.name, key)):
                digest = body_digest(body)
                first = self.loop.store.submitted_with(self.caller.name, key)
                if first is None:
                    stored = await self._submit(body, key=key, digest=digest)
                else:
                    stored = self._replay(first, digest)
        # a sweep is answered as the sweep, at its own address
        base = self.request.path.rstrip("/")
        if stored[0].sweep_id is None:
            self.set_header("Location", f"{base}/{stored[0].id}")
            self.write_json(workload_json(stored[0], self.loop), status=201)
        else:
            self.set_header("Location", f"{base.rsplit('/', 1)[0]}/sweeps/{stored[0].id}")
            self.write_json(sweep_json(stored[0].id, stored, self.loop), status=201)

    async def _submit(
        self, body: object, key: str | None = None, digest: str | None = None
    ) -> list[WorkloadRecord]:
        """Store what ``body`` asks for: the workload, or a sweep's members. With an
        idempotency ``key``, the workload (a sweep's first member) keeps it and the body's
        ``digest``."""
        submission = parse_submission(body, self.settings["resource_defaults"])
        asked = submission.ask
        ceiling = default_priority(asked.kind, False)
        if asked.priority > ceiling and not self.caller.is_admin:
            raise InvalidSpec(
                "priority",
                f"may be at most {ceiling} for {asked.kind.value} work "
                f"(higher needs {ADMIN}), got {asked.priority}",
            )
        project = await self.project_for(asked.project, self.caller.name)
        min_runtime = asked.min_runtime
        if min_runtime is None:
            min_runtime = self.settings["default_min_runtime"]
        ask = replace(
            asked,
            project=project,
            user=self.caller.name,
            min_runtime=min_runtime,
            max_runtime=self.time_limit(asked.max_runtime, project),
        )
        self.refuse_never_starting(ask)
        dependency = submission.dependency
        if dependency is not None:
            target = self.loop.records.get(dependency.id) or self.loop.store.workload(dependency.id)
            check_dependency(dependency, target, self.caller.name, self.caller.is_admin)
        if submission.sweep is not None:
            return await self._submit_sweep(submission, ask, key, digest)
        record = self._record(submission, ask)
        record.idempotency_key, record.request_digest = key, digest
        return await self.loop.submit([record])

    def _replay(self, first: WorkloadRecord, digest: str) -> list[WorkloadRecord]:
        """A retry of the submission that stored ``first``: the same answer as the first time
        (201, the workload or sweep as it is now), storing nothing. The same key with
        another body is a client's mistake, refused (422) rather than answered."""
        if first.request_digest != digest:
            raise web.HTTPError(
                422,
                f"{IDEMPOTENCY_HEADER}: this key was first sent with another body (it made "
                f"workload {first.id}); send a new key for a new submission",
            )
        self.set_header(REPLAYED_HEADER, "true")
        if first.sweep_id == first.id:
            return self.loop.store.sweep_members(first.id)
        return [self.loop.records.get(first.id, first)]

    @staticmethod
    def _record(submission: Submission, ask: WorkloadRequest) -> WorkloadRecord:
        dependency = submission.dependency
        return WorkloadRecord.asking(
            ask,
            name=submission.name or "",
            command=submission.command,
            working_dir=submission.working_dir,
            env=submission.env,
            after_id=None if dependency is None else dependency.id,
            after_ok=dependency is not None and dependency.ok,
        )

    async def _submit_sweep(
        self, submission: Submission, ask: WorkloadRequest, key: str | None, digest: str | None
    ) -> list[WorkloadRecord]:
        """Every member in one transaction, with consecutive ids; the sweep's id is its first
        member's, which alone keeps the idempotency key. All are stored or none is, and no
        cycle sees part of a sweep."""
        sweep = submission.sweep
        assert sweep is not None
        combinations = list(sweep.members())
        records = [self._record(submission, ask) for _ in combinations]
        records[0].idempotency_key, records[0].request_digest = key, digest

        def name_members(records: list[WorkloadRecord]) -> None:
            first = records[0].id
            stem = submission.name or f"sweep-{first}"
            for index, (record, values) in enumerate(zip(records, combinations, strict=True)):
                record.sweep_id = first
                record.sweep_parallel = sweep.parallel
                record.name = f"{stem}-{index}"
                record.env = {**submission.env, **member_env(first, index, values)}

        return await self.loop.submit(records, before_commit=name_members)


class WorkloadHandler(WorkloadAccess):
    async def get(self, workload_id: str) -> None:
        self.require(READ, job=True)
        record = self.find(workload_id)
        self.write_json(workload_json(record, self.loop, self.loop.store.events(record.id)))

    async def delete(self, workload_id: str) -> None:
        self.require(SUBMIT)
        record = self.find(workload_id)
        if record.is_allocation:
            server = f"server {record.server_name!r}" if record.server_name else "server"
            raise web.HTTPError(
                409,
                f"workload {workload_id} is the GPU share of {record.user}'s notebook "
                f"{server}, not a job: stop that server to give the GPU back (Stop My Server "
                "on the hub's home page)",
            )
        if record.state not in CANCELLABLE:
            raise web.HTTPError(409, f"workload {workload_id} is already {record.state}")
        await self.loop.cancel(record, by=self.actor(record))
        self.write_json(workload_json(record, self.loop))


class WorkloadCheckpointHandler(WorkloadAccess):
    """A running job says it has just saved its work (``frachub.checkpointed()``): from now
    on an eviction destroys only what it does after this."""

    async def post(self, workload_id: str) -> None:
        self.require(SUBMIT, job=True)
        record = self.find(workload_id)
        if record.is_allocation:
            raise web.HTTPError(
                409, f"workload {workload_id} is a notebook allocation; only jobs checkpoint"
            )
        try:
            self.loop.checkpointed(record)
        except LifecycleError:
            raise web.HTTPError(
                409,
                f"workload {workload_id} is {record.state}; only a running job can report "
                "a checkpoint",
            ) from None
        self.write_json(workload_json(record, self.loop))


class WorkloadLogsHandler(WorkloadAccess):
    """Plain text; ``tail=N`` lines, ``follow=1`` keeps streaming until the workload ends."""

    def set_default_headers(self) -> None:
        super().set_default_headers()
        self.set_header("Content-Type", "text/plain; charset=utf-8")

    async def get(self, workload_id: str) -> None:
        self.require(READ)
        record = self.find(workload_id)
        if record.is_allocation:
            raise web.HTTPError(404, f"workload {workload_id} is a notebook; it has no job logs")
        replica = self._int_argument("replica", 0)
        if replica >= record.replicas:
            raise InvalidSpec("replica", f"must be below {record.replicas}, got {replica}")
        tail = self._int_argument("tail", -1)
        follow = self.get_argument("follow", "0").lower() in ("1", "true", "yes")
        path = self.loop.backend.log_path(record.id, replica)
        reader = getattr(self.loop.backend, "read_log", None)
        if not path and reader is not None:  # Kubernetes: the pods' logs (pods/log)
            await self._stream(reader, record, replica, tail, follow)
            return
        position = 0
        if path and os.path.lexists(path):
            try:
                position = self._write_tail(path, tail)
            except OSError as error:
                raise web.HTTPError(
                    404, f"the log of workload {workload_id} cannot be read ({error.strerror})"
                ) from None
        await self.flush()
        while follow and record.id in self.loop.records and not self.client_gone:
            await self.wait_unless_gone(asyncio.sleep(0.5), 0.5)
            if not path:  # the job was still starting: its log may exist by now
                path = self.loop.backend.log_path(record.id, replica)
            if path and os.path.exists(path):
                position = self._write_from(path, position)
                try:
                    await self.flush()
                except StreamClosedError:
                    return
        if self.client_gone:
            return
        if follow and path and os.path.exists(path):
            self._write_from(path, position)
        self.finish()

    async def _stream(self, reader, record, replica: int, tail: int, follow: bool) -> None:
        """A backend that streams logs itself; with ``follow``, a job still starting (no pod
        yet) is waited for while the workload is active."""
        while True:
            wrote = False
            async for chunk in reader(record.id, replica, tail=tail, follow=follow):
                wrote = True
                self.write(chunk)
                try:
                    await self.flush()
                except StreamClosedError:
                    return
            if wrote or not follow or record.id not in self.loop.records:
                break
            await asyncio.sleep(0.5)
        self.finish()

    def _int_argument(self, name: str, default: int) -> int:
        return parse_count(self.get_argument(name, None), name, default)

    def _write_tail(self, path: str, lines: int) -> int:
        with _open_log(path) as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            if lines < 0:
                start = 0
            else:
                start, found = size, 0
                while start > 0 and found <= lines:
                    step = min(LOG_CHUNK, start)
                    start -= step
                    handle.seek(start)
                    found += handle.read(step).count(b"\n")
                handle.seek(start)
                data = handle.read(size - start)
                if lines == 0:
                    return size
                kept = data.split(b"\n")
                ending = kept[-1] == b""
                kept = kept[-(lines + 1) :] if ending else kept[-lines:]
                self.write(b"\n".join(kept))
                return size
            handle.seek(start)
            self.write(handle.read(size - start))
            return size

    def _write_from(self, path: str, position: int) -> int:
        with _open_log(path) as handle:
            handle.seek(position)
            data = handle.read()
        if data:
            self.write(data)
        return position + len(data)


def _open_log(path: str):
    """Log files sit in directories their (possibly untrusted) users own: never read through a
    symlink or hard link a job may have put there to make the service read another file."""
    return os.fdopen(open_own_file(path, os.O_RDONLY), "rb")


class WorkloadGpuHandler(WorkloadAccess):
    """``GET /api/v1/workloads/{id}/gpu``: the workload's recent GPU use, for the panel's
    live chart: the in-memory ring of samples while it runs (``runtime/gpu_history.py``),
    oldest first, and its share's memory to draw them against."""

    async def get(self, workload_id: str) -> None:
        self.require(READ, job=True)
        record = self.find(workload_id)
        history = self.loop.gpu_usage
        running = record.state == WorkloadState.RUNNING
        seen = history.workloads.get(record.id) if history is not None and running else None
        self.write_json(
            {
                "workload_id": record.id,
                "state": record.state,
                "sampling": history is not None and not history.failing,
                "source": history.source if history is not None else None,
                "interval_seconds": history.interval if history is not None else None,
                "utilization_of": seen.utilization_of if seen else None,
                "share_memory_bytes": share_bytes(record, self.loop) if running else None,
                "samples": [
                    {
                        "at": iso(point.at),
                        "utilization_percent": point.utilization_percent,
                        "memory_bytes": point.memory_bytes,
                    }
                    for point in (seen.ring if seen else ())
                ],
            }
        )


def sweep_json(sweep_id: int, members: list[WorkloadRecord], loop) -> dict:
    """A sweep: its id, its limit, and its members (in order), each as ``workload_json``."""
    return {
        "id": sweep_id,
        "user": members[0].user,
        "project": members[0].project,
        "parallel": members[0].sweep_parallel,
        "workloads": [workload_json(loop.records.get(m.id, m), loop) for m in members],
    }


class SweepHandler(WorkloadAccess):
    """``/api/v1/sweeps/{id}``: a sweep's members; DELETE cancels every one not yet ended."""

    def members(self, sweep_id: str) -> list[WorkloadRecord]:
        first = self.find(sweep_id)
        if first.sweep_id != first.id:
            raise web.HTTPError(404, f"sweep {sweep_id} not found")
        return self.loop.store.sweep_members(first.id)

    async def get(self, sweep_id: str) -> None:
        self.require(READ)
        members = self.members(sweep_id)
        self.write_json(sweep_json(members[0].id, members, self.loop))

    async def delete(self, sweep_id: str) -> None:
        self.require(SUBMIT)
        members = self.members(sweep_id)
        for member in members:
            live = self.loop.records.get(member.id)
            if live is not None and live.state in CANCELLABLE:
                await self.loop.cancel(live, by=self.actor(live))
        self.write_json(sweep_json(members[0].id, members, self.loop))


default_handlers = [
    (r"/api/v1/workloads/?", WorkloadListHandler),
    (r"/api/v1/workloads/([0-9]+)/?", WorkloadHandler),
    (r"/api/v1/workloads/([0-9]+)/logs/?", WorkloadLogsHandler),
    (r"/api/v1/workloads/([0-9]+)/checkpoint/?", WorkloadCheckpointHandler),
    (r"/api/v1/workloads/([0-9]+)/gpu/?", WorkloadGpuHandler),
    (r"/api/v1/sweeps/([0-9]+)/?", SweepHandler),
]
