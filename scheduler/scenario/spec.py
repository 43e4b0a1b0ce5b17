"""Scenario files (docs/scheduling.md, "Scenario files") parsed into typed, validated data.

Validation happens completely before anything runs: the first problem raises
``InvalidSpec`` naming the entry and the field, so the command can print one
line and exit 2. Unknown top-level keys (``expect:``, ``description:``) are
ignored; unknown keys inside an entry are refused, because a misspelt field
(``gpu: 2``) silently taking its default is worse than an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from scheduler.common.limits import MILLI
from scheduler.common.placement import GpuShare, ReplicaPlacement
from scheduler.common.states import WorkloadState
from scheduler.engine import SCORERS, Aging, Kind, Node, Queue, Request, WorkloadRequest
from scheduler.fields import (
    InvalidSpec,
    gpu_model_field,
    gpus_field,
    integer_field,
    labels_field,
    list_field,
    mapping_field,
    name_field,
    named_entries,
    number_field,
    parse_queues,
)


@dataclass(frozen=True)
class WorkloadSpec:
    """One workload of the timeline: what it asks for, and when and how long it runs."""

    name: str
    ask: WorkloadRequest
    at: float
    duration: float | None
    running: bool
    placement: tuple[ReplicaPlacement, ...] | None


@dataclass(frozen=True)
class UsageSpec:
    """Usage-decayed fair share in simulated time (docs/scheduling.md): the runner accrues
    the queues' allocation and hands the decayed usage to each cycle."""

    half_life: float
    window: float
    k: float
    refresh: float
    """Simulated seconds between recomputations (the service's ``usage_refresh_seconds``)."""
    past: Mapping[str, float] = field(default_factory=dict)
    """GPUs each queue held on average over the window before t=0."""


@dataclass(frozen=True)
class EventSpec:
    at: float
    action: str
    """One of finish, cancel, remove_node, add_node."""
    target: str
    node: Node | None = None


@dataclass(frozen=True)
class Scenario:
    nodes: tuple[Node, ...]
    queues: tuple[Queue, ...]
    workloads: tuple[WorkloadSpec, ...]
    events: tuple[EventSpec, ...] = ()
    run_until: float | None = None
    placement: str = "pack"
    grace_seconds: float = 0.0
    aging: Aging | None = None
    """``aging: {per_hour: 10, most: 100}``: pending work's rank rises with its wait
    (``scheduler/engine/aging.py``); absent, the plain order."""
    usage: UsageSpec | None = None
    interactive_reserve_gpus: float = 0.0
    """``interactive_reserve_gpus: 1``: idle GPUs lending work may not take while some
    project has unused deserved quota (``scheduler/engine/reserve.py``); 0: off."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Top-level keys the runner ignores (``expect``, ``description``), for tools and tests."""


