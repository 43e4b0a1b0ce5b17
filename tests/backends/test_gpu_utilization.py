"""Utilization from the GPU sampler (issue 27): per process where NVML gives it, else the
GPU's, told to workloads; temperature and power per GPU; a real job on the local backend."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

import pytest

from scheduler.backends import confinement as cg
from scheduler.backends.gpu_usage import (
    MemoryReader,
    NvmlSampler,
    WorkloadGpu,
    memory_of,
    usage_by_workload,
)
from scheduler.backends.holders import Holders
from scheduler.backends.local import LocalBackend
from tests.backends.test_gpu_usage import read_pid
from tests.backends.test_local_backend import make_job, run
from tests.fakenvml import GIB, FakeNvml

pytestmark = pytest.mark.backends


def test_per_process_utilization_is_each_workloads_own() -> None:
    nvml = FakeNvml()
    nvml.set_processes(0, {101: 3 * GIB, 102: GIB, 103: GIB, 999: GIB})
    nvml.set_utilization(0, 90)
    nvml.set_process_utilization(0, {101: 30, 102: 25, 999: 35})  # 103 ran no kernel
    nvml.set_processes(1, {104: 2 * GIB})
    nvml.set_utilization(1, 60)
    nvml.set_process_utilization(1, None)  # this GPU gives no per-process figures
    sampler = NvmlSampler(nvml)
    sample = sampler.read()
    first, second = sample.gpus
    assert first.process_utilization == {101: 30, 102: 25, 999: 35}
    assert second.process_utilization is None
    assert (first.temperature_c, first.power_watts) == (85, 370.0)
    owners = {101: 1, 102: 1, 103: 2, 104: 3}
    usage = usage_by_workload(sample, owners.get)
    assert usage == {
        1: {"GPU 0": WorkloadGpu(4 * GIB, 55, "processes")},  # 999 is no one's
        2: {"GPU 0": WorkloadGpu(GIB, 0, "processes")},
        3: {"GPU 1": WorkloadGpu(2 * GIB, 60, "gpu")},  # the whole GPU's, said so
    }
    assert memory_of(usage) == {1: {"GPU 0": 4 * GIB}, 2: {"GPU 0": GIB}, 3: {"GPU 1": 2 * GIB}}


def test_only_samples_newer_than_the_last_read_are_asked_for() -> None:
    class Noting(FakeNvml):
        asked: list[int]

        def nvmlDeviceGetProcessUtilization(self, device: int, since: int) -> list:
            self.asked = [*getattr(self, "asked", []), since]
            return super().nvmlDeviceGetProcessUtilization(device, since)

    nvml = Noting(gpus=1)
    nvml.set_process_utilization(0, {5: 10})
    sampler = NvmlSampler(nvml)
    sampler.read()
    nvml.set_process_utilization(0, {})  # nothing ran since: NVML_ERROR_NOT_FOUND
    assert sampler.read().gpus[0].process_utilization == {}
    assert nvml.asked[0] == 0 and nvml.asked[1] > 0


def test_a_gpu_without_utilization_gives_none() -> None:
    nvml = FakeNvml(gpus=1)
    nvml.set_processes(0, {7: GIB})
    usage = usage_by_workload(NvmlSampler(nvml).read(), {7: 1}.get)
    assert usage == {1: {"GPU 0": WorkloadGpu(GIB, None, "none")}}


def test_a_real_jobs_processes_get_their_utilization(tmp_path: Path) -> None:
    backend = LocalBackend(
        data_dir=str(tmp_path / "data"), inventory_source="declared", run_as_user=False
    )
    nvml = FakeNvml()
    backend.gpu_reader = MemoryReader(NvmlSampler(nvml), log=logging.getLogger("test"))
    child = tmp_path / "child"

    async def scenario():
        handle = await backend.start(make_job(7, f"sleep 60 & echo $! > {child}; wait"))
        try:
            pid = await read_pid(child)
            nvml.set_processes(1, {pid: 6 * GIB})
            nvml.set_process_utilization(1, {pid: 42})
            return await backend.gpu_usage({})
        finally:
            await backend.stop(7, handle, 0)
            await backend.close()

    assert run(scenario) == {7: {"GPU 1": WorkloadGpu(6 * GIB, 42, "processes")}}
    last = backend.gpu_reader.last
    assert last is not None and [g.index for g in last.gpus] == [0, 1]


def test_a_pid_is_looked_up_again_once_its_workload_is_gone() -> None:
    """The reader remembers whose each listed pid was (a process never changes workload),
    but not past its workload: a pid whose workload no longer runs is looked up anew."""
    nvml = FakeNvml(gpus=1)
    reader = MemoryReader(NvmlSampler(nvml), log=logging.getLogger("test"))
    process = subprocess.Popen(["sleep", "30"], env={**os.environ, cg.ATTEMPT_VARIABLE: "tok"})
    try:
        nvml.set_processes(0, {process.pid: GIB})

        async def scenario():
            first = await reader.usage(Holders(tokens={"tok": 1}))
            again = await reader.usage(Holders(tokens={"tok": 1, "other": 5}))
            moved = await reader.usage(Holders(tokens={"tok": 2}))
            reader.close()
            return first, again, moved

        first, again, moved = run(scenario)
    finally:
        process.kill()
        process.wait()
    assert list(first) == list(again) == [1]
    assert list(moved) == [2]


def test_a_recent_sample_is_reused_so_one_nvml_read_feeds_both_timers() -> None:
    """The GPU use sampler asks with ``max_age``: a sample the memory watchdog took that
    recently is told again; an older one is not, and neither is anything without it."""

    class Counting(FakeNvml):
        reads = 0

        def nvmlDeviceGetCount(self) -> int:
            Counting.reads += 1
            return super().nvmlDeviceGetCount()

    nvml = Counting(gpus=1)
    reader = MemoryReader(NvmlSampler(nvml), log=logging.getLogger("test"))

    async def scenario():
        await reader.memory(Holders())  # the watchdog's read
        await reader.usage(Holders(), max_age=60)  # the sampler's: reused
        reused = Counting.reads
        await reader.usage(Holders())  # no max_age: read
        await reader.usage(Holders(), max_age=1e-9)  # too old: read
        reader.close()
        return reused

    assert run(scenario) == 1
    assert Counting.reads == 3
