"""Fleet description files: an organisation's cluster, projects and workload, validated.

A description says what the cluster is (the ``cluster:`` section of a scenario file),
which projects share it (the quota fields of a scenario's ``queues:``) and how each
project works: notebooks opened during working hours and training jobs submitted
through the day. ``docs/fleet.md`` documents every field. Validation is complete
before anything runs and the first problem raises ``InvalidSpec`` naming the field,
for example ``projects[1] (nlp).training.shapes[0].gpus: must be a fraction ...``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from scheduler.engine import Node, Queue
from scheduler.fields import (
    QUEUE_FIELDS,
    InvalidSpec,
    field_path,
    gpus_field,
    integer_field,
    list_field,
    mapping_field,
    number_field,
    parse_queues,
)
from scheduler.scenario.spec import UsageSpec, parse_scenario

HOUR = 3600.0
DAY = 24 * HOUR


@dataclass(frozen=True)
class Shape:
    """One request shape and how often it is drawn (weights are relative)."""

    gpus: float
    replicas: int
    weight: float


@dataclass(frozen=True)
class Notebooks:
    per_day: float
    """Sessions opened per weekday, spread evenly over working hours (a Poisson process)."""
    weekend_factor: float
    session_hours_median: float
    session_hours_p90: float
    patience_minutes: float | None
    """A user whose notebook has no GPU after this long gives up; None waits for ever."""
    shapes: tuple[Shape, ...]
    take_offer: float = 0.0
    """The share of users who, when their notebook would wait at the project's quota and a
    preemptible one would start now, take the spawn form's offer to start it preemptible."""


@dataclass(frozen=True)
class Training:
    per_day: float
    """Jobs submitted per weekday (a Poisson process)."""
    weekend_factor: float
    working_hours_share: float
    """Share of a day's jobs submitted inside working hours; the rest come at other times."""
    checkpoint_minutes: float | None
    """A preempted job loses the work since its last checkpoint; None loses all of it."""
    runtime_scale: float
    max_runtime_hours: float | None
    shapes: tuple[Shape, ...]


@dataclass(frozen=True)
class Project:
    name: str
    notebooks: Notebooks | None
    training: Training | None


@dataclass(frozen=True)
class Description:
    name: str
    nodes: tuple[Node, ...]
    queues: tuple[Queue, ...]
    """The projects' quota fields as engine queues, in file order (departments included)."""
    projects: tuple[Project, ...]
    """Projects with work to do, in file order."""
    days: int
    grace_seconds: float
    placement: str
    working_hours: tuple[float, float]
    """Start and end of the working day, in hours since midnight."""
    usage: UsageSpec | None = None
    """Usage-decayed fair share (a scenario's ``usage:`` section, without ``past``)."""
    interactive_reserve_gpus: float = 0.0
    """The interactive reserve (``simulate fleet --interactive-reserve``); 0: off."""

    @property
    def capacity(self) -> int:
        """Whole GPUs in the cluster."""
        return sum(node.gpus for node in self.nodes)


def load_description(path: str) -> Description:
    """Read and validate a description file; every problem is an ``InvalidSpec``."""
    try:
        with open(path, encoding="utf-8") as stream:
            text = stream.read()
    except OSError as error:
        raise InvalidSpec(path, f"cannot read the file: {error.strerror}") from None
    try:
        return parse_description_text(text)
    except InvalidSpec as error:
        raise InvalidSpec(f"{path}: {error.where}", error.message) from None


def parse_description_text(text: str) -> Description:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "YAML"
        raise InvalidSpec(where, getattr(error, "problem", None) or "not valid YAML") from None
    return parse_description(document)


_TOP = (
    "name",
    "description",
    "cluster",
    "placement",
    "grace_seconds",
    "days",
    "working_hours",
    "projects",
    "usage",
)
_PROJECT_FIELDS = (*QUEUE_FIELDS, "notebooks", "training")
_NOTEBOOK_FIELDS = (
    "per_day",
    "weekend_factor",
    "session_hours",
    "patience_minutes",
    "shapes",
    "take_offer",
)
_TRAINING_FIELDS = (
    "per_day",
    "weekend_factor",
    "working_hours_share",
    "checkpoint_minutes",
    "runtime_scale",
    "max_runtime_hours",
    "shapes",
)