def load_scenario(path: str) -> Scenario:
    """Read and validate a scenario file; every problem is an ``InvalidSpec``."""
    try:
        with open(path, encoding="utf-8") as stream:
            document = yaml.safe_load(stream)
    except OSError as error:
        raise InvalidSpec(path, f"cannot read the file: {error.strerror}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "YAML"
        problem = getattr(error, "problem", None) or "not valid YAML"
        raise InvalidSpec(f"{path}: {where}", problem) from None
    try:
        return parse_scenario(document)
    except InvalidSpec as error:
        raise InvalidSpec(f"{path}: {error.where}", str(error)[len(error.where) + 2 :]) from None


_TOP = (
    "cluster",
    "queues",
    "workloads",
    "events",
    "run_until",
    "placement",
    "grace_seconds",
    "usage",
    "interactive_reserve_gpus",
)
_AGING_FIELDS = ("per_hour", "most")


def parse_scenario(document: Any) -> Scenario:
    if not isinstance(document, Mapping):
        raise InvalidSpec("document", "must be a mapping with cluster, queues and workloads")
    cluster = document.get("cluster")
    if not isinstance(cluster, Mapping):
        raise InvalidSpec("cluster", "is required and must be a mapping with a nodes list")
    nodes = _nodes(list_field(cluster, "nodes", "cluster.nodes"))
    queues = parse_queues(list_field(document, "queues", "queues"))
    node_names = {node.name for node in nodes}
    workloads = _workloads(list_field(document, "workloads", "workloads"), queues, nodes)
    raw_events = list_field(document, "events", "events", required=False)
    events = _events(raw_events, workloads, node_names)
    placement = document.get("placement", "pack")
    if placement not in SCORERS:
        raise InvalidSpec(
            "placement",
            f"unknown placement {placement!r}; choose one of: {', '.join(sorted(SCORERS))}",
        )
    return Scenario(
        nodes=nodes,
        queues=queues,
        workloads=workloads,
        events=events,
        run_until=number_field(document, "run_until", "", None, minimum=0, optional=True),
        placement=placement,
        grace_seconds=number_field(document, "grace_seconds", "", 0.0, minimum=0),
        aging=_aging(document.get("aging")),
        usage=_usage(document.get("usage"), queues),
        interactive_reserve_gpus=number_field(
            document, "interactive_reserve_gpus", "", 0.0, minimum=0
        ),
        extra={k: v for k, v in document.items() if k not in (*_TOP, "aging")},
    )


def _aging(raw: Any) -> Aging | None:
    if raw is None:
        return None
    entry = mapping_field(raw, "aging", _AGING_FIELDS)
    if entry.get("per_hour") is None:
        raise InvalidSpec("aging.per_hour", "is required: priority points gained per hour waited")
    return Aging(
        per_hour=number_field(entry, "per_hour", "aging", None, minimum=0),
        most=number_field(entry, "most", "aging", None, minimum=0, optional=True),
    )


# -- sections -----------------------------------------------------------------------------

WEEK = 7 * 86400.0


def _usage(raw: Any, queues: tuple[Queue, ...]) -> UsageSpec | None:
    if raw is None:
        return None
    entry = mapping_field(raw, "usage", ("half_life", "window", "k", "refresh", "past"))
    half_life = number_field(entry, "half_life", "usage", None, strictly_positive=True)
    if half_life is None:
        raise InvalidSpec("usage.half_life", "is required (seconds of simulated time)")
    window = number_field(entry, "window", "usage", WEEK, strictly_positive=True)
    past_raw = entry.get("past", {})
    if not isinstance(past_raw, Mapping):
        raise InvalidSpec("usage.past", "must be a mapping of queue name to GPUs held")
    names = {queue.name for queue in queues}
    past: dict[str, float] = {}
    for name, _gpus in past_raw.items():
        if name not in names:
            raise InvalidSpec(f"usage.past.{name}", "is not a queue of this scenario")
        past[name] = float(number_field(past_raw, name, "usage.past", 0.0))
    return UsageSpec(
        half_life=float(half_life),
        window=float(window),
        k=float(number_field(entry, "k", "usage", 1.0)),
        refresh=float(number_field(entry, "refresh", "usage", min(half_life / 10, window / 20))),
        past=past,
    )


_NODE_FIELDS = (
    "name",
    "count",
    "gpus",
    "gpu_memory_gib",
    "gpu_model",
    "cpu",
    "memory_gib",
    "labels",
    "one_account_per_gpu",
)


def _node_entries(raw: Any, where: str) -> list[Node]:
    entry = mapping_field(raw, where, _NODE_FIELDS)
    name = name_field(entry, where)
    where = f"{where} ({name})"
    count = integer_field(entry, "count", where, 1, 1)
    gpus = integer_field(entry, "gpus", where, 0, 0)
    memory = number_field(entry, "gpu_memory_gib", where, 80, strictly_positive=True)
    cpu = number_field(entry, "cpu", where, None, optional=True)
    ram = number_field(entry, "memory_gib", where, None, optional=True)
    labels = labels_field(entry, where)
    model = entry.get("gpu_model", "")
    if not isinstance(model, str):
        raise InvalidSpec(f"{where}.gpu_model", "must be a string")
    one_account = entry.get("one_account_per_gpu", False)
    if not isinstance(one_account, bool):
        raise InvalidSpec(f"{where}.one_account_per_gpu", "must be true or false")
    names = [name] if "count" not in entry else [f"{name}-{i}" for i in range(count)]
    return [
        Node(
            name=node_name,
            gpus=gpus,
            gpu_memory_mib=round(memory * 1024),
            gpu_model=model,
            cpu_milli=None if cpu is None else round(cpu * 1000),
            memory_mib=None if ram is None else round(ram * 1024),
            labels=labels,
            one_account_per_gpu=one_account,
        )
        for node_name in names
    ]


def _nodes(raw: list) -> tuple[Node, ...]:
    nodes: list[Node] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        for node in _node_entries(item, f"cluster.nodes[{i}]"):
            if node.name in seen:
                raise InvalidSpec(f"cluster.nodes[{i}].name", f"duplicate node name {node.name!r}")
            seen.add(node.name)
            nodes.append(node)
    return tuple(nodes)


_WORKLOAD_FIELDS = (
    "name",
    "queue",
    "user",
    "kind",
    "gpus",
    "gpu_memory_gib",
    "replicas",
    "priority",
    "preemptible",
    "min_runtime",
    "at",
    "duration",
    "state",
    "placement",
    "cpu",
    "memory_gib",
    "checkpoint_interval_seconds",
    "gpu_model",
)


def _workloads(
    raw: list, queues: tuple[Queue, ...], nodes: tuple[Node, ...]
) -> tuple[WorkloadSpec, ...]:
    queue_names = {queue.name for queue in queues}
    departments = {queue.parent for queue in queues if queue.parent}
    node_index = {node.name: node for node in nodes}
    specs: list[WorkloadSpec] = []
    for where, entry in named_entries(raw, "workloads", _WORKLOAD_FIELDS, "workload"):
        name = entry["name"]
        queue = name_field(entry, where, "queue")
        if queue not in queue_names:
            raise InvalidSpec(f"{where}.queue", f"unknown queue {queue!r}")
        if queue in departments:
            raise InvalidSpec(
                f"{where}.queue", f"{queue!r} is a department; submit to one of its projects"
            )
        kind_text = entry.get("kind", "training")
        try:
            kind = Kind(kind_text)
        except ValueError:
            raise InvalidSpec(
                f"{where}.kind",
                f"must be one of training, interactive, inference, got {kind_text!r}",
            ) from None
        replicas = integer_field(entry, "replicas", where, 1, 1)
        cpu = number_field(entry, "cpu", where, 0)
        ram = number_field(entry, "memory_gib", where, 0)
        if entry.get("gpus") == 0 and not isinstance(entry.get("gpus"), bool):
            # a CPU-only workload (rule 3b): no GPU, but CPUs or memory
            if not (cpu or ram) or entry.get("gpu_memory_gib") is not None:
                raise InvalidSpec(
                    f"{where}.gpus", "0 (a CPU-only workload) needs cpu or memory_gib and no GPU"
                )
            gpus, memory_mib = 0.0, None
        else:
            gpus, memory_mib = gpus_field(entry, where)
        request = Request(
            gpus=gpus,
            gpu_memory_mib=memory_mib,
            replicas=replicas,
            cpu_milli=round(cpu * 1000),
            memory_mib=round(ram * 1024),
            gpu_models=gpu_model_field(entry, where),
        )
        preemptible = entry.get("preemptible")
        if preemptible is not None and not isinstance(preemptible, bool):
            raise InvalidSpec(
                f"{where}.preemptible", f"must be true, false or null, got {preemptible!r}"
            )
        priority = entry.get("priority")
        if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
            raise InvalidSpec(f"{where}.priority", f"must be a whole number, got {priority!r}")
        state = entry.get("state")
        if state not in (None, WorkloadState.PENDING, WorkloadState.RUNNING):
            raise InvalidSpec(f"{where}.state", f"must be running, pending or null, got {state!r}")
        running = state == WorkloadState.RUNNING
        at = number_field(entry, "at", where, 0)
        if running and at != 0:
            raise InvalidSpec(f"{where}.at", "a workload that begins running must have at: 0")
        placement = None
        if entry.get("placement") is not None:
            if not running:
                raise InvalidSpec(f"{where}.placement", "only a running workload has a placement")
            placement = _placement(entry["placement"], f"{where}.placement", request, node_index)
        user = entry.get("user")
        if user is not None and not isinstance(user, str):
            raise InvalidSpec(f"{where}.user", "must be a string")
        specs.append(
            WorkloadSpec(
                name=name,
                ask=WorkloadRequest.of(
                    kind,
                    request,
                    preemptible=preemptible,
                    priority=priority,
                    project=queue,
                    user=user,
                    min_runtime=number_field(entry, "min_runtime", where, 0),
                    checkpoint_interval=number_field(
                        entry,
                        "checkpoint_interval_seconds",
                        where,
                        None,
                        optional=True,
                        strictly_positive=True,
                    ),
                ),
                at=at,
                duration=number_field(
                    entry, "duration", where, None, optional=True, strictly_positive=True
                ),
                running=running,
                placement=placement,
            )
        )
    _check_initial_capacity(specs, node_index)
    return tuple(specs)


def _placement(
    raw: Any, where: str, request: Request, nodes: Mapping[str, Node]
) -> tuple[ReplicaPlacement, ...]:
    if not isinstance(raw, list) or len(raw) != request.replicas:
        raise InvalidSpec(where, f"must list one entry per replica ({request.replicas})")
    replicas = []
    for r, item in enumerate(raw):
        at = f"{where}[{r}]"
        entry = mapping_field(item, at, ("node", "gpus"))
        node_name = name_field(entry, at, "node")
        node = nodes.get(node_name)
        if node is None:
            raise InvalidSpec(f"{at}.node", f"unknown node {node_name!r}")
        cpu_only = not request.whole_gpus and not request.is_fraction
        indices = entry.get("gpus", [] if cpu_only else None)
        want = 0 if cpu_only else request.whole_gpus or 1
        if (
            not isinstance(indices, list)
            or len(indices) != want
            or not all(isinstance(g, int) and not isinstance(g, bool) for g in indices)
        ):
            raise InvalidSpec(f"{at}.gpus", f"must list {want} GPU index(es)")
        if len(set(indices)) != len(indices) or not all(0 <= g < node.gpus for g in indices):
            raise InvalidSpec(
                f"{at}.gpus", f"indices must be distinct and within 0..{node.gpus - 1}"
            )
        milli = MILLI if request.whole_gpus else request.milli_on(node.gpu_memory_mib)
        if milli > MILLI:
            raise InvalidSpec(f"{at}.node", f"{node_name}'s GPUs are too small for this request")
        replicas.append(ReplicaPlacement(node_name, tuple(GpuShare(g, milli) for g in indices)))
    return tuple(replicas)


def _check_initial_capacity(specs: list[WorkloadSpec], nodes: Mapping[str, Node]) -> None:
    used: dict[tuple[str, int], int] = {}
    for spec in specs:
        for replica in spec.placement or ():
            for share in replica.gpus:
                key = (replica.node, share.index)
                used[key] = used.get(key, 0) + share.milli
                if used[key] > MILLI:
                    raise InvalidSpec(
                        f"workloads ({spec.name}).placement",
                        f"GPU {share.index} of {replica.node} would hold more than one whole GPU",
                    )


_EVENT_ACTIONS = ("finish", "cancel", "remove_node", "add_node")


def _events(
    raw: list, workloads: tuple[WorkloadSpec, ...], node_names: set[str]
) -> tuple[EventSpec, ...]:
    known = {spec.name for spec in workloads}
    all_nodes = set(node_names)
    events = []
    for i, item in enumerate(raw):
        where = f"events[{i}]"
        entry = mapping_field(item, where, ("at", *_EVENT_ACTIONS))
        at = number_field(entry, "at", where, None)
        if at is None:
            raise InvalidSpec(f"{where}.at", "is required")
        actions = [key for key in _EVENT_ACTIONS if key in entry]
        if len(actions) != 1:
            raise InvalidSpec(where, f"needs exactly one of {', '.join(_EVENT_ACTIONS)}")
        action = actions[0]
        if action == "add_node":
            added = _node_entries(entry["add_node"], f"{where}.add_node")
            for node in added:
                if node.name in all_nodes:
                    raise InvalidSpec(
                        f"{where}.add_node.name", f"duplicate node name {node.name!r}"
                    )
                all_nodes.add(node.name)
                events.append(EventSpec(at, action, node.name, node))
            continue
        target = entry[action]
        if not isinstance(target, str):
            raise InvalidSpec(f"{where}.{action}", "must be a name")
        if action in ("finish", "cancel") and target not in known:
            raise InvalidSpec(f"{where}.{action}", f"unknown workload {target!r}")
        if action == "remove_node" and target not in all_nodes:
            raise InvalidSpec(f"{where}.{action}", f"unknown node {target!r}")
        events.append(EventSpec(at, action, target))
    return tuple(events)
