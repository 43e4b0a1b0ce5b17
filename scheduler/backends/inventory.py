"""The GPUs of this machine: from NVML where a driver answers, else as an admin declared them.

- ``nvml_inventory()`` asks the NVIDIA driver (``pynvml``, package ``nvidia-ml-py``): one node
  named after the host, with each GPU's index, UUID, model and memory.
- ``declared_inventory(entries)`` turns an admin's list of dicts, e.g.
  ``[{"name": "local", "gpus": 2, "gpu_memory_gib": 80, "model": "declared"}]``, into nodes
  with stable fake UUIDs (``GPU-declared-<node>-<index>``), for machines without GPUs (demos,
  CI) or where NVML is unavailable. A node's optional ``labels`` (e.g.
  ``{"topology.kubernetes.io/zone": "a"}``) are its topology: gangs prefer nodes whose
  labels are all the same.
- ``load_inventory(source, declared)`` picks by the ``source`` setting: ``nvml`` (must work),
  ``declared``, or ``auto`` (NVML if it works, else declared).

``validate_declared`` is separate so configuration can be checked at start-up, before any
workload depends on it.

CPU and memory (RAM): the NVML node offers this machine's cores (those this process may run
on) and memory, less a reserve for the system and the hub (``machine_resources``; the local
backend's ``reserved_cpu`` and ``reserved_memory_gib``); a declared node offers the ``cpu``
and ``memory_gib`` it declares, and none is counted when it declares none (a demo's
pretend nodes all share one machine, whose cores are not theirs to divide).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from scheduler.backends.base import Gpu, Inventory
from scheduler.engine.model import Node
from scheduler.fields import labels_field

SOURCES = ("auto", "nvml", "declared")
DECLARED_KEYS = ("name", "gpus", "gpu_memory_gib", "model", "labels", "cpu", "memory_gib")
DEFAULT_GPU_MEMORY_GIB = 80
DEFAULT_MODEL = "declared"


class NvmlUnavailable(RuntimeError):
    """NVML cannot describe this machine's GPUs (no driver, no library, no GPU)."""


def validate_declared(entries: Any) -> list[dict[str, Any]]:
    """Check an admin's declared inventory and fill defaults; ``ValueError`` names the field.

    Why so strict: a typo here ("gpu": 2) would otherwise silently become a node with no
    GPUs, and the first sign would be workloads that never start.
    """
    if not isinstance(entries, Sequence) or isinstance(entries, str | bytes):
        raise ValueError("inventory must be a list of nodes, e.g. [{'name': 'local', 'gpus': 2}]")
    checked: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"inventory[{i}]"
        if not isinstance(entry, Mapping):
            raise ValueError(f"{where} must be a mapping with keys {', '.join(DECLARED_KEYS)}")
        unknown = sorted(set(entry) - set(DECLARED_KEYS))
        if unknown:
            raise ValueError(
                f"{where} has unknown key(s) {', '.join(map(repr, unknown))}; "
                f"known keys: {', '.join(DECLARED_KEYS)}"
            )
        name = entry.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{where}.name must be a non-empty string")
        if name in seen:
            raise ValueError(f"{where}.name {name!r} is declared twice")
        seen.add(name)
        gpus = entry.get("gpus")
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus <= 0:
            raise ValueError(f"{where}.gpus must be a positive integer, not {gpus!r}")
        memory = entry.get("gpu_memory_gib", DEFAULT_GPU_MEMORY_GIB)
        if isinstance(memory, bool) or not isinstance(memory, int | float) or not memory > 0:
            raise ValueError(f"{where}.gpu_memory_gib must be a positive number, not {memory!r}")
        model = entry.get("model", DEFAULT_MODEL)
        if not isinstance(model, str):
            raise ValueError(f"{where}.model must be a string, not {model!r}")
        labels = labels_field(entry, where)
        resources = {}
        for key in ("cpu", "memory_gib"):
            value = entry.get(key)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or not value > 0
            ):
                raise ValueError(f"{where}.{key} must be a positive number, not {value!r}")
            resources[key] = value
        checked.append(
            {
                "name": name,
                "gpus": gpus,
                "gpu_memory_gib": memory,
                "model": model,
                "labels": labels,
                **resources,
            }
        )
    return checked


def declared_inventory(entries: Any) -> Inventory:
    """Nodes and GPUs exactly as declared (validated here too), with ``source="declared"``."""
    nodes: list[Node] = []
    gpus: list[Gpu] = []
    for entry in validate_declared(entries):
        memory_mib = round(entry["gpu_memory_gib"] * 1024)
        node = Node(
            name=entry["name"],
            gpus=entry["gpus"],
            gpu_memory_mib=memory_mib,
            gpu_model=entry["model"],
            cpu_milli=None if entry["cpu"] is None else round(entry["cpu"] * 1000),
            memory_mib=None if entry["memory_gib"] is None else round(entry["memory_gib"] * 1024),
            labels=entry["labels"],
        )
        nodes.append(node)
        gpus.extend(
            Gpu(node.name, index, f"GPU-declared-{node.name}-{index}", node.gpu_model, memory_mib)
            for index in range(node.gpus)
        )
    return Inventory(nodes=tuple(nodes), gpus=tuple(gpus), source="declared")


