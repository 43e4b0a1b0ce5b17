"""The GPU use sampler's memory (``runtime/gpu_history.py``) and its loop's bookkeeping
(``runtime/gpu_watch.py``): the ring is bounded, a stopped workload is forgotten, the idle
check's "GPU active since" outlives the ring, and a machine without NVML says so."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest

from scheduler.backends.gpu_usage import GpuReading, WorkloadGpu
from scheduler.backends.inventory import NvmlUnavailable
from scheduler.common.placement import GpuShare, ReplicaPlacement
from scheduler.service.runtime.gpu_history import GpuHistory
from scheduler.service.runtime.gpu_watch import GpuMetrics, GpuWatch

pytestmark = pytest.mark.unit

GIB = 1 << 30


def use(percent: int | None, of: str = "processes") -> dict[str, WorkloadGpu]:
    return {"GPU 0": WorkloadGpu(2 * GIB, percent, of)}


def test_the_ring_is_bounded_and_a_stopped_workload_forgotten() -> None:
    history = GpuHistory(points=3, busy_percent=5, interval=1, source="NVML")
    for t in range(5):
        history.record(float(t), {7: use(40 + t)}, {7: 1})
    assert [p.at for p in history.series(7)] == [2.0, 3.0, 4.0]
    assert history.latest(7).utilization_percent == 44
    history.record(5.0, {}, {})
    assert history.series(7) == [] and history.latest(7) is None


def test_gpu_active_since_is_the_last_busy_sample_or_the_first() -> None:
    history = GpuHistory(points=2, busy_percent=5, interval=1, source="NVML")
    history.record(10.0, {7: use(0)}, {7: 1})
    assert history.gpu_active_since(7) == 10.0  # never busy: since it was first sampled
    history.record(11.0, {7: use(30)}, {7: 1})
    for t in range(12, 20):
        history.record(float(t), {7: use(2)}, {7: 1})  # under busy_percent
    assert history.gpu_active_since(7) == 11.0  # past the ring's two samples
    history.record(20.0, {7: use(None, "none")}, {7: 1})
    assert history.gpu_active_since(7) is None  # no utilization: the hub decides
    assert history.gpu_active_since(99) is None


def test_a_two_gpu_job_is_the_mean_of_its_gpus_and_one_without_processes_idle() -> None:
    history = GpuHistory(points=4, busy_percent=5, interval=1, source="NVML")
    reading = GpuReading(1, "GPU-b", 70, GIB, 80 * GIB, (), process_utilization={})
    history.record(1.0, {7: use(60)}, {7: 2, 8: 1}, [reading])
    assert history.latest(7).utilization_percent == 30  # 60 and (no process) 0
    idle = history.latest(8)
    assert (idle.utilization_percent, idle.memory_bytes) == (0, 0)
    assert history.workloads[8].utilization_of == "processes"


def test_a_machine_without_nvml_is_not_sampled_and_says_so(caplog) -> None:
    async def unreadable(notebooks, *, max_age=0.0):
        raise NvmlUnavailable("NVML could not read the GPUs: Driver Not Loaded")

    record = SimpleNamespace(
        id=7,
        state="running",
        is_allocation=False,
        user="alice",
        server_name=None,
        placement=(ReplicaPlacement("n", (GpuShare(0, 500),)),),
    )
    backend = SimpleNamespace(gpu_memory_source="NVML", gpu_usage=unreadable)
    loop = SimpleNamespace(records={7: record}, backend=backend)
    watch = GpuWatch(loop, GpuMetrics(interval=1), log=logging.getLogger("test"))
    caplog.set_level(logging.INFO)
    asyncio.run(watch.check())
    asyncio.run(watch.check())
    assert watch.history.failing == "NVML could not read the GPUs: Driver Not Loaded"
    said = [r.message for r in caplog.records if "cannot read the GPUs" in r.message]
    assert len(said) == 1  # said once, not at every sample
