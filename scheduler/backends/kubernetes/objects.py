"""Pure builders and readers for the Kubernetes backend: manifests in, dicts out, no I/O.

Everything FracHub creates carries ``app.kubernetes.io/managed-by: frachub`` and an
``app.kubernetes.io/component`` (``training``, ``gpu-reservation``, ``notebook``); training
objects also carry the workload id, attempt, project and user (labels, sanitised) with the
exact user and project and the GPU shares in annotations. That is all a restarted scheduler
needs to rebuild its state from the cluster.

Shapes:

- An attempt of a training workload is one **Indexed Job per group of replicas** that share a
  node and the same GPUs (usually one Job), created suspended, pinned with ``nodeSelector``,
  then un-suspended. ``RANK``/``LOCAL_RANK`` come from ``JOB_COMPLETION_INDEX`` through a
  short shell prelude; ``MASTER_ADDR`` is ``<job>-<index>.<service>`` of rank 0, resolved by
  a headless Service selecting the attempt's pods (gangs only).
- A **reservation pod** per shared GPU (KAI's way) requests ``nvidia.com/gpu: 1``; the program
  in it reports the UUID it was given as the annotation ``frachub.io/gpu-uuid``. Fractional
  pods on that node then get ``NVIDIA_VISIBLE_DEVICES`` of that UUID and request no GPU.
- In **HAMi mode** GPUs are HAMi's: the node's devices (UUID, memory) come from HAMi's
  ``hami.io/node-nvidia-register`` annotation, and every GPU pod names HAMi's scheduler,
  asks ``nvidia.com/gpu`` with ``nvidia.com/gpumem`` (a share) or 100 % memory and cores (a
  whole GPU), and carries ``nvidia.com/use-gpuuuid`` so HAMi puts it on the GPUs FracHub chose.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.backends.base import Gpu, Inventory, JobSpec
from scheduler.common.placement import Placement, ReplicaPlacement
from scheduler.engine.model import Node

Obj = dict[str, Any]

MANAGED_BY = "app.kubernetes.io/managed-by"
COMPONENT = "app.kubernetes.io/component"
WORKLOAD = "frachub.io/workload-id"
ATTEMPT = "frachub.io/attempt"
PROJECT = "frachub.io/project"
USER = "frachub.io/user"
GROUP = "frachub.io/group"
ATTEMPT_NAME = "frachub.io/attempt-name"
NODE = "frachub.io/node"
GPU_INDEX = "frachub.io/gpu-index"
SHARES = "frachub.io/gpu-shares"
GPU_UUID = "frachub.io/gpu-uuid"
CLAIMED = "frachub.io/claimed-at"
STOPPED = "frachub.io/stop-requested"
RANKS = "frachub.io/ranks"
RESERVATION_GRACE = 1
"""Reservation pods are deleted gracefully, never forced (grace 0): a forced delete frees the
GPU in the API while the container still holds it on the node, and the next whole-GPU pod
there is refused by the kubelet (UnexpectedAdmissionError)."""
"""On a Job's pods: the gang rank of each completion index, in index order."""
MANAGED = "frachub"
TRAINING, RESERVATION = "training", "gpu-reservation"
HOSTNAME = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
GPUMEM = "nvidia.com/gpumem"
GPUMEM_PERCENTAGE = "nvidia.com/gpumem-percentage"
GPUCORES = "nvidia.com/gpucores"
HAMI_REGISTER = "hami.io/node-nvidia-register"
"""On a Node: the physical GPUs HAMi's device plugin registered (UUID, memory, model)."""
HAMI_USE_UUID = "nvidia.com/use-gpuuuid"
"""On a pod: the only GPUs (UUIDs, comma-separated) HAMi's scheduler may give it."""
HAMI_SCHEDULER = "hami-scheduler"
"""HAMi's chart's default ``schedulerName``."""
SHARING_MODES = ("reservation", "hami")
TRACKED = "frachub.io/managed"
"""On every pod FracHub creates or places (KubeSpawner owns managed-by on notebook pods)."""
MANAGED_SELECTOR = f"{TRACKED}=true"


def label_value(text: str) -> str:
    """A valid label value (63 characters of ``[A-Za-z0-9._-]``, alphanumeric at the ends)."""
    value = re.sub(r"[^A-Za-z0-9._-]", "-", text)[:63]
    return value.strip("-_.") or "x"


