"""What one variant's run measured: pure functions of a ``FleetRun``.

Time averages weigh each sample by how long it held (the runner samples after every
settled instant, so this is exact, not an approximation). Waits of work that never got
that far are *censored*: a notebook whose user gave up counts as waiting at least its
patience, work still waiting at the end as waiting at least until the end. A percentile
that such a lower bound may have moved is marked ``censored`` (printed with ``≥``).
Arrival-based figures count arrivals from ``start`` on (the warm-up is left out).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.engine import Kind
from scheduler.fleet.driver import FleetRun, JobRecord
from scheduler.fleet.workload import Job


@dataclass(frozen=True)
class Quantile:
    seconds: float
    censored: bool = False
    """True when the true value may be larger (a censored wait lies at or below it)."""


@dataclass(frozen=True)
class Waits:
    count: int
    p50: Quantile | None
    p99: Quantile | None


@dataclass(frozen=True)
class Summary:
    variant: str
    allocation: float
    """Time-average GPUs held / GPUs in the cluster."""
    requested: float
    """Time-average GPU units the running work asked for / GPUs in the cluster."""
    useful: float
    """``requested`` less the work that evictions later threw away."""
    demand: float
    """Time-average GPU units held or waited for / GPUs in the cluster."""
    busy_allocation: float | None
    """GPUs held / GPUs in the cluster, averaged over the busy hours only: the times when the
    offered load (``offered_load``) is at least the cluster. None without busy hours."""
    busy_requested: float | None
    notebook_wait: Waits
    in_quota_wait: Waits
    notebooks_abandoned: int
    training_wait: Waits
    training_completion: Waits
    training_done: int
    preemptions: dict[str, int]
    """Evictions by reason (reclaim, preempt, consolidate)."""
    lost_gpu_hours: float
    """Work lost to evictions, as the run checkpointed."""
    lost_gpu_hours_no_checkpoint: float | None
    """The same variant rerun with no job checkpointing; None if not rerun."""
    fair_share_deviation: float
    """Time-average of sum over projects of |GPUs held - fair share|, in GPUs."""
    project_deviation: dict[str, float]
    project_gpu_hours: dict[str, float]
    """Each project's cumulative GPU-hours held over the whole run (warm-up included)."""
    notebooks_preemptible: int = 0
    """Notebooks started preemptible: their users took the offer rather than wait."""
    notebooks_stopped: int = 0
    """Of those, notebooks stopped while preemptible (their share revoked)."""
    notebook_hours_cut: float = 0.0
    """GPU-hours of the stopped notebooks' sessions they did not get (their users do not
    come back). Not counted as lost work: nothing done is thrown away."""


Intervals = Sequence[tuple[float, float]]


def time_average(
    times: Sequence[float], values: Sequence[float], end: float, within: Intervals
) -> float:
    """Average of a step function over the union of the (disjoint) intervals ``within``.

    ``values[i]`` holds from ``times[i]`` to the next time (the last one until ``end``),
    and the function is zero before the first time."""
    span = sum(hi - lo for lo, hi in within)
    if span <= 0:
        return 0.0
    total = 0.0
    for lo, hi in within:
        i = max(0, bisect.bisect_right(times, lo) - 1)
        while i < len(times) and times[i] < hi:
            until = times[i + 1] if i + 1 < len(times) else end
            overlap = min(until, hi) - max(times[i], lo)
            if overlap > 0:
                total += overlap * values[i]
            i += 1
    return total / span


def offered_load(jobs: Sequence[Job], end: float) -> tuple[list[float], list[float]]:
    """GPU units the arrivals would use if every one started the moment it arrived and ran
    its session or work once: the demand the organisation offers, the same for every
    variant, as a step function (times, values)."""
    changes: dict[float, float] = {}
    for job in jobs:
        if job.at >= end:
            continue
        changes[job.at] = changes.get(job.at, 0.0) + job.size
        if job.at + job.duration < end:
            changes[job.at + job.duration] = changes.get(job.at + job.duration, 0.0) - job.size
    times = sorted(changes)
    values, level = [], 0.0
    for t in times:
        level += changes[t]
        values.append(level)
    return times, values


def intervals_at_least(
    times: Sequence[float], values: Sequence[float], threshold: float, start: float, end: float
) -> list[tuple[float, float]]:
    """The parts of [start, end) where the step function is at least ``threshold``."""
    found: list[tuple[float, float]] = []
    for i, (t, value) in enumerate(zip(times, values, strict=True)):
        lo, hi = max(t, start), min(times[i + 1] if i + 1 < len(times) else end, end)
        if hi <= lo or value < threshold - 1e-9:
            continue
        if found and found[-1][1] == lo:
            found[-1] = (found[-1][0], hi)
        else:
            found.append((lo, hi))
    return found


def quantile(waits: Sequence[tuple[float, bool]], q: float) -> Quantile | None:
    """Nearest-rank quantile of (seconds, censored) waits; None when there are none."""
    if not waits:
        return None
    ordered = sorted(waits)
    k = max(0, math.ceil(q * len(ordered)) - 1)
    return Quantile(ordered[k][0], any(censored for _, censored in ordered[: k + 1]))


def _waits(waits: list[tuple[float, bool]]) -> Waits:
    return Waits(len(waits), quantile(waits, 0.50), quantile(waits, 0.99))