def machine_cores() -> float:
    """Cores this process may run on (its CPU affinity, which a container's cpuset narrows),
    else every core the machine has."""
    try:
        return float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return float(os.cpu_count() or 1)


def machine_memory_mib(meminfo: str = "/proc/meminfo") -> int:
    """The machine's memory (``MemTotal``) in MiB; 0 when it cannot be read."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def machine_resources(
    reserved_cpu: float | None = None,
    reserved_memory_gib: float | None = None,
    *,
    cores: float | None = None,
    memory_mib: int | None = None,
) -> tuple[int, int]:
    """What this machine offers to workloads: (thousandths of a core, MiB), its cores and
    memory less a reserve for the system and the hub. A reserve of None is the larger of a
    tenth and 1 core (2 GiB of memory), so a small machine keeps room for the hub and a big
    one for its page cache; never below nothing."""
    cores = machine_cores() if cores is None else cores
    memory_mib = machine_memory_mib() if memory_mib is None else memory_mib
    cpu_reserve = max(1.0, cores / 10) if reserved_cpu is None else reserved_cpu
    memory_reserve = (
        max(2048.0, memory_mib / 10) if reserved_memory_gib is None else reserved_memory_gib * 1024
    )
    return (
        max(0, round((cores - cpu_reserve) * 1000)),
        max(0, round(memory_mib - memory_reserve)),
    )


def nvml_inventory(node_name: str | None = None) -> Inventory:
    """This host's GPUs from NVML as one node (named after the host unless ``node_name``).

    A node's GPUs are assumed identical by the engine; if they are not, the node advertises
    the smallest memory (so no share is promised that a GPU cannot hold) and lists every model.
    Raises ``NvmlUnavailable`` with the driver's reason when NVML cannot answer.
    """
    try:
        import pynvml
    except ImportError as e:  # nvidia-ml-py is a dependency, but say so plainly if missing
        raise NvmlUnavailable(f"the pynvml module (package nvidia-ml-py) is missing: {e}") from e
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        raise NvmlUnavailable(f"NVML could not start: {e}") from e
    try:
        name = node_name or socket.gethostname()
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            device = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory_mib = int(pynvml.nvmlDeviceGetMemoryInfo(device).total // (1024 * 1024))
            gpus.append(
                Gpu(
                    node=name,
                    index=index,
                    uuid=_text(pynvml.nvmlDeviceGetUUID(device)),
                    model=_text(pynvml.nvmlDeviceGetName(device)),
                    memory_mib=memory_mib,
                )
            )
    except pynvml.NVMLError as e:
        raise NvmlUnavailable(f"NVML could not list the GPUs: {e}") from e
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
    if not gpus:
        raise NvmlUnavailable("NVML works but reports no GPUs on this machine")
    models = list(dict.fromkeys(gpu.model for gpu in gpus))
    node = Node(
        name=name,
        gpus=len(gpus),
        gpu_memory_mib=min(gpu.memory_mib for gpu in gpus),
        gpu_model=" + ".join(models),
    )
    return Inventory(nodes=(node,), gpus=tuple(gpus), source="nvml")


def load_inventory(
    source: str,
    declared: Any,
    node_name: str | None = None,
    machine: tuple[int, int] | None = None,
) -> Inventory:
    """The inventory the ``source`` setting asks for; an NVML node offers ``machine``
    (thousandths of a core, MiB; ``machine_resources`` read now when None).

    ``auto`` is for the common case of one image on machines with and without GPUs: it uses
    NVML when NVML answers and the declared inventory otherwise. ``nvml`` turns a missing
    driver into an error at start-up instead of a silent switch to pretend GPUs.
    """
    if source not in SOURCES:
        raise ValueError(f"inventory source must be one of {', '.join(SOURCES)}, not {source!r}")
    if source == "declared":
        return declared_inventory(declared)
    try:
        found = nvml_inventory(node_name)
    except NvmlUnavailable as e:
        if source == "nvml":
            raise NvmlUnavailable(
                f"inventory source is 'nvml' but {e}; use 'declared' (or 'auto') on a machine "
                "without NVIDIA GPUs"
            ) from e
        return declared_inventory(declared)
    cpu_milli, memory_mib = machine_resources() if machine is None else machine
    (node,) = found.nodes
    node = replace(node, cpu_milli=cpu_milli, memory_mib=memory_mib)
    return replace(found, nodes=(node,))


def _text(value: str | bytes) -> str:
    """Older pynvml versions return bytes."""
    return value.decode() if isinstance(value, bytes) else value
