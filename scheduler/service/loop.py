"""The scheduling loop: the only place in the service that runs the engine.

One cycle is store + backend -> ``Snapshot`` -> ``run_cycle(now)`` -> the store (one
transaction) -> ``backend.start/stop``; cycles repeat until the engine decides nothing, as
the scenario runner does. Cycles run when something changes (submit, cancel, an exit, a queue
edit), coalesced so a burst of submissions costs a few cycles rather than one each, and on a
timer for min_runtime protections and max runtimes.

Write first, act second: a start is committed before the process is launched, so a crash in
between leaves a "running" workload without a handle, which ``recover`` requeues. Evicted work
holds its GPUs ("preempting") until the backend reports its exit, so the engine never hands a
GPU to two workloads at once (the policy is built with ``immediate_evictions=False``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from scheduler.backends.base import Backend, BackendError, Exit, Inventory, JobSpec
from scheduler.engine import (
    MILLI,
    CycleResult,
    Evict,
    EvictReason,
    Kind,
    Move,
    Pending,
    Placement,
    Policy,
    Queue,
    QueueStatus,
    Request,
    Snapshot,
    Start,
    State,
    Workload,
    run_cycle,
)
from scheduler.service.metrics import Metrics
from scheduler.service.orm import WorkloadRecord
from scheduler.service.store import Store

MAX_CYCLES_PER_RUN = 100

ENGINE_STATE = {
    "pending": State.PENDING,
    "running": State.RUNNING,
    "preempting": State.RELEASING,
    "cancelling": State.RELEASING,
    "stopping": State.RELEASING,
}
RELEASING = ("preempting", "cancelling", "stopping")


@dataclass(frozen=True)
class Settings:
    """The loop's knobs, copied from the service's traits once at start-up."""

    grace_seconds: float = 30.0
    cycle_interval: float = 5.0
    poll_interval: float = 0.5


def describe_placement(placement: Placement) -> str:
    """ "node-0 GPU 1 (0.5)", "node-0 GPUs 0, 1" — for events and logs."""
    parts = []
    for replica in placement:
        shares = replica.gpus
        if len(shares) == 1 and shares[0].milli < MILLI:
            parts.append(f"{replica.node} GPU {shares[0].index} ({shares[0].milli / MILLI:g})")
        else:
            label = "GPU" if len(shares) == 1 else "GPUs"
            parts.append(f"{replica.node} {label} {', '.join(str(s.index) for s in shares)}")
    return "; ".join(parts)


def held_gpus(placement: Placement) -> float:
    return sum(share.milli for replica in placement for share in replica.gpus) / MILLI


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
        self.records: dict[int, WorkloadRecord] = {}
        self.queues: tuple[Queue, ...] = ()
        self.members: dict[str, tuple[str, ...]] = {}
        self.pending: dict[int, Pending] = {}
        self.queue_status: dict[str, QueueStatus] = {}
        self.inventory: Inventory = backend.inventory()
        self.next_wakeup: float | None = None
        self.version = 0
        """Bumped whenever something a waiting client may care about changed."""
        self._changed = asyncio.Event()
        self._start_seq = 0
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
        self._start_seq = self.store.max_start_seq()
        for record in self.store.active_workloads():
            self.records[record.id] = record
        to_stop: list[WorkloadRecord] = []
        for record in list(self.records.values()):
            if record.is_allocation or record.state == "pending":
                continue
            if record.handle is None:
                self.store.event(record, now, "requeued", "the service stopped before it started")
                self._requeue(record, now, count_restart=False)
            elif not self.backend.adopt(record.id, record.handle):
                if record.state == "running":
                    self.store.event(
                        record, now, "lost", "its process was gone when the service restarted"
                    )
                    self._requeue(record, now, count_restart=True)
                else:
                    self._finish_stopped(record, None, now)
            elif record.state in RELEASING:
                to_stop.append(record)
        self.store.commit()
        for record in to_stop:
            await self.backend.stop(record.id, record.handle or {}, self.settings.grace_seconds)
        self.log.info(
            "recovered %d active workloads (%d running, %d pending)",
            len(self.records),
            sum(r.state == "running" for r in self.records.values()),
            sum(r.state == "pending" for r in self.records.values()),
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
                self.log.exception("scheduler %s failed; trying again", action.__name__)

    # -- changes from the API -------------------------------------------------------------

    def add(self, record: WorkloadRecord) -> WorkloadRecord:
        """Store a validated new workload at the back of its queue and schedule. The caller
        fills in what was asked for; the life it has not had yet starts here."""
        now = self.clock()
        record.state = "pending"
        record.submitted_at = now
        record.start_seq = 0
        record.placement = ()
        record.restart_count = 0
        record.preemptions = 0
        record.message = ""
        self.store.add(record)
        self.store.flush()
        if not record.name:
            record.name = f"{'notebook' if record.is_allocation else 'job'}-{record.id}"
        self.store.event(record, now, "submitted", f"to project {record.project}")
        self.store.commit()
        self.records[record.id] = record
        self.metrics.submitted(record.kind)
        self.request_cycle()
        return record

    async def cancel(self, record: WorkloadRecord) -> None:
        """Cancel a job or release an allocation; a running job gets its grace period."""
        now = self.clock()
        if record.state == "preempting":
            record.state = "cancelling"  # its stop is under way; it ends cancelled, not requeued
            record.stop_reason = "cancel"
            self.store.event(record, now, "cancelling", "cancelled by its owner while preempted")
            self.store.commit()
            self._notify()
            return
        if record.state not in ("pending", "running"):
            return
        if record.state == "pending" or record.is_allocation:
            final = "released" if record.is_allocation else "cancelled"
            self._finish(record, final, now, message=f"{final} by its owner")
            self.store.commit()
        else:
            record.state = "cancelling"
            record.stop_reason = "cancel"
            self.store.event(record, now, "cancelling", "stopping at its owner's request")
            self.store.commit()
            if record.handle is not None:  # else it is being launched: _launch stops it
                await self.backend.stop(record.id, record.handle, self.settings.grace_seconds)
        self._notify()
        self.request_cycle()

    def queues_changed(self) -> None:
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
                self.log.exception("scheduling cycle failed; will try again")
                await asyncio.sleep(1.0)
                self._cycle_requested = True

    async def run_cycles(self) -> CycleResult:
        """Cycle until the engine decides nothing, applying each cycle's decisions."""
        began = time.perf_counter()
        self.inventory = self.backend.inventory()
        result = None
        for _ in range(MAX_CYCLES_PER_RUN):
            now = self.clock()
            snapshot = self.snapshot()
            # the placement's target workload: the cluster's own recent requests
            self.policy = self.policy.for_snapshot(snapshot)
            result = run_cycle(snapshot, now, self.policy)
            if not result.decisions:
                break
            await self._apply(result, now)
        else:
            self.log.error("the engine did not settle in %d cycles", MAX_CYCLES_PER_RUN)
        assert result is not None
        self.pending = {int(name): info for name, info in result.pending.items()}
        self.queue_status = dict(result.queues)
        self.next_wakeup = result.next_wakeup
        self._last_cycle_seconds = time.perf_counter() - began
        self.metrics.cycle(self._last_cycle_seconds, result, self.records.values())
        self._notify()
        return result

    def snapshot(self) -> Snapshot:
        workloads = []
        for record in self.records.values():
            state = ENGINE_STATE[record.state]
            workloads.append(
                Workload(
                    name=str(record.id),
                    queue=record.project,
                    kind=Kind(record.kind),
                    request=Request(
                        gpus=record.gpus or 0.0,
                        gpu_memory_mib=record.gpu_memory_mib,
                        replicas=record.replicas,
                        gpu_models=frozenset(record.gpu_model or ()),
                    ),
                    priority=record.priority,
                    preemptible=record.preemptible,
                    submitted_at=record.submitted_at,
                    seq=record.id,
                    min_runtime=record.min_runtime,
                    user=record.user,
                    state=state,
                    placement=record.placement if state is not State.PENDING else (),
                    started_at=record.started_at,
                    start_seq=record.start_seq,
                    claimant=(
                        str(record.claimant_id)
                        if state in (State.RELEASING, State.PENDING)
                        and record.claimant_id is not None
                        else None
                    ),
                )
            )
        return Snapshot(self.inventory.nodes, self.queues, tuple(workloads))

    async def _apply(self, result: CycleResult, now: float) -> None:
        to_start: list[WorkloadRecord] = []
        to_stop: list[WorkloadRecord] = []
        for decision in result.decisions:
            record = self.records.get(int(decision.workload))
            if record is None:
                continue
            if isinstance(decision, Start):
                if record.state == "pending":
                    self._started(record, decision.placement, now)
                    if not record.is_allocation:
                        to_start.append(record)
            elif isinstance(decision, Evict | Move) and record.state == "running":
                reason = decision.reason if isinstance(decision, Evict) else EvictReason.CONSOLIDATE
                if self._evicted(record, reason, decision.claimant, now):
                    to_stop.append(record)
        self.store.commit()
        for record in to_stop:
            if record.handle is None:
                continue  # still being launched: _launch stops it once it has a handle
            grace = 0.0 if record.stop_reason == EvictReason.NODE_LOST.value else None
            await self.backend.stop(
                record.id, record.handle or {}, self.settings.grace_seconds if grace is None else 0
            )
        if to_start:
            for record in to_start:
                await self._launch(record, now)
            self.store.commit()

    def _started(self, record: WorkloadRecord, placement: Placement, now: float) -> None:
        self._start_seq += 1
        record.state = "running"
        record.placement = placement
        record.started_at = now
        record.start_seq = self._start_seq
        record.handle = None
        record.stop_reason = None
        record.claimant_id = None
        where = describe_placement(placement)
        self.store.event(record, now, "started" if not record.is_allocation else "allocated", where)
        self.store.open_usage(record, held_gpus(placement), now)
        self.metrics.started(record.kind, now - record.submitted_at)

    def _evicted(
        self, record: WorkloadRecord, reason: EvictReason, claimant: str | None, now: float
    ) -> bool:
        """Record an eviction; True when a process must be stopped."""
        record.preemptions += 1
        self.metrics.preempted(reason.value)
        claim = self.records.get(int(claimant)) if claimant else None
        why = f"{reason.value}" + (f" for {claim.project}/{claim.name}" if claim else "")
        if record.is_allocation:
            self._finish(record, "revoked", now, message=f"preempted ({why})")
            return False
        if reason is EvictReason.NODE_LOST:
            self.store.event(record, now, "requeued", f"its node is gone ({why})")
            handle = record.handle
            self._requeue(record, now, count_restart=True)
            record.handle = handle  # kept until the stop below is sent
            return True
        record.state = "preempting"
        record.stop_reason = reason.value
        record.claimant_id = int(claimant) if claimant else None
        self.store.event(
            record, now, "preempting", f"{why}; grace {self.settings.grace_seconds:g}s"
        )
        return True

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
            if record.state in ("cancelling", "preempting"):
                # cancelled or evicted while the backend was starting it: stop it now that
                # there is a handle to stop (the stop sent meanwhile had none)
                await self.backend.stop(record.id, record.handle, self.settings.grace_seconds)
        except BackendError as error:
            self._finish(record, "failed", now, message=str(error))
        except Exception as error:
            self.log.exception("starting workload %d failed", record.id)
            self._finish(record, "failed", now, message=f"could not start: {error}")

    # -- reality ----------------------------------------------------------------------------

    async def poll(self) -> None:
        exits = await self.backend.poll()
        if not exits:
            return
        now = self.clock()
        for exit_ in exits:
            self._exited(exit_, now)
        self.store.commit()
        self._notify()
        self.request_cycle()

    def _exited(self, exit_: Exit, now: float) -> None:
        record = self.records.get(exit_.workload_id)
        if record is None or record.state not in ("running", *RELEASING):
            return  # an attempt already accounted for (requeued at once, or cancelled)
        if record.state == "running":
            if exit_.exit_code is None:
                self.store.event(record, now, "lost", exit_.message or "its process vanished")
                self._requeue(record, now, count_restart=True)
            elif exit_.exit_code == 0:
                self._finish(record, "succeeded", now, exit_code=0)
            else:
                message = exit_.message or f"exited with code {exit_.exit_code}"
                self._finish(record, "failed", now, exit_code=exit_.exit_code, message=message)
        else:
            self._finish_stopped(record, exit_.exit_code, now)

    def _finish_stopped(self, record: WorkloadRecord, code: int | None, now: float) -> None:
        if record.state == "preempting":
            self.store.event(record, now, "requeued", "back in its original place in the queue")
            self._requeue(record, now, count_restart=True)
        elif record.state == "cancelling":
            self._finish(record, "cancelled", now, exit_code=code, message="cancelled by its owner")
        else:
            limit = f"{record.max_runtime:g}s" if record.max_runtime else "its limit"
            self._finish(
                record, "failed", now, exit_code=code, message=f"stopped: ran longer than {limit}"
            )

    async def tick(self) -> None:
        """Timer duties: max runtimes, and a cycle for min_runtime ends and changed nodes."""
        now = self.clock()
        overdue = [
            record
            for record in self.records.values()
            if record.state == "running"
            and record.max_runtime is not None
            and record.started_at is not None
            and now - record.started_at > record.max_runtime
            and not record.is_allocation
        ]
        for record in overdue:
            record.state = "stopping"
            record.stop_reason = "max-runtime"
            self.store.event(record, now, "stopping", f"ran longer than {record.max_runtime:g}s")
        if overdue:
            self.store.commit()
            for record in overdue:
                await self.backend.stop(record.id, record.handle or {}, self.settings.grace_seconds)
        self.request_cycle()

    # -- bookkeeping ------------------------------------------------------------------------

    def _requeue(self, record: WorkloadRecord, now: float, *, count_restart: bool) -> None:
        if record.started_at is not None:
            self.store.close_usage(record, now)
        record.state = "pending"
        record.placement = ()
        record.started_at = None
        record.handle = None
        record.stop_reason = None  # claimant_id stays: a requeued victim yields to it
        if count_restart:
            record.restart_count += 1

    def _finish(
        self,
        record: WorkloadRecord,
        state: str,
        now: float,
        *,
        exit_code: int | None = None,
        message: str = "",
    ) -> None:
        if record.started_at is not None:
            self.store.close_usage(record, now)
        record.state = state
        record.finished_at = now
        record.exit_code = exit_code
        record.handle = None
        record.claimant_id = None
        if message:
            record.message = message
        self.store.event(record, now, state, message)
        self.records.pop(record.id, None)
        self.pending.pop(record.id, None)

    def _notify(self) -> None:
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for_change(self, timeout: float) -> None:
        """Return after the next cycle or exit, or after ``timeout`` seconds."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)