def _notebook_wait(record: JobRecord, end: float) -> tuple[float, bool]:
    job = record.job
    if record.first_start is not None:
        return record.first_start - job.at, False
    if record.abandoned and record.ended is not None:
        return record.ended - job.at, True
    return end - job.at, True


def _cut(record: JobRecord) -> float:
    """GPU-seconds of a stopped notebook's session it did not get."""
    if not record.stopped or record.first_start is None or record.ended is None:
        return 0.0
    return max(0.0, record.first_start + record.job.duration - record.ended) * record.held


def _training_wait(record: JobRecord, end: float) -> tuple[float, bool]:
    if record.first_start is not None:
        return record.first_start - record.job.at, False
    return end - record.job.at, True


def _completion(record: JobRecord, end: float) -> tuple[float, bool]:
    if record.ended is not None:
        return record.ended - record.job.at, False
    return end - record.job.at, True


def summarize(
    run: FleetRun,
    start: float = 0.0,
    no_checkpoint: FleetRun | None = None,
    busy: Intervals = (),
) -> Summary:
    """The figures of one run, from ``start`` (seconds) on; ``busy`` are the busy hours."""
    timeline, end, capacity = run.timeline, run.end, run.capacity
    times = timeline.times

    def average(values: Sequence[float], within: Intervals = ((start, end),)) -> float:
        return time_average(times, values, end, within)

    gaps = fair_share_gaps(run)
    deviations = {
        project: average([gap[i] for gap in gaps]) for i, project in enumerate(timeline.projects)
    }
    counted = [r for r in run.records if r.job.at >= start]
    notebooks = [r for r in counted if r.job.kind is Kind.INTERACTIVE]
    training = [r for r in counted if r.job.kind is Kind.TRAINING]
    requested = average(timeline.asked) / capacity
    lost = lost_gpu_hours(run, start)
    preemptions: dict[str, int] = {}
    for record in run.records:
        for t, reason, _ in record.evictions:
            if t >= start:
                preemptions[reason] = preemptions.get(reason, 0) + 1
    return Summary(
        variant=run.variant,
        allocation=average(timeline.held) / capacity,
        requested=requested,
        useful=requested - lost * 3600 / (capacity * (end - start)),
        demand=average(timeline.demand) / capacity,
        busy_allocation=average(timeline.held, busy) / capacity if busy else None,
        busy_requested=average(timeline.asked, busy) / capacity if busy else None,
        notebook_wait=_waits([_notebook_wait(r, end) for r in notebooks]),
        in_quota_wait=_waits([_notebook_wait(r, end) for r in notebooks if r.in_quota]),
        notebooks_abandoned=sum(r.abandoned for r in notebooks),
        notebooks_preemptible=sum(r.preemptible for r in notebooks),
        notebooks_stopped=sum(r.stopped for r in notebooks),
        notebook_hours_cut=sum(_cut(r) for r in notebooks) / 3600,
        training_wait=_waits([_training_wait(r, end) for r in training]),
        training_completion=_waits([_completion(r, end) for r in training]),
        training_done=sum(r.ended is not None for r in training),
        preemptions=preemptions,
        lost_gpu_hours=lost,
        lost_gpu_hours_no_checkpoint=None
        if no_checkpoint is None
        else lost_gpu_hours(no_checkpoint, start),
        fair_share_deviation=sum(deviations.values()),
        project_deviation=deviations,
        project_gpu_hours={
            project: round(hours[-1], 3) if hours else 0.0
            for project, hours in cumulative_gpu_hours(run).items()
        },
    )


def cumulative_gpu_hours(run: FleetRun) -> dict[str, list[float]]:
    """Each project's GPU-hours held from 0 up to each sample's time and, last, up to the run's
    end (exact: the samples are a step function)."""
    timeline = run.timeline
    totals = [0.0] * len(timeline.projects)
    series: dict[str, list[float]] = {project: [] for project in timeline.projects}
    times = [*timeline.times, run.end]
    for k, held in enumerate(timeline.project_held):
        for i, project in enumerate(timeline.projects):
            series[project].append(totals[i] / 3600)
            totals[i] += held[i] * max(0.0, min(times[k + 1], run.end) - times[k])
    for i, project in enumerate(timeline.projects):
        series[project].append(totals[i] / 3600)
    return series


def fair_share_gaps(run: FleetRun) -> list[tuple[float, ...]]:
    """|GPUs held - fair share| of each project, at each sample."""
    timeline = run.timeline
    return [
        tuple(abs(h - f) for h, f in zip(held, fair, strict=True))
        for held, fair in zip(timeline.project_held, timeline.project_fair, strict=True)
    ]


def lost_gpu_hours(run: FleetRun, start: float = 0.0) -> float:
    """GPU-hours of work lost to evictions from ``start`` on."""
    return sum(lost for r in run.records for t, _, lost in r.evictions if t >= start) / 3600


def binned(
    times: Sequence[float], values: Sequence[float], end: float, width: float
) -> list[float]:
    """Averages of a step function over consecutive bins of ``width`` seconds from 0 to ``end``
    (for plots: hourly allocation instead of one point per instant)."""
    edges = [b * width for b in range(math.ceil(end / width))] + [end]
    return [time_average(times, values, end, [(lo, hi)]) for lo, hi in itertools.pairwise(edges)]
