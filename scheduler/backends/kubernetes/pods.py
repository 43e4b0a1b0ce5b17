"""What every FracHub pod shares, where it runs, and reading pods (and their owners) back.

``PodSettings`` is what the backend's (or FracKubeSpawner's) settings give every pod it
creates; ``pin`` puts a pod on the node the engine chose; the readers below are how the
backend sees a pod's (or a Job's, a Node's) state in the watch caches. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.backends.kubernetes.gpus import HAMI_SCHEDULER
from scheduler.backends.kubernetes.labels import RANKS
from scheduler.common.quantities import kube_cpu, kube_memory

Obj = dict[str, Any]
"""An API object as the JSON the API server speaks."""


@dataclass(frozen=True)
class PodSettings:
    """What every FracHub pod of one backend shares (copied from its traits)."""

    namespace: str
    image: str
    sharing: str = "reservation"
    grace_seconds: int = 30
    service_account: str = ""
    priority_class: str = ""
    scheduler_name: str = ""
    home_mount_path: str = "/home/jovyan"
    volumes: Sequence[Obj] = ()
    volume_mounts: Sequence[Obj] = ()
    node_label: str = ""
    extra_labels: Mapping[str, str] = field(default_factory=dict)
    environment: Mapping[str, str] = field(default_factory=dict)
    ttl_seconds_after_finished: int = 86400
    rendezvous_port: int = 29500
    reservation_image: str = ""
    reservation_command: Sequence[str] = ()
    reservation_priority_class: str = ""
    tolerations: Sequence[Obj] = ()
    runtime_class_name: str = ""
    hami_scheduler_name: str = HAMI_SCHEDULER


def add_node_settings(spec: Obj, settings: PodSettings) -> None:
    """Tolerations (tainted GPU nodes) and runtimeClassName (e.g. ``nvidia``) of a pod spec.
    A fractional pod in reservation mode requests no ``nvidia.com/gpu``, so the
    ExtendedResourceToleration admission plugin adds it no toleration: it needs these."""
    if settings.tolerations:
        spec["tolerations"] = [dict(t) for t in settings.tolerations]
    if settings.runtime_class_name:
        spec["runtimeClassName"] = settings.runtime_class_name


def pin(node: str, node_label: str) -> Obj:
    """Pod spec fields that put a pod on ``node``: node affinity on the Node's *name*
    (``matchFields: metadata.name``), which holds where the ``kubernetes.io/hostname`` label
    differs from it (hostname-override, FQDN node names); or, with ``node_label`` set, a
    ``nodeSelector`` on that label."""
    if node_label:
        return {"nodeSelector": {node_label: node}}
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }
    }


def pinned_node(spec: Obj) -> str | None:
    """The node ``pin`` put a pod spec on (either form), or None."""
    for value in (spec.get("nodeSelector") or {}).values():
        return str(value)
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for selector in term.get("matchFields") or []:
            if selector.get("key") == "metadata.name" and selector.get("values"):
                return str(selector["values"][0])
    return None


def pod_phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def pod_live(pod: Obj) -> bool:
    return pod_phase(pod) not in ("Succeeded", "Failed")


def pod_exit_code(pod: Obj) -> int | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated is not None:
            return int(terminated.get("exitCode", 0))
    return None


def condition(obj: Obj, *kinds: str) -> Obj | None:
    """The first True condition of ``kinds`` of a pod, Job or Node (e.g. a pod's
    DisruptionTarget, a Job's Complete, a Node's Ready), else None."""
    for found in (obj.get("status") or {}).get("conditions") or []:
        if found.get("type") in kinds and found.get("status") == "True":
            return found
    return None


def pod_rank(pod: Obj) -> int:
    """The gang rank of a training pod (its completion index through ``frachub.io/ranks``)."""
    meta = pod["metadata"]
    index = int((meta.get("labels") or {}).get("batch.kubernetes.io/job-completion-index", 0))
    ranks = [r for r in ((meta.get("annotations") or {}).get(RANKS) or "").split(",") if r]
    return int(ranks[index]) if index < len(ranks) else index


def owner_job(pod: Obj) -> str | None:
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == "Job":
            return str(ref["name"])
    return None


def container_resources(gpu_limits: Mapping[str, str], cpu_milli: int, memory_mib: int) -> Obj:
    """A container's ``resources``: its GPU limits, and the CPU and memory it asked for as
    both its requests (what the Kubernetes scheduler counts, as FracHub's engine did) and
    its limits (memory: the kubelet's OOM kill past it, as on the local backend; CPU: its
    CFS quota). Nothing asked, nothing set."""
    limits: dict[str, str] = dict(gpu_limits)
    requests: dict[str, str] = {}
    if cpu_milli:
        requests["cpu"] = limits["cpu"] = kube_cpu(cpu_milli)
    if memory_mib:
        requests["memory"] = limits["memory"] = kube_memory(memory_mib)
    resources: Obj = {}
    if limits:
        resources["limits"] = limits
    if requests:
        resources["requests"] = requests
    return resources
