"""Drive the real engine through simulated days, once per variant, and record what happened.

``FleetRunner`` *is* the scenario runner (``scheduler.scenario.runner.Runner``), and so the
product's own lifecycle (``scheduler.engine.lifecycle``): the same instants, the same
cycles-until-settled, the same grace periods, claimant links and requeues. It adds only
what a fleet needs, through the runner's public hooks:

* arrivals are admitted when their time comes, and finished work is forgotten, so each
  instant costs what is active, not what the whole run ever held;
* a training job's run is its *remaining* work, so a preempted job that checkpointed
  resumes from its last checkpoint (without checkpointing it starts over);
* a notebook whose user gave up waiting (``patience_minutes``) is cancelled;
* under a variant that offers it, a notebook that would wait at its project's quota while a
  preemptible one would start now (the spawn form's two dry runs, on the state the last
  instant settled in) is started preemptible if its user takes the offer
  (``Job.takes_offer``): an allocation, as the spawner asks for one, so a reclaim revokes
  its share and the notebook stops, as the spawner's poll stops it; its user does not come
  back for the rest of the session;
* after each settled instant the allocation, demand and fair shares are sampled. The state
  only changes at instants, so the samples are an exact step function of time.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from scheduler.common.limits import MILLI
from scheduler.common.states import WorkloadState
from scheduler.engine import Kind, decide
from scheduler.engine.dryrun import NOW, WAIT, dry_run
from scheduler.engine.fairshare import deserved_quotas, fair_shares
from scheduler.engine.lifecycle import Effect, Ended, Evicted, Life, Started
from scheduler.fleet.description import DAY, Description
from scheduler.fleet.variants import (
    Variant,
    variant_gpus,
    variant_policy,
    variant_queues,
    variant_spec,
)
from scheduler.fleet.workload import Job
from scheduler.scenario.runner import Runner
from scheduler.scenario.spec import Scenario

Progress = Callable[[int, int], None]
"""Called with (simulated day, days) as each simulated day begins."""


@dataclass
class JobRecord:
    """One arrival's life under one variant."""

    job: Job
    held: float
    """GPU units it holds while running under this variant (fractions rounded up or not)."""
    in_quota: bool = False
    """Notebooks: the project's notebooks, running or waiting, fit its quota with this one."""
    first_start: float | None = None
    ended: float | None = None
    abandoned: bool = False
    evictions: list[tuple[float, str, float]] = field(default_factory=list)
    """(time, reason, GPU-seconds of work lost) for each eviction."""
    progress: float = 0.0
    """Training work (seconds) kept by checkpoints across evictions."""
    run_started: float | None = None
    preemptible: bool = False
    """Notebooks: started preemptible, its user having taken the spawn form's offer."""
    stopped: bool = False
    """Notebooks: stopped while preemptible (its share revoked for others' quota)."""


@dataclass
class Timeline:
    """Samples after each settled instant; each holds until the next sample (or ``end``)."""

    projects: tuple[str, ...]
    times: list[float] = field(default_factory=list)
    held: list[float] = field(default_factory=list)
    """GPU units held (running and releasing work)."""
    asked: list[float] = field(default_factory=list)
    """GPU units the running work asked for (a 0.5-GPU notebook on a whole GPU counts 0.5)."""
    demand: list[float] = field(default_factory=list)
    """GPU units held or waited for (running, releasing and pending)."""
    project_held: list[tuple[float, ...]] = field(default_factory=list)
    project_fair: list[tuple[float, ...]] = field(default_factory=list)


@dataclass
class FleetRun:
    variant: str
    capacity: int
    end: float
    checkpointing: bool
    records: tuple[JobRecord, ...]
    timeline: Timeline


