"""What this machine's GPUs are doing, from NVML: the one sampler the service reads them by.

``NvmlSampler.sample()`` returns a ``GpuSample``: per GPU its utilization, its memory in use
and total, its temperature and power draw where NVML has them, the memory each compute
process holds on it (``nvmlDeviceGetComputeRunningProcesses``) and, where the GPU reports
them, each process's own utilization (``nvmlDeviceGetProcessUtilization``: the SM percent of
its samples since the previous read). The memory watchdog judges workloads by the
per-process memory; the per-workload charts, metrics and the idle-by-GPU check read the same
samples (``usage_by_workload``), so there is one reader of NVML, not one per feature.

A workload's utilization on a GPU is its processes' summed SM percent when NVML gives
per-process figures (``utilization_of == "processes"``); where it does not (some models,
MIG, vGPU) every workload with a process on the GPU is given the whole GPU's utilization
(``"gpu"``), which the panel and the CLI say, and a workload with no process on a GPU used
none of it.

NVML calls block (a GPU that falls off the bus can take seconds to answer), so ``sample``
runs them on a thread of the sampler's own, never on the event loop, and one at a time: a
slow read delays the next sample rather than piling threads up.

Pids: NVML names processes by their pid in the host's pid namespace. A service that runs in
a container of its own pid namespace sees other numbers (or none) in ``/proc``, so it cannot
tell whose processes they are; ``by_workload`` then finds no holder, and the service says so
in its log (``unknown_pids``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from scheduler.backends.holders import Holders, holder_of
from scheduler.backends.inventory import NvmlUnavailable

MemoryByWorkload = dict[int, dict[str, int]]
"""GPU memory in use per workload: workload id -> {GPU in words ("GPU 0"): bytes}. What a
backend's ``gpu_memory`` answers and the memory watchdog judges, whatever the source (NVML
on the local backend, NVIDIA's DCGM exporter on Kubernetes)."""


@dataclass(frozen=True)
class ProcessMemory:
    """One compute process on one GPU: its host pid and the GPU memory it holds."""

    pid: int
    used_bytes: int


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one moment."""

    index: int
    uuid: str
    utilization_percent: int | None
    """Percent of the last sample period in which a kernel ran (None: NVML cannot say)."""
    memory_used_bytes: int
    memory_total_bytes: int
    processes: tuple[ProcessMemory, ...]
    temperature_c: int | None = None
    """The GPU's core temperature (None: NVML cannot say)."""
    power_watts: float | None = None
    """The GPU's power draw (None: NVML cannot say)."""
    process_utilization: Mapping[int, int] | None = None
    """Pid -> SM percent over the samples since the previous read; None where the GPU gives
    no per-process figures (a process missing from it was idle)."""


@dataclass(frozen=True)
class GpuSample:
    """Every GPU of this machine at ``at`` (Unix seconds); ``seconds`` is what reading them
    took."""

    at: float
    seconds: float
    gpus: tuple[GpuReading, ...]


def gpu_words(index: int) -> str:
    """How a local GPU is named in the watchdog's words ("GPU 0"), as placements name it."""
    return f"GPU {index}"


