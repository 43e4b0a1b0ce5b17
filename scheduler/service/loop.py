"""The scheduling loop: the only place in the service that runs the engine.

One cycle is store + backend -> ``Snapshot`` -> ``run_cycle(now)`` -> the store (one
transaction) -> ``backend.start/stop``; cycles repeat until the engine decides nothing, as
the scenario runner does. Cycles run when something changes (submit, cancel, an exit, a queue
edit), coalesced so a burst of submissions costs a few cycles rather than one each, and on a
timer for min_runtime protections and max runtimes.

The workloads' life (states, transitions, the snapshot, the decisions) is the lifecycle's
(``scheduler.engine.lifecycle``), shared with the scenario runner and the fleet simulator; the
loop carries out its effects. Write first, act second: a start is committed before the
process is launched, so a crash in between leaves a running workload without a handle, which
``recover`` requeues. Evicted work holds its GPUs (preempting) until the backend reports its
exit, so the engine never hands a GPU to two workloads at once (the policy is built with
``immediate_evictions=False``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from scheduler.backends.base import Backend, BackendError, Checkpoint, Inventory, JobSpec
from scheduler.display import describe_placement, event_line, gpus
from scheduler.engine import (
    MILLI,
    CycleResult,
    Pending,
    Placement,
    Policy,
    Queue,
    QueueStatus,
    Session,
    Snapshot,
    decide,
)
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
    WorkloadState,
)
from scheduler.engine.model import held_milli
from scheduler.service.metrics import Metrics
from scheduler.service.orm import WorkloadRecord
from scheduler.service.store import Store
from scheduler.service.sweeps import held_back

MAX_CYCLES_PER_RUN = 100


@dataclass(frozen=True)
class Settings:
    """The loop's knobs, copied from the service's traits once at start-up."""

    grace_seconds: float = 30.0
    cycle_interval: float = 5.0
    poll_interval: float = 0.5


def held_gpus(placement: Placement) -> float:
    return held_milli(placement) / MILLI


class SchedulingLoop:
    """Owns the active workloads (in memory and in the store) and keeps them scheduled."""

    def __init__(
        self,
        store: Store,
        backend: Backend,
        policy: Policy,
        settings: Settings,
        metrics: Metrics,
        *,
        clock: Callable[[], float] = time.time,
        log: logging.Logger | None = None,
    ) -> None:
        self.store = store
        self.backend = backend
        self.policy = replace(policy, immediate_evictions=False)
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self.log = log or logging.getLogger("frachub")
        self.lifecycle = Lifecycle(grace_seconds=settings.grace_seconds)
        """The workloads' lives; ``records`` are their rows, kept in step with them."""
        self.records: dict[int, WorkloadRecord] = {}
        self.queues: tuple[Queue, ...] = ()
        self.members: dict[str, tuple[str, ...]] = {}
        self.pending: dict[int, Pending] = {}
        self.held: dict[int, str] = {}
        """Sweep members the last snapshot held back, with why."""
        self.queue_status: dict[str, QueueStatus] = {}
        self.borrowed: dict[int, str] = {}
        """Running work beyond its project's quota -> who may reclaim it, in words."""
        self.inventory: Inventory = backend.inventory()
        self.next_wakeup: float | None = None
        self.settled: Session | None = None
        """The last cycle's session once it decided nothing: what the store and the backend
        hold now, forked to decide arrivals in milliseconds (``dry_run``); None once anything
        changed since."""
        self.version = 0
        """Bumped whenever something a waiting client may care about changed."""
        self._changed = asyncio.Event()
        self._cycle_requested = False
        self._cycle_task: asyncio.Task | None = None
        self._tasks: list[asyncio.Task] = []
        self._last_cycle_seconds = 0.0

    # -- life -----------------------------------------------------------------------------

    def load_queues(self) -> None:
        records = self.store.queues()
        self.queues = tuple(record.as_queue() for record in records)
        self.members = {record.name: tuple(record.members or ()) for record in records}

    async def recover(self) -> None:
        """Rebuild the in-memory state from the store and reality after a (re)start."""
        now = self.clock()
        self.load_queues()
        self.lifecycle.start_seq = self.store.max_start_seq()
        for record in self.store.active_workloads():
            self.records[record.id] = record
            self.lifecycle.restore(record.as_life())
        effects: list[Effect] = []
        to_stop: list[WorkloadRecord] = []
        for record in list(self.records.values()):
            life = self.lifecycle[str(record.id)]
            if record.is_allocation or life.state is WorkloadState.PENDING:
                continue
            if record.handle is None:
                effects += self.lifecycle.not_launched(life.name, now)
            elif not self.backend.adopt(record.id, record.handle):
                gone = "its process was gone when the service restarted"
                effects += self.lifecycle.exited(life.name, now, None, gone)
            elif life.state.releasing:
                to_stop.append(record)
        self._record(effects, now)
        self.store.commit()
        for record in to_stop:
            await self.backend.stop(record.id, record.handle or {}, self.settings.grace_seconds)
        states = [life.state for life in self.lifecycle.lives.values()]
        self.log.info(
            "recovered %d active workloads (%d running, %d pending)",
            len(self.records),
            states.count(WorkloadState.RUNNING),
            states.count(WorkloadState.PENDING),
        )

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._every(self.settings.poll_interval, self.poll)),
            loop.create_task(self._every(self.settings.cycle_interval, self.tick)),
        ]
        self.request_cycle()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._cycle_task is not None:
            self._cycle_task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.backend.close()

    async def _every(self, seconds: float, action: Callable) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await action()
            except Exception:
                self.store.rollback()
                self.log.exception("scheduler %s failed; trying again", action.__name__)

    # -- changes from the API -------------------------------------------------------------

    def add(self, record: WorkloadRecord) -> WorkloadRecord:
        """Store a validated new workload at the back of its queue and schedule. The caller
        fills in what was asked for; the life it has not had yet starts here."""
        (added,) = self.add_all([record])
        return added

    def add_all(
        self,
        records: list[WorkloadRecord],
        *,
        before_commit: Callable[[list[WorkloadRecord]], None] | None = None,
    ) -> list[WorkloadRecord]:
        """Store new workloads in ONE transaction, each at the back of its queue, and schedule:
        a sweep's members are all stored or none is, and nothing of a failed submission stays
        in memory. ``before_commit`` sees them with their ids (a sweep names its members after
        its first one's)."""
        now = self.clock()
        for record in records:
            record.state = WorkloadState.PENDING.value  # the row needs one before it has an id
            record.submitted_at = now
            self.store.add(record)
        self.store.flush()
        if before_commit is not None:
            before_commit(records)
        for record in records:
            if not record.name:
                record.name = f"{'notebook' if record.is_allocation else 'job'}-{record.id}"
        try:
            for record in records:
                self.records[record.id] = record
                self._record(self.lifecycle.submit(record.as_life(new=True), now), now)
            self.store.commit()
        except Exception:
            for record in records:
                self.records.pop(record.id, None)
                self.lifecycle.withdraw(str(record.id))
            raise
        for record in records:
            self.metrics.submitted(record.kind)
        self.request_cycle()
        return records

    async def cancel(self, record: WorkloadRecord, by: str = "its owner") -> None:
        """Cancel a job or release an allocation; a running job gets its grace period. ``by``
        names who acted, for the record ("its owner", "admin bob", "the idle check")."""
        now = self.clock()
        try:
            effects = self.lifecycle.cancel(str(record.id), now, by)
        except LifecycleError:
            return  # it ended or is already stopping meanwhile; the handlers said so
        stops, _ = self._record(effects, now)
        self.store.commit()
        await self._stop(stops)
        self._notify()
        self.request_cycle()

    def checkpointed(self, record: WorkloadRecord, at: float | None = None) -> bool:
        """The job saved its work at ``at`` (default: now), as it told the API or as its
        backend saw; kept so the engine counts only the work since then as at risk. False
        when it was not news. Raises ``LifecycleError`` when the job holds no GPUs."""
        now = self.clock()
        name = str(record.id)
        if not self.lifecycle.checkpointed(name, now if at is None else at, now):
            return False
        record.keep(self.lifecycle[name])
        self.store.commit()
        self._notify()
        return True

    def queues_changed(self) -> None:
        self.settled = None
        self.load_queues()
        self.request_cycle()

    # -- the cycle ------------------------------------------------------------------------

    def request_cycle(self) -> None:
        """Run a cycle soon; bursts of requests share one. A cycle never takes more than about
        half the event loop: the next one waits at least as long as the last one took."""
        self._cycle_requested = True
        if self._cycle_task is None or self._cycle_task.done():
            self._cycle_task = asyncio.get_running_loop().create_task(self._cycle_soon())

    async def _cycle_soon(self) -> None:
        while self._cycle_requested:
            await asyncio.sleep(min(self._last_cycle_seconds, 1.0))
            self._cycle_requested = False
            try:
                await self.run_cycles()
            except Exception:
                self.store.rollback()
                self._reload()
                self.log.exception("scheduling cycle failed; will try again")
                await asyncio.sleep(1.0)
                self._cycle_requested = True

    def _reload(self) -> None:
        """After a rollback: the lives as the store has them again."""
        self.settled = None
        for record in self.records.values():
            self.lifecycle.restore(record.as_life())

    async def run_cycles(self) -> CycleResult:
        """Cycle until the engine decides nothing, applying each cycle's decisions."""
        began = time.perf_counter()
        self.inventory = self.backend.inventory()
        result = None
        started: set[int] = set()
        now = self.clock()
        for _ in range(MAX_CYCLES_PER_RUN):
            now = self.clock()
            self.settled = None
            snapshot = self.snapshot()
            # the placement's target workload: the cluster's own recent requests
            self.policy = self.policy.for_snapshot(snapshot)
            session = Session(snapshot, now, self.policy)
            result = decide(session)
            if not result.decisions:
                self.settled = session
                break
            effects = self.lifecycle.apply(result, now)
            started.update(int(e.name) for e in effects if isinstance(e, Started))
            await self._carry_out(effects, now)
        else:
            self.log.error("the engine did not settle in %d cycles", MAX_CYCLES_PER_RUN)
        assert result is not None
        self.pending = {int(name): info for name, info in result.pending.items()}
        self.queue_status = dict(result.queues)
        self.borrowed = self._borrowed()
        for workload_id in sorted(started & self.borrowed.keys()):
            record = self.records[workload_id]
            self.store.event(record, now, Milestone.BORROWED.value, self.borrowed[workload_id])
            words = event_line(Milestone.BORROWED.value, self.borrowed[workload_id])
            self._log_line(record, now, words)
        if started & self.borrowed.keys():
            self.store.commit()
        self.next_wakeup = result.next_wakeup
        self._last_cycle_seconds = time.perf_counter() - began
        self.metrics.cycle(self._last_cycle_seconds, result, self.records.values())
        self._notify()
        return result

    def snapshot(self) -> Snapshot:
        """The engine's input: every active workload but the sweep members held back by
        their sweep's parallel limit (``scheduler/service/sweeps.py``)."""
        full = self.lifecycle.snapshot(self.inventory.nodes, self.queues)
        self.held = held_back(self.records.values())
        if not self.held:
            return full
        kept = tuple(w for w in full.workloads if int(w.name) not in self.held)
        return replace(full, workloads=kept)

    def _borrowed(self) -> dict[int, str]:
        """Running preemptible work beyond its project's quota, in the order it started (the
        latest started is the first reclaimed), each with who may take the GPUs back."""
        parents = {queue.parent for queue in self.queues}
        projects = [queue.name for queue in self.queues if queue.name not in parents]
        over = {
            name
            for name in projects
            if (status := self.queue_status.get(name)) is not None
            and status.allocated_gpus > status.deserved_gpus + 1e-9
        }
        if not over:
            return {}
        runs: dict[str, list[WorkloadRecord]] = {}
        for record in self.records.values():
            if (
                record.project in over
                and record.state == WorkloadState.RUNNING
                and record.preemptible
            ):
                runs.setdefault(record.project, []).append(record)
        borrowed: dict[int, str] = {}
        for project in sorted(over):
            status = self.queue_status[project]
            running = sorted(runs.get(project, ()), key=lambda record: record.start_seq)
            held = status.allocated_gpus - sum(held_gpus(r.placement) for r in running)
            lenders = [
                name
                for name in projects
                if name != project
                and (other := self.queue_status.get(name)) is not None
                and other.deserved_gpus > other.allocated_gpus + 1e-9
            ]
            if lenders:
                who = " or ".join(lenders)
                needs = "needs its" if len(lenders) == 1 else "need their"
                when = f"may be preempted when {who} {needs} GPUs"
            else:
                when = "may be preempted when another project needs its quota"
            words = (
                f"{project} is using {gpus(status.allocated_gpus)}, beyond its "
                f"{gpus(status.deserved_gpus)} quota; {when}"
            )
            for record in running:
                held += held_gpus(record.placement)
                if held > status.deserved_gpus + 1e-9:
                    borrowed[record.id] = words
        return borrowed

    def _log_line(self, record: WorkloadRecord, now: float, text: str) -> None:
        """A milestone of a job in its own log, between its output, where its owner reads it
        (every replica's log that exists; a backend whose logs live elsewhere has none)."""
        if record.is_allocation:
            return
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now))
        line = f"=== frachub {stamp}: {text} ===\n".encode()
        for replica in range(record.replicas):
            path = self.backend.log_path(record.id, replica)
            if not path:
                continue
            try:
                # never created here, never through a symlink a job may have put in its place
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
            except OSError:
                continue
            try:
                os.write(fd, line)
            except OSError:
                pass
            finally:
                os.close(fd)

    def standing(self) -> Session:
        """A session of the state the scheduler stands in now, to fork for a dry run: the
        settled one of the last cycle, or (something changed since) a fresh one, decided so
        that it describes where the next cycle will leave things."""
        if self.settled is not None:
            return self.settled
        session = Session(self.snapshot(), self.clock(), self.policy)
        decide(session)
        return session

    # -- carrying out the lifecycle's effects: the store first, the backend second ---------

    async def _carry_out(self, effects: list[Effect], now: float) -> None:
        stops, launches = self._record(effects, now)
        self.store.commit()
        await self._stop(stops)
        for record in launches:
            await self._launch(record, now)
            self.store.commit()  # before the next await: a failed request's rollback is its own

    def _record(
        self, effects: list[Effect], now: float
    ) -> tuple[list[tuple[WorkloadRecord, dict | None, float]], list[WorkloadRecord]]:
        """Write the effects to the store (not committed) and the records; return the
        processes to stop (with the handle they had) and the jobs to launch."""
        stops: list[tuple[WorkloadRecord, dict | None, float]] = []
        launches: list[WorkloadRecord] = []
        touched: dict[str, WorkloadRecord] = {}
        if effects:
            self.settled = None
        for effect in effects:
            record = self.records[int(effect.name)]
            touched[effect.name] = record
            if isinstance(effect, Note):
                self.store.event(record, now, effect.type.value, effect.message)
                if effect.type is not Milestone.SUBMITTED:
                    self._log_line(record, now, event_line(effect.type.value, effect.message))
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
                self.records.pop(record.id, None)
                self.pending.pop(record.id, None)
        return stops, launches

    async def _stop(self, stops: list[tuple[WorkloadRecord, dict | None, float]]) -> None:
        for record, handle, grace in stops:
            if handle is not None:  # else it is being launched: _launch stops it
                await self.backend.stop(record.id, handle, grace)

    async def _launch(self, record: WorkloadRecord, now: float) -> None:
        node_memory = {node.name: node.gpu_memory_mib for node in self.inventory.nodes}
        first = record.placement[0]
        fraction = first.gpus[0].milli / MILLI if first.gpus else 0.0
        memory = round(fraction * node_memory.get(first.node, 0))
        job = JobSpec(
            workload_id=record.id,
            name=record.name,
            user=record.user,
            project=record.project,
            command=record.command,
            working_dir=record.working_dir,
            env=dict(record.env or {}),
            placement=record.placement,
            gpu_fraction=fraction,
            gpu_memory_mib=memory,
            restart_count=record.restart_count,
            replicas=record.replicas,
        )
        try:
            record.handle = await self.backend.start(job)
            self.store.commit()  # nothing of a cycle stays uncommitted across an await
            life = self.lifecycle.get(str(record.id))
            if life is not None and life.state.releasing:
                # cancelled, evicted or overdue while the backend was starting it: stop it now
                # that there is a handle to stop (the stop sent meanwhile had none)
                await self.backend.stop(record.id, record.handle, self.settings.grace_seconds)
        except BackendError as error:
            self._launch_failed(record, now, str(error))
        except Exception as error:
            self.log.exception("starting workload %d failed", record.id)
            self._launch_failed(record, now, f"could not start: {error}")

    def _launch_failed(self, record: WorkloadRecord, now: float, message: str) -> None:
        try:
            self._record(self.lifecycle.launch_failed(str(record.id), now, message), now)
        except LifecycleError:
            self.log.warning("workload %d ended while it was launched: %s", record.id, message)

    # -- reality ----------------------------------------------------------------------------

    async def poll(self) -> None:
        reports = await self.backend.poll()
        if not reports:
            return
        now = self.clock()
        effects: list[Effect] = []
        exits = []
        for report in reports:
            if isinstance(report, Checkpoint):
                record = self.records.get(report.workload_id)
                if record is not None:
                    with contextlib.suppress(LifecycleError):  # it stopped holding meanwhile
                        self.checkpointed(record, report.at)
            else:
                exits.append(report)
        if not exits:
            return
        for exit_ in exits:
            life = self.lifecycle.get(str(exit_.workload_id))
            if life is None or not life.state.holding:
                continue  # an attempt already accounted for (requeued at once, or cancelled)
            effects += self.lifecycle.exited(life.name, now, exit_.exit_code, exit_.message)
        self._record(effects, now)
        self.store.commit()
        self._notify()
        self.request_cycle()

    async def tick(self) -> None:
        """Timer duties: max runtimes, and a cycle for min_runtime ends and changed nodes."""
        now = self.clock()
        effects = self.lifecycle.stop_overdue(now)
        if effects:
            stops, _ = self._record(effects, now)
            self.store.commit()
            await self._stop(stops)
        self.request_cycle()

    # -- bookkeeping ------------------------------------------------------------------------

    def _notify(self) -> None:
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for_change(self, timeout: float) -> None:
        """Return after the next cycle or exit, or after ``timeout`` seconds."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)
