"""The scheduling loop: the only place in the service that runs the engine.

One cycle is the lifecycle's kept session (``Lifecycle.session``: brought up to date with
what changed since the last cycle, as the scenario runner and the fleet do) -> ``decide`` ->
the store (one transaction) -> ``backend.start/stop``; cycles repeat until the engine
decides nothing. Cycles run when something changes (submit, cancel, an exit, a queue
edit), coalesced so a burst of submissions costs a few cycles rather than one each, and on a
timer for min_runtime protections and max runtimes.

Requests never wait for a cycle. The engine's pure work (building the session, deciding) runs
on a worker thread of its own; the session is forked, and the decisions applied, on the event
loop, which alone touches the lifecycle, the store's session and the backend (new workloads
are committed on the store's writer thread, in a session of its own, and taken in here after:
``_write``, ``_take_in``). The decisions are applied
in slices of a few milliseconds (``SLICE_SECONDS``), each committed before the loop answers
what arrived meanwhile, so a request waits for one slice at most, never for a whole cycle's
decisions. What changed while the engine worked, or between two slices, is reconciled by
``scheduler/service/policies/decisions.py``, decision by decision just before each is applied: a
decision applies only to a workload still exactly as the session counted it
(``Lifecycle.counted``), and a start only to GPUs still free.

Arrivals do not wait for a cycle either (``arrive``, ``arrivals.py`` next door): a
new workload the engine starts at once on a fork of ``settled`` without touching anyone else
starts now. ``settled`` is replaced by a cycle's session when the cycle comes back from the
worker, with what the fast path started while that cycle decided taken in, before its
decisions are applied: it counts them all as done, so it holds more than is held until the
last slice, never less, and arrivals between slices are decided on it.
docs/service.md, "Cycles and arrivals", has the whole argument.

The workloads' life (states, transitions, the snapshot, the decisions) is the lifecycle's
(``scheduler.engine.lifecycle``), shared with the scenario runner and the fleet simulator; the
loop carries out its effects (``effects.py`` next door: the store first, the backend
second). Evicted work holds its GPUs (preempting) until the backend reports its exit, so the
engine never hands a GPU to two workloads at once (the policy is built with
``immediate_evictions=False``).

Its neighbours: ``roster`` (the active rows and their indexes), ``submissions`` (the group
commit), ``joblog`` (milestones in a job's own log). Work beyond its project's quota
("borrowed") is the engine's to say, with each cycle's result.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from scheduler.backends.base import Backend, Checkpoint, Exit, Inventory
from scheduler.common.messages import event_line
from scheduler.common.states import WorkloadState
from scheduler.engine import (
    CycleResult,
    Pending,
    Policy,
    Queue,
    QueueStatus,
    Session,
    Snapshot,
    Workload,
    decide,
)
from scheduler.engine.lifecycle import (
    Effect,
    Life,
    Lifecycle,
    LifecycleError,
    Milestone,
    Note,
    Started,
)
from scheduler.engine.usage import Usage
from scheduler.service.persistence.orm import EventRecord, WorkloadRecord
from scheduler.service.persistence.store import Store
from scheduler.service.persistence.writer import StoreWriter
from scheduler.service.policies.decisions import Reconciler
from scheduler.service.policies.dependencies import WAITED, DependencyHolds
from scheduler.service.policies.sweeps import held_back
from scheduler.service.runtime.heap import Freezer
from scheduler.service.runtime.metrics import Metrics
from scheduler.service.scheduling.arrivals import FastPath
from scheduler.service.scheduling.effects import Effects, Stops
from scheduler.service.scheduling.roster import Roster
from scheduler.service.scheduling.submissions import BeforeCommit, GroupCommit, KeyTurns

MAX_CYCLES_PER_RUN = 100
SLICE_SECONDS = 0.005
"""A cycle's decisions are applied in slices of about this long on the event loop (at least
one decision each), each committed, with the requests that arrived meanwhile answered between
them."""
SWITCH_INTERVAL = 0.001
"""The interpreter's switch interval while the loop runs (Python's default: 5 ms). The event
loop gives up the interpreter lock at every socket write and SQLite statement, and while the
engine thread decides, it waits up to this long to get it back, several times a request.
With benchmarks/service_api.py, 5 -> 1 ms: POST and `GET workloads` p99 about 40% lower, the
engine's CPU per cycle no higher (docs/benchmarks.md, section 3, "What stands in the way")."""