def dns_name(text: str, limit: int = 63) -> str:
    """A DNS-1123 label made of ``text``."""
    value = re.sub(r"[^a-z0-9-]", "-", text.lower())[:limit]
    return value.strip("-") or "x"


def attempt_name(workload_id: int, restart_count: int) -> str:
    return f"frachub-{workload_id}-{restart_count}"


def reservation_name(node: str, index: int) -> str:
    return f"frachub-gpu-{dns_name(node, 40)}-{index}"


# --- inventory ------------------------------------------------------------------------------


TOPOLOGY_LABELS = (
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "nvidia.com/gpu.clique",
)
"""Node labels kept as the engine's topology: gangs prefer nodes that share all of them.
(The GPU model, ``nvidia.com/gpu.product``, becomes the node's GPU model.)"""


def node_ready(node: Obj) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


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
    count a GPU twice), so a pod FracHub pins to it waits, as under the device plugin."""
    out_nodes: list[Node] = []
    gpus: list[Gpu] = []
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        meta = node["metadata"]
        labels = meta.get("labels") or {}
        if any(labels.get(k) != v for k, v in (node_selector or {}).items()):
            continue
        if not node_ready(node) or (node.get("spec") or {}).get("unschedulable"):
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
        out_nodes.append(
            Node(name=name, gpus=count, gpu_memory_mib=memory, gpu_model=model, labels=topology)
        )
        for index in range(count):
            uuid = (
                registered[index].uuid
                if registered
                else reservations.get((name, index)) or f"GPU-unreserved-{name}-{index}"
            )
            gpus.append(Gpu(name, index, uuid, model, memory))
    return Inventory(nodes=tuple(out_nodes), gpus=tuple(gpus), source="kubernetes")


def pod_gpus(pod: Obj) -> int:
    """Whole ``nvidia.com/gpu`` a pod asks (limits, else requests; init containers too)."""
    spec = pod.get("spec") or {}
    total = 0
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        amount = (resources.get("limits") or {}).get(GPU) or (resources.get("requests") or {}).get(
            GPU
        )
        total += int(amount or 0)
    for container in spec.get("initContainers") or []:
        resources = container.get("resources") or {}
        amount = (resources.get("limits") or {}).get(GPU) or (resources.get("requests") or {}).get(
            GPU
        )
        total = max(total, int(amount or 0))
    return total


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


# --- pods and jobs --------------------------------------------------------------------------


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


def user_fields(username: str) -> dict[str, str]:
    """The ``{username}``-style fields of volume templates, expanded as KubeSpawner (>= 7)
    expands them for a user's default server, so ``claim-{username}`` names the claim z2jh
    made for ``a@b.org``: ``username`` and ``user_server`` are KubeSpawner's safe slug,
    ``escaped_username`` its legacy (< 7) escaping, ``unescaped_username`` the name itself."""
    from kubespawner.slugs import escape_slug, safe_slug

    safe = safe_slug(username, max_length=48)
    return {
        "username": safe,
        "user_server": safe,
        "safe_username": safe,
        "escaped_username": escape_slug(username),
        "unescaped_username": username,
        "servername": "",
    }


def format_template(value: Any, **names: str) -> Any:
    """``{username}``-style fields in every string of a JSON-like template."""
    if isinstance(value, str):
        return value.format(**names)
    if isinstance(value, list):
        return [format_template(v, **names) for v in value]
    if isinstance(value, dict):
        return {k: format_template(v, **names) for k, v in value.items()}
    return value


def is_fractional(replica: ReplicaPlacement) -> bool:
    return len(replica.gpus) == 1 and replica.gpus[0].milli < 1000


def gpu_resources(sharing: str, replica: ReplicaPlacement, memory_mib: int) -> dict[str, str]:
    """Resource limits of one replica. Reservation mode: whole GPUs are ``nvidia.com/gpu: N``
    and a fraction asks nothing (its reservation pod holds the GPU). HAMi mode, where
    ``nvidia.com/gpu`` counts devices each pod gets a slice of: a fraction is one device with
    ``nvidia.com/gpumem`` (MiB, which HAMi enforces); whole GPUs are N devices with 100 % of
    their memory and cores, which HAMi gives only to a device nobody else uses (without
    them a pod gets HAMi's ``defaultMemory``, or shares the device's compute)."""
    if not replica.gpus:
        return {}
    if not is_fractional(replica):
        whole = {GPU: str(len(replica.gpus))}
        if sharing == "hami":
            whole.update({GPUMEM_PERCENTAGE: "100", GPUCORES: "100"})
        return whole
    if sharing == "hami":
        return {GPU: "1", GPUMEM: str(int(memory_mib))}
    return {}


def share_memory_mib(milli: int, memory_mib: int) -> int:
    """The MiB of a GPU of ``memory_mib`` a share of ``milli`` thousandths gets, rounded down,
    so the shares the engine fits on one GPU fit in HAMi's count of its memory too."""
    return max(0, int(milli) * int(memory_mib) // 1000)


def hami_pod_fields(
    settings: PodSettings,
    replicas: Sequence[ReplicaPlacement],
    uuids: Mapping[tuple[str, int], str],
) -> tuple[str, dict[str, str]]:
    """HAMi mode: the schedulerName and annotations of a pod holding ``replicas``' GPUs.

    HAMi's device plugin serves only pods HAMi's scheduler extender placed, so every GPU pod
    names it (its webhook would set it for pods without a schedulerName, but leaves alone any
    other name, and a default-scheduler pod when ``forceOverwriteDefaultScheduler`` is off;
    the default scheduler cannot place ``nvidia.com/gpumem``, which no node advertises).
    ``nvidia.com/use-gpuuuid`` lists the GPUs FracHub chose: HAMi picks each pod's among them
    (one Job's pods share one template, so a group lists all its replicas' GPUs, and each
    whole-GPU pod takes free ones: HAMi never gives a 100 % device twice)."""
    wanted = [(r.node, share.index) for r in replicas for share in r.gpus]
    if settings.sharing != "hami" or not wanted:
        return settings.scheduler_name, {}
    missing = [f"GPU {index} on {node}" for node, index in wanted if not uuids.get((node, index))]
    if missing:
        raise ValueError(
            f"HAMi has not registered {', '.join(missing)} ({HAMI_REGISTER} on the Node)"
        )
    listed = list(dict.fromkeys(uuids[key] for key in wanted))
    return settings.hami_scheduler_name, {HAMI_USE_UUID: ",".join(listed)}


def shares_text(placement: Placement) -> str:
    """``node:index:milli`` for every share, the annotation a restarted backend reads."""
    return ",".join(
        f"{replica.node}:{share.index}:{share.milli}"
        for replica in placement
        for share in replica.gpus
    )


def shares_text_raw(shares: Sequence[tuple[str, int, int]]) -> str:
    return ",".join(f"{node}:{index}:{milli}" for node, index, milli in shares)


def parse_shares(text: str) -> list[tuple[str, int, int]]:
    out = []
    for part in (text or "").split(","):
        if part.count(":") >= 2:
            node, index, milli = part.rsplit(":", 2)
            out.append((node, int(index), int(milli)))
    return out


def replica_groups(placement: Placement) -> list[list[int]]:
    """Ranks grouped by node and GPUs held, in order of their first rank: one Indexed Job
    each, so every pod of a Job shares one template (one node, one device list). Replicas of
    whole GPUs group by node and count (the device plugin picks the GPUs); fractional ones by
    the exact GPU, whose UUID is in the template."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for rank, replica in enumerate(placement):
        if is_fractional(replica):
            key: tuple[Any, ...] = (
                replica.node,
                "share",
                replica.gpus[0].index,
                replica.gpus[0].milli,
            )
        else:
            key = (replica.node, "whole", len(replica.gpus))
        groups.setdefault(key, []).append(rank)
    return list(groups.values())


def labels_for(job: JobSpec, settings: PodSettings) -> dict[str, str]:
    return {
        **settings.extra_labels,
        MANAGED_BY: MANAGED,
        TRACKED: "true",
        COMPONENT: TRAINING,
        WORKLOAD: str(job.workload_id),
        ATTEMPT: str(job.restart_count),
        PROJECT: label_value(job.project),
        USER: label_value(job.user),
    }


def prelude(ranks: Sequence[int], local_ranks: Sequence[int]) -> str:
    """Shell lines setting RANK and LOCAL_RANK from JOB_COMPLETION_INDEX."""
    cases = " ".join(
        f"{index}) RANK={rank}; LOCAL_RANK={local};;"
        for index, (rank, local) in enumerate(zip(ranks, local_ranks, strict=True))
    )
    return f'case "$JOB_COMPLETION_INDEX" in {cases} esac; export RANK LOCAL_RANK; '


def container_command(command: str | Sequence[str], lead: str) -> list[str]:
    if isinstance(command, str):
        return ["/bin/sh", "-c", lead + command] if lead else ["/bin/sh", "-c", command]
    argv = [str(part) for part in command]
    if not lead:
        return argv
    return ["/bin/sh", "-c", lead + 'exec "$@"', "frachub-job", *argv]


def working_dir(job: JobSpec, settings: PodSettings) -> str:
    home = settings.home_mount_path.rstrip("/") or "/"
    if not job.working_dir:
        return home
    if job.working_dir.startswith("/"):
        return job.working_dir
    return f"{home}/{job.working_dir.removeprefix('~/')}"


POD_FAILURE_POLICY = {
    "rules": [
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {
            "action": "FailJob",
            "onExitCodes": {"containerName": "job", "operator": "NotIn", "values": [0]},
        },
    ]
}
"""Every training Job's ``podFailurePolicy``. A disrupted pod (eviction, drain, preemption
by kube-scheduler, node lost) fails the Job at once and says so in the Job's condition, so
the backend requeues the workload even when the pod is gone; a replacement pod (``Ignore``)
would be pinned to the node it was evicted from and wait there, unseen by the scheduler. A
program's non-zero exit fails it at once too, with the code in the condition's message."""


def job_manifests(
    job: JobSpec,
    settings: PodSettings,
    envs: Sequence[Mapping[str, str]],
    service: str | None,
    base: str,
    uuids: Mapping[tuple[str, int], str] | None = None,
) -> list[Obj]:
    """The attempt's suspended Indexed Jobs named ``base`` (``base-g<n>`` for several groups;
    see the module docstring); ``envs[rank]`` is each rank's full environment, identical
    within a group except RANK/LOCAL_RANK. ``uuids`` ((node, index) -> UUID) name the GPUs
    HAMi must use (HAMi mode)."""
    groups = replica_groups(job.placement)
    labels = labels_for(job, settings)
    manifests = []
    for number, ranks in enumerate(groups):
        name = job_names(job.placement, base)[number]
        replica = job.placement[ranks[0]]
        env = dict(envs[ranks[0]])
        lead = ""
        if "RANK" in env:
            local = [int(envs[rank]["LOCAL_RANK"]) for rank in ranks]
            lead = prelude(ranks, local)
            env.pop("RANK")
            env.pop("LOCAL_RANK")
        pod_labels = {**labels, GROUP: str(number), ATTEMPT_NAME: base}
        limits = gpu_resources(settings.sharing, replica, job.gpu_memory_mib)
        fields = user_fields(job.user)
        volumes = [format_template(v, **fields) for v in settings.volumes]
        mounts = [format_template(m, **fields) for m in settings.volume_mounts]
        container: Obj = {
            "name": "job",
            "image": settings.image,
            "command": container_command(job.command, lead),
            "workingDir": working_dir(job, settings),
            "env": [{"name": k, "value": v} for k, v in env.items()]
            + [
                {
                    "name": "FRACHUB_NODE_NAME",
                    "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                }
            ],
            "resources": {"limits": limits} if limits else {},
            "volumeMounts": mounts,
        }
        pod_spec: Obj = {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": int(settings.grace_seconds),
            "containers": [container],
            "volumes": volumes,
            "enableServiceLinks": False,
        }
        if service:
            pod_spec["subdomain"] = service
        if settings.service_account:
            pod_spec["serviceAccountName"] = settings.service_account
        if settings.priority_class:
            pod_spec["priorityClassName"] = settings.priority_class
        scheduler, hami = hami_pod_fields(settings, [job.placement[r] for r in ranks], uuids or {})
        if scheduler:
            pod_spec["schedulerName"] = scheduler
        add_node_settings(pod_spec, settings)
        annotations = {
            **hami,
            USER: job.user,
            PROJECT: job.project,
            SHARES: shares_text(tuple(job.placement[r] for r in ranks)),
            "frachub.io/workload-name": job.name,
            RANKS: ",".join(str(rank) for rank in ranks),
        }
        manifests.append(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": name,
                    "labels": pod_labels,
                    "annotations": {**annotations, "frachub.io/jobs": str(len(groups))},
                },
                "spec": {
                    "suspend": True,
                    "completionMode": "Indexed",
                    "completions": len(ranks),
                    "parallelism": len(ranks),
                    "backoffLimit": 0,
                    "podFailurePolicy": POD_FAILURE_POLICY,
                    "ttlSecondsAfterFinished": int(settings.ttl_seconds_after_finished),
                    "template": {
                        "metadata": {"labels": pod_labels, "annotations": annotations},
                        "spec": pod_spec,
                    },
                },
            }
        )
    return manifests


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


def admit_patch(node: str, settings: PodSettings) -> Obj:
    """Kueue's admission: pin the (never started) suspended Job to its node and resume it."""
    return {"spec": {"suspend": False, "template": {"spec": pin(node, settings.node_label)}}}


