"""The running workloads' recent GPU use, in memory: what the panel's live chart, the CLI's
``GPU%``/``MEM`` columns, the admin GPU map, the metrics and the idle-by-GPU check read.

``GpuHistory.record`` takes one sample of the sampler (``gpu_usage.usage_by_workload``: per
workload and GPU, its memory and utilization) and keeps, per running workload, a ring of its
last ``points`` samples (``Point``: when, utilization in percent, memory in bytes, summed
over its GPUs) plus its newest per-GPU figures, and, per GPU, the newest reading. History is
bounded by design: ``points`` per workload (``GpuMetrics.history_seconds`` /
``GpuMetrics.interval``), forgotten when the workload stops running, and lost on restart;
the long view is Prometheus's (the ``frachub_workload_gpu_*`` series).

For the idle-by-GPU check it also keeps, per workload, when it was first sampled and when
it last kept a GPU busy (``busy_percent`` or more): outside the ring, so a notebook idle for
longer than the ring holds is still idle since then.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.backends.gpu_usage import GpuReading, UsageByWorkload, WorkloadGpu


@dataclass(frozen=True)
class Point:
    """One workload at one sample, over all its GPUs."""

    at: float
    utilization_percent: float | None
    """The mean over the GPUs it holds (a GPU it has no process on counts 0)."""
    memory_bytes: int
    """The sum over its GPUs."""


@dataclass
class Seen:
    """What the history knows of one running workload."""

    ring: deque[Point]
    first_at: float
    busy_at: float | None = None
    gpus: dict[str, WorkloadGpu] = field(default_factory=dict)
    utilization_of: str = "none"


def utilization_of(per_gpu: Iterable[WorkloadGpu], readings: Iterable[GpuReading]) -> str:
    """What a workload's utilization measures: its own processes', the GPU's, or nothing."""
    kinds = {gpu.utilization_of for gpu in per_gpu}
    if kinds:
        return "processes" if kinds == {"processes"} else "gpu" if "gpu" in kinds else "none"
    listed = list(readings)
    if any(r.process_utilization is not None for r in listed):
        return "processes"
    return "gpu" if any(r.utilization_percent is not None for r in listed) else "none"


class GpuHistory:
    """Bounded recent GPU use of the running workloads (see the module docstring)."""

    def __init__(self, *, points: int, busy_percent: float, interval: float, source: str) -> None:
        self.points = max(1, points)
        self.busy_percent = busy_percent
        self.interval = interval
        self.source = source
        """Where the figures come from, in words ("NVML", "Prometheus at ...")."""
        self.workloads: dict[int, Seen] = {}
        self.readings: dict[str, GpuReading] = {}
        """The newest reading of each GPU, by UUID (the local backend's NVML)."""
        self.at: float | None = None
        self.seconds = 0.0
        """What the newest sample took to read and attribute."""
        self.failing = ""
        """Why the last sample could not be read ("" when it could): no NVML here, say."""

    def record(
        self,
        at: float,
        usage: UsageByWorkload,
        gpu_counts: Mapping[int, int],
        readings: Iterable[GpuReading] = (),
        seconds: float = 0.0,
    ) -> None:
        """One sample: ``usage`` of the running workloads ``gpu_counts`` names (id -> how many
        GPUs it holds); workloads no longer running are forgotten."""
        listed = tuple(readings)
        self.readings = {reading.uuid: reading for reading in listed}
        self.at, self.seconds = at, seconds
        for gone in set(self.workloads) - set(gpu_counts):
            del self.workloads[gone]
        for workload, count in gpu_counts.items():
            per_gpu = usage.get(workload, {})
            seen = self.workloads.get(workload)
            if seen is None:
                seen = self.workloads[workload] = Seen(deque(maxlen=self.points), at)
            seen.gpus = dict(per_gpu)
            seen.utilization_of = utilization_of(per_gpu.values(), listed)
            known = [g.utilization_percent for g in per_gpu.values()]
            percent = None
            if seen.utilization_of != "none":
                percent = round(sum(p or 0 for p in known) / max(count, len(known), 1), 1)
            memory = sum(g.memory_bytes for g in per_gpu.values())
            seen.ring.append(Point(at, percent, memory))
            if percent is not None and percent >= self.busy_percent:
                seen.busy_at = at

    def reading_for(self, uuid: str | None, index: int, only_node: bool) -> GpuReading | None:
        """The newest reading of an inventory GPU: by its UUID, or, where the inventory is
        this one machine's (``only_node``: the local backend, whose NVML GPU ``index`` is
        the inventory's, a declared inventory included), by its index."""
        reading = self.readings.get(uuid or "")
        if reading is None and only_node:
            reading = next((r for r in self.readings.values() if r.index == index), None)
        return reading

    def gpu_active_since(self, workload: int) -> float | None:
        """When the workload last kept its GPU busy (or, never busy, when it was first
        sampled); None when the history cannot say (never sampled, or no utilization)."""
        seen = self.workloads.get(workload)
        if seen is None or seen.utilization_of == "none":
            return None
        return seen.busy_at if seen.busy_at is not None else seen.first_at

    def latest(self, workload: int) -> Point | None:
        seen = self.workloads.get(workload)
        return seen.ring[-1] if seen and seen.ring else None

    def summary(self, workload: int, share_bytes: int) -> dict[str, Any] | None:
        """The ``gpu_usage`` field of a running workload's JSON; None before its first
        sample."""
        seen = self.workloads.get(workload)
        if seen is None or not seen.ring:
            return None
        point = seen.ring[-1]
        return {
            "at": point.at,
            "utilization_percent": point.utilization_percent,
            "utilization_of": seen.utilization_of,
            "memory_bytes": point.memory_bytes,
            "share_memory_bytes": share_bytes,
            "gpus": {
                words: {
                    "memory_bytes": gpu.memory_bytes,
                    "utilization_percent": gpu.utilization_percent,
                }
                for words, gpu in sorted(seen.gpus.items())
            },
        }

    def series(self, workload: int) -> list[Point]:
        seen = self.workloads.get(workload)
        return list(seen.ring) if seen else []
