"""Field-by-field validation shared by every input FracHub accepts: scenario files, the
service's configuration and its REST API.

Each helper checks one field and raises ``InvalidSpec`` naming the entry and the field, so a
command-line tool can print one line and an HTTP edge can answer 400 with the same words.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from scheduler.common.limits import (
    MAX_GPU_MEMORY_GIB,
    MAX_GPU_MODELS,
    MAX_ID,
    MAX_NAME_LENGTH,
    MAX_PRIORITY,
    MAX_QUOTA_CPU,
    MAX_QUOTA_GPUS,
    MAX_QUOTA_MEMORY_GIB,
    gpu_count_problem,
    shown,
)
from scheduler.engine import Queue


class InvalidSpec(ValueError):
    """Malformed input: ``where`` names the entry (and field); the message says what is wrong.

    ``status_hint`` lets an HTTP edge answer 400 without the core knowing about HTTP.
    """

    def __init__(self, where: str, message: str, status_hint: int = 400) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message
        self.status_hint = status_hint


def field_path(where: str, key: str) -> str:
    """``queues[2].parent`` in a file; just ``parent`` in a request body (``where`` empty)."""
    return f"{where}.{key}" if where else key


# -- fields ------------------------------------------------------------------------


def list_field(parent: Mapping, key: str, where: str, required: bool = True) -> list:
    value = parent.get(key)
    if value is None and not required:
        return []
    if not isinstance(value, list):
        raise InvalidSpec(where, "is required and must be a list" if required else "must be a list")
    return value


def mapping_field(value: Any, where: str, allowed: tuple[str, ...]) -> Mapping:
    if not isinstance(value, Mapping):
        raise InvalidSpec(where, "must be a mapping")
    if where and isinstance(value.get("name"), str):
        where = f"{where} ({value['name']})"
    for key in value:
        if key not in allowed:
            raise InvalidSpec(
                field_path(where, key), f"unknown field; known fields: {', '.join(allowed)}"
            )
    return value


def name_field(entry: Mapping, where: str, key: str = "name") -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidSpec(field_path(where, key), "is required and must be a non-empty string")
    return value


def named_entries(
    raw: list, prefix: str, allowed: tuple[str, ...], noun: str
) -> Iterator[tuple[str, Mapping]]:
    """Each entry of a list of named mappings (queues, a scenario's workloads), checked to be
    a mapping of ``allowed`` fields with a name no entry before it has; yields where it is
    (``queues[2] (vision)``, for the messages about its fields) and the entry."""
    seen: set[str] = set()
    for i, item in enumerate(raw):
        where = f"{prefix}[{i}]"
        entry = mapping_field(item, where, allowed)
        name = name_field(entry, where)
        where = f"{where} ({name})"
        if name in seen:
            raise InvalidSpec(field_path(where, "name"), f"duplicate {noun} name {name!r}")
        seen.add(name)
        yield where, entry


def number_field(
    entry: Mapping,
    key: str,
    where: str,
    default: Any,
    *,
    minimum: float = 0,
    maximum: float | None = None,
    optional: bool = False,
    strictly_positive: bool = False,
) -> Any:
    value = entry.get(key, default)
    if value is None and (optional or default is None):
        return None
    field_name = field_path(where, key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidSpec(field_name, f"must be a number, got {shown(value)}")
    if value < minimum or (strictly_positive and value <= 0):
        bound = "greater than 0" if strictly_positive else f">= {minimum:g}"
        raise InvalidSpec(field_name, f"must be {bound}, got {shown(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidSpec(field_name, f"must be a finite number, got {value!r}")
    if maximum is not None and value > maximum:
        raise InvalidSpec(field_name, f"must be at most {maximum:g}, got {shown(value)}")
    return value


def integer_field(
    entry: Mapping, key: str, where: str, default: int, minimum: int, maximum: int = MAX_ID
) -> int:
    value = entry.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidSpec(
            field_path(where, key), f"must be a whole number >= {minimum}, got {shown(value)}"
        )
    if value > maximum:
        raise InvalidSpec(field_path(where, key), f"must be at most {maximum}, got {shown(value)}")
    return value


def priority_field(entry: Mapping, key: str, where: str, default: int) -> int:
    """A priority: a whole number in [-MAX_PRIORITY, MAX_PRIORITY]."""
    value = entry.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidSpec(field_path(where, key), f"must be a whole number, got {shown(value)}")
    if not -MAX_PRIORITY <= value <= MAX_PRIORITY:
        raise InvalidSpec(
            field_path(where, key),
            f"must be between {-MAX_PRIORITY} and {MAX_PRIORITY}, got {shown(value)}",
        )
    return value


QUEUE_HOST_FIELDS = (
    "deserved_cpu",
    "limit_cpu",
    "over_quota_weight_cpu",
    "deserved_memory_gib",
    "limit_memory_gib",
    "over_quota_weight_memory",
)
"""A queue's CPU (cores) and memory (GiB) quotas, limits and weights (docs/scheduling.md,
rule 3b); absent or null: unlimited, and the GPU ``over_quota_weight``."""
QUEUE_FIELDS = (
    "name",
    "parent",
    "deserved_gpus",
    "over_quota_weight",
    "limit_gpus",
    "priority",
    *QUEUE_HOST_FIELDS,
)


def queue_host_quotas(entry: Mapping, where: str) -> dict[str, Any]:
    """The ``Queue`` keyword arguments of an entry's CPU and memory quota fields: cores in
    thousandths, GiB in MiB, as the engine counts them."""
    cpu = {"optional": True, "maximum": MAX_QUOTA_CPU}
    memory = {"optional": True, "maximum": MAX_QUOTA_MEMORY_GIB}
    weight = {"optional": True, "maximum": MAX_QUOTA_GPUS}
    found: dict[str, Any] = {}
    for key, target, bounds, scale in (
        ("deserved_cpu", "deserved_cpu_milli", cpu, 1000),
        ("limit_cpu", "limit_cpu_milli", cpu, 1000),
        ("deserved_memory_gib", "deserved_memory_mib", memory, 1024),
        ("limit_memory_gib", "limit_memory_mib", memory, 1024),
    ):
        value = number_field(entry, key, where, None, **bounds)
        if value is not None and abs(value * scale - round(value * scale)) > 1e-6:
            unit = "cores are counted in thousandths" if scale == 1000 else "memory in MiB"
            raise InvalidSpec(field_path(where, key), f"{unit}, got {value!r}")
        found[target] = None if value is None else round(value * scale)
    for key in ("over_quota_weight_cpu", "over_quota_weight_memory"):
        found[key] = number_field(entry, key, where, None, **weight)
    return found


def queue_host_dict(queue: Queue) -> dict[str, Any]:
    """A queue's CPU and memory quota fields as the API and the files write them."""

    def cores(milli: int | None) -> float | None:
        return None if milli is None else milli / 1000

    def gib(mib: int | None) -> float | None:
        return None if mib is None else mib / 1024

    return {
        "deserved_cpu": cores(queue.deserved_cpu_milli),
        "limit_cpu": cores(queue.limit_cpu_milli),
        "over_quota_weight_cpu": queue.over_quota_weight_cpu,
        "deserved_memory_gib": gib(queue.deserved_memory_mib),
        "limit_memory_gib": gib(queue.limit_memory_mib),
        "over_quota_weight_memory": queue.over_quota_weight_memory,
    }


