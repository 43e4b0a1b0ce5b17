"""Each running workload's GPU use, sampled on a timer of its own: the loop behind the panel's
live chart, ``frachub jobs``/``describe``'s ``GPU%`` and ``MEM``, the admin GPU map, the
``frachub_workload_gpu_*``/``frachub_gpu_*`` metrics and the idle-by-GPU check.

It reads through the backend, with the memory watchdog's sampler (``gpu_usage.NvmlSampler``
on the local backend: ``LocalBackend.gpu_usage``); a backend that only knows memory
(``gpu_memory``: Kubernetes through the DCGM exporter) gives memory without utilization.
Every ``GpuMetrics.interval`` seconds while any workload holds a GPU it samples, whether or
not any is over its share, and keeps the recent samples in memory (``gpu_history``). When
the watchdog read the GPUs within the last 0.9 of an interval (it reads every 2 s), that
sample is used again: NVML is read once for both.

Cost: one NVML read of every GPU plus one ``/proc`` lookup per GPU process per sample; with
8 GPUs and 200 jobs it takes a few milliseconds (``benchmarks/gpu_sampling.py``,
docs/benchmarks.md), so the default 5 s interval costs the service well under 1% of a core.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from traitlets import Float, validate
from traitlets.config import LoggingConfigurable

from scheduler.backends.gpu_usage import UsageByWorkload, WorkloadGpu
from scheduler.common.share import share_of
from scheduler.common.states import WorkloadState
from scheduler.service.persistence.orm import WorkloadRecord
from scheduler.service.runtime.gpu_history import GpuHistory
from scheduler.service.runtime.periodic import Periodic
from scheduler.service.scheduling.loop import SchedulingLoop


class GpuMetrics(LoggingConfigurable):
    """The GPU use sampler's settings (``c.GpuMetrics.interval = 5``)."""

    interval = Float(
        5.0,
        help="""Seconds between samples of the running workloads' GPU utilization and memory
        (the panel's live chart, the CLI's GPU% and MEM, the admin GPU map, the metrics, the
        idle-by-GPU check). 0 turns sampling off.""",
    ).tag(config=True)

    history_seconds = Float(
        900.0,
        help="""How far back the in-memory history of each running workload goes (the live
        chart's window): history_seconds / interval samples per workload, forgotten when it
        stops and on restart. Prometheus keeps the long view.""",
    ).tag(config=True)

    busy_percent = Float(
        5.0,
        help="""GPU utilization (percent) at or above which a sample counts as the workload
        using its GPU, for the idle-notebook check.""",
    ).tag(config=True)

    @validate("interval", "history_seconds", "busy_percent")
    def _not_negative(self, proposal):
        if proposal.value < 0:
            raise ValueError(f"GpuMetrics.{proposal.trait.name} must be >= 0")
        return proposal.value


def gpu_count(record: WorkloadRecord) -> int:
    return sum(len(replica.gpus) for replica in record.placement)


def share_bytes(record: WorkloadRecord, loop: SchedulingLoop) -> int:
    """The GPU memory a workload's share grants it, over all its GPUs (``share_of``)."""
    memory = {node.name: node.gpu_memory_mib for node in loop.inventory.nodes}
    return sum(
        share_of(replica, memory.get(replica.node, 0)).memory_bytes * len(replica.gpus)
        for replica in record.placement
    )


class GpuWatch:
    """Samples the running workloads' GPU use into ``loop.gpu_usage`` (``start``/``stop``,
    or ``check`` once)."""

    def __init__(
        self,
        loop: SchedulingLoop,
        settings: GpuMetrics,
        *,
        clock: Callable[[], float] = time.time,
        log: logging.Logger | None = None,
    ) -> None:
        self.loop = loop
        self.settings = settings
        self.clock = clock
        self.log = log or logging.getLogger("frachub")
        backend = loop.backend
        self.source = getattr(backend, "gpu_memory_source", None)
        interval = settings.interval or 1.0
        self.history = GpuHistory(
            points=round(settings.history_seconds / interval) or 1,
            busy_percent=settings.busy_percent,
            interval=settings.interval,
            source=str(self.source or ""),
        )
        self._timer = Periodic(
            self.check, lambda: settings.interval, self.log, "GPU use sampling: the sample"
        )
        self._said = ""

    def start(self) -> None:
        if self.settings.interval <= 0 or not self.source:
            why = "off" if self.settings.interval <= 0 else "off (no source of GPU figures)"
            self.log.info("GPU use sampling: %s", why)
            return
        self.loop.gpu_usage = self.history
        self.log.info(
            "GPU use sampling: %s every %gs, %d samples kept per running workload",
            self.source,
            self.settings.interval,
            self.history.points,
        )
        self._timer.start()

    async def stop(self) -> None:
        await self._timer.stop()

    async def check(self) -> None:
        """One sample of every running workload that holds a GPU; nothing is read while none
        does."""
        running = [
            r
            for r in self.loop.records.values()
            if r.state == WorkloadState.RUNNING and gpu_count(r)
        ]
        if not running:
            self.history.record(self.clock(), {}, {})
            return
        notebooks = {r.id: (r.user, r.server_name or "") for r in running if r.is_allocation}
        backend = self.loop.backend
        began = time.monotonic()
        try:
            usage = await self._read(backend, notebooks, self.settings.interval * 0.9)
        except Exception as error:  # no NVML, Prometheus down: said once, tried again
            self.history.failing = str(error) or type(error).__name__
            if str(error) != self._said:
                self._said = str(error)
                self.log.info("GPU use sampling: cannot read the GPUs: %s", error)
            return
        self._said = self.history.failing = ""
        reader = getattr(backend, "gpu_reader", None)
        last = getattr(reader, "last", None)
        self.history.record(
            self.clock(),
            usage,
            {r.id: gpu_count(r) for r in running},
            last.gpus if last is not None else (),
            time.monotonic() - began,
        )

    @staticmethod
    async def _read(
        backend: Any, notebooks: dict[int, tuple[str, str]], max_age: float
    ) -> UsageByWorkload:
        """``max_age``: a sample younger than most of an interval (the memory watchdog's,
        which reads more often) is reused rather than NVML read twice."""
        if hasattr(backend, "gpu_usage"):
            return await backend.gpu_usage(notebooks, max_age=max_age)
        memory = await backend.gpu_memory(notebooks)
        return {
            workload: {words: WorkloadGpu(used, None, "none") for words, used in per_gpu.items()}
            for workload, per_gpu in memory.items()
        }


