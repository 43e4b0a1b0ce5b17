"""The scheduling loop: the only place in the service that runs the engine.

One cycle is the lifecycle's kept session (``Lifecycle.session``: brought up to date with
what changed since the last cycle, as the scenario runner and the fleet do) -> ``decide`` ->
the store (one transaction) -> ``backend.start/stop``; cycles repeat until the engine
decides nothing. Cycles run when something changes (submit, cancel, an exit, a queue
edit), coalesced so a burst of submissions costs a few cycles rather than one each, and on a
timer for min_runtime protections and max runtimes.

Requests never wait for a cycle. The engine's pure work (building the session, deciding) runs
on a worker thread of its own; the session is forked, and the decisions applied, on the event
loop, which alone touches the lifecycle, the store and the backend. The decisions are applied
in slices of a few milliseconds (``SLICE_SECONDS``), each committed before the loop answers
what arrived meanwhile, so a request waits for one slice at most, never for a whole cycle's
decisions. What changed while the engine worked, or between two slices, is reconciled by
``scheduler/service/decisions.py``, decision by decision just before each is applied: a
decision applies only to a workload still exactly as the session counted it
(``Lifecycle.counted``), and a start only to GPUs still free.

Arrivals do not wait for a cycle either (``arrive``). A new workload is decided at once with
``decide(settled.fork([arrival], now))`` on ``settled``, a session that holds at least every
GPU share held now (exits and cancels only free capacity, so it may hold more, never less):
if the engine starts it there without touching anyone else, it starts now and the next full
cycle confirms it. Whatever else the fork decides (evictions, a reservation, a wait) is left
to the next cycle. The fork becomes the new ``settled``, so arrivals see each other.
``settled`` is replaced by a cycle's session when the cycle comes back from the worker, with
what the fast path started while that cycle decided taken in (``_absorb``), before its
decisions are applied: it counts them all as done, so it holds more than is held until the
last slice, never less, and arrivals between slices are decided on it.
docs/service.md, "Cycles and arrivals", has the whole argument.

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
import copy
import logging
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from scheduler.backends.base import Backend, BackendError, Checkpoint, Inventory, JobSpec
from scheduler.common.limits import MILLI
from scheduler.common.messages import event_line
from scheduler.common.placement import Placement, describe_placement
from scheduler.common.quantities import gpus
from scheduler.common.states import WorkloadState
from scheduler.engine import (
    CycleResult,
    Pending,
    Policy,
    Queue,
    QueueStatus,
    Session,
    Snapshot,
    Start,
    Workload,
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
)
from scheduler.engine.model import held_milli
from scheduler.service.decisions import Reconciler
from scheduler.service.heap import Freezer
from scheduler.service.metrics import Metrics
from scheduler.service.orm import WorkloadRecord
from scheduler.service.store import Store
from scheduler.service.sweeps import held_back

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
engine's CPU per cycle no higher (docs/benchmarks.md, section 3, "Fourth pass")."""
LAUNCHES_AT_ONCE = 16
"""A cycle's starts are launched side by side, this many at a time: each waits on the
backend (a process, the Kubernetes API) and, with job tokens, on the hub (about 50 ms)."""


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
        self._holding: dict[int, WorkloadRecord] = {}
        self._sweeps: dict[int, WorkloadRecord] = {}
        self._allocations: dict[tuple[str, str | None], WorkloadRecord] = {}
        """``records`` indexed (``_index``) for what a cycle or a request asks of them often:
        the ones holding GPUs, the sweep members, the allocations by (user, server name).
        Walking all of them costs milliseconds at 15,000 pending (their rows' attributes are
        SQLAlchemy's), every cycle and every fast-path start."""
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
        self.freezer = Freezer()
        """Freezes the long-lived state after each settled run of cycles (``heap``)."""
        self.settled: Session | None = None
        """A session holding at least every GPU share held now (it may still count work that
        has exited since), forked to decide arrivals in milliseconds (``arrive``,
        ``dry_run``); None while nothing guarantees that (see the module's docstring)."""
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="frachub-engine")
        """Where cycles decide: one thread, so cycles never overlap."""
        self._policies = [replace(self.policy, scorer=copy.deepcopy(policy.scorer)) for _ in "ab"]
        """The cycles' policies, each with a scorer of its own: scorers keep memos that two
        threads must not change at once, and the event loop forks ``settled`` (whose policy
        is one of these) while a cycle decides, so a cycle takes the other one."""
        self._fast_log: list[tuple[Workload, Placement]] = []
        """What the fast path started since the running cycle's snapshot (as pending, and
        where): that cycle checks its starts against the GPUs held now, and its session
        takes these in before it becomes ``settled``."""
        self._waiting: set[str] = set()
        """Projects an arrival was left waiting in since the last cycle: later arrivals there
        queue behind it rather than jump it."""
        self._late: list[WorkloadRecord] = []
        """Submitted since the running cycle's snapshot (``_rearrive``)."""
        self._submissions: list[
            tuple[
                list[WorkloadRecord],
                Callable[[list[WorkloadRecord]], None] | None,
                asyncio.Future,
            ]
        ] = []
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
            self._index(record)
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
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL)
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
        self._worker.shutdown(wait=True, cancel_futures=True)
        sys.setswitchinterval(self._switch_interval)
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

    async def submit(
        self,
        records: list[WorkloadRecord],
        *,
        before_commit: Callable[[list[WorkloadRecord]], None] | None = None,
    ) -> list[WorkloadRecord]:
        """``add_all``, committed together with the submissions that arrive alongside (a
        group commit): the first one of a burst schedules the commit for the end of this turn
        of the event loop, and every caller is answered once the one transaction holding
        its workloads has committed, so a 201 still means stored. Should the shared
        transaction fail, each submission is tried again in a transaction of its own, so one
        cannot fail another."""
        running = asyncio.get_running_loop()
        future = running.create_future()
        self._submissions.append((records, before_commit, future))
        if len(self._submissions) == 1:
            running.call_soon(self._commit_submissions)
        return await future

    def _commit_submissions(self) -> None:
        batch, self._submissions = self._submissions, []
        if len(batch) > 1:
            everything = [record for records, _, _ in batch for record in records]
            names = [record.name for record in everything]
            hooks = [(records, before) for records, before, _ in batch if before is not None]

            def before_commit(_: list[WorkloadRecord]) -> None:
                for records, before in hooks:
                    before(records)

            try:
                self.add_all(everything, before_commit=before_commit)
            except Exception:
                self.log.warning("a group commit of %d submissions failed; one by one", len(batch))
                for record, name in zip(everything, names, strict=True):
                    record.id, record.name = None, name
            else:
                for records, _, future in batch:
                    if not future.done():
                        future.set_result(records)
                return
        for records, before, future in batch:
            try:
                self.add_all(records, before_commit=before)
            except Exception as error:
                if not future.done():
                    future.set_exception(error)
            else:
                if not future.done():
                    future.set_result(records)

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
                self._index(record)
                self._record(self.lifecycle.submit(record.as_life(new=True), now), now)
            self.store.commit()
        except Exception:
            for record in records:
                self._unindex(record)
                self.records.pop(record.id, None)
                self.lifecycle.withdraw(str(record.id))
            raise
        for record in records:
            self.metrics.submitted(record.kind)
        self._late += records
        self._busy = True
        try:
            self.arrive([record for record in records if record.sweep_id is None])
        except Exception:  # they are stored: the next cycle decides them instead
            self.log.exception("the fast path failed; the next cycle decides the arrivals")
            self.store.rollback()
            self._reload()
        self.request_cycle()
        return records

    # -- the fast arrival path ----------------------------------------------------------------

    def arrive(self, records: list[WorkloadRecord], *, again: bool = False) -> None:
        """Decide new pending workloads at once on a fork of ``settled``; start those the
        engine starts there without evicting, moving or reserving anything. The rest wait
        for the next cycle (which ``add_all`` has asked for). ``again``: they were offered
        before, and are not counted again in the metrics."""
        now = self.clock()

        def count(outcome: str, n: int = 1) -> None:
            if not again:
                self.metrics.arrived(outcome, n)

        arrivals: list[Workload] = []
        for record in records:
            life = self.lifecycle.get(str(record.id))
            if life is None or life.state is not WorkloadState.PENDING:
                continue
            arrival = life.workload()
            if self.settled is None:
                count("unsettled")
            elif not self._may_start_now(self.settled, arrival):
                count("deferred")
            else:
                arrivals.append(arrival)
                continue
            self._waiting.add(arrival.queue)
        if not arrivals or self.settled is None:
            return
        names = {arrival.name for arrival in arrivals}
        try:
            fork = self.settled.fork(arrivals, now)
            # Only the arrivals are decided. The work already waiting in ``settled`` waited
            # there on the same capacity (or more: it still counts exited work); an arrival
            # adds demand, which raises no other queue's share, so none of it would start
            # now, and deciding it again costs as much as a cycle. (The claims held for
            # reserved claimants stay taken on the fork's ledger.)
            fork.pending = {name: w for name, w in fork.pending.items() if name in names}
            result = decide(fork)
        except Exception:  # the full cycle decides them anyway, and says what went wrong
            self.log.exception("the fast path failed for %d arrivals", len(arrivals))
            self.settled = None
            return
        clean = not fork.reserved and all(
            isinstance(d, Start) and d.workload in names for d in result.decisions
        )
        if not clean:  # it needs room made: the next cycle decides that, with evictions
            self.settled = self.settled.fork(arrivals, now)
            count("waited", len(arrivals))
            self._waiting.update(arrival.queue for arrival in arrivals)
            return
        started = {d.workload for d in result.decisions}
        self._waiting.update(a.queue for a in arrivals if a.name not in started)
        count("started", len(started))
        count("waited", len(arrivals) - len(started))
        if not started:
            self.settled = fork
            return
        effects = self.lifecycle.apply(result, now)
        _, launches = self._record(effects, now)  # starts stop nothing
        self.store.commit()
        self.settled = fork  # after _record, which forgets a session that missed a start
        self._fast_log += [
            (arrival, d.placement)
            for d in result.decisions
            for arrival in arrivals
            if arrival.name == d.workload
        ]
        for name in started:
            self.pending.pop(int(name), None)
        # the fork's queue status is the one that counts these starts: a start beyond its
        # project's quota is noted as borrowed now, before anything can reclaim it
        self.queue_status = dict(result.queues)
        self.borrowed = self._borrowed()
        noted = self._note_borrowed({int(name) for name in started}, now, log=False)
        self._notify()
        if launches:
            self._spawn(self._launch_all(launches, now, noted))

    def _may_start_now(self, settled: Session, arrival: Workload) -> bool:
        """Whether an arrival is worth a fork at all: there are idle GPUs enough for it, and
        nothing waits in its project ahead of it (it would queue behind that). Cheap, so a
        burst of submissions into full queues costs no engine time on the event loop."""
        if arrival.queue in self._waiting:
            return False
        status = self.queue_status.get(arrival.queue)
        if status is not None and status.pending:
            return False
        return settled.ledger.total_free >= settled.request_size(arrival)

    def _spawn(self, coroutine) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.append(task)
        task.add_done_callback(self._tasks.remove)

    async def _launch_all(
        self, launches: list[WorkloadRecord], now: float, borrowed: dict[int, str]
    ) -> None:
        """Launch fast-path starts; the borrowed note goes into a job's log once it has one."""
        try:
            await self._launch_many(launches, now)
            for record in launches:
                if record.id in borrowed:
                    self._log_line(record, now, borrowed[record.id])
        except Exception:
            self.store.rollback()
            self.log.exception("launching fast-path starts failed")

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
        self._waiting.clear()
        self.load_queues()
        self.request_cycle()

    # -- the cycle ------------------------------------------------------------------------

    def request_cycle(self) -> None:
        """Run a cycle soon; bursts of requests share one. Cycles decide off the event loop
        but share the interpreter with it, and arrivals no longer wait for them: the next
        one waits twice as long as the last one took (at most a second), so cycles take at
        most a third of the process under a burst."""
        self._cycle_requested = True
        if self._cycle_task is None or self._cycle_task.done():
            self._cycle_task = asyncio.get_running_loop().create_task(self._cycle_soon())

    async def _cycle_soon(self) -> None:
        while self._cycle_requested:
            await asyncio.sleep(min(2 * self._last_cycle_seconds, 1.0))
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
        self.settled = None
        self._holding.clear()
        self._sweeps.clear()
        self._allocations.clear()
        for record in self.records.values():
            self._index(record)
            self.lifecycle.restore(record.as_life())

    async def run_cycles(self) -> CycleResult:
        """Cycle until the engine decides nothing, applying each cycle's decisions. Each
        cycle decides on the worker thread; this coroutine, on the event loop, takes the
        snapshot before and applies what still holds after, in slices (``_apply``)."""
        began = time.perf_counter()
        inventory = self.backend.inventory()
        if inventory.nodes != self.inventory.nodes:
            self.settled = None
        self.inventory = inventory
        result = None
        started: set[int] = set()
        seen: dict[str, Workload] = {}
        now = self.clock()
        running = asyncio.get_running_loop()
        for _ in range(MAX_CYCLES_PER_RUN):
            now = self.clock()
            self._fast_log, self._late = [], []
            self._waiting.clear()
            forked = self.settled.policy.scorer if self.settled is not None else None
            which = 1 if forked is self._policies[0].scorer else 0
            # the lifecycle's standing state, brought up to date with what changed since the
            # last cycle (on this thread: it reads the lives); the fork it returns is the
            # cycle's own, which nothing here changes while the worker decides on it
            self.held = held_back(self._sweeps.values())
            hidden = [str(workload_id) for workload_id in self.held]
            session = self.lifecycle.session(
                self.inventory.nodes, self.queues, now, self._policies[which], hidden=hidden
            )
            self._policies[which] = session.policy
            seen = self.lifecycle.counted()
            session, result = await running.run_in_executor(self._worker, self._decide, session)
            # the cycle's outcome is ``settled`` before its decisions are applied: it counts
            # them all as done, so while they are applied, slice by slice, it holds at least
            # every share held (a decision not applied yet, or skipped, only makes it hold
            # more), and the arrivals between slices are decided on it
            self.settled = self._absorb(session, self._fast_log)
            self._rearrive()
            stale, stops, launches = await self._apply(result, seen, now, started)
            if stale:
                self.log.info("%d decisions went stale while the cycle ran; skipped", stale)
                self._cycle_requested = True
            if not result.decisions:
                break
            await self._stop(stops)
            await self._launch_many(launches, now)
        else:
            self.log.error("the engine did not settle in %d cycles", MAX_CYCLES_PER_RUN)
        assert result is not None
        self.pending = {int(name): info for name, info in result.pending.items()}
        self.queue_status = dict(result.queues)
        self.borrowed = self._borrowed()
        self._note_borrowed(started, now)
        self.next_wakeup = result.next_wakeup
        self._last_cycle_seconds = time.perf_counter() - began
        self.metrics.cycle(self._last_cycle_seconds, result, self._counts())
        self.freezer.settled(busy=self._busy)
        self._busy = False
        self._notify()
        return result

    async def _apply(
        self, result: CycleResult, seen: dict[str, Workload], now: float, started: set[int]
    ) -> tuple[int, list[tuple[WorkloadRecord, dict | None, float]], list[WorkloadRecord]]:
        """Apply a cycle's decisions in slices of ``SLICE_SECONDS``, each written to the store
        in one commit, answering what arrived meanwhile between slices. Each decision is
        checked just before it is applied (``Reconciler``): requests between slices may have
        cancelled its workload, or the fast path taken GPUs. Adds the workloads started to
        ``started``; returns how many decisions were stale, the processes to stop and the
        jobs to launch."""
        check = Reconciler(seen, self.lifecycle.lives, self.inventory.nodes)
        decisions = result.decisions
        stops: list[tuple[WorkloadRecord, dict | None, float]] = []
        launches: list[WorkloadRecord] = []
        stale = heard = 0
        done = 0
        while done < len(decisions):
            if done:
                await self._between_slices()
            if len(self._fast_log) > heard:  # the fast path started work since the snapshot
                check.capacity_taken(self._fast_log[heard:])
                heard = len(self._fast_log)
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
            settled = self.settled
            more_stops, more_launches = self._record(effects, now)
            self.settled = settled  # it counted these starts already (``run_cycles``)
            self.store.commit()
            stops += more_stops
            launches += more_launches
        return stale, stops, launches

    async def _between_slices(self) -> None:
        """Let the event loop answer what arrived during a slice of a cycle's decisions
        (``_apply``); tests/service/test_concurrent_cycles.py holds a cycle here."""
        await asyncio.sleep(0)

    def _note_borrowed(self, started: set[int], now: float, *, log: bool = True) -> dict[int, str]:
        """The "borrowed" milestone of work that just started beyond its project's quota, in
        its timeline and (``log``: launched already) its log; returns the lines noted."""
        noted: dict[int, str] = {}
        for workload_id in sorted(started & self.borrowed.keys()):
            record = self.records.get(workload_id)
            if record is None:
                continue
            self.store.event(record, now, Milestone.BORROWED.value, self.borrowed[workload_id])
            noted[workload_id] = event_line(Milestone.BORROWED.value, self.borrowed[workload_id])
            if log:
                self._log_line(record, now, noted[workload_id])
        if noted:
            self.store.commit()
        return noted

    def _decide(self, session: Session) -> tuple[Session, CycleResult]:
        """The engine's part of a cycle, on the worker thread: pure, it touches nothing the
        event loop uses but the session handed to it (whose policy's scorer is the one the
        fast path is not using, see ``_policies``)."""
        began = time.thread_time()
        result = decide(session)
        self.metrics.engine_cpu.inc(time.thread_time() - began)
        return session, result

    def _absorb(self, session: Session, started: list[tuple[Workload, Placement]]) -> Session:
        """The cycle's outcome plus what the fast path started while it decided, so that it
        holds every share held now: each one is taken on its ledger where it runs and
        accounted as started. A share the cycle also planned (that start was skipped) is
        then counted twice, which only makes the session hold more than is held."""
        for workload, placement in started:
            request = workload.request
            session.ledger.take(placement, request.cpu_milli, request.memory_mib)
            session.start(workload, placement)
        return session

    def _rearrive(self) -> None:
        """Offer the fast path, on the new ``settled``, the arrivals the cycle's snapshot did
        not hold (``_late``) and that still wait: without this a later arrival could start
        ahead of them on a fork that never heard of them."""
        if self.settled is None or not self._late:
            return
        late = [
            record
            for record in self._late
            if record.sweep_id is None
            and record.state == WorkloadState.PENDING
            and record.id in self.records
        ]
        if late:
            self.arrive(sorted(late, key=lambda record: record.id), again=True)

    def snapshot(self) -> Snapshot:
        """The engine's input: every active workload but the sweep members held back by
        their sweep's parallel limit (``scheduler/service/sweeps.py``)."""
        full = self.lifecycle.snapshot(self.inventory.nodes, self.queues)
        self.held = held_back(self._sweeps.values())
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
        for record in self._holding.values():
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
        """A session of the state the scheduler stands in now, to fork for a dry run:
        ``settled`` (the last cycle's outcome and the arrivals since), or, when there is none
        (before the first cycle, after a queue edit), a fresh one, decided so that it
        describes where the next cycle will leave things."""
        if self.settled is not None:
            return self.settled
        session = Session(self.snapshot(), self.clock(), self.policy)
        decide(session)
        return session

    # -- carrying out the lifecycle's effects: the store first, the backend second ---------

    def _record(
        self, effects: list[Effect], now: float
    ) -> tuple[list[tuple[WorkloadRecord, dict | None, float]], list[WorkloadRecord]]:
        """Write the effects to the store (not committed) and the records; return the
        processes to stop (with the handle they had) and the jobs to launch."""
        stops: list[tuple[WorkloadRecord, dict | None, float]] = []
        launches: list[WorkloadRecord] = []
        touched: dict[str, WorkloadRecord] = {}
        if any(isinstance(effect, Started) for effect in effects):
            self.settled = None  # it holds less than is held now; its maker sets the next
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
                self._unindex(record)
                self.records.pop(record.id, None)
                self.pending.pop(record.id, None)
            else:
                self._index(record)
        return stops, launches

    def _index(self, record: WorkloadRecord) -> None:
        """Keep ``record`` (active, in ``records``) in the indexes as its state has it."""
        if WorkloadState(record.state).holding:
            self._holding[record.id] = record
        else:
            self._holding.pop(record.id, None)
        if record.sweep_id is not None:
            self._sweeps[record.id] = record
        if record.is_allocation:
            self._allocations[record.user, record.server_name] = record

    def _unindex(self, record: WorkloadRecord) -> None:
        """``record`` leaves ``records``."""
        self._holding.pop(record.id, None)
        self._sweeps.pop(record.id, None)
        if self._allocations.get((record.user, record.server_name)) is record:
            del self._allocations[record.user, record.server_name]

    def allocation(self, user: str, server_name: str | None) -> WorkloadRecord | None:
        """The active allocation of ``user``'s server ``server_name``, if there is one."""
        return self._allocations.get((user, server_name))

    def _counts(self) -> dict[str, int]:
        """Active workloads by state: the ones holding GPUs, the rest pending."""
        counts = {WorkloadState.PENDING.value: len(self.records) - len(self._holding)}
        for record in self._holding.values():
            counts[record.state] = counts.get(record.state, 0) + 1
        return counts

    async def _stop(self, stops: list[tuple[WorkloadRecord, dict | None, float]]) -> None:
        for record, handle, grace in stops:
            if handle is not None:  # else it is being launched: _launch stops it
                await self.backend.stop(record.id, handle, grace)

    async def _launch_many(self, launches: list[WorkloadRecord], now: float) -> None:
        """Launch starts side by side (``LAUNCHES_AT_ONCE``); each commits what it changed
        before its next await, so a failed request's rollback stays its own."""
        at_once = asyncio.Semaphore(LAUNCHES_AT_ONCE)

        async def launch(record: WorkloadRecord) -> None:
            async with at_once:
                await self._launch(record, now)
                self.store.commit()

        await asyncio.gather(*(launch(record) for record in launches))

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
