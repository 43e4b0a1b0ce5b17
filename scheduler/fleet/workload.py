"""Arrivals for a fleet description: pure and seeded, so every variant sees the same ones.

Each project draws from its own random stream (seeded by the seed, the project and the
kind of work), so adding a project leaves the others' arrivals unchanged. Day 0 is a
Monday; days 5 and 6 of each week are the weekend.

* Notebooks arrive as a Poisson process inside working hours (``per_day`` on weekdays,
  times ``weekend_factor`` on weekends) and last a log-normal session (median and p90).
* Training jobs arrive as a Poisson process, ``working_hours_share`` of them inside working
  hours and the rest at other times. Their run time is drawn from the real Philly run
  times, scaled and capped as the description says; a gang is ``replicas`` > 1.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from scheduler.engine import Kind
from scheduler.fleet.description import DAY, HOUR, Description, Notebooks, Shape, Training

Z90 = 1.2815515655446004
"""The standard normal's 90th percentile: a log-normal's p90 = median * exp(sigma * Z90)."""
MIN_RUNTIME_SECONDS = 1.0
"""Philly holds a few zero-second jobs; the engine needs a positive duration."""


@dataclass(frozen=True)
class Job:
    """One arrival, in the organisation's own terms (variants transform the request)."""

    name: str
    project: str
    kind: Kind
    gpus: float
    """Per replica: a fraction in (0, 1] or a whole number."""
    replicas: int
    at: float
    duration: float
    """Seconds: a notebook's session from its start, a training job's work."""
    checkpoint_seconds: float | None = None
    patience_seconds: float | None = None
    takes_offer: bool = False
    """A notebook whose user, offered to start it preemptible now rather than wait at the
    project's quota, takes the offer (drawn with ``Notebooks.take_offer``)."""

    @property
    def size(self) -> float:
        """GPU units the job asks for."""
        return self.gpus * self.replicas


def generate(
    description: Description, days: int, seed: int, runtimes: Sequence[float]
) -> tuple[Job, ...]:
    """All arrivals over ``days`` simulated days, sorted by time (then name)."""
    jobs: list[Job] = []
    for project in description.projects:
        if project.notebooks is not None:
            rng = random.Random(f"{seed}:{project.name}:notebooks")
            notebooks = _notebooks(project.name, project.notebooks, description, days, rng)
            jobs += _offers(notebooks, project.notebooks.take_offer, seed, project.name)
        if project.training is not None:
            rng = random.Random(f"{seed}:{project.name}:training")
            jobs += _training(project.name, project.training, description, days, rng, runtimes)
    return tuple(sorted(jobs, key=lambda job: (job.at, job.name)))


def is_weekend(day: int) -> bool:
    return day % 7 >= 5


def _poisson_times(rate: float, start: float, end: float, rng: random.Random) -> list[float]:
    """Arrival instants of a Poisson process with ``rate`` arrivals over [start, end)."""
    times: list[float] = []
    if rate <= 0 or end <= start:
        return times
    per_second = rate / (end - start)
    t = start + rng.expovariate(per_second)
    while t < end:
        times.append(t)
        t += rng.expovariate(per_second)
    return times


def _pick(shapes: Sequence[Shape], rng: random.Random) -> Shape:
    return rng.choices(shapes, weights=[shape.weight for shape in shapes])[0]


def _notebooks(
    project: str, spec: Notebooks, description: Description, days: int, rng: random.Random
) -> list[Job]:
    begin, end = description.working_hours
    sigma = math.log(spec.session_hours_p90 / spec.session_hours_median) / Z90
    mu = math.log(spec.session_hours_median * HOUR)
    patience = None if spec.patience_minutes is None else spec.patience_minutes * 60.0
    jobs = []
    for day in range(days):
        rate = spec.per_day * (spec.weekend_factor if is_weekend(day) else 1.0)
        for at in _poisson_times(rate, day * DAY + begin * HOUR, day * DAY + end * HOUR, rng):
            shape = _pick(spec.shapes, rng)
            jobs.append(
                Job(
                    name=f"{project}-nb-{len(jobs):05d}",
                    project=project,
                    kind=Kind.INTERACTIVE,
                    gpus=shape.gpus,
                    replicas=1,
                    at=at,
                    duration=max(60.0, rng.lognormvariate(mu, sigma)),
                    patience_seconds=patience,
                )
            )
    return jobs


def _offers(notebooks: list[Job], share: float, seed: int, project: str) -> list[Job]:
    """Which users take the offer to start preemptible: a stream of its own, so the share
    changes who takes it and nothing else (the arrivals are those of any other share), and
    a larger share keeps every user a smaller one had."""
    rng = random.Random(f"{seed}:{project}:offer")
    return [replace(job, takes_offer=rng.random() < share) for job in notebooks]


def _training(
    project: str,
    spec: Training,
    description: Description,
    days: int,
    rng: random.Random,
    runtimes: Sequence[float],
) -> list[Job]:
    begin, end = description.working_hours
    inside = (end - begin) * HOUR
    checkpoint = None if spec.checkpoint_minutes is None else spec.checkpoint_minutes * 60.0
    cap = None if spec.max_runtime_hours is None else spec.max_runtime_hours * HOUR
    jobs = []
    for day in range(days):
        rate = spec.per_day * (spec.weekend_factor if is_weekend(day) else 1.0)
        base = day * DAY
        times = _poisson_times(
            rate * spec.working_hours_share, base + begin * HOUR, base + end * HOUR, rng
        )
        # the rest of the day's jobs: before and after working hours, at the same density
        outside = DAY - inside
        if outside > 0:
            off = _poisson_times(rate * (1 - spec.working_hours_share), 0.0, outside, rng)
            times += [base + (t if t < begin * HOUR else t + inside) for t in off]
        for at in sorted(times):
            shape = _pick(spec.shapes, rng)
            work = rng.choice(runtimes) * spec.runtime_scale
            if cap is not None:
                work = min(work, cap)
            jobs.append(
                Job(
                    name=f"{project}-train-{len(jobs):05d}",
                    project=project,
                    kind=Kind.TRAINING,
                    gpus=shape.gpus,
                    replicas=shape.replicas,
                    at=at,
                    duration=max(MIN_RUNTIME_SECONDS, work),
                    checkpoint_seconds=checkpoint,
                )
            )
    return jobs