class NvmlSampler:
    """Reads NVML on a thread of its own. NVML is initialised on the first read and shut
    down by ``close``; a read that fails raises ``NvmlUnavailable`` with the driver's words,
    and the next read tries again from the start."""

    def __init__(self, nvml: Any = None) -> None:
        self._nvml = nvml
        self._started = False
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._seen: dict[int, int] = {}
        """Per GPU, the newest per-process utilization sample's timestamp (microseconds):
        the next read asks only for what came after it."""

    def _module(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as e:
                raise NvmlUnavailable(
                    f"the pynvml module (package nvidia-ml-py) is missing: {e}"
                ) from e
            self._nvml = pynvml
        return self._nvml

    def read(self) -> GpuSample:
        """Every GPU, now (blocking: call it from a thread, or through ``sample``)."""
        nvml = self._module()
        began = time.monotonic()
        with self._lock:
            try:
                if not self._started:
                    nvml.nvmlInit()
                    self._started = True
                gpus = tuple(
                    _reading(nvml, index, nvml.nvmlDeviceGetHandleByIndex(index), self._seen)
                    for index in range(nvml.nvmlDeviceGetCount())
                )
            except nvml.NVMLError as e:
                self._shutdown(nvml)
                raise NvmlUnavailable(f"NVML could not read the GPUs: {e}") from e
        return GpuSample(time.time(), time.monotonic() - began, gpus)

    async def sample(self) -> GpuSample:
        """``read`` on the sampler's own thread."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="frachub-nvml")
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.read)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        if self._nvml is not None:
            with self._lock:
                self._shutdown(self._nvml)

    def _shutdown(self, nvml: Any) -> None:
        if self._started:
            self._started = False
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()


NVML_SUCCESS = 0
NVML_ERROR_NOT_FOUND = 6
NVML_TEMPERATURE_GPU = 0


def _optional(nvml: Any, read: Callable[[], Any]) -> Any:
    """What ``read`` answers, or None where this GPU does not support it."""
    try:
        return read()
    except nvml.NVMLError:
        return None


def _process_utilization(
    nvml: Any, index: int, device: Any, seen: dict[int, int]
) -> dict[int, int] | None:
    """Pid -> mean SM percent of its samples since ``seen[index]``; None where unsupported."""
    if not hasattr(nvml, "nvmlDeviceGetProcessUtilization"):
        return None
    try:
        samples = nvml.nvmlDeviceGetProcessUtilization(device, seen.get(index, 0))
    except nvml.NVMLError as error:
        # "not found": no process ran a kernel since the last read (pynvml raises the
        # success code too when the driver has no sample to size an answer by)
        if getattr(error, "value", None) in (NVML_ERROR_NOT_FOUND, NVML_SUCCESS):
            return {}
        return None
    totals: dict[int, list[int]] = {}
    for sample in samples:
        seen[index] = max(seen.get(index, 0), int(sample.timeStamp))
        entry = totals.setdefault(int(sample.pid), [0, 0])
        entry[0] += int(sample.smUtil)
        entry[1] += 1
    return {pid: round(total / count) for pid, (total, count) in totals.items()}


def _reading(nvml: Any, index: int, device: Any, seen: dict[int, int]) -> GpuReading:
    memory = nvml.nvmlDeviceGetMemoryInfo(device)
    rates = _optional(nvml, lambda: nvml.nvmlDeviceGetUtilizationRates(device))
    utilization = None if rates is None else int(rates.gpu)  # None: some models, MIG
    temperature = _optional(
        nvml, lambda: nvml.nvmlDeviceGetTemperature(device, NVML_TEMPERATURE_GPU)
    )
    milliwatts = _optional(nvml, lambda: nvml.nvmlDeviceGetPowerUsage(device))
    held: dict[int, int] = {}
    for process in nvml.nvmlDeviceGetComputeRunningProcesses(device):
        used = process.usedGpuMemory  # None where the driver cannot say (NVML_VALUE_NOT_AVAILABLE)
        held[int(process.pid)] = held.get(int(process.pid), 0) + int(used or 0)
    uuid = nvml.nvmlDeviceGetUUID(device)
    return GpuReading(
        index=index,
        uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
        utilization_percent=utilization,
        memory_used_bytes=int(memory.used),
        memory_total_bytes=int(memory.total),
        processes=tuple(ProcessMemory(pid, used) for pid, used in sorted(held.items())),
        temperature_c=None if temperature is None else int(temperature),
        power_watts=None if milliwatts is None else int(milliwatts) / 1000,
        process_utilization=_process_utilization(nvml, index, device, seen),
    )


def by_workload(
    sample: GpuSample, holder_of: Callable[[int], int | None]
) -> tuple[MemoryByWorkload, list[int]]:
    """Each workload's memory per GPU, summed over its processes, and the pids no workload
    holds (the service's own, another user's outside FracHub, or pids of another pid
    namespace). ``holder_of`` answers for each pid (``holders.holder_of``)."""
    memory: MemoryByWorkload = {}
    unknown: list[int] = []
    for gpu in sample.gpus:
        for process in gpu.processes:
            workload = holder_of(process.pid)
            if workload is None:
                unknown.append(process.pid)
                continue
            per_gpu = memory.setdefault(workload, {})
            words = gpu_words(gpu.index)
            per_gpu[words] = per_gpu.get(words, 0) + process.used_bytes
    return memory, unknown


@dataclass(frozen=True)
class WorkloadGpu:
    """One workload on one GPU at one sample: the memory its processes hold and how busy it
    kept the GPU."""

    memory_bytes: int
    utilization_percent: int | None
    """Its processes' SM percent (``utilization_of == "processes"``), or the whole GPU's
    (``"gpu"``: NVML gives no per-process figure); None where NVML gives neither."""
    utilization_of: str
    """``"processes"``, ``"gpu"`` or ``"none"``: what ``utilization_percent`` measures."""


UsageByWorkload = dict[int, dict[str, WorkloadGpu]]
"""Workload id -> {GPU in words ("GPU 0"): its use of that GPU}."""


def usage_by_workload(sample: GpuSample, holder_of: Callable[[int], int | None]) -> UsageByWorkload:
    """Each workload's memory and utilization per GPU (see the module's docstring for whose
    utilization it is)."""
    usage: UsageByWorkload = {}
    for gpu in sample.gpus:
        held: dict[int, int] = {}
        busy: dict[int, int] = {}
        per_process = gpu.process_utilization
        for process in gpu.processes:
            workload = holder_of(process.pid)
            if workload is None:
                continue
            held[workload] = held.get(workload, 0) + process.used_bytes
            if per_process is not None:
                busy[workload] = busy.get(workload, 0) + per_process.get(process.pid, 0)
        for workload, used in held.items():
            if per_process is not None:
                percent: int | None = min(100, busy[workload])
                of = "processes"
            else:
                percent = gpu.utilization_percent
                of = "gpu" if percent is not None else "none"
            usage.setdefault(workload, {})[gpu_words(gpu.index)] = WorkloadGpu(used, percent, of)
    return usage


def memory_of(usage: UsageByWorkload) -> MemoryByWorkload:
    """The memory part of ``usage``: what the memory watchdog judges."""
    return {
        workload: {words: gpu.memory_bytes for words, gpu in per_gpu.items()}
        for workload, per_gpu in usage.items()
    }


def unknown_pids(pids: list[int]) -> list[int]:
    """Of NVML's pids that no workload holds, those this process cannot see at all: a sign
    that the service runs in another pid namespace than the GPUs' processes."""
    return [pid for pid in pids if not os.path.exists(f"/proc/{pid}")]


