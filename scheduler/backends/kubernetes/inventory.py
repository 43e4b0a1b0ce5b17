"""The engine's inventory from the cluster: Ready GPU nodes, their GPUs (from NVIDIA's GPU
feature discovery labels, or as HAMi registered them), less the GPUs of pods FracHub did not
create; their CPU and memory are the node's allocatable, less what those pods request.
Pure: the backend passes its watch caches in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduler.backends.base import Gpu, Inventory
from scheduler.backends.kubernetes.gpus import GPU, HAMI_REGISTER
from scheduler.backends.kubernetes.labels import TRACKED
from scheduler.backends.kubernetes.pods import Obj, condition, pod_live
from scheduler.common.quantities import kube_quantity
from scheduler.engine.model import Node

TOPOLOGY_LABELS = (
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "nvidia.com/gpu.clique",
)
"""Node labels kept as the engine's topology: gangs prefer nodes that share all of them.
(The GPU model, ``nvidia.com/gpu.product``, becomes the node's GPU model.)"""


@dataclass(frozen=True)
class HamiDevice:
    """One physical GPU as HAMi registered it on its node."""

    uuid: str
    memory_mib: int
    model: str


def hami_devices(node: Obj) -> list[HamiDevice]:
    """The GPUs in a Node's ``hami.io/node-nvidia-register``, in the device plugin's order
    (its ``index`` where given). HAMi >= 2.5 writes a JSON list of ``{"id", "index", "count",
    "devmem", "devcore", "type", "numa", "mode", "health"}``; older versions
    ``id,count,devmem,devcore,type,numa,health[,index,mode]:`` per device. An unreadable
    annotation is as none: HAMi's own scheduler cannot use that node either."""
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(HAMI_REGISTER) or ""
    rows: list[tuple[int, HamiDevice]] = []
    try:
        if text.strip().startswith("["):
            for position, item in enumerate(json.loads(text)):
                device = HamiDevice(
                    str(item["id"]), int(item.get("devmem") or 0), str(item.get("type") or "")
                )
                rows.append((int(item.get("index", position)), device))
        else:
            for position, part in enumerate(p for p in text.split(":") if "," in p):
                fields = part.split(",")
                if len(fields) not in (7, 9):
                    return []
                index = int(fields[7]) if len(fields) == 9 else position
                rows.append((index, HamiDevice(fields[0], int(fields[2]), fields[4])))
    except (ValueError, TypeError, KeyError, AttributeError):
        return []
    if not all(device.uuid.startswith("GPU-") for _, device in rows):
        return []
    return [device for _, device in sorted(rows, key=lambda row: row[0])]


def inventory_from(
    nodes: Sequence[Obj],
    reservations: Mapping[tuple[str, int], str],
    *,
    node_selector: Mapping[str, str] | None = None,
    default_memory_mib: int = 0,
    held: Mapping[str, int] | None = None,
    sharing: str = "reservation",
    requested: Mapping[str, tuple[int, int]] | None = None,
) -> Inventory:
    """Schedulable GPU nodes from Node objects (NVIDIA GPU feature discovery labels:
    ``nvidia.com/gpu.count``, ``nvidia.com/gpu.memory`` in MiB, ``nvidia.com/gpu.product``;
    the GPU count is the smaller of the label and allocatable ``nvidia.com/gpu``); the
    :data:`TOPOLOGY_LABELS` a node has become its engine labels. Nodes not
    Ready, cordoned, or without GPUs are left out. A GPU's UUID is the one its reservation pod
    reported, else ``GPU-unreserved-<node>-<index>`` (whole-GPU pods get theirs from the device
    plugin and never use it). ``held`` (node -> GPUs) are held by pods FracHub did not
    create (``foreign_gpus``): they are left out of the node's count.

    In HAMi mode (``sharing="hami"``) the node's allocatable ``nvidia.com/gpu`` counts HAMi's
    virtual slots (GPUs x ``deviceSplitCount``), so the GPUs are those HAMi registered
    (``hami_devices``): their UUIDs, and as memory the smallest ``devmem`` (what HAMi counts
    a ``nvidia.com/gpumem`` against, a little under the label's on most cards). A node HAMi
    has not registered is left out (HAMi cannot place pods there). A device HAMi marks
    unhealthy stays in: GPU indices must not shift under running work (the engine would
    count a GPU twice), so a pod FracHub pins to it waits, as under the device plugin.

    A node's CPU and memory are its allocatable ``cpu`` and ``memory`` (what the kubelet
    offers pods, the system's reserve already taken off), less ``requested`` (node ->
    thousandths of a core, MiB) by pods FracHub did not create (``foreign_requests``); None
    (not counted) where the node does not say."""
    out_nodes: list[Node] = []
    gpus: list[Gpu] = []
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        meta = node["metadata"]
        labels = meta.get("labels") or {}
        if any(labels.get(k) != v for k, v in (node_selector or {}).items()):
            continue
        if condition(node, "Ready") is None or (node.get("spec") or {}).get("unschedulable"):
            continue
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        memory = int(labels.get("nvidia.com/gpu.memory") or default_memory_mib)
        model = labels.get("nvidia.com/gpu.product", "unknown")
        name = meta["name"]
        registered = hami_devices(node) if sharing == "hami" else []
        if sharing == "hami":
            counts = [len(registered)]
            if registered:
                memory = min(device.memory_mib for device in registered)
                model = labels.get("nvidia.com/gpu.product") or registered[0].model or model
        else:
            counts = [int(allocatable.get(GPU, 0) or 0)]
            if labels.get("nvidia.com/gpu.count"):
                counts.append(int(labels["nvidia.com/gpu.count"]))
        count = min(counts) - int((held or {}).get(name, 0))
        if count <= 0:
            continue
        topology = {key: labels[key] for key in TOPOLOGY_LABELS if labels.get(key)}
        cpu_milli, memory_mib = allocatable_resources(allocatable)
        taken_cpu, taken_memory = (requested or {}).get(name, (0, 0))
        out_nodes.append(
            Node(
                name=name,
                gpus=count,
                gpu_memory_mib=memory,
                gpu_model=model,
                cpu_milli=None if cpu_milli is None else max(0, cpu_milli - taken_cpu),
                memory_mib=None if memory_mib is None else max(0, memory_mib - taken_memory),
                labels=topology,
            )
        )
        for index in range(count):
            uuid = (
                registered[index].uuid
                if registered
                else reservations.get((name, index)) or f"GPU-unreserved-{name}-{index}"
            )
            gpus.append(Gpu(name, index, uuid, model, memory))
    return Inventory(nodes=tuple(out_nodes), gpus=tuple(gpus), source="kubernetes")


def allocatable_resources(allocatable: Mapping[str, str]) -> tuple[int | None, int | None]:
    """A node's allocatable ``cpu`` (thousandths of a core) and ``memory`` (MiB, rounded
    down); None for one it does not state or states in a way that is not a quantity."""
    cpu = kube_quantity(allocatable.get("cpu", ""))
    memory = kube_quantity(allocatable.get("memory", ""))
    return (
        None if cpu is None else round(cpu * 1000),
        None if memory is None else int(memory // 2**20),
    )


def pod_requests(pod: Obj) -> tuple[int, int]:
    """What a pod requests of its node's CPU (thousandths) and memory (MiB), as the
    Kubernetes scheduler counts it: its containers' requests together, or its largest init
    container's where that is more."""
    spec = pod.get("spec") or {}

    def requests(container: Obj) -> tuple[int, int]:
        asked = ((container.get("resources") or {}).get("requests")) or {}
        cpu = kube_quantity(asked.get("cpu", "0")) or 0.0
        memory = kube_quantity(asked.get("memory", "0")) or 0.0
        return round(cpu * 1000), int(memory // 2**20)

    running = [requests(c) for c in spec.get("containers") or []]
    cpu, memory = sum(r[0] for r in running), sum(r[1] for r in running)
    for init in (requests(c) for c in spec.get("initContainers") or []):
        cpu, memory = max(cpu, init[0]), max(memory, init[1])
    return cpu, memory


def foreign_requests(pods: Sequence[Obj]) -> dict[str, tuple[int, int]]:
    """node -> (CPU thousandths, MiB) requested by bound, live pods FracHub neither created
    nor placed, as ``foreign_gpus`` counts their GPUs."""
    taken: dict[str, tuple[int, int]] = {}
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if labels.get(TRACKED) == "true" or not node or not pod_live(pod):
            continue
        cpu, memory = pod_requests(pod)
        before = taken.get(node, (0, 0))
        taken[node] = (before[0] + cpu, before[1] + memory)
    return taken


def pod_gpus(pod: Obj) -> int:
    """Whole ``nvidia.com/gpu`` a pod asks (limits, else requests; init containers too)."""
    spec = pod.get("spec") or {}
    total = sum(_container_gpus(container) for container in spec.get("containers") or [])
    for container in spec.get("initContainers") or []:
        total = max(total, _container_gpus(container))
    return total


def _container_gpus(container: Obj) -> int:
    resources = container.get("resources") or {}
    amount = (resources.get("limits") or {}).get(GPU) or (resources.get("requests") or {}).get(GPU)
    return int(amount or 0)


def foreign_gpus(pods: Sequence[Obj]) -> dict[str, int]:
    """node -> GPUs held by bound, live pods FracHub neither created nor placed (no
    ``frachub.io/managed`` label): another scheduler's work, a DaemonSet, a user's pod."""
    held: dict[str, int] = {}
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if labels.get(TRACKED) == "true" or not node or not pod_live(pod):
            continue
        gpus = pod_gpus(pod)
        if gpus:
            held[node] = held.get(node, 0) + gpus
    return held