def parse_description(document: Any) -> Description:
    if not isinstance(document, Mapping):
        raise InvalidSpec("document", "must be a mapping with cluster and projects")
    mapping_field(document, "", _TOP)
    if not isinstance(document.get("cluster"), Mapping):
        raise InvalidSpec("cluster", "is required and must be a mapping with a nodes list")
    placement = document.get("placement", "frachub")  # the service's default
    # the cluster and the placement name are validated exactly as in scenario files
    raw_usage = document.get("usage")
    if isinstance(raw_usage, Mapping) and "past" in raw_usage:
        raise InvalidSpec("usage.past", "is for scenario files; a fleet accrues its own history")
    scenario = parse_scenario(
        {
            "cluster": document["cluster"],
            "queues": [],
            "workloads": [],
            "placement": placement,
            **({"usage": raw_usage} if raw_usage is not None else {}),
        }
    )
    if not scenario.nodes or sum(node.gpus for node in scenario.nodes) == 0:
        raise InvalidSpec("cluster.nodes", "must hold at least one GPU")
    raw_projects = list_field(document, "projects", "projects")
    if not raw_projects:
        raise InvalidSpec("projects", "must list at least one project")
    entries = [
        mapping_field(item, f"projects[{i}]", _PROJECT_FIELDS)
        for i, item in enumerate(raw_projects)
    ]
    queues = parse_queues(
        [{k: v for k, v in entry.items() if k in QUEUE_FIELDS} for entry in entries],
        prefix="projects",
    )
    departments = {queue.parent for queue in queues if queue.parent}
    largest = max(node.gpus for node in scenario.nodes)
    projects = []
    for i, (entry, queue) in enumerate(zip(entries, queues, strict=True)):
        where = f"projects[{i}] ({queue.name})"
        has_work = entry.get("notebooks") is not None or entry.get("training") is not None
        if queue.name in departments:
            if has_work:
                raise InvalidSpec(
                    where, "is a department; give notebooks and training to its projects"
                )
            continue
        projects.append(
            Project(
                name=queue.name,
                notebooks=_notebooks(entry.get("notebooks"), f"{where}.notebooks", largest),
                training=_training(entry.get("training"), f"{where}.training", largest),
            )
        )
    hours = document.get("working_hours", {"start": 9, "end": 18})
    hours = mapping_field(hours, "working_hours", ("start", "end"))
    start = number_field(hours, "start", "working_hours", 9)
    end = number_field(hours, "end", "working_hours", 18)
    if not start < end <= 24:
        raise InvalidSpec("working_hours", f"needs 0 <= start < end <= 24, got {start}..{end}")
    return Description(
        name=str(document.get("name") or "fleet"),
        nodes=scenario.nodes,
        queues=queues,
        projects=tuple(projects),
        days=integer_field(document, "days", "", 7, 1),
        grace_seconds=number_field(document, "grace_seconds", "", 30),
        placement=scenario.placement,
        working_hours=(float(start), float(end)),
        usage=scenario.usage,
    )


def _notebooks(raw: Any, where: str, largest: int) -> Notebooks | None:
    if raw is None:
        return None
    entry = mapping_field(raw, where, _NOTEBOOK_FIELDS)
    session = mapping_field(
        entry.get("session_hours", {"median": 2, "p90": 6}),
        f"{where}.session_hours",
        ("median", "p90"),
    )
    median = number_field(session, "median", f"{where}.session_hours", 2, strictly_positive=True)
    p90 = number_field(session, "p90", f"{where}.session_hours", 6, strictly_positive=True)
    if p90 < median:
        raise InvalidSpec(f"{where}.session_hours.p90", f"must be >= median ({median}), got {p90}")
    shapes = _shapes(entry, where, largest, gangs=False)
    return Notebooks(
        per_day=_required_number(entry, "per_day", where),
        weekend_factor=number_field(entry, "weekend_factor", where, 0.0),
        session_hours_median=float(median),
        session_hours_p90=float(p90),
        patience_minutes=number_field(
            entry, "patience_minutes", where, 60, optional=True, strictly_positive=True
        ),
        shapes=shapes,
        take_offer=float(number_field(entry, "take_offer", where, 0.0, maximum=1)),
    )


def _training(raw: Any, where: str, largest: int) -> Training | None:
    if raw is None:
        return None
    entry = mapping_field(raw, where, _TRAINING_FIELDS)
    share = number_field(entry, "working_hours_share", where, 0.7)
    if share > 1:
        raise InvalidSpec(f"{where}.working_hours_share", f"must be at most 1, got {share!r}")
    return Training(
        per_day=_required_number(entry, "per_day", where),
        weekend_factor=number_field(entry, "weekend_factor", where, 0.3),
        working_hours_share=float(share),
        checkpoint_minutes=number_field(
            entry, "checkpoint_minutes", where, None, optional=True, strictly_positive=True
        ),
        runtime_scale=number_field(entry, "runtime_scale", where, 1.0, strictly_positive=True),
        max_runtime_hours=number_field(
            entry, "max_runtime_hours", where, None, optional=True, strictly_positive=True
        ),
        shapes=_shapes(entry, where, largest, gangs=True),
    )


def _required_number(entry: Mapping, key: str, where: str) -> float:
    if entry.get(key) is None:
        raise InvalidSpec(field_path(where, key), "is required")
    return float(number_field(entry, key, where, None))


def _shapes(entry: Mapping, where: str, largest: int, *, gangs: bool) -> tuple[Shape, ...]:
    raw = list_field(entry, "shapes", f"{where}.shapes")
    if not raw:
        raise InvalidSpec(f"{where}.shapes", "must list at least one request shape")
    allowed = ("gpus", "replicas", "weight") if gangs else ("gpus", "weight")
    shapes = []
    for i, item in enumerate(raw):
        at = f"{where}.shapes[{i}]"
        shape = mapping_field(item, at, allowed)
        if shape.get("gpu_memory_gib") is not None:
            raise InvalidSpec(f"{at}.gpu_memory_gib", "fleet shapes are given in gpus")
        gpus, _ = gpus_field(shape, at)
        if gpus > largest:
            raise InvalidSpec(
                f"{at}.gpus", f"{gpus:g} GPUs per replica, but the largest node has {largest}"
            )
        weight = number_field(shape, "weight", at, 1, strictly_positive=True)
        if not math.isfinite(weight):
            raise InvalidSpec(f"{at}.weight", "must be finite")
        replicas = integer_field(shape, "replicas", at, 1, 1) if gangs else 1
        shapes.append(Shape(gpus=gpus, replicas=replicas, weight=float(weight)))
    return tuple(shapes)