@dataclass(frozen=True)
class Settings:
    """The loop's knobs, copied from the service's traits once at start-up."""

    grace_seconds: float = 30.0
    cycle_interval: float = 5.0
    poll_interval: float = 0.5


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
        """The workloads' lives; the roster's rows are kept in step with them."""
        self.roster = Roster()
        self.records: dict[int, WorkloadRecord] = self.roster.records
        """The active workloads' rows, by id (the roster's)."""
        self.pending: dict[int, Pending] = self.roster.pending
        """Why each pending workload waits (the roster's)."""
        self.queues: tuple[Queue, ...] = ()
        self.members: dict[str, tuple[str, ...]] = {}
        self.time_limits: dict[str, tuple[float | None, float | None]] = {}
        self.held: dict[int, str] = {}
        """Sweep members and jobs waiting for another that the last snapshot held back, with
        why."""
        self.dependencies = DependencyHolds(self._state_of)
        self.queue_status: dict[str, QueueStatus] = {}
        self.borrowed: dict[int, str] = {}
        self.gpu_usage: Any = None
        """The running workloads' recent GPU use (``runtime.gpu_history.GpuHistory``) while
        the GPU use sampler runs (``runtime.gpu_watch``); None otherwise."""
        """Running work beyond its project's quota -> who may reclaim it, in words."""
        self.inventory: Inventory = backend.inventory()
        self.next_wakeup: float | None = None
        self.freezer = Freezer()
        """Freezes the long-lived state after each settled run of cycles (``heap``)."""
        self.fast = FastPath(metrics, self.log)
        """The fast arrival path and the ``settled`` session it decides on."""
        self.effects = Effects(
            self.lifecycle,
            self.roster,
            store,
            backend,
            metrics,
            grace_seconds=settings.grace_seconds,
            unsettle=self.fast.unsettle,
            never_launched=self._never_launched,
            log=self.log,
        )
        self.writer = StoreWriter(store.engine)
        """Where new workloads are committed, off the event loop (``persistence/writer.py``)."""
        self._group = GroupCommit(self._write, self._take_in, self.log)
        self.key_turns = KeyTurns()
        """Submissions with one idempotency key take turns (``submissions.KeyTurns``)."""
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="frachub-engine")
        """Where cycles decide: one thread, so cycles never overlap."""
        self._policies = [replace(self.policy, scorer=copy.deepcopy(policy.scorer)) for _ in "ab"]
        """The cycles' policies, each with a scorer of its own: scorers keep memos that two
        threads must not change at once, and the event loop forks ``settled`` (whose policy
        is one of these) while a cycle decides, so a cycle takes the other one."""
        self.version = 0
        """Bumped whenever something a waiting client may care about changed."""
        self._changed = asyncio.Event()
        self._cycle_requested = False
        self._cycle_task: asyncio.Task | None = None
        self._tasks: list[asyncio.Task] = []
        self._last_cycle_seconds = 0.0
        self._switch_interval = sys.getswitchinterval()
        self._busy = False
        """Submissions arrived since the last settled run (``Freezer.settled``)."""
        self._in_cycle = False
        """A run of cycles is under way (snapshot taken, decisions not all applied)."""
        self.usage_source: Callable[[float], Awaitable[Usage]] | None = None
        """Usage-decayed fair share: the queues' decayed usage for a cycle at a time (the
        service's ``UsageTracker.current``); None: off."""
        self.usage: Usage | None = None
        """The usage the last cycle saw."""

    # -- life -----------------------------------------------------------------------------

    def load_queues(self) -> None:
        records = self.store.queues()
        self.queues = tuple(record.as_queue() for record in records)
        self.members = {record.name: tuple(record.members or ()) for record in records}
        self.time_limits = {
            record.name: (record.default_time_limit, record.max_time_limit) for record in records
        }
        """Each project's default and maximum time limit in seconds (None: none)."""

    async def recover(self) -> None:
        """Rebuild the in-memory state from the store and reality after a (re)start."""
        now = self.clock()
        self.load_queues()
        self.lifecycle.start_seq = self.store.max_start_seq()
        for record in self.store.active_workloads():
            self.roster.add(record)
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
        self.effects.record(effects, now)
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
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL)
        loop = asyncio.get_running_loop()
        exit_wait = getattr(self.backend, "wait_for_exit", asyncio.sleep)
        self._tasks = [
            # at once when the backend can tell an end (the local one: ``exitwatch``)
            loop.create_task(self._every(self.settings.poll_interval, self.poll, exit_wait)),
            loop.create_task(self._every(self.settings.cycle_interval, self.tick)),
        ]
        self.request_cycle()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._cycle_task is not None:
            self._cycle_task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._worker.shutdown(wait=True, cancel_futures=True)
        self.writer.close()
        sys.setswitchinterval(self._switch_interval)
        await self.backend.close()

    async def _every(
        self, seconds: float, action: Callable, wait: Callable = asyncio.sleep
    ) -> None:
        while True:
            await wait(seconds)
            try:
                await action()
            except Exception:
                self.store.rollback()
                self.log.exception("scheduler %s failed; trying again", action.__name__)

    # -- changes from the API -------------------------------------------------------------

    async def submit(
        self, records: list[WorkloadRecord], *, before_commit: BeforeCommit | None = None
    ) -> list[WorkloadRecord]:
        """Store new workloads in ONE transaction, each at the back of its queue, and schedule
        them: committed on the store's writer thread together with the submissions that
        arrive alongside (a group commit, ``submissions.py`` next door), then taken in here.
        A 201 still means stored, one submission cannot fail another, a sweep's members are
        all stored or none is, and nothing of a failed submission stays in memory.
        ``before_commit`` sees them with their ids (a sweep names its members after its first
        one's)."""
        return await self._group.submit(records, before_commit)

    async def _write(
        self, records: list[WorkloadRecord], before_commit: BeforeCommit | None
    ) -> None:
        """Insert and commit ``records`` on the writer thread, with their names and their
        ``submitted`` events. The events' words are the lifecycle's: a scratch one says them
        there (the loop's own lifecycle is the loop's alone, and takes them in after)."""
        now = self.clock()
        for record in records:
            record.state = WorkloadState.PENDING.value  # the row needs one before it has an id
            record.submitted_at = now

        def prepare(records: list[WorkloadRecord], session: Any) -> None:
            if before_commit is not None:
                before_commit(records)
            scratch = Lifecycle(grace_seconds=self.settings.grace_seconds)
            for record in records:
                if not record.name:
                    record.name = f"{'notebook' if record.is_allocation else 'job'}-{record.id}"
                life = record.as_life(new=True)
                for note in scratch.submit(life, now):  # a new workload's one effect
                    if isinstance(note, Note):
                        event = EventRecord(
                            workload_id=record.id,
                            time=now,
                            type=note.type.value,
                            message=note.message,
                        )
                        session.add(event)
                record.keep(life)

        await self.writer.insert(records, prepare)

    def _take_in(self, records: list[WorkloadRecord]) -> None:
        """Committed rows become active: in the scheduler's session, the lifecycle (their
        ``submitted`` note is stored already) and the indexes; then the fast path and a
        cycle decide them."""
        try:
            self.store.adopt(records)
            for record in records:
                self.roster.add(record)
                self.lifecycle.submit(record.as_life(new=True), records[0].submitted_at)
        except Exception:
            self.log.exception("taking in new workloads failed; reloading them")
            self._reload()
        for record in records:
            self.metrics.submitted(record.kind)
        self.fast.late += records
        self._busy = True
        try:
            self.arrive([r for r in records if r.sweep_id is None and r.after_id is None])
        except Exception:  # they are stored: the next cycle decides them instead
            self.log.exception("the fast path failed; the next cycle decides the arrivals")
            self.store.rollback()
            self._reload()
        self.request_cycle()

    def allocation(self, user: str, server_name: str | None) -> WorkloadRecord | None:
        """The active allocation of ``user``'s server ``server_name``, if there is one."""
        return self.roster.allocation(user, server_name)

    async def cancel(self, record: WorkloadRecord, by: str = "its owner") -> None:
        """Cancel a job or release an allocation; a running job gets its grace period. ``by``
        names who acted, for the record ("its owner", "admin bob", "the idle check")."""
        now = self.clock()
        try:
            effects = self.lifecycle.cancel(str(record.id), now, by)
        except LifecycleError:
            return  # it ended or is already stopping meanwhile; the handlers said so
        stops, _ = self.effects.record(effects, now)
        self.store.commit()
        if record.is_allocation:  # its GPUs are free now, not after a grace period
            self.fast.released(str(record.id), now)
        await self.effects.stop(stops)
        self._notify()
        self.request_cycle()

    def changed(self) -> None:
        """Something outside the loop changed a workload (the memory watchdog stopped or
        warned it): wake whoever waits for a change, and run a cycle."""
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
        self.fast.unsettle()
        self.fast.waiting.clear()
        self.load_queues()
        self.request_cycle()

    # -- the fast arrival path ----------------------------------------------------------------

    def arrive(self, records: list[WorkloadRecord], *, again: bool = False) -> None:
        """Decide new pending workloads at once (``FastPath.decide``) and start those the
        engine starts without evicting, moving or reserving anything. The rest wait for the
        next cycle (which ``add_all`` has asked for). ``again``: they were offered before,
        and are not counted again in the metrics."""
        now = self.clock()
        arrivals: list[Workload] = []
        for record in records:
            life = self.lifecycle.get(str(record.id))
            if life is not None and life.state is WorkloadState.PENDING:
                arrivals.append(life.workload())
        decided = self.fast.decide(arrivals, self.queue_status, now, again=again)
        evicting, self.fast.evicting = self.fast.evicting, None
        if evicting is not None and not self._in_cycle:
            self._evict_now(*evicting, now)
        if decided is None:
            return
        result, fork, offered = decided
        started = {d.workload for d in result.decisions}
        effects = self.lifecycle.apply(result, now)
        _, launches = self.effects.record(effects, now)  # starts stop nothing
        self.store.commit()
        self.fast.took(fork, result, offered)  # after recording, which unsettled the fast path
        for name in started:
            self.pending.pop(int(name), None)
        # the fork's queue status is the one that counts these starts: a start beyond its
        # project's quota is noted as borrowed now, before anything can reclaim it
        self.queue_status = dict(result.queues)
        self.borrowed = {int(name): words for name, words in result.borrowed.items()}
        noted = self._note_borrowed({int(name) for name in started}, now)
        self._notify()
        if launches:
            self._spawn(self._launch_all(launches, now, noted))

    def _evict_now(self, result: CycleResult, fork: Session, before: Session, now: float) -> None:
        """Apply a fork's evictions for one notebook in its own request (``FastPath.evicting``):
        only between cycles, and only if every victim is still exactly as ``settled`` counted
        it (the rule a cycle's decisions pass, ``policies/decisions.py``); else the next cycle
        decides. The fork, which counts them done, becomes ``settled``."""
        check = Reconciler(before.running, self.lifecycle.lives, self.inventory.nodes)
        if not all(check.holds(decision) for decision in result.decisions):
            return
        effects = self.lifecycle.apply(result, now)
        stops, _ = self.effects.record(effects, now)
        self.store.commit()
        self.fast.settled = fork
        reserved = fork.reserved
        self.pending.update(
            (int(name), pending) for name, pending in result.pending.items() if name in reserved
        )
        self._notify()
        self._spawn(self.effects.stop(stops))

    def _spawn(self, coroutine) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.append(task)
        task.add_done_callback(self._tasks.remove)

    async def _launch_all(
        self, launches: list[WorkloadRecord], now: float, noted: dict[int, str]
    ) -> None:
        """Launch fast-path starts, each log with its borrowed note after its header."""
        try:
            await self.effects.launch_many(launches, now, noted)
        except Exception:
            self.store.rollback()
            self.log.exception("launching fast-path starts failed")

    def _rearrive(self) -> None:
        """Offer the fast path, on the new ``settled``, the arrivals the cycle's snapshot did
        not hold (``FastPath.late``) and that still wait: without this a later arrival could
        start ahead of them on a fork that never heard of them."""
        if self.fast.settled is None or not self.fast.late:
            return
        late = [
            record
            for record in self.fast.late
            if record.sweep_id is None
            and record.after_id is None
            and record.state == WorkloadState.PENDING
            and record.id in self.records
        ]
        if late:
            self.arrive(sorted(late, key=lambda record: record.id), again=True)

    def standing(self) -> Session:
        """A session of the state the scheduler stands in now, to fork for a dry run:
        ``settled`` (the last cycle's outcome and the arrivals since), or, when there is none
        (before the first cycle, after a queue edit), a fresh one, decided so that it
        describes where the next cycle will leave things."""
        if self.fast.settled is not None:
            return self.fast.settled
        session = Session(replace(self.snapshot(), usage=self.usage), self.clock(), self.policy)
        decide(session)
        return session

    # -- the cycle ------------------------------------------------------------------------

    def request_cycle(self) -> None:
        """Run a cycle soon; bursts of requests share one. Cycles decide off the event loop
        but share the interpreter with it, and arrivals no longer wait for them: the next
        one waits twice as long as the last one took (at most a second), so cycles take at
        most a third of the process under a burst; but not when a notebook needs room made
        (``FastPath.urgent``): its user waits at the spawn page, and it is one cycle."""
        self._cycle_requested = True
        if self._cycle_task is None or self._cycle_task.done():
            self._cycle_task = asyncio.get_running_loop().create_task(self._cycle_soon())

    async def _cycle_soon(self) -> None:
        while self._cycle_requested:
            if not self.fast.urgent:
                await asyncio.sleep(min(2 * self._last_cycle_seconds, 1.0))
            self.fast.urgent = False
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
        """After a rollback: the lives (and the indexes) as the store has them again."""
        self.fast.unsettle()
        self.roster.reindex()
        for record in self.records.values():
            self.lifecycle.restore(record.as_life())

    async def run_cycles(self) -> CycleResult:
        """Cycle until the engine decides nothing, applying each cycle's decisions. Each
        cycle decides on the worker thread; this coroutine, on the event loop, takes the
        snapshot before and applies what still holds after, in slices (``_apply``)."""
        self._in_cycle = True
        try:
            return await self._run_cycles()
        finally:
            self._in_cycle = False

    async def _run_cycles(self) -> CycleResult:
        began = time.perf_counter()
        inventory = self.backend.inventory()
        if inventory.nodes != self.inventory.nodes:
            self.fast.unsettle()
        self.inventory = inventory
        result = None
        started: set[int] = set()
        seen: dict[str, Workload] = {}
        now = self.clock()
        running = asyncio.get_running_loop()
        for _ in range(MAX_CYCLES_PER_RUN):
            now = self.clock()
            self.fast.cycle_began()
            forked = self.fast.settled.policy.scorer if self.fast.settled is not None else None
            which = 1 if forked is self._policies[0].scorer else 0
            # the lifecycle's standing state, brought up to date with what changed since the
            # last cycle (on this thread: it reads the lives); the fork it returns is the
            # cycle's own, which nothing here changes while the worker decides on it
            self.held = self._held_back(now)
            hidden = [str(workload_id) for workload_id in self.held]
            if self.usage_source is not None:
                self.usage = await self.usage_source(now)
            session = self.lifecycle.session(
                self.inventory.nodes,
                self.queues,
                now,
                self._policies[which],
                hidden=hidden,
                usage=self.usage,
            )
            self._policies[which] = session.policy
            seen = self.lifecycle.counted()
            session, result = await running.run_in_executor(self._worker, self._decide, session)
            # the cycle's outcome is ``settled`` before its decisions are applied: it counts
            # them all as done, so while they are applied, slice by slice, it holds at least
            # every share held (a decision not applied yet, or skipped, only makes it hold
            # more), and the arrivals between slices are decided on it
            self.fast.settle(session)
            self._rearrive()
            before = set(started)
            stale, stops, launches = await self._apply(result, seen, now, started)
            if stale:
                self.log.info("%d decisions went stale while the cycle ran; skipped", stale)
                self._cycle_requested = True
            if not result.decisions:
                break
            await self.effects.stop(stops)
            self.borrowed = {int(name): words for name, words in result.borrowed.items()}
            noted = self._note_borrowed(started - before, now)
            await self.effects.launch_many(launches, now, noted)
        else:
            self.log.error("the engine did not settle in %d cycles", MAX_CYCLES_PER_RUN)
        assert result is not None
        self.pending.clear()
        self.pending.update((int(name), info) for name, info in result.pending.items())
        self.queue_status = dict(result.queues)
        self.borrowed = {int(name): words for name, words in result.borrowed.items()}
        self.next_wakeup = result.next_wakeup
        self._last_cycle_seconds = time.perf_counter() - began
        self.metrics.cycle(
            self._last_cycle_seconds,
            result,
            self.roster.counts(),
            held=self.roster.held_resources(),
            nodes=self.inventory.nodes,
        )
        self.freezer.settled(busy=self._busy)
        self._busy = False
        self._notify()
        return result

    async def _apply(
        self, result: CycleResult, seen: dict[str, Workload], now: float, started: set[int]
    ) -> tuple[int, Stops, list[WorkloadRecord]]:
        """Apply a cycle's decisions in slices of ``SLICE_SECONDS``, each written to the store
        in one commit, answering what arrived meanwhile between slices. Each decision is
        checked just before it is applied (``Reconciler``): requests between slices may have
        cancelled its workload, or the fast path taken GPUs. Adds the workloads started to
        ``started``; returns how many decisions were stale, the processes to stop and the
        jobs to launch."""
        check = Reconciler(seen, self.lifecycle.lives, self.inventory.nodes)
        decisions = result.decisions
        stops: Stops = []
        launches: list[WorkloadRecord] = []
        stale = heard = 0
        done = 0
        while done < len(decisions):
            if done:
                await self._between_slices()
            if len(self.fast.started) > heard:  # the fast path started work since the snapshot
                check.capacity_taken(self.fast.started[heard:])
                heard = len(self.fast.started)
            began = time.perf_counter()
            effects: list[Effect] = []
            while done < len(decisions):
                decision = decisions[done]
                done += 1
                if check.holds(decision):
                    effects += self.lifecycle.apply(replace(result, decisions=(decision,)), now)
                    check.applied(decision)
                else:
                    stale += 1
                if time.perf_counter() - began >= SLICE_SECONDS:
                    break
            started.update(int(e.name) for e in effects if isinstance(e, Started))
            settled = self.fast.settled
            more_stops, more_launches = self.effects.record(effects, now)
            self.fast.settled = settled  # it counted these starts already (``run_cycles``)
            self.store.commit()
            stops += more_stops
            launches += more_launches
        return stale, stops, launches

    async def _between_slices(self) -> None:
        """Let the event loop answer what arrived during a slice of a cycle's decisions
        (``_apply``); tests/service/test_concurrent_cycles.py holds a cycle here."""
        await asyncio.sleep(0)

    def _note_borrowed(self, started: set[int], now: float) -> dict[int, str]:
        """The "borrowed" milestone of work starting beyond its project's quota, in its
        timeline; returns the lines its launch writes into its log, after the log's header
        (``JobSpec.log_notes``): written once launched, a preemption during the launch could
        put its own milestone before it."""
        noted: dict[int, str] = {}
        for workload_id in sorted(started & self.borrowed.keys()):
            record = self.records.get(workload_id)
            if record is None:
                continue
            self.store.event(record, now, Milestone.BORROWED.value, self.borrowed[workload_id])
            noted[workload_id] = event_line(Milestone.BORROWED.value, self.borrowed[workload_id])
        if noted:
            self.store.commit()
        return noted

    def _decide(self, session: Session) -> tuple[Session, CycleResult]:
        """The engine's part of a cycle, on the worker thread: pure, it touches nothing the
        event loop uses but the session handed to it (whose policy's scorer is the one the
        fast path is not using, see ``_policies``)."""
        began = time.thread_time()
        result = decide(session, report_borrowed=True)
        self.metrics.engine_cpu.inc(time.thread_time() - began)
        return session, result

    def snapshot(self) -> Snapshot:
        """The engine's input: every active workload but the sweep members held back by
        their sweep's parallel limit (``scheduler/service/policies/sweeps.py``) and the jobs
        waiting for another (``dependencies.py`` there)."""
        self.held = self._held_back(self.clock())
        full = self.lifecycle.snapshot(self.inventory.nodes, self.queues)
        if not self.held:
            return full
        kept = tuple(w for w in full.workloads if int(w.name) not in self.held)
        return replace(full, workloads=kept)

    def _held_back(self, now: float) -> dict[int, str]:
        """The pending workloads the engine must not see now, with why: sweep members beyond
        their parallel limit, jobs whose dependency has not ended. A job whose ``after_ok``
        dependency ended without succeeding is cancelled here, with why in its timeline."""
        held = held_back(self.roster.sweeps.values())
        if not self.roster.dependents:
            return held
        waiting, doomed, freed = self.dependencies.holds(list(self.roster.dependents.values()))
        for record, why in doomed:
            self.effects.record(self.lifecycle.abandon(str(record.id), now, why), now)
        for record, what in freed:
            self.store.event(record, now, WAITED, what)
        if doomed or freed:
            self.store.commit()
            self._notify()
        return {**held, **waiting}

    def _state_of(self, workload_id: int) -> str | None:
        """A workload's state by id: its row while active, the store's after."""
        record = self.records.get(workload_id) or self.store.workload(workload_id)
        return None if record is None else record.state

    # -- reality ----------------------------------------------------------------------------

    async def poll(self) -> None:
        reports = await self.backend.poll()
        if not reports:
            return
        now = self.clock()
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
            self._ended(life, ended_at(exit_, life.started_at, now), exit_.exit_code, exit_.message)
        self.store.commit()
        self._notify()
        self.request_cycle()

    def _never_launched(self, workload_id: int) -> None:
        """A start released before its launch (``Effects.launch``): it ends now, as if its
        process had exited at once (requeued, cancelled or stopped, as it was asked)."""
        life = self.lifecycle.get(str(workload_id))
        if life is None or not life.state.holding:
            return
        self._ended(life, self.clock(), None, "")
        self.store.commit()
        self._notify()
        self.request_cycle()

    def _ended(self, life: Life, at: float, exit_code: int | None, message: str) -> None:
        claimant = self.records.get(int(life.claimant)) if life.claimant else None
        if claimant is not None and claimant.is_allocation:
            self.fast.urgent = True  # a notebook waits for these GPUs: no spacing
        self.effects.record(self.lifecycle.exited(life.name, at, exit_code, message), at)

    async def tick(self) -> None:
        """Timer duties: max runtimes, and a cycle for min_runtime ends and changed nodes."""
        now = self.clock()
        effects = self.lifecycle.stop_overdue(now)
        if effects:
            stops, _ = self.effects.record(effects, now)
            self.store.commit()
            await self.effects.stop(stops)
        await self.effects.retry_stops()
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


def ended_at(exit_: Exit, started_at: float | None, now: float) -> float:
    """When an attempt ended: the time the backend recorded (an attempt that ended while the
    service was down ends then, not at the restart, which would inflate its run time and
    GPU-hours), kept between its start and now against a skewed or odd record."""
    if exit_.ended_at is None:
        return now
    return min(now, max(exit_.ended_at, started_at if started_at is not None else 0.0))
