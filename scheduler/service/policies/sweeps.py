"""Sweeps (Run:ai's hyper-parameter optimisation workloads): one submission, N jobs.

A sweep is the cartesian product of its parameters' values, each member a job of its own
with its values in its environment (``FRACHUB_SWEEP_LR=0.1`` for a parameter ``lr``, plus
``FRACHUB_SWEEP_ID`` and ``FRACHUB_SWEEP_INDEX``), named ``<name>-<index>``, listed together
(consecutive ids) and cancelled as one (``DELETE /api/v1/sweeps/{id}``).

``parallel`` (at most that many members hold GPUs at once) is kept by the service, not the
engine: before each cycle ``held_back`` picks the pending members beyond the limit, lowest
ids first, and the loop leaves them out of the engine's snapshot. The engine stays pure and
unaware of sweeps; a held member waits with its own reason and starts when an earlier one
ends.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.common.limits import shown
from scheduler.fields import InvalidSpec
from scheduler.service.persistence.orm import WorkloadRecord

PARAMETER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")
MAX_PARAMETERS = 8
MAX_VALUES = 100
MAX_VALUE = 1024
MAX_MEMBERS = 256
"""A sweep's jobs in all: more is a typo (or a denial of service), not an experiment."""
ENV_PREFIX = "FRACHUB_SWEEP_"
SWEEP_FIELDS = ("parameters", "parallel")


@dataclass(frozen=True)
class Sweep:
    """A validated sweep: parameters in the order given, and the parallel limit."""

    parameters: tuple[tuple[str, tuple[str, ...]], ...]
    parallel: int

    def members(self) -> list[dict[str, str]]:
        """Each member's parameter values, in product order (the last parameter fastest)."""
        names = [name for name, _ in self.parameters]
        return [
            dict(zip(names, values, strict=True))
            for values in itertools.product(*(values for _, values in self.parameters))
        ]


def parse_sweep(value: Any) -> Sweep | None:
    """``sweep: {"parameters": {"lr": ["0.1", "0.01"]}, "parallel": 2}``; None if absent."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidSpec("sweep", "must be an object with parameters and parallel")
    unknown = [key for key in value if key not in SWEEP_FIELDS]
    if unknown:
        raise InvalidSpec(
            f"sweep.{_key(unknown[0])}", "is not a sweep field (parameters, parallel)"
        )
    raw = value.get("parameters")
    if not isinstance(raw, Mapping) or not raw:
        raise InvalidSpec("sweep.parameters", "must name at least one parameter with its values")
    if len(raw) > MAX_PARAMETERS:
        raise InvalidSpec("sweep.parameters", f"must name at most {MAX_PARAMETERS} parameters")
    parameters = []
    seen: set[str] = set()
    for name, values in raw.items():
        where = f"sweep.parameters.{_key(name)}"
        if not isinstance(name, str) or not PARAMETER.fullmatch(name):
            raise InvalidSpec(
                where,
                "a parameter's name is 1-32 letters, digits or '_', not starting with a digit",
            )
        if name.upper() in seen:
            raise InvalidSpec(where, "names the same variable as another parameter")
        seen.add(name.upper())
        if not isinstance(values, list) or not values or len(values) > MAX_VALUES:
            raise InvalidSpec(where, f"must be a list of 1 to {MAX_VALUES} values")
        texts = []
        for value_ in values:
            if isinstance(value_, bool) or not isinstance(value_, (str, int, float)):
                raise InvalidSpec(where, f"values must be strings or numbers, got {shown(value_)}")
            text = value_ if isinstance(value_, str) else repr(value_)
            if len(text) > MAX_VALUE:
                raise InvalidSpec(where, f"values must be at most {MAX_VALUE} characters")
            texts.append(text)
        parameters.append((name, tuple(texts)))
    size = 1
    for _, values in parameters:
        size *= len(values)
    if size > MAX_MEMBERS:
        raise InvalidSpec(
            "sweep.parameters", f"make {size} jobs; a sweep has at most {MAX_MEMBERS}"
        )
    parallel = value.get("parallel", size)
    if (
        isinstance(parallel, bool)
        or not isinstance(parallel, int)
        or not 1 <= parallel <= MAX_MEMBERS
    ):
        raise InvalidSpec(
            "sweep.parallel",
            f"must be a whole number from 1 to {MAX_MEMBERS}, got {shown(parallel)}",
        )
    return Sweep(tuple(parameters), parallel)


def _key(name: Any) -> str:
    """A key as a field path names it: plain when short text, else as ``shown`` writes it."""
    return name if isinstance(name, str) and 0 < len(name) <= 64 else shown(name)


def member_env(sweep_id: int, index: int, values: Mapping[str, str]) -> dict[str, str]:
    """What a member finds in its environment besides the job's own ``env``."""
    env = {f"{ENV_PREFIX}{name.upper()}": value for name, value in values.items()}
    env[f"{ENV_PREFIX}ID"] = str(sweep_id)
    env[f"{ENV_PREFIX}INDEX"] = str(index)
    return env


def held_back(records: Iterable[WorkloadRecord]) -> dict[int, str]:
    """Pending members beyond their sweep's parallel limit, with the reason they wait: each
    sweep lets its lowest-numbered pending members fill what its busy members leave."""
    sweeps: dict[int, list[WorkloadRecord]] = {}
    for record in records:
        if record.sweep_id is not None:
            sweeps.setdefault(record.sweep_id, []).append(record)
    held: dict[int, str] = {}
    for sweep_id, members in sweeps.items():
        limit = members[0].sweep_parallel or len(members)
        busy = sum(1 for member in members if member.state != "pending")
        waiting = sorted((m for m in members if m.state == "pending"), key=lambda m: m.id)
        for member in waiting[max(0, limit - busy) :]:
            held[member.id] = (
                f"sweep {sweep_id} runs at most {limit} "
                f"{'job' if limit == 1 else 'jobs'} at once; {busy} of its jobs "
                f"{'holds' if busy == 1 else 'hold'} GPUs"
            )
    return held