def job_names(placement: Placement, base: str) -> list[str]:
    count = len(replica_groups(placement))
    return [base] if count == 1 else [f"{base}-g{n}" for n in range(count)]


def master_address(placement: Placement, base: str, service: str) -> str:
    """``<job of rank 0>-0.<service>``: rank 0 is index 0 of the first group."""
    return f"{job_names(placement, base)[0]}-0.{service}"


def service_manifest(job: JobSpec, settings: PodSettings, base: str) -> Obj:
    """The headless Service that gives a gang's pods their DNS names."""
    labels = labels_for(job, settings)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": base, "labels": {**labels, ATTEMPT_NAME: base}},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {ATTEMPT_NAME: base, MANAGED_BY: MANAGED},
            "ports": [{"name": "rendezvous", "port": settings.rendezvous_port}],
        },
    }


def reservation_manifest(node: str, index: int, settings: PodSettings, claimed_at: str) -> Obj:
    """A pod holding one whole GPU for fractional pods; its program reports the UUID."""
    container: Obj = {
        "name": "reserve",
        "image": settings.reservation_image or settings.image,
        "resources": {"limits": {GPU: "1"}},
    }
    if settings.reservation_command:
        container["command"] = list(settings.reservation_command)
    spec: Obj = {
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": RESERVATION_GRACE,
        **pin(node, settings.node_label),
        "containers": [container],
        # the program only prints the UUID; the scheduler reads it through pods/log
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
    }
    add_node_settings(spec, settings)
    if settings.reservation_priority_class or settings.priority_class:
        spec["priorityClassName"] = settings.reservation_priority_class or settings.priority_class
    if settings.scheduler_name and settings.sharing != "hami":
        spec["schedulerName"] = settings.scheduler_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": reservation_name(node, index),
            "labels": {
                **settings.extra_labels,
                MANAGED_BY: MANAGED,
                TRACKED: "true",
                COMPONENT: RESERVATION,
                NODE: label_value(node),
                GPU_INDEX: str(index),
            },
            "annotations": {NODE: node, GPU_INDEX: str(index), CLAIMED: claimed_at},
        },
        "spec": spec,
    }


