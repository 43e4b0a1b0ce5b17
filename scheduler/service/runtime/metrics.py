"""Prometheus metrics: what an operator graphs to see whether the GPUs are shared well.

Each service instance has its own registry (tests start several in one process); the
``/metrics`` handler renders it in the text exposition format.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from scheduler.common.states import ACTIVE_STATES
from scheduler.engine import CycleResult, Node

WAIT_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 12 * 3600)
SAMPLE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
CYCLE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.queue_pending = Gauge(
            "frachub_queue_pending_workloads",
            "Workloads waiting, per project",
            ["queue"],
            registry=r,
        )
        self.queue_running = Gauge(
            "frachub_queue_running_workloads",
            "Workloads holding GPUs, per project",
            ["queue"],
            registry=r,
        )
        self.allocated = Gauge(
            "frachub_queue_allocated_gpus",
            "GPUs held by a project's workloads",
            ["queue"],
            registry=r,
        )
        self.deserved = Gauge(
            "frachub_queue_deserved_gpus",
            "A project's guaranteed quota in GPUs",
            ["queue"],
            registry=r,
        )
        self.fair_share = Gauge(
            "frachub_queue_fair_share_gpus",
            "A project's fair share of the cluster right now (deserved plus its share of idle)",
            ["queue"],
            registry=r,
        )
        self.allocated_cpu = Gauge(
            "frachub_queue_allocated_cpu_cores",
            "CPU cores asked for by a project's workloads holding GPUs (all their replicas)",
            ["queue"],
            registry=r,
        )
        self.allocated_memory = Gauge(
            "frachub_queue_allocated_memory_gib",
            "Memory (GiB) asked for by a project's workloads holding GPUs",
            ["queue"],
            registry=r,
        )
        self.node_cpu = Gauge(
            "frachub_node_cpu_cores",
            "CPU cores a node offers to workloads (absent where not counted)",
            ["node"],
            registry=r,
        )
        self.node_memory = Gauge(
            "frachub_node_memory_gib",
            "Memory (GiB) a node offers to workloads (absent where not counted)",
            ["node"],
            registry=r,
        )
        self.recent_use = Gauge(
            "frachub_queue_recent_use",
            "A project's decayed GPU use as a share of the cluster's (usage-decayed fair share "
            "on only)",
            ["queue"],
            registry=r,
        )
        self.time_to_start = Histogram(
            "frachub_time_to_start_seconds",
            "From submission (or requeue) to holding GPUs, by workload kind",
            ["kind"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.preemptions = Counter(
            "frachub_preemptions", "Workloads evicted, by reason", ["reason"], registry=r
        )
        self.submissions = Counter(
            "frachub_submissions", "Workloads submitted, by kind", ["kind"], registry=r
        )
        self.cycle_seconds = Histogram(
            "frachub_cycle_duration_seconds",
            "Time to run the engine until it settles and apply its decisions",
            buckets=CYCLE_BUCKETS,
            registry=r,
        )
        self.engine_cpu = Counter(
            "frachub_engine_cpu_seconds",
            "CPU time of the cycles' engine work (session and decisions) on its worker thread",
            registry=r,
        )
        self.arrivals = Counter(
            "frachub_arrivals",
            "New workloads by what the fast arrival path did: started (at once), waited (the "
            "engine left it pending), deferred (its project had work waiting, or no idle GPUs "
            "were enough), unsettled (no session to fork: the next cycle decides it)",
            ["outcome"],
            registry=r,
        )
        self.workloads = Gauge(
            "frachub_active_workloads", "Active workloads by state", ["state"], registry=r
        )
        self.tasks = Gauge(
            "frachub_service_tasks",
            "Asyncio tasks alive in the service: requests, streams and its own loops",
            registry=r,
        )
        self.tasks.set_function(_task_count)
        self.gpu_samples = Counter(
            "frachub_gpu_memory_samples",
            "Samples of the running workloads' GPU memory the memory watchdog took, by outcome "
            "(ok, failed: no NVML, Prometheus unreachable)",
            ["outcome"],
            registry=r,
        )
        self.gpu_sample_seconds = Histogram(
            "frachub_gpu_memory_sample_duration_seconds",
            "Time to read the running workloads' GPU memory (NVML or Prometheus) and attribute it",
            buckets=SAMPLE_BUCKETS,
            registry=r,
        )
        self.over_share = Gauge(
            "frachub_workloads_over_memory_share",
            "Running workloads whose processes hold more GPU memory than their share",
            registry=r,
        )
        self.watchdog_actions = Counter(
            "frachub_memory_watchdog_actions",
            "What the memory watchdog did: stop, warn, cleared (back within the share)",
            ["action"],
            registry=r,
        )

    def watch_gpu_sharing(self, health: Callable[[], Mapping[str, Any]]) -> None:
        """Export the MPS daemons' state (``frachub_mps_daemon_up``,
        ``frachub_mps_daemon_restarts_total``) from the backend's ``gpu_sharing_health``,
        read at each scrape."""
        self.registry.register(_GpuSharingCollector(health))

    def submitted(self, kind: str) -> None:
        self.submissions.labels(kind).inc()

    def started(self, kind: str, waited: float) -> None:
        self.time_to_start.labels(kind).observe(max(waited, 0.0))

    def arrived(self, outcome: str, count: int = 1) -> None:
        if count:
            self.arrivals.labels(outcome).inc(count)

    def gpu_sampled(self, seconds: float, *, ok: bool) -> None:
        self.gpu_samples.labels("ok" if ok else "failed").inc()
        if ok:
            self.gpu_sample_seconds.observe(seconds)

    def watchdog_acted(self, action: str) -> None:
        self.watchdog_actions.labels(action).inc()

    def preempted(self, reason: str) -> None:
        self.preemptions.labels(reason).inc()

    def cycle(
        self,
        seconds: float,
        result: CycleResult,
        counts: Mapping[str, int],
        *,
        held: Mapping[str, tuple[float, float]] | None = None,
        nodes: Sequence[Node] = (),
    ) -> None:
        """A cycle took ``seconds``; ``counts``: the active workloads by state after it;
        ``held``: per project, the CPU cores and memory (GiB) its running work asked for;
        ``nodes``: the inventory, for what each node offers."""
        self.cycle_seconds.observe(seconds)
        held = held or {}
        for name, status in result.queues.items():
            self.queue_pending.labels(name).set(status.pending)
            self.queue_running.labels(name).set(status.running)
            self.allocated.labels(name).set(status.allocated_gpus)
            self.deserved.labels(name).set(status.deserved_gpus)
            self.fair_share.labels(name).set(status.fair_share_gpus)
            cores, gib = held.get(name, (0.0, 0.0))
            self.allocated_cpu.labels(name).set(cores)
            self.allocated_memory.labels(name).set(gib)
            if status.usage is not None:
                self.recent_use.labels(name).set(status.usage)
        for node in nodes:
            if node.cpu_milli is not None:
                self.node_cpu.labels(node.name).set(node.cpu_milli / 1000)
            if node.memory_mib is not None:
                self.node_memory.labels(node.name).set(node.memory_mib / 1024)
        for state in ACTIVE_STATES:
            self.workloads.labels(state.value).set(counts.get(state.value, 0))

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _task_count() -> float:
    """What a leak of abandoned streams would show (rendered inside the event loop)."""
    try:
        return len(asyncio.all_tasks())
    except RuntimeError:  # no running loop
        return 0


class _GpuSharingCollector:
    """The MPS daemons' state as the backend reports it, at scrape time."""

    def __init__(self, health: Callable[[], Mapping[str, Any]]) -> None:
        self.health = health

    def collect(self) -> Iterator[Metric]:
        state = self.health()
        daemons = state.get("daemons")
        if daemons is None:
            return
        up = GaugeMetricFamily(
            "frachub_mps_daemon_up",
            "1 while a GPU's MPS control daemon runs",
            labels=["node", "gpu"],
        )
        restarts = CounterMetricFamily(
            "frachub_mps_daemon_restarts",
            "Times a GPU's MPS control daemon was started again after it died",
            labels=["node", "gpu"],
        )
        for daemon in daemons:
            labels = [str(daemon["node"]), str(daemon["gpu"])]
            up.add_metric(labels, 1.0 if daemon["up"] else 0.0)
            restarts.add_metric(labels, float(daemon["restarts"]))
        yield up
        yield restarts
