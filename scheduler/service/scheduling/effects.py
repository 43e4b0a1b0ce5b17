"""Carrying out the lifecycle's effects: the store first, the backend second.

The lifecycle (``scheduler.engine.lifecycle``) says what happened to each workload as a list
of effects; this module writes them to the store and the rows (``record``), then stops and
launches what they say on the backend (``stop``, ``launch_many``). Write first, act second: a
start is committed before the process is launched, so a crash in between leaves a running
workload without a handle, which the loop's ``recover`` requeues.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from scheduler.backends.base import Backend, BackendError, JobSpec
from scheduler.common.concurrency import side_by_side
from scheduler.common.limits import MILLI
from scheduler.common.messages import event_line
from scheduler.common.placement import Placement, describe_placement
from scheduler.engine.lifecycle import (
    Effect,
    Evicted,
    Freed,
    Launch,
    Lifecycle,
    LifecycleError,
    Milestone,
    Note,
    Started,
    Stop,
)
from scheduler.engine.model import held_milli
from scheduler.service.persistence.orm import WorkloadRecord
from scheduler.service.persistence.store import Store
from scheduler.service.runtime.metrics import Metrics
from scheduler.service.scheduling.joblog import milestone_line, write_milestone
from scheduler.service.scheduling.roster import Roster

LAUNCHES_AT_ONCE = 16
"""A cycle's starts are launched side by side, this many at a time: each waits on the
backend (a process, the Kubernetes API) and, with job tokens, on the hub (about 50 ms)."""

STOPS_AT_ONCE = 16
"""A cycle's stops are sent side by side, this many at a time: a reclaim for a 500-replica
gang stops 500 jobs, each a call to the backend (on Kubernetes, a patch of its Jobs)."""

Stops = list[tuple[WorkloadRecord, dict | None, float]]
"""Processes to stop: each row with the handle its attempt had and its grace period."""


def held_gpus(placement: Placement) -> float:
    """The GPUs a placement holds, in GPUs (fractions included)."""
    return held_milli(placement) / MILLI


def job_spec(record: WorkloadRecord, log_notes: tuple[str, ...] = ()) -> JobSpec:
    """What the backend needs to launch ``record`` where it was placed (the backend sizes
    each share's memory from its own inventory: ``Inventory.share``). ``log_notes``:
    milestone lines for its log."""
    return JobSpec(
        workload_id=record.id,
        name=record.name,
        user=record.user,
        project=record.project,
        command=record.command,
        working_dir=record.working_dir,
        env=dict(record.env or {}),
        placement=record.placement,
        restart_count=record.restart_count,
        replicas=record.replicas,
        log_notes=log_notes,
        cpu_milli=record.cpu_milli or 0,
        memory_mib=record.memory_mib or 0,
    )


class Effects:
    """Writes effects to the store and the rows, and stops and launches on the backend."""

    def __init__(
        self,
        lifecycle: Lifecycle,
        roster: Roster,
        store: Store,
        backend: Backend,
        metrics: Metrics,
        *,
        grace_seconds: float,
        unsettle: Callable[[], None],
        never_launched: Callable[[int], None] = lambda workload_id: None,
        log: logging.Logger,
    ) -> None:
        self.lifecycle = lifecycle
        self.roster = roster
        self.store = store
        self.backend = backend
        self.metrics = metrics
        self.grace_seconds = grace_seconds
        self.unsettle = unsettle
        """Called before a start is written: the session arrivals are decided on holds less
        than is held from then on, until its maker sets the next one."""
        self.never_launched = never_launched
        """Called with a start that was evicted, cancelled or stopped while it waited for its
        turn to launch: it never ran, so its end is now (the loop records it)."""
        self.log = log
        self.unstopped: dict[int, tuple[WorkloadRecord, dict, float]] = {}
        """Stops the backend failed, by workload id: ``retry_stops`` sends them again."""

    def record(self, effects: list[Effect], now: float) -> tuple[Stops, list[WorkloadRecord]]:
        """Write the effects to the store (not committed) and the rows; return the processes
        to stop (with the handle they had) and the jobs to launch."""
        stops: Stops = []
        launches: list[WorkloadRecord] = []
        touched: dict[str, WorkloadRecord] = {}
        if any(isinstance(effect, Started) for effect in effects):
            self.unsettle()
        records = self.roster.records
        for effect in effects:
            record = records[int(effect.name)]
            touched[effect.name] = record
            if isinstance(effect, Note):
                self.store.event(record, now, effect.type.value, effect.message)
                if effect.type is not Milestone.SUBMITTED:
                    line = event_line(effect.type.value, effect.message)
                    write_milestone(self.backend, record, now, line)
            elif isinstance(effect, Started):
                record.handle = None
                attempt = self.lifecycle[effect.name].restart_count + 1
                where = describe_placement(effect.placement) or "no GPU"
                if record.is_allocation:
                    self.store.event(record, now, Milestone.ALLOCATED.value, where)
                elif attempt > 1:
                    words = f"attempt {attempt} on {where}"
                    self.store.event(record, now, Milestone.RESTARTED.value, words)
                else:
                    self.store.event(record, now, Milestone.STARTED.value, f"on {where}")
                self.store.open_usage(record, held_gpus(effect.placement), now)
                self.metrics.started(record.kind, now - record.submitted_at)
            elif isinstance(effect, Launch):
                launches.append(record)
            elif isinstance(effect, Evicted):
                self.metrics.preempted(effect.reason.value)
                self.log.info("workload %s (%s): %s", record.id, record.name, effect.message)
            elif isinstance(effect, Stop):
                stops.append((record, record.handle, effect.grace))
            elif isinstance(effect, Freed):
                self.store.close_usage(record, now)
        for name, record in touched.items():
            life = self.lifecycle[name]
            record.keep(life)
            if not life.state.holding:
                record.handle = None  # its attempt is over; a stop above kept the handle
            if life.state.final:
                self.lifecycle.forget(name)
                self.roster.remove(record)
            else:
                self.roster.index(record)
        return stops, launches

    async def stop(self, stops: Stops) -> None:
        """Stop the processes ``record`` returned, side by side (``STOPS_AT_ONCE``). A stop
        the backend fails is logged and kept for ``retry_stops`` (the loop's next tick);
        the others go on, so one failure does not leave the rest running."""

        async def one(stop: tuple[WorkloadRecord, dict | None, float]) -> None:
            record, handle, grace = stop
            if handle is None:  # it is being launched: ``launch`` stops it
                return
            try:
                await self.backend.stop(record.id, handle, grace)
            except Exception as error:
                self.unstopped[record.id] = (record, handle, grace)
                message = f"stopping it failed ({error}); trying again"
                self.log.warning("workload %d (%s): %s", record.id, record.name, message)
            else:
                self.unstopped.pop(record.id, None)

        await side_by_side(one, stops, STOPS_AT_ONCE)

    async def retry_stops(self) -> None:
        """Send again the stops that failed, of the workloads still being stopped (the
        loop's tick calls it)."""
        retry: Stops = []
        for workload_id, (record, handle, grace) in list(self.unstopped.items()):
            life = self.lifecycle.get(str(workload_id))
            if life is None or not life.state.releasing or record.handle != handle:
                del self.unstopped[workload_id]  # it ended, or this attempt did
            else:
                retry.append((record, handle, grace))
        await self.stop(retry)

    async def launch_many(
        self, launches: list[WorkloadRecord], now: float, notes: Mapping[int, str] | None = None
    ) -> None:
        """Launch starts side by side (``LAUNCHES_AT_ONCE``); each commits what it changed
        before its next await, so a failed request's rollback stays its own. ``notes``: a
        milestone (in words) for the log of each workload it names, decided with its start."""
        notes = notes or {}

        async def launch(record: WorkloadRecord) -> None:
            note = notes.get(record.id)
            await self.launch(record, now, () if note is None else (note,))
            self.store.commit()

        await side_by_side(launch, launches, LAUNCHES_AT_ONCE)

    async def launch(self, record: WorkloadRecord, now: float, notes: tuple[str, ...] = ()) -> None:
        """Launch one start on the backend; a launch that fails ends the attempt. One that
        was evicted, cancelled or stopped while it waited for its turn (a burst's starts
        launch ``LAUNCHES_AT_ONCE`` at a time) is not launched at all: launching it only to
        stop it would keep a notebook waiting for its GPUs until then, and run for a moment
        what its user cancelled."""
        life = self.lifecycle.get(str(record.id))
        if life is not None and life.state.releasing:
            self.never_launched(record.id)
            return
        lines = tuple(milestone_line(now, note) for note in notes)
        job = job_spec(record, lines)
        try:
            record.handle = await self.backend.start(job)
            self.store.commit()  # nothing of a cycle stays uncommitted across an await
            life = self.lifecycle.get(str(record.id))
            if life is not None and life.state.releasing:
                # cancelled, evicted or overdue while the backend was starting it: stop it now
                # that there is a handle to stop (the stop sent meanwhile had none)
                await self.backend.stop(record.id, record.handle, self.grace_seconds)
        except BackendError as error:
            self._launch_failed(record, now, str(error))
        except Exception as error:
            self.log.exception("starting workload %d failed", record.id)
            self._launch_failed(record, now, f"could not start: {error}")

    def _launch_failed(self, record: WorkloadRecord, now: float, message: str) -> None:
        try:
            self.record(self.lifecycle.launch_failed(str(record.id), now, message), now)
        except LifecycleError:
            self.log.warning("workload %d ended while it was launched: %s", record.id, message)