class FleetRunner(Runner):
    def __init__(
        self,
        description: Description,
        jobs: Sequence[Job],
        variant: Variant,
        days: int,
        *,
        checkpointing: bool = True,
        progress: Progress | None = None,
    ) -> None:
        end = days * DAY
        super().__init__(
            Scenario(
                nodes=description.nodes,
                queues=variant_queues(variant, description.queues, description.capacity),
                workloads=(),
                run_until=end,
                placement=description.placement,
                grace_seconds=description.grace_seconds,
                usage=description.usage,
                interactive_reserve_gpus=description.interactive_reserve_gpus,
            )
        )
        self.policy = variant_policy(variant, self.policy)
        self.variant = variant
        self.days = days
        self.checkpointing = checkpointing
        self.progress = progress
        self.arrivals = [job for job in jobs if job.at < end]
        self.admitted = 0
        self.records = {
            job.name: JobRecord(job, variant_gpus(variant, job.gpus) * job.replicas)
            for job in self.arrivals
        }
        self.deadlines: list[tuple[float, str]] = []
        self.org_queues = description.queues
        self.deserved = deserved_quotas(description.queues)
        parents = {queue.parent for queue in description.queues}
        self.projects = tuple(q.name for q in description.queues if q.name not in parents)
        self.notebook_units = dict.fromkeys(self.projects, 0.0)
        self.capacity = description.capacity
        self.timeline = Timeline(self.projects)
        self.day = -1

    def simulate(self) -> FleetRun:
        self.run()
        return FleetRun(
            variant=self.variant.name,
            capacity=self.capacity,
            end=self.days * DAY,
            checkpointing=self.checkpointing,
            records=tuple(self.records[job.name] for job in self.arrivals),
            timeline=self.timeline,
        )

    # -- the runner's hooks -------------------------------------------------------------------

    def before_instant(self, now: float) -> None:
        day = int(now // DAY)
        if day != self.day:
            self.day = day
            if self.progress is not None:
                self.progress(day + 1, self.days)
        self._admit(now)
        self._give_up(now)

    def after_instant(self, now: float) -> None:
        self._sample(now)
        for name in [name for name, life in self.lives.items() if life.state.final]:
            self.lifecycle.forget(name)
            del self.specs[name]

    def next_instant(self, now: float) -> float | None:
        times = [super().next_instant(now)]
        if self.admitted < len(self.arrivals):
            times.append(self.arrivals[self.admitted].at)
        while self.deadlines and self.records[self.deadlines[0][1]].first_start is not None:
            heapq.heappop(self.deadlines)  # started in time: no deadline any more
        if self.deadlines:
            times.append(self.deadlines[0][0])
        return min((t for t in times if t is not None and t > now), default=None)

    def run_time(self, name: str, now: float) -> float | None:
        """Training runs its remaining work: what its checkpoints kept is not done again."""
        record = self.records[name]
        if record.job.kind is Kind.TRAINING:
            return record.job.duration - record.progress
        return super().run_time(name, now)

    def on_effect(self, effect: Effect, now: float) -> None:
        record = self.records[effect.name]
        if isinstance(effect, Started):
            if record.first_start is None:
                record.first_start = now
            record.run_started = now
            if record.preemptible:  # an allocation has no process: its session ends it
                self.ends_at[effect.name] = now + record.job.duration
        elif isinstance(effect, Evicted) and record.preemptible:
            # its share revoked: the notebook stops (files kept), no work to resume
            record.stopped = True
            record.evictions.append((now, effect.reason.value, 0.0))
            record.run_started = None
        elif isinstance(effect, Evicted):
            ran = now - (record.run_started if record.run_started is not None else now)
            every = record.job.checkpoint_seconds if self.checkpointing else None
            saved = math.floor(ran / every) * every if every else 0.0
            record.progress += saved
            record.evictions.append((now, effect.reason.value, (ran - saved) * record.held))
            record.run_started = None
        elif isinstance(effect, Ended):
            record.ended = now
            record.abandoned = effect.state is WorkloadState.CANCELLED
            if record.job.kind is Kind.INTERACTIVE:
                self.notebook_units[record.job.project] -= record.held

    # -- the fleet's additions ----------------------------------------------------------------

    def _admit(self, now: float) -> None:
        while self.admitted < len(self.arrivals) and self.arrivals[self.admitted].at <= now:
            job = self.arrivals[self.admitted]
            record = self.records[job.name]
            if job.kind is Kind.INTERACTIVE:
                units = self.notebook_units[job.project] + record.held
                record.in_quota = units * MILLI <= self.deserved[job.project] + 1e-6
                self.notebook_units[job.project] = units
                if job.patience_seconds is not None:
                    heapq.heappush(self.deadlines, (job.at + job.patience_seconds, job.name))
                if job.takes_offer and self.variant.offers_preemptible and self._offered(job, now):
                    record.preemptible = True
                    spec = variant_spec(self.variant, job, preemptible_notebook=True)
                    life = Life(spec.ask.workload(job.name, self.admitted, job.at), allocation=True)
                    life.title = job.name
                    self.specs[job.name] = spec
                    self._carry_out(self.lifecycle.submit(life, now), now)
                    self.admitted += 1
                    continue
            self.submit(self.admitted, variant_spec(self.variant, job, self.checkpointing), now)
            self.admitted += 1

    def _offered(self, job: Job, now: float) -> bool:
        """The spawn form's offer: the notebook as asked would wait, and a preemptible one
        would start now, each decided by the engine's dry run on the state the last instant
        settled in (as the service decides the form's hints)."""
        session = self.session(now)
        decide(session)
        grace = self.scenario.grace_seconds
        seq = self.admitted
        asked = variant_spec(self.variant, job).ask.workload(job.name, seq, now)
        if dry_run(session, asked, now, grace).outcome != WAIT:
            return False
        spec = variant_spec(self.variant, job, preemptible_notebook=True)
        return dry_run(session, spec.ask.workload(job.name, seq, now), now, grace).outcome == NOW

    def _give_up(self, now: float) -> None:
        while self.deadlines and self.deadlines[0][0] <= now:
            _, name = heapq.heappop(self.deadlines)
            life = self.lives.get(name)
            if life is not None and life.state is WorkloadState.PENDING:
                self._carry_out(self.lifecycle.cancel(name, now), now)

    def _sample(self, now: float) -> None:
        index = {name: i for i, name in enumerate(self.projects)}
        held = [0.0] * len(self.projects)
        demand = [0.0] * len(self.projects)
        asked = 0.0
        for name, life in self.lives.items():
            record = self.records[name]
            i = index[record.job.project]
            if life.state.holding:
                held[i] += record.held
                if life.state is WorkloadState.RUNNING:
                    asked += record.job.size
            if life.state.active:
                demand[i] += record.held
        fair = fair_shares(
            self.org_queues,
            self.deserved,
            {name: demand[i] * MILLI for name, i in index.items()},
            self.capacity * MILLI,
            self.usage.current(now) if self.usage is not None else None,
        )
        timeline = self.timeline
        timeline.times.append(now)
        timeline.held.append(sum(held))
        timeline.asked.append(asked)
        timeline.demand.append(sum(demand))
        timeline.project_held.append(tuple(held))
        timeline.project_fair.append(tuple(fair[name] / MILLI for name in self.projects))


def simulate(
    description: Description,
    jobs: Sequence[Job],
    variant: Variant,
    days: int,
    *,
    checkpointing: bool = True,
    progress: Progress | None = None,
) -> FleetRun:
    """Run one variant over ``days`` simulated days of ``jobs``."""
    runner = FleetRunner(
        description, jobs, variant, days, checkpointing=checkpointing, progress=progress
    )
    return runner.simulate()
