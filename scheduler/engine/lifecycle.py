"""A workload's life, once: states, transitions, the next snapshot and a cycle's decisions.

The service loop, the scenario runner and the fleet simulator all drive workloads through
the same life, so they feed this module events and carry out what it returns instead of
keeping copies of the rules (a fix made here reaches all three). Like h11, it does no I/O
and reads no clock: ``now`` is passed in, and every transition returns *effects* (start a
process, stop one with a grace period, GPUs freed, a line of history in words) for the
caller to carry out: the service writes the store first and acts on the backend second,
the scenario runner moves simulated time.

The life (every transition below is refused, raising ``LifecycleError`` and changing
nothing, unless the workload is in one of the states ``ALLOWED`` lists for it):

* ``submit``: a new workload waits, ``pending``.
* ``start`` (a ``Start`` decision): ``pending`` -> ``running``; a job's process is launched
  (``Launch``); a notebook allocation has no process, the spawner runs its server.
* ``evict`` (an ``Evict`` or ``Move`` decision): ``running`` -> ``preempting``, holding its
  GPUs while its process gets the grace period (``Stop``), then ``exited`` requeues it
  ``pending`` in its original place (its ``seq`` and ``submitted_at`` never change). A lost
  node, or ``immediate`` evictions (no processes to wait for), requeue it at once. Either
  way it keeps the claimant link: a requeued victim yields to the workload it made room for
  until that one starts, so it does not take the capacity back (a reclaim ping-pong). An
  evicted allocation is ``revoked``.
* ``cancel``: ``pending`` -> ``cancelled``; a running job -> ``cancelling`` (its process gets
  the grace period), a preempting one too; an allocation -> ``released``.
* ``abandon``: ``pending`` -> ``cancelled`` because it can never start, with why in words
  (the job it had to follow with ``--after-ok`` failed).
* ``stop_overdue`` / ``time_limit``: a job running past its ``max_runtime`` -> ``stopping``.
* ``enforce``: a running job broke a rule the service enforces (more GPU memory than its
  share) -> ``stopping``, with the reason in words.
* ``exited``: the process ended. ``running`` -> ``succeeded`` (code 0), ``failed`` (other
  codes) or, with no code (the process was lost), ``pending`` again; ``preempting`` ->
  ``pending`` (requeued); ``cancelling`` -> ``cancelled``; ``stopping`` -> ``failed``.
* ``checkpointed``: a holding job saved its work; the time is kept, the state unchanged.
* ``launch_failed``: the process could not be started -> ``failed``.
* ``not_launched``: started but never launched (the service stopped in between) -> ``pending``.
* ``end``: a scenario's ``finish``/``cancel`` event ends it at once, whatever it was doing.

Adding a field: a request field goes into ``Request`` (the ``ask`` carries it to every
snapshot); something the life tracks goes into ``Life`` declared with ``metadata=KEPT``, which the
service stores under the same name (a column of that name is all it needs).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field, fields, replace
from typing import Any

from scheduler.common.placement import Placement
from scheduler.common.quantities import time_limit_words
from scheduler.common.states import (
    ACTIVE_STATES,
    FINAL_STATES,
    HOLDING_STATES,
    RELEASING_STATES,
    Words,
    WorkloadState,
)
from scheduler.engine import reasons
from scheduler.engine.model import (
    CycleResult,
    Evict,
    EvictReason,
    Move,
    Node,
    Queue,
    Snapshot,
    Start,
    State,
    Workload,
)
from scheduler.engine.session import Policy, Session
from scheduler.engine.standing import Standing
from scheduler.engine.usage import Usage

_ENGINE = {
    WorkloadState.PENDING: State.PENDING,
    WorkloadState.RUNNING: State.RUNNING,
    **dict.fromkeys(RELEASING_STATES, State.RELEASING),
}
"""What the engine sees of each state; final states it never sees."""


class Milestone(Words):
    """History lines that are not states (those that are use the state's own name)."""

    SUBMITTED = "submitted"
    STARTED = "started"
    ALLOCATED = "allocated"
    RESTARTED = "restarted"
    """Started again after a preemption or a lost process (the caller's words: attempt N)."""
    BORROWED = "borrowed"
    """Running beyond its project's quota, on GPUs another project may reclaim."""
    REQUEUED = "requeued"
    LOST = "lost"


_P, _R = WorkloadState.PENDING, WorkloadState.RUNNING
ALLOWED: dict[str, frozenset[WorkloadState]] = {
    "start": frozenset({_P}),
    "evict": frozenset({_R}),
    "cancel": frozenset({_P, _R, WorkloadState.PREEMPTING}),
    "abandon": frozenset({_P}),
    "time_limit": frozenset({_R}),
    "enforce": frozenset({_R}),
    "exited": frozenset(HOLDING_STATES),
    "checkpointed": frozenset(HOLDING_STATES),
    "launch_failed": frozenset(ACTIVE_STATES),
    "not_launched": frozenset(HOLDING_STATES),
    "end": frozenset(ACTIVE_STATES),
}
"""Rule 1: the states each transition may start from; everything else is refused."""
CANCELLABLE = tuple(state for state in WorkloadState if state in ALLOWED["cancel"])
"""What an owner may cancel (an allocation is never preempting: it is revoked at once)."""


def vocabulary() -> dict[str, Any]:
    """The states and their groups as JSON, for code that cannot import this module: the
    panel's JavaScript reads them from the page (``data-states``)."""
    return {
        "names": {state.name: state.value for state in WorkloadState},
        "active": [state.value for state in ACTIVE_STATES],
        "final": [state.value for state in FINAL_STATES],
        "holding": [state.value for state in HOLDING_STATES],
        "cancellable": [state.value for state in CANCELLABLE],
    }


class LifecycleError(Exception):
    """A transition the workload's state does not allow; nothing was changed."""


# -- effects: what the caller carries out ------------------------------------------------------


@dataclass(frozen=True)
class Note:
    """A line of the workload's history, in words (``type`` is a state or a ``Milestone``)."""

    name: str
    type: WorkloadState | Milestone
    message: str = ""


@dataclass(frozen=True)
class Started:
    """It now holds ``placement`` (the history line is the caller's: it describes places)."""

    name: str
    placement: Placement


@dataclass(frozen=True)
class Launch:
    """Start its process (jobs only; an allocation's server is the spawner's)."""

    name: str


@dataclass(frozen=True)
class Evicted:
    """It was evicted or moved; ``message`` says why, for whom and what it lost, in the
    words of its history line (``reasons.evicted``)."""

    name: str
    reason: EvictReason
    claimant: str | None
    message: str = ""


@dataclass(frozen=True)
class Stop:
    """Stop its process: SIGTERM, then SIGKILL after ``grace`` seconds."""

    name: str
    grace: float


@dataclass(frozen=True)
class Freed:
    """It no longer holds GPUs (usage accounting ends here)."""

    name: str


@dataclass(frozen=True)
class Ended:
    """It reached a final state; the caller may ``forget`` it once recorded."""

    name: str
    state: WorkloadState


Effect = Note | Started | Launch | Evicted | Stop | Freed | Ended


def _time_limit_reached(life: Life) -> str:
    """Why a job past its ``max_runtime`` stops, in words: "reached its 2 h time limit"."""
    if life.max_runtime is None:
        return "reached its time limit"
    return f"reached its {time_limit_words(life.max_runtime)} time limit"


# -- the record --------------------------------------------------------------------------------


KEPT = {"kept": True}
"""Metadata of the fields of a life that the service stores under the same name."""


@dataclass(eq=False)
class Life:
    """One workload: what it asked for (fixed) and what has happened to it (the ``KEPT`` fields)."""

    ask: Workload
    """As submitted; its life's fields below replace the state part in each snapshot."""
    title: str = ""
    """Its name in words ("job-12"), for events about the workloads it displaces."""
    allocation: bool = False
    """A notebook's GPU allocation: no process; evicted means revoked, cancelled released."""
    max_runtime: float | None = None
    state: WorkloadState = field(default=WorkloadState.PENDING, metadata=KEPT)
    placement: Placement = field(default=(), metadata=KEPT)
    started_at: float | None = field(default=None, metadata=KEPT)
    start_seq: int = field(default=0, metadata=KEPT)
    claimant: str | None = field(default=None, metadata=KEPT)
    """While preempting, and once requeued: the workload its eviction made room for."""
    stop_reason: str | None = field(default=None, metadata=KEPT)
    restart_count: int = field(default=0, metadata=KEPT)
    """Starts after the first: counted when a restart happens, not when it is requeued."""
    preemptions: int = field(default=0, metadata=KEPT)
    finished_at: float | None = field(default=None, metadata=KEPT)
    exit_code: int | None = field(default=None, metadata=KEPT)
    message: str = field(default="", metadata=KEPT)
    checkpointed_at: float | None = field(default=None, metadata=KEPT)
    """When the job last reported a checkpoint (``checkpointed``): the engine counts the work
    since then, not since its start, as what an eviction would destroy."""
    _view: tuple[tuple, Workload] | None = field(default=None, init=False, repr=False)

    @property
    def name(self) -> str:
        return self.ask.name

    def kept_values(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in KEPT_FIELDS}

    def workload(self) -> Workload:
        """What the engine sees of it now (it must be active); kept until its life changes,
        since most workloads are the same from one cycle to the next."""
        key = (
            self.state,
            self.placement,
            self.started_at,
            self.start_seq,
            self.claimant,
            self.checkpointed_at,
        )
        if self._view is not None and self._view[0] == key:
            return self._view[1]
        state = _ENGINE.get(self.state)
        assert state is not None, f"{self.name} is {self.state.value}"
        workload = replace(
            self.ask,
            state=state,
            placement=self.placement if state is not State.PENDING else (),
            started_at=self.started_at,
            start_seq=self.start_seq,
            claimant=self.claimant if state is not State.RUNNING else None,
            checkpointed_at=self.checkpointed_at,
        )
        self._view = (key, workload)
        return workload


KEPT_FIELDS = tuple(f.name for f in fields(Life) if f.metadata.get("kept"))


# -- the lifecycle -----------------------------------------------------------------------------


class Lifecycle:
    """The active (and, until forgotten, finished) workloads of one scheduler.

    ``grace_seconds`` is what an evicted or cancelled process gets before SIGKILL;
    ``immediate`` says evicted work gives its GPUs back at once (a simulation without
    processes to wait for, the engine's ``immediate_evictions``), so it is requeued at once
    and a ``Move`` restarts it where the engine moved it.
    """

    def __init__(self, *, grace_seconds: float, immediate: bool = False) -> None:
        self.grace_seconds = grace_seconds
        self.immediate = immediate
        self.lives: dict[str, Life] = {}
        self.start_seq = 0
        """The latest start's order; a restarted service resumes from the store's."""
        self.standing: Standing | None = None
        """The engine's state as of the last cycle, brought up to date by ``session``."""
        self._changed: dict[str, None] = {}
        """Workloads whose life changed since ``standing`` last heard of them."""
        self._counted: dict[str, Workload] = {}
        """What the last ``session`` counted (``counted``)."""
        self._hidden: frozenset[str] = frozenset()

    def get(self, name: str) -> Life | None:
        return self.lives.get(name)

    def __getitem__(self, name: str) -> Life:
        return self.lives[name]

    def _life(self, name: str, transition: str) -> Life:
        life = self.lives.get(name)
        if life is None:
            raise LifecycleError(f"can't {transition} workload {name}: there is no such workload")
        if life.state not in ALLOWED[transition]:
            raise LifecycleError(
                f"can't {transition} workload {name} when it is {life.state.value}"
            )
        self._changed[name] = None
        return life

    # -- joining and leaving ---------------------------------------------------------------------

    def submit(self, life: Life, now: float) -> list[Effect]:
        """A new workload, waiting at the back of its queue (its ``ask`` says where)."""
        if life.name in self.lives:
            raise LifecycleError(f"can't submit workload {life.name}: it exists already")
        if life.state is not WorkloadState.PENDING or life.started_at is not None:
            raise LifecycleError(f"can't submit workload {life.name} when it is {life.state.value}")
        self.lives[life.name] = life
        self._changed[life.name] = None
        return [Note(life.name, Milestone.SUBMITTED, f"to project {life.ask.queue}")]

    def withdraw(self, name: str) -> None:
        """Take back a submission its driver could not record (its store refused it): only
        a workload that has not started yet, as if it had never been submitted."""
        life = self.lives.get(name)
        if life is None:
            return
        if life.state is not WorkloadState.PENDING or life.start_seq:
            raise LifecycleError(f"can't withdraw workload {name} when it is {life.state.value}")
        del self.lives[name]
        self._changed[name] = None

    def restore(self, life: Life) -> None:
        """Take back a workload as it was (a restarted service reading its store)."""
        self.lives[life.name] = life
        self._changed[life.name] = None

    def forget(self, name: str) -> None:
        """Drop a finished workload (the caller has recorded its end)."""
        life = self.lives.get(name)
        if life is not None and life.state.active:
            raise LifecycleError(f"can't forget workload {name} when it is {life.state.value}")
        self.lives.pop(name, None)
        self._changed[name] = None

    # -- the engine ------------------------------------------------------------------------------

    def snapshot(self, nodes: tuple[Node, ...], queues: tuple[Queue, ...]) -> Snapshot:
        """The next cycle's input: every active workload, in submission order."""
        active = [life for life in self.lives.values() if life.state.active]
        active.sort(key=lambda life: life.ask.seq)
        return Snapshot(tuple(nodes), tuple(queues), tuple(life.workload() for life in active))

    def session(
        self,
        nodes: tuple[Node, ...],
        queues: tuple[Queue, ...],
        now: float,
        policy: Policy,
        hidden: Collection[str] = (),
        usage: Usage | None = None,
    ) -> Session:
        """The next cycle's session, equal to ``Session(snapshot, now, policy)`` of the same
        workloads (``hidden`` ones left out) but without a snapshot: a fork of the standing
        state, which hears only of the workloads that changed since the last cycle.
        ``usage`` is the snapshot's ``usage`` (usage-decayed fair share; None: off).

        The policy's target workload comes from the latest workloads, as
        ``Policy.for_snapshot`` takes it; keep the session's ``policy`` for the next call.
        """
        hidden = frozenset(hidden)
        standing = self.standing
        if standing is not None and standing.serves(nodes, queues):
            self._bring_up_to_date(standing, hidden)
        if standing is None or not standing.serves(nodes, queues):
            return self._fresh_session(nodes, queues, now, policy, hidden, usage)
        self._counted = standing.members
        standing.session.usage = usage  # the fork's fair shares are computed with it
        return standing.fork(now, policy.for_recent(nodes, standing.recent_workloads()))

    def counted(self) -> dict[str, Workload]:
        """Every workload the last ``session`` counted, as it counted them: a driver that
        applies that session's decisions later (the service, whose cycle decides on another
        thread) checks each against what the workload has become since. Call it before the
        next change reaches the lifecycle's standing state, i.e. before the next ``session``."""
        return dict(self._counted)

    def _bring_up_to_date(self, standing: Standing, hidden: frozenset[str]) -> None:
        changed = self._changed
        if hidden != self._hidden:
            changed.update(dict.fromkeys(hidden.symmetric_difference(self._hidden)))
            self._hidden = hidden
        for name in changed:
            life = self.lives.get(name)
            shown = life is not None and life.state.active and name not in hidden
            standing.put(name, life.workload() if shown else None)  # type: ignore[union-attr]
        changed.clear()

    def _fresh_session(
        self,
        nodes: tuple[Node, ...],
        queues: tuple[Queue, ...],
        now: float,
        policy: Policy,
        hidden: frozenset[str],
        usage: Usage | None = None,
    ) -> Session:
        """Build the standing state from a snapshot (the first cycle, new nodes or queues);
        when building it decided something already (work on a lost node), that session is
        the cycle's and the next cycle builds again."""
        snapshot = replace(self.snapshot(nodes, queues), usage=usage)
        if hidden:
            snapshot = replace(
                snapshot, workloads=tuple(w for w in snapshot.workloads if w.name not in hidden)
            )
        standing = Standing(snapshot, now, policy.for_snapshot(snapshot))
        self._counted = {workload.name: workload for workload in snapshot.workloads}
        self._changed.clear()
        self._hidden = hidden
        if not standing.usable:
            self.standing = None
            return standing.session
        self.standing = standing
        return standing.fork(now, standing.session.policy)

    def apply(self, result: CycleResult, now: float) -> list[Effect]:
        """Carry out a cycle's decisions. A decision about a workload that has moved on since
        the snapshot (cancelled, exited meanwhile) is stale and skipped."""
        effects: list[Effect] = []
        for decision in result.decisions:
            life = self.lives.get(decision.workload)
            if life is None:
                continue
            if isinstance(decision, Start):
                if life.state is WorkloadState.PENDING:
                    effects += self.start(life.name, decision.placement, now)
            elif life.state is WorkloadState.RUNNING:
                reason = decision.reason if isinstance(decision, Evict) else EvictReason.CONSOLIDATE
                effects += self.evict(
                    life.name,
                    reason,
                    decision.claimant,
                    now,
                    lost_seconds=decision.lost_seconds,
                    lost_gpu_seconds=decision.lost_gpu_seconds,
                )
                if isinstance(decision, Move) and life.state is WorkloadState.PENDING:
                    effects += self.start(life.name, decision.placement, now)
        return effects

    # -- transitions -----------------------------------------------------------------------------

    def start(self, name: str, placement: Placement, now: float) -> list[Effect]:
        life = self._life(name, "start")
        if life.start_seq:  # it started before: this start is a restart
            life.restart_count += 1
        self.start_seq += 1
        life.state = WorkloadState.RUNNING
        life.placement = placement
        life.started_at = now
        life.start_seq = self.start_seq
        life.stop_reason = None
        life.claimant = None
        effects: list[Effect] = [Started(name, placement)]
        if not life.allocation:
            effects.append(Launch(name))
        return effects

    def evict(
        self,
        name: str,
        reason: EvictReason,
        claimant: str | None,
        now: float,
        *,
        lost_seconds: float = 0.0,
        lost_gpu_seconds: float = 0.0,
    ) -> list[Effect]:
        """``lost_seconds`` and ``lost_gpu_seconds``: the work the eviction destroys, as the
        engine's decision counted it, for the history line."""
        life = self._life(name, "evict")
        life.preemptions += 1
        claim = self.lives.get(claimant) if claimant else None
        who = f"{claim.ask.queue}/{claim.title}" if claim else None
        decision = Evict(name, reason, claimant, lost_seconds, lost_gpu_seconds)
        why = reasons.evicted(decision, who)
        effects: list[Effect] = [Evicted(name, reason, claimant, why)]
        if life.allocation:
            return effects + self._finish(life, WorkloadState.REVOKED, now, why)
        life.claimant = claimant
        if reason is EvictReason.NODE_LOST or self.immediate:
            gone = reason is EvictReason.NODE_LOST
            effects.append(Stop(name, 0.0 if gone else self.grace_seconds))
            words = "its node is gone" if gone else why
            effects.append(Note(name, Milestone.REQUEUED, f"{words}; {self._place(life)}"))
            return effects + self._requeue(life)
        life.state = WorkloadState.PREEMPTING
        life.stop_reason = reason.value
        effects.append(
            Note(
                name,
                WorkloadState.PREEMPTING,
                f"{why}; grace period {self.grace_seconds:g}s",
            )
        )
        effects.append(Stop(name, self.grace_seconds))
        return effects

    def checkpointed(self, name: str, at: float, now: float) -> bool:
        """Its process saved its work at ``at`` (never later than ``now``, never earlier than
        the save already known); True if that is news. A save before its current run began
        is kept but saves nothing of this run (``Workload.saved_at``)."""
        life = self._life(name, "checkpointed")
        at = min(at, now)
        if life.checkpointed_at is not None and at <= life.checkpointed_at:
            return False
        life.checkpointed_at = at
        return True

    def cancel(self, name: str, now: float, by: str = "its owner") -> list[Effect]:
        """Someone asked (``by`` names who, for the record: "its owner", "admin bob", "the
        idle check"): a waiting one ends at once, a running job stops first."""
        life = self._life(name, "cancel")
        if life.state is WorkloadState.PREEMPTING:
            # its stop is under way; it ends cancelled rather than requeued
            life.state = WorkloadState.CANCELLING
            life.stop_reason = "cancel"
            life.message = f"cancelled by {by}"
            return [Note(name, WorkloadState.CANCELLING, f"cancelled by {by} while preempted")]
        if life.state is WorkloadState.PENDING or life.allocation:
            final = WorkloadState.RELEASED if life.allocation else WorkloadState.CANCELLED
            return self._finish(life, final, now, f"{final.value} by {by}")
        life.state = WorkloadState.CANCELLING
        life.stop_reason = "cancel"
        life.message = f"cancelled by {by}"
        return [
            Note(name, WorkloadState.CANCELLING, f"stopping at the request of {by}"),
            Stop(name, self.grace_seconds),
        ]

    def abandon(self, name: str, now: float, why: str) -> list[Effect]:
        """A waiting workload that can never start ends cancelled, ``why`` its message."""
        life = self._life(name, "abandon")
        return self._finish(life, WorkloadState.CANCELLED, now, f"cancelled: {why}")

    def overdue(self, now: float) -> list[str]:
        """Jobs running longer than their max runtime."""
        return [
            life.name
            for life in self.lives.values()
            if life.state is WorkloadState.RUNNING
            and not life.allocation
            and life.max_runtime is not None
            and life.started_at is not None
            and now - life.started_at > life.max_runtime
        ]

    def stop_overdue(self, now: float) -> list[Effect]:
        effects: list[Effect] = []
        for name in self.overdue(now):
            effects += self.time_limit(name, now)
        return effects

    def time_limit(self, name: str, now: float) -> list[Effect]:
        life = self._life(name, "time_limit")
        life.state = WorkloadState.STOPPING
        life.stop_reason = "max-runtime"
        return [
            Note(name, WorkloadState.STOPPING, _time_limit_reached(life)),
            Stop(name, self.grace_seconds),
        ]

    def enforce(self, name: str, rule: str, why: str, grace: float) -> list[Effect]:
        """A running job broke ``rule`` (kept as its ``stop_reason``, e.g. "memory"); ``why``
        says how in words ("uses 52 GiB of its 35 GiB share of GPU 0 for more than 10s"). It
        stops with ``grace`` seconds before SIGKILL and then fails with ``why`` as its message."""
        life = self._life(name, "enforce")
        life.state = WorkloadState.STOPPING
        life.stop_reason = rule
        life.message = f"stopped: {why}"
        return [Note(name, WorkloadState.STOPPING, why), Stop(name, grace)]

    def exited(
        self, name: str, now: float, exit_code: int | None = None, message: str = ""
    ) -> list[Effect]:
        """Its process ended with ``exit_code`` (None: it vanished without one)."""
        life = self._life(name, "exited")
        if life.state is WorkloadState.RUNNING:
            if exit_code is None:
                note = Note(name, Milestone.LOST, message or "its process vanished")
                return [note, *self._requeue(life)]
            if exit_code == 0:
                return self._finish(life, WorkloadState.SUCCEEDED, now, exit_code=0)
            message = message or f"exited with code {exit_code}"
            return self._finish(life, WorkloadState.FAILED, now, message, exit_code=exit_code)
        if life.state is WorkloadState.PREEMPTING:
            note = Note(name, Milestone.REQUEUED, self._place(life))
            return [note, *self._requeue(life)]
        if life.state is WorkloadState.CANCELLING:
            message = life.message or "cancelled"  # who asked, from cancel()
            return self._finish(life, WorkloadState.CANCELLED, now, message, exit_code=exit_code)
        message = f"stopped: {_time_limit_reached(life)}"
        if life.stop_reason not in (None, "max-runtime") and life.message:
            message = life.message  # what ``enforce`` said
        return self._finish(life, WorkloadState.FAILED, now, message, exit_code)

    def launch_failed(self, name: str, now: float, message: str) -> list[Effect]:
        life = self._life(name, "launch_failed")
        return self._finish(life, WorkloadState.FAILED, now, message)

    def not_launched(self, name: str, now: float) -> list[Effect]:
        """Started, but its process was never launched: it waits again, no restart counted."""
        life = self._life(name, "not_launched")
        # the start that never happened counts as no start, and so as no restart
        if life.restart_count:
            life.restart_count -= 1
        else:
            life.start_seq = 0
        note = Note(name, Milestone.REQUEUED, "the service stopped before it started")
        return [note, *self._requeue(life)]

    def end(self, name: str, now: float, state: WorkloadState) -> list[Effect]:
        """It ends now in ``state``, whatever it was doing (a scenario's finish/cancel)."""
        if not state.final:
            raise LifecycleError(f"can't end workload {name} as {state.value}: not a final state")
        life = self._life(name, "end")
        return self._finish(life, state, now)

    # -- shared steps ----------------------------------------------------------------------------

    def _requeue(self, life: Life) -> list[Effect]:
        """Back to its original place in its queue; the claimant link stays. Its restart is
        counted when it starts again."""
        effects: list[Effect] = [Freed(life.name)] if life.started_at is not None else []
        life.state = WorkloadState.PENDING
        life.placement = ()
        life.started_at = None
        life.stop_reason = None
        return effects

    def _place(self, life: Life) -> str:
        """Where a requeued workload waits, in words: its place among its queue's waiting
        workloads, served by priority and then in submission order, as the engine serves them."""
        key = (-life.ask.priority, life.ask.seq)
        ahead = sum(
            1
            for other in self.lives.values()
            if other is not life
            and other.state is WorkloadState.PENDING
            and other.ask.queue == life.ask.queue
            and (-other.ask.priority, other.ask.seq) < key
        )
        return f"back in its original place in the queue: #{ahead + 1} in {life.ask.queue}"

    def _finish(
        self,
        life: Life,
        state: WorkloadState,
        now: float,
        message: str = "",
        exit_code: int | None = None,
    ) -> list[Effect]:
        effects: list[Effect] = [Freed(life.name)] if life.started_at is not None else []
        life.state = state
        life.finished_at = now
        life.exit_code = exit_code
        life.claimant = None
        if message:
            life.message = message
        words = message or (f"exit code {exit_code}" if exit_code is not None else "")
        return [*effects, Note(life.name, state, words), Ended(life.name, state)]