def parse_queues(raw: list, prefix: str = "queues") -> tuple[Queue, ...]:
    queues: list[Queue] = []
    for where, entry in named_entries(raw, prefix, QUEUE_FIELDS, "queue"):
        name = entry["name"]
        parent = entry.get("parent")
        if parent is not None and not isinstance(parent, str):
            raise InvalidSpec(
                field_path(where, "parent"), "must be the name of another queue or null"
            )
        quota = {"maximum": MAX_QUOTA_GPUS}
        queues.append(
            Queue(
                name=name,
                parent=parent,
                deserved_gpus=number_field(
                    entry, "deserved_gpus", where, None, optional=True, **quota
                ),
                over_quota_weight=number_field(entry, "over_quota_weight", where, 1, **quota),
                limit_gpus=number_field(entry, "limit_gpus", where, None, optional=True, **quota),
                priority=priority_field(entry, "priority", where, 0),
                **queue_host_quotas(entry, where),
            )
        )
    parents = {queue.name: queue.parent for queue in queues}
    for i, queue in enumerate(queues):
        where = f"{prefix}[{i}] ({queue.name}).parent"
        if queue.parent is not None and queue.parent not in parents:
            raise InvalidSpec(where, f"unknown queue {shown(queue.parent)}")
        seen_chain = {queue.name}
        current = queue.parent
        while current is not None:
            if current in seen_chain:
                raise InvalidSpec(where, f"the parents of {queue.name!r} form a cycle")
            seen_chain.add(current)
            current = parents[current]
    has_children = {queue.parent for queue in queues}
    return tuple(
        queue
        if queue.deserved_gpus is not None or queue.name in has_children
        else replace(queue, deserved_gpus=0.0)
        for queue in queues
    )


