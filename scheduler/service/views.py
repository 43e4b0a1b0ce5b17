"""How the API shows things: workloads, queues and nodes as JSON-ready dicts."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from scheduler.backends.base import Inventory
from scheduler.common.limits import MILLI
from scheduler.common.messages import event_line, pending_headline
from scheduler.common.placement import Placement, placement_to_api
from scheduler.common.quantities import gpus as gpu_words
from scheduler.common.quantities import slurm_time
from scheduler.common.states import WorkloadState
from scheduler.engine import QueueStatus
from scheduler.fields import queue_host_dict
from scheduler.service.persistence.orm import EventRecord, QueueRecord, WorkloadRecord
from scheduler.service.runtime.gpu_watch import share_bytes
from scheduler.service.scheduling.loop import SchedulingLoop

GIB = 1 << 30


def iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return (
        datetime.fromtimestamp(seconds, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def placement_json(placement: Placement, inventory: Inventory) -> list[dict[str, Any]]:
    if not placement:
        return []  # pending work, most of what a busy service shows

    def facts(node: str, index: int) -> dict[str, Any]:
        try:
            gpu: Any = inventory.gpu(node, index)
        except KeyError:
            gpu = None
        # memory_mib is the whole GPU's: a share's memory cap is share × this
        return {"uuid": getattr(gpu, "uuid", None), "memory_mib": getattr(gpu, "memory_mib", None)}

    return placement_to_api(placement, facts)


def workload_json(
    record: WorkloadRecord, loop: SchedulingLoop, events: list[EventRecord] | None = None
) -> dict[str, Any]:
    waiting = record.state == WorkloadState.PENDING
    held = loop.held.get(record.id) if waiting else None
    pending = loop.pending.get(record.id) if waiting and not held else None
    reason = (
        pending.reason
        if pending
        else held
        if held
        else "waiting for the scheduler's next cycle"
        if waiting
        else None
    )
    headline = None
    if reason is not None:
        status = loop.queue_status.get(record.project)
        headline = (
            pending_headline(reason, record.project, status.allocated_gpus, status.deserved_gpus)
            if pending and status
            else reason
        )
    value: dict[str, Any] = {
        "id": record.id,
        "name": record.name,
        "user": record.user,
        "project": record.project,
        "kind": record.kind,
        "state": record.state,
        "gpus": record.gpus,
        "gpu_memory_gib": None if record.gpu_memory_mib is None else record.gpu_memory_mib / 1024,
        "cpu": (record.cpu_milli or 0) / 1000,
        "memory_gib": (record.memory_mib or 0) / 1024,
        "gpu_model": record.gpu_model,
        "replicas": record.replicas,
        "priority": record.priority,
        "preemptible": record.preemptible,
        "submitted_at": iso(record.submitted_at),
        "started_at": iso(record.started_at),
        "finished_at": iso(record.finished_at),
        "placement": placement_json(record.placement, loop.inventory),
        "pending_reason": reason,
        # the reason in a short phrase first; pending_reason is the engine's detail
        "pending_headline": headline,
        "queue_position": pending.position if pending else None,
        # running beyond its project's quota: who may take the GPUs back, in words
        "borrowed": (
            loop.borrowed.get(record.id) if record.state == WorkloadState.RUNNING else None
        ),
        "preemptions": record.preemptions,
        "restart_count": record.restart_count,
        "exit_code": record.exit_code,
        "message": record.message or None,
        "gpu_usage": gpu_usage_json(record, loop),
    }
    if record.is_allocation:
        watched = record.state == WorkloadState.RUNNING and record.idle_timeout is not None
        value.update(
            server_name=record.server_name,
            idle_timeout_seconds=record.idle_timeout,
            # both known once the service has read the server's activity from the hub
            idle_stop_at=iso(record.idle_stop_at) if watched else None,
            idle_warning=(record.idle_warning or None) if watched else None,
            sharing_env=sharing_env(loop, record),
        )
    else:
        value.update(
            command=record.command,
            working_dir=record.working_dir,
            env=record.env or {},
            min_runtime_seconds=record.min_runtime,
            max_runtime_seconds=record.max_runtime,
            checkpoint_interval_seconds=record.checkpoint_interval,
            checkpointed_at=iso(record.checkpointed_at),
            sweep_id=record.sweep_id,
            sweep_parallel=record.sweep_parallel,
            after=record.after_id if not record.after_ok else None,
            after_ok=record.after_id if record.after_ok else None,
        )
    if events is not None:
        value["events"] = [
            {
                "time": iso(event.time),
                "type": event.type,
                "message": event.message,
                "text": event_line(event.type, event.message),
            }
            for event in events
        ]
    return value


def gpu_usage_json(record: WorkloadRecord, loop: SchedulingLoop) -> dict[str, Any] | None:
    """A running workload's GPU use at the last sample (``runtime/gpu_history.py``): its
    utilization (what it measures: ``utilization_of``), its memory and its share's, per GPU
    too; None while it is not running or not sampled yet."""
    history = getattr(loop, "gpu_usage", None)
    if history is None or record.state != WorkloadState.RUNNING:
        return None
    summary = history.summary(record.id, share_bytes(record, loop))
    if summary is not None:
        summary["at"] = iso(summary["at"])
    return summary


def sharing_env(loop: SchedulingLoop, record: WorkloadRecord) -> dict[str, str] | None:
    """What a running notebook needs for its share to be enforced beyond the contract (the
    local backend's MPS variables), from the backend; None when there is nothing."""
    env_of = getattr(loop.backend, "gpu_sharing_env", None)
    if env_of is None or record.state != WorkloadState.RUNNING or not record.placement:
        return None
    return env_of(record.placement[0]) or None


def _slurm_time(seconds: float | None) -> str | None:
    return None if seconds is None else slurm_time(seconds)


def queue_json(record: QueueRecord, status: QueueStatus | None, children: list[str]) -> dict:
    return {
        "name": record.name,
        "parent": record.parent,
        "children": children,
        "deserved_gpus": record.deserved_gpus,
        "over_quota_weight": record.over_quota_weight,
        "limit_gpus": record.limit_gpus,
        "priority": record.priority,
        "members": list(record.members or ()),
        "default_time_limit": _slurm_time(record.default_time_limit),
        "max_time_limit": _slurm_time(record.max_time_limit),
        "source": record.source,
        "allocated_gpus": status.allocated_gpus if status else 0.0,
        "fair_share_gpus": status.fair_share_gpus if status else 0.0,
        "running": status.running if status else 0,
        "pending": status.pending if status else 0,
        "usage": status.usage if status else None,
        "fair_share_without_usage_gpus": status.fair_share_without_usage_gpus if status else None,
        "fair_share_note": fair_share_note(status),
        **queue_host_dict(record.as_queue()),
        **_host_standing(status),
    }


def fair_share_note(status: QueueStatus | None) -> str:
    """How usage-decayed fair share moved a project's share, in words; "" when it did not
    (or is off). A change under a tenth of a GPU is rounding, not worth a sentence."""
    if status is None or status.usage is None or status.fair_share_without_usage_gpus is None:
        return ""
    plain, fair = status.fair_share_without_usage_gpus, status.fair_share_gpus
    if abs(plain - fair) < 0.1:
        return ""
    used = f"{status.usage:.0%} of the cluster's, decayed"
    if fair < plain:
        return f"lowered from {gpu_words(plain)} by its recent use ({used})"
    return f"raised from {gpu_words(plain)}: it used less than its part recently ({used})"


def _host_standing(status: QueueStatus | None) -> dict[str, float | None]:
    """CPUs (cores) and memory (GiB) in use and the fair share, for the resources some queue
    has a quota for (rule 3b); null otherwise."""
    found: dict[str, float | None] = {}
    for key, suffix, unit in (("cpu", "cpu", 1000), ("memory", "memory_gib", 1024)):
        standing = status.resources.get(key) if status else None
        found[f"allocated_{suffix}"] = standing.allocated / unit if standing else None
        found[f"fair_share_{suffix}"] = round(standing.fair_share / unit, 3) if standing else None
    return found


def share_use(record: WorkloadRecord, replica: Any, loop: SchedulingLoop) -> dict[str, Any]:
    """A share's memory cap and what its workload's processes use of it at the last sample
    (null before one; summed over the workload's GPUs)."""
    try:
        share_gib: float | None = round(loop.inventory.share(replica).memory_bytes / GIB, 2)
    except KeyError:  # its GPU has left the inventory (a node lost)
        share_gib = None
    history = getattr(loop, "gpu_usage", None)
    point = history.latest(record.id) if history is not None else None
    if record.state != WorkloadState.RUNNING:
        point = None
    return {
        "share_memory_gib": share_gib,
        "memory_used_gib": None if point is None else round(point.memory_bytes / GIB, 2),
        "utilization_percent": None if point is None else point.utilization_percent,
    }


def gpu_reading_json(loop: SchedulingLoop, gpu: Any) -> dict[str, Any]:
    """A GPU's newest sample (utilization, memory in use, temperature, power), each null
    before the first sample or where nothing reads them (Kubernetes: the DCGM exporter's own
    series in Prometheus)."""
    history = getattr(loop, "gpu_usage", None)
    only_node = len(loop.inventory.nodes) == 1
    reading = history.reading_for(gpu.uuid, gpu.index, only_node) if history is not None else None
    if reading is None:
        return dict.fromkeys(
            ("utilization_percent", "memory_used_gib", "temperature_c", "power_watts", "sampled_at")
        )
    return {
        "utilization_percent": reading.utilization_percent,
        "memory_used_gib": round(reading.memory_used_bytes / GIB, 2),
        "temperature_c": reading.temperature_c,
        "power_watts": reading.power_watts,
        "sampled_at": iso(history.at),
    }


def nodes_json(loop: SchedulingLoop, viewer: str, admin: bool) -> list[dict[str, Any]]:
    """Every GPU and who holds which share of it. Other users' workloads show their project
    and share only, unless the viewer is an admin."""
    holders: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for record in loop.records.values():
        if record.state == WorkloadState.PENDING:
            continue
        visible = admin or record.user == viewer
        for replica in record.placement:
            for share in replica.gpus:
                holders.setdefault((replica.node, share.index), []).append(
                    {
                        "share": share.milli / MILLI,
                        "project": record.project,
                        "kind": record.kind,
                        "state": record.state,
                        "workload": record.id if visible else None,
                        "name": record.name if visible else None,
                        "user": record.user if visible else None,
                        # running beyond its project's quota: the GPU map marks it
                        "borrowed": record.id in loop.borrowed,
                        **share_use(record, replica, loop),
                    }
                )
    # how shares are enforced: the local backend's mode, or the Kubernetes backend's
    sharing = getattr(loop.backend, "gpu_sharing", None) or getattr(
        loop.backend, "sharing_mode", None
    )
    nodes = []
    for node in loop.inventory.nodes:
        gpus = []
        for gpu in (g for g in loop.inventory.gpus if g.node == node.name):
            shares = holders.get((node.name, gpu.index), [])
            gpus.append(
                {
                    "index": gpu.index,
                    "uuid": gpu.uuid,
                    "model": gpu.model,
                    "memory_gib": gpu.memory_mib / 1024,
                    "used": round(sum(s["share"] for s in shares), 3),
                    "holders": shares,
                    **gpu_reading_json(loop, gpu),
                }
            )
        nodes.append(
            {
                "name": node.name,
                "gpus": gpus,
                "gpu_count": node.gpus,
                "gpu_memory_gib": node.gpu_memory_mib / 1024,
                "gpu_model": node.gpu_model,
                "cpu": None if node.cpu_milli is None else node.cpu_milli / 1000,
                "memory_gib": None if node.memory_mib is None else node.memory_mib / 1024,
                "labels": dict(node.labels),
                "gpu_sharing": sharing if isinstance(sharing, str) else None,
            }
        )
    return nodes