class MemoryReader:
    """Samples NVML and tells each process's memory to its workload: what
    ``LocalBackend.gpu_memory`` answers with. Keeps the newest sample (``last``) for whoever
    shows per-GPU figures, and warns once when NVML names pids this process cannot see."""

    def __init__(self, sampler: NvmlSampler | None = None, *, log: logging.Logger) -> None:
        self.sampler = sampler or NvmlSampler()
        self.log = log
        self.last: GpuSample | None = None
        self._warned = False
        self._owners: dict[int, int | None] = {}
        """The last sample's pids and their workloads."""

    async def memory(self, holders: Holders) -> MemoryByWorkload:
        return memory_of(await self.usage(holders))

    async def usage(self, holders: Holders, *, max_age: float = 0.0) -> UsageByWorkload:
        """One sample, told to workloads: memory and utilization per GPU (``last`` keeps the
        sample itself, per GPU). With ``max_age``, a sample that recent is told again
        instead of reading NVML: the GPU use sampler (every 5 s) takes the memory
        watchdog's (every 2 s), so one NVML read feeds both."""
        last = self.last
        if last is not None and max_age > 0 and time.time() - last.at < max_age:
            sample = last
        else:
            sample = self.last = await self.sampler.sample()
        owners: dict[int, int | None] = {}
        alive = set(holders.groups.values()) | set(holders.roots.values())
        alive |= set(holders.tokens.values())
        known = self._owners

        def owner(pid: int) -> int | None:  # a pid on several GPUs is looked up once
            if pid not in owners:
                before = known.get(pid)
                # a pid NVML listed last time too is the same process (a reused pid would
                # need the old one gone and the numbers wrapped in between), and a process
                # never changes workload: only new pids, and pids no one held, cost /proc
                # reads (benchmarks/gpu_sampling.py)
                owners[pid] = before if before in alive else holder_of(pid, holders)
            return owners[pid]

        usage = usage_by_workload(sample, owner)
        self._owners = owners
        unknown = [pid for pid, workload in owners.items() if workload is None]
        unseen = unknown_pids(unknown) if unknown and not self._warned else []
        if unseen:
            self._warned = True
            self.log.warning(
                "NVML names GPU processes this service cannot see (pids %s): it runs in "
                "another pid namespace, so their memory counts for no workload",
                ", ".join(map(str, unseen)),
            )
        return usage

    def close(self) -> None:
        self.sampler.close()