class GpuUsageCollector:
    """The sampled figures as Prometheus series, read at scrape time from the history (no
    series outlives its workload). Per workload, labelled ``workload``, ``name``,
    ``project``, ``user``, ``kind``: ``frachub_workload_gpu_utilization_percent``,
    ``frachub_workload_gpu_memory_used_bytes``, ``frachub_workload_gpu_memory_share_bytes``.
    Per GPU, labelled ``node``, ``gpu``, ``uuid``, ``model``:
    ``frachub_gpu_utilization_percent``, ``frachub_gpu_memory_used_bytes``,
    ``frachub_gpu_memory_total_bytes``, ``frachub_gpu_temperature_celsius``,
    ``frachub_gpu_power_watts``, ``frachub_gpu_shares_allocated`` (the fraction of it held)."""

    WORKLOAD_LABELS = ("workload", "name", "project", "user", "kind")
    GPU_LABELS = ("node", "gpu", "uuid", "model")

    def __init__(self, loop: SchedulingLoop) -> None:
        self.loop = loop

    def collect(self) -> Iterator[Metric]:
        history = getattr(self.loop, "gpu_usage", None)
        if history is None:
            return
        yield from self._workloads(history)
        yield from self._gpus(history)

    def _workloads(self, history: GpuHistory) -> Iterator[Metric]:
        labels = list(self.WORKLOAD_LABELS)
        busy = GaugeMetricFamily(
            "frachub_workload_gpu_utilization_percent",
            "A running workload's GPU utilization at the last sample: its processes' SM "
            "percent, or its GPUs' where NVML gives no per-process figure; mean over its GPUs",
            labels=labels,
        )
        used = GaugeMetricFamily(
            "frachub_workload_gpu_memory_used_bytes",
            "GPU memory a running workload's processes hold, over its GPUs",
            labels=labels,
        )
        share = GaugeMetricFamily(
            "frachub_workload_gpu_memory_share_bytes",
            "GPU memory a running workload's share grants it, over its GPUs",
            labels=labels,
        )
        for workload in list(history.workloads):
            record = self.loop.records.get(workload)
            point = history.latest(workload)
            if record is None or point is None:
                continue
            values = [str(record.id), record.name, record.project, record.user, record.kind]
            if point.utilization_percent is not None:
                busy.add_metric(values, point.utilization_percent)
            used.add_metric(values, point.memory_bytes)
            share.add_metric(values, share_bytes(record, self.loop))
        yield from (busy, used, share)

    def _gpus(self, history: GpuHistory) -> Iterator[Metric]:
        labels = list(self.GPU_LABELS)
        families = {
            "util": GaugeMetricFamily(
                "frachub_gpu_utilization_percent",
                "Percent of the last NVML sample period a kernel ran on the GPU",
                labels=labels,
            ),
            "used": GaugeMetricFamily(
                "frachub_gpu_memory_used_bytes", "GPU memory in use", labels=labels
            ),
            "total": GaugeMetricFamily(
                "frachub_gpu_memory_total_bytes", "GPU memory in all", labels=labels
            ),
            "temp": GaugeMetricFamily(
                "frachub_gpu_temperature_celsius", "GPU core temperature", labels=labels
            ),
            "power": GaugeMetricFamily("frachub_gpu_power_watts", "GPU power draw", labels=labels),
            "held": GaugeMetricFamily(
                "frachub_gpu_shares_allocated",
                "The fraction of the GPU that running and stopping workloads hold",
                labels=labels,
            ),
        }
        held: dict[tuple[str, int], float] = {}
        for record in self.loop.records.values():
            if record.state == WorkloadState.PENDING:
                continue
            for replica in record.placement:
                for gpu in replica.gpus:
                    key = (replica.node, gpu.index)
                    held[key] = held.get(key, 0.0) + gpu.milli / 1000
        for gpu in self.loop.inventory.gpus:
            values = [gpu.node, str(gpu.index), gpu.uuid or "", gpu.model or ""]
            families["held"].add_metric(values, round(held.get((gpu.node, gpu.index), 0.0), 3))
            only_node = len(self.loop.inventory.nodes) == 1
            reading = history.reading_for(gpu.uuid, gpu.index, only_node)
            if reading is None:
                continue
            if reading.utilization_percent is not None:
                families["util"].add_metric(values, reading.utilization_percent)
            families["used"].add_metric(values, reading.memory_used_bytes)
            families["total"].add_metric(values, reading.memory_total_bytes)
            if reading.temperature_c is not None:
                families["temp"].add_metric(values, reading.temperature_c)
            if reading.power_watts is not None:
                families["power"].add_metric(values, reading.power_watts)
        yield from families.values()
