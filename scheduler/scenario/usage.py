"""Usage history in simulated time, for scenarios and the fleet (docs/scheduling.md,
"Usage-decayed fair share").

The runner tells it what each queue holds after every settled instant; between instants the
allocation is a step function, so the GPU-seconds accrued are exact. Like the service, it
recomputes the decayed usage at most every ``refresh`` simulated seconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduler.common.limits import MILLI
from scheduler.engine import Node, Queue
from scheduler.engine.fairshare import subtree_totals
from scheduler.engine.lifecycle import Life
from scheduler.engine.model import held_milli
from scheduler.engine.usage import Usage, UsageHistory
from scheduler.scenario.spec import UsageSpec


class UsageAccrual:
    """The queues' decayed usage as simulated time passes."""

    def __init__(self, spec: UsageSpec, queues: tuple[Queue, ...], nodes: Iterable[Node]) -> None:
        self.spec = spec
        self.queues = queues
        self.history = UsageHistory(spec.half_life, spec.window)
        self.held: dict[str, float] = {}
        """GPUs each queue holds since ``since`` (the last settled instant)."""
        self.since = 0.0
        self.capacity = float(sum(node.gpus for node in nodes))
        if spec.past:
            self.history.accrue(-spec.window, 0.0, spec.past, self.capacity)
        self._usage: Usage | None = None
        self._computed_at = float("-inf")

    def accrue(self, now: float) -> None:
        """Count what was held from the last settled instant until ``now``."""
        if now > self.since:
            self.history.accrue(self.since, now, self.held, self.capacity)
            self.since = now

    def settled(self, now: float, lives: Mapping[str, Life], nodes: Iterable[Node]) -> None:
        """What each queue holds from ``now`` on (``lives`` as the instant left them)."""
        held: dict[str, float] = {}
        for life in lives.values():
            if life.state.holding:
                queue = life.ask.queue
                held[queue] = held.get(queue, 0.0) + held_milli(life.placement) / MILLI
        self.held = held
        self.since = now
        self.capacity = float(sum(node.gpus for node in nodes))

    def current(self, now: float) -> Usage:
        """The usage the cycles at ``now`` see: recomputed at most every ``refresh`` seconds."""
        if self._usage is None or now - self._computed_at >= self.spec.refresh:
            leaves = self.history.fractions(now)
            totals = subtree_totals(self.queues, leaves)
            self._usage = Usage({name: round(v, 6) for name, v in totals.items() if v}, self.spec.k)
            self._computed_at = now
        return self._usage

    def gpu_hours(self) -> dict[str, float]:
        """Each queue's undecayed GPU-hours since t=0 (``past`` included)."""
        return {name: seconds / 3600 for name, seconds in self.history.totals.items()}