# The reservation pod's program needs no API access, no curl and no Python: it prints the
# UUID of the GPU it holds and sleeps; the scheduler reads the line through ``pods/log`` and
# annotates the pod (``frachub.io/gpu-uuid``), where FracKubeSpawner, whose z2jh hub Role
# reads pods but not their logs, finds it. nvidia-smi is mounted by the NVIDIA container
# runtime into every GPU container; without it, the device plugin's NVIDIA_VISIBLE_DEVICES
# (its default "envvar" strategy) names the device.
UUID_LINE = "frachub.io/gpu-uuid="
RESERVATION_SCRIPT = r"""
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader 2>/dev/null | head -n1)
case "$uuid" in GPU-*) ;; *) uuid=${NVIDIA_VISIBLE_DEVICES%%,*} ;; esac
case "$uuid" in
  GPU-*) echo "frachub.io/gpu-uuid=$uuid" ;;
  *) echo "no GPU UUID from nvidia-smi or NVIDIA_VISIBLE_DEVICES" >&2; exit 1 ;;
esac
exec sleep infinity
"""


def reported_uuid(log: str) -> str | None:
    """The UUID a reservation pod's program printed (its last ``frachub.io/gpu-uuid=`` line)."""
    found = None
    for line in log.splitlines():
        line = line.strip()
        if line.startswith(UUID_LINE) and line[len(UUID_LINE) :].startswith("GPU-"):
            found = line[len(UUID_LINE) :]
    return found


# --- reading pods and jobs back -------------------------------------------------------------


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


def pod_condition(pod: Obj, kind: str) -> Obj | None:
    """The pod's condition ``kind`` when it is True (e.g. DisruptionTarget), else None."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition
    return None


def job_condition(job: Obj, kind: str) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


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