def gpus_field(entry: Mapping, where: str) -> tuple[float, int | None]:
    has_gpus = entry.get("gpus") is not None
    has_memory = entry.get("gpu_memory_gib") is not None
    if has_gpus and has_memory:
        raise InvalidSpec(
            field_path(where, "gpu_memory_gib"), "give either gpus or gpu_memory_gib, not both"
        )
    if has_memory:
        memory = number_field(
            entry, "gpu_memory_gib", where, None, strictly_positive=True, maximum=MAX_GPU_MEMORY_GIB
        )
        if memory * 1024 < 1:
            raise InvalidSpec(
                field_path(where, "gpu_memory_gib"),
                f"must be at least 1 MiB (1/1024 GiB), got {memory!r}",
            )
        return 0.0, round(memory * 1024)
    if not has_gpus:
        raise InvalidSpec(field_path(where, "gpus"), "is required (or gpu_memory_gib)")
    value = entry["gpus"]
    problem = gpu_count_problem(value)
    if problem is not None:
        raise InvalidSpec(field_path(where, "gpus"), problem)
    return float(value), None


def gpu_model_field(entry: Mapping, where: str) -> frozenset[str]:
    """``gpu_model``: the GPU model a workload must run on, or a list of models it may use
    (any of them, as Run:ai's GPU-type selection); absent or null means any model."""
    value = entry.get("gpu_model")
    if value is None:
        return frozenset()
    models = [value] if isinstance(value, str) else value
    ok = (
        isinstance(models, list)
        and 0 < len(models) <= MAX_GPU_MODELS
        and all(isinstance(m, str) and 0 < len(m) <= MAX_NAME_LENGTH for m in models)
    )
    if not ok:
        raise InvalidSpec(
            field_path(where, "gpu_model"),
            f"must be a GPU model name (e.g. 'NVIDIA-A100-SXM4-80GB') or a list of 1 to "
            f"{MAX_GPU_MODELS} names, got {shown(value)}",
        )
    return frozenset(models)


def labels_field(entry: Mapping, where: str) -> dict[str, str]:
    """``labels``: a node's labels (topology such as ``topology.kubernetes.io/zone``), strings
    to strings; gangs prefer nodes whose labels are all the same."""
    labels = entry.get("labels")
    if labels is None:
        return {}
    ok = isinstance(labels, Mapping) and all(
        isinstance(k, str)
        and 0 < len(k) <= MAX_NAME_LENGTH
        and isinstance(v, str | int | float)
        and not isinstance(v, bool)
        and len(str(v)) <= MAX_NAME_LENGTH
        for k, v in labels.items()
    )
    if not ok:
        raise InvalidSpec(
            field_path(where, "labels"),
            "must be a mapping of label names to values, e.g. {'topology.kubernetes.io/zone': "
            f"'a'}}, got {labels!r}",
        )
    return {k: str(v) for k, v in labels.items()}
