"""The GPU sampler and whose processes NVML names, on the local backend: real job
subprocesses in each confinement this machine offers, the fake NVML naming their pids."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.backends import confinement as cg
from scheduler.backends.gpu_usage import MemoryReader, NvmlSampler
from scheduler.backends.holders import Holders, holder_of
from scheduler.backends.inventory import NvmlUnavailable
from scheduler.backends.local import LocalBackend
from tests.backends.test_local_backend import make_job, run
from tests.fakenvml import GIB, FakeNvml

pytestmark = pytest.mark.backends


class ThreadNoting(FakeNvml):
    """Notes the thread each process list is read on."""

    threads: list[str]

    def nvmlDeviceGetComputeRunningProcesses(self, device: int) -> list:
        self.threads = [*getattr(self, "threads", []), threading.current_thread().name]
        return super().nvmlDeviceGetComputeRunningProcesses(device)


def test_a_sample_has_each_gpu_and_each_process_read_off_the_event_loop() -> None:
    nvml = ThreadNoting()
    nvml.set_processes(0, {101: 3 * GIB, 102: GIB})
    nvml.set_utilization(0, 35)
    sampler = NvmlSampler(nvml)

    async def scenario():
        try:
            return await sampler.sample()
        finally:
            sampler.close()

    sample = run(scenario)
    first, second = sample.gpus
    assert (first.index, first.uuid, first.utilization_percent) == (0, "GPU-real-0", 35)
    assert first.memory_used_bytes == 4 * GIB and first.memory_total_bytes == 80 * GIB
    assert [(p.pid, p.used_bytes) for p in first.processes] == [(101, 3 * GIB), (102, GIB)]
    assert second.utilization_percent is None and second.processes == ()  # not supported
    assert nvml.threads and all(name.startswith("frachub-nvml") for name in nvml.threads)
    assert nvml.calls == ["init", "shutdown"]  # initialised once, shut down by close


def test_nvml_that_cannot_start_says_so_and_is_tried_again() -> None:
    nvml = FakeNvml(broken=True)
    sampler = NvmlSampler(nvml)
    with pytest.raises(NvmlUnavailable, match="NVML could not read the GPUs"):
        sampler.read()
    nvml.broken = False
    assert len(sampler.read().gpus) == 2


@pytest.fixture(params=["auto", "session"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalBackend]:
    """The local backend in each confinement: ``auto`` (control groups where this machine
    lets the tests make them) and ``session`` (the process tree and FRACHUB_ATTEMPT)."""
    yield LocalBackend(
        data_dir=str(tmp_path / "data"),
        inventory_source="declared",
        run_as_user=False,
        confinement=request.param,
    )


async def read_pid(path: Path) -> int:
    for _ in range(200):
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        await asyncio.sleep(0.02)
    raise AssertionError(f"{path} was never written")


def test_processes_on_the_gpus_are_told_to_their_job_or_notebook(
    backend: LocalBackend, tmp_path: Path
) -> None:
    """A job's child and a daemon it detached (``setsid``: out of its process group) count
    for the job; a process of a notebook server (its FRACHUB_ATTEMPT, and its control group
    where there are groups) for the notebook's allocation; the test's own process for no
    one."""
    nvml = FakeNvml()
    backend.gpu_reader = MemoryReader(NvmlSampler(nvml), log=logging.getLogger("test"))
    child, daemon = tmp_path / "child", tmp_path / "daemon"
    command = (
        f"sleep 60 & echo $! > {child}; setsid sh -c 'echo $$ > {daemon}; exec sleep 60' & wait"
    )
    server = cg.server_group_name("alice", "gpu")
    confined = backend.confined

    async def scenario():
        handle = await backend.start(make_job(7, command))
        notebook = subprocess.Popen(
            ["sleep", "60"], env={**os.environ, cg.ATTEMPT_VARIABLE: server}
        )
        if confined.root is not None:
            cg.prepare(confined, server, ())
            cg.enter(confined, server, notebook.pid)
        try:
            nvml.set_processes(0, {await read_pid(child): 20 * GIB, os.getpid(): GIB})
            nvml.set_processes(1, {await read_pid(daemon): 2 * GIB, notebook.pid: 5 * GIB})
            return await backend.gpu_memory({9: ("alice", "gpu")})
        finally:
            notebook.kill()
            notebook.wait()
            if confined.root is not None:
                cg.kill_all(confined, server, server)
            await backend.stop(7, handle, 0)
            await backend.close()

    assert run(scenario) == {7: {"GPU 0": 20 * GIB, "GPU 1": 2 * GIB}, 9: {"GPU 1": 5 * GIB}}
    assert backend.gpu_reader.last is not None and len(backend.gpu_reader.last.gpus) == 2


def test_a_pid_no_one_holds_is_no_ones(tmp_path: Path) -> None:
    assert holder_of(os.getpid(), Holders(tokens={"x": 1})) is None
    assert holder_of(2**22 + 12345, Holders()) is None  # no such process
