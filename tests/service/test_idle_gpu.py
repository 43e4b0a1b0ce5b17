"""Idle by the GPU (issue 27): the idle-notebook check judges a notebook by its GPU when the
GPU use sampler has figures for it, against a real JupyterHub running real single-user
servers (``test_idle.py``'s harness) and the fake NVML (``tests/fakenvml.py``) naming a
process of the notebook (marked as the spawner marks its kernels: ``FRACHUB_ATTEMPT``).

A notebook whose user keeps its kernels busy (the hub sees activity) while its GPU idles is
warned and stopped; one whose user is away while its GPU works is not, until its GPU idles.
The idle limit is 4 s (warning at 3.2 s); the service samples the GPUs every 0.25 s.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest
from fakenvml import GIB, FakeNvml, install_line
from hubharness import API_PATH, ServiceProcess, running_hub
from service_client import CHECKED, service_config, wait_for

from scheduler.backends import confinement as cg

from . import test_idle as idle
from .test_idle import IDLE_LIMIT, Researcher, allocate, events

WARNING = re.compile(
    r"its GPU idle since \d\d:\d\d UTC; this notebook's 0\.5 GPU will be released and the "
    r"server stopped at \d\d:\d\d UTC unless its GPU is used"
)


@pytest.fixture(scope="module")
def gpu_hub(tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("idle-gpu-hub")
    with running_hub(work, extra_config=idle.hub_config(work / "home")) as hub:
        yield hub


@pytest.fixture
def spawner_api(gpu_hub, service: ServiceProcess) -> Iterator[httpx.Client]:
    """The frachub API with the service's own token, as the FracHub spawner calls it."""
    with httpx.Client(
        base_url=gpu_hub.service_url(API_PATH),
        headers={"Authorization": f"token {gpu_hub.frachub_token}"},
        timeout=30,
        event_hooks=CHECKED,
    ) as client:
        yield client


@pytest.fixture
def researcher(gpu_hub, request: pytest.FixtureRequest) -> Iterator[Researcher]:
    name = request.node.name.removeprefix("test_").replace("_", "-")[:24].rstrip("-")
    person = Researcher(gpu_hub, name)
    yield person
    person.close()


@pytest.fixture(scope="module")
def nvml(tmp_path_factory: pytest.TempPathFactory) -> FakeNvml:
    return FakeNvml.in_directory(tmp_path_factory.mktemp("nvml"))


@pytest.fixture(scope="module")
def service(gpu_hub, nvml: FakeNvml, tmp_path_factory) -> Iterator[ServiceProcess]:
    extra = (
        install_line(nvml.state_file)
        + "c.FracHubService.idle_check_interval = 0.5\n"
        + "c.GpuMetrics.interval = 0.25\n"
        + 'c.Application.log_level = "INFO"\n'
    )
    process = ServiceProcess(
        gpu_hub, service_config(gpus=2, extra=extra), tmp_path_factory.mktemp("idle-gpu")
    ).start()
    yield process
    process.stop()


class Kernel:
    """A process of the notebook's server on its GPU, as NVML lists it."""

    def __init__(self, nvml: FakeNvml, user: str, gpu: int) -> None:
        self.nvml, self.gpu = nvml, gpu
        marked = {**os.environ, cg.ATTEMPT_VARIABLE: cg.server_group_name(user, "")}
        self.process = subprocess.Popen(["sleep", "300"], env=marked)
        nvml.set_processes(gpu, {self.process.pid: 3 * GIB})

    def busy(self, percent: int) -> None:
        self.nvml.set_process_utilization(self.gpu, {self.process.pid: percent})

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
        self.nvml.set_processes(self.gpu, {})
        self.nvml.set_process_utilization(self.gpu, None)


def test_busy_kernels_on_an_idle_gpu_are_idle_for_the_gpu(
    spawner_api: httpx.Client, researcher: Researcher, nvml: FakeNvml, service: ServiceProcess
) -> None:
    researcher.start()
    allocation = allocate(spawner_api, researcher.name, idle_timeout_seconds=IDLE_LIMIT)
    gpu = allocation["placement"][0]["gpus"][0]["index"]
    kernel = Kernel(nvml, researcher.name, gpu)
    kernel.busy(0)  # the kernels compute on the CPU; the GPU's share waits
    url = f"allocations/{allocation['id']}"
    try:
        deadline = time.monotonic() + 30
        warned = None
        while time.monotonic() < deadline and not warned:
            researcher.report_activity("")  # the hub sees its user at work
            view = spawner_api.get(url).json()
            warned = view["idle_warning"] and view
            time.sleep(0.3)
        assert warned, "never warned"
        assert WARNING.fullmatch(warned["idle_warning"]), warned["idle_warning"]
        assert warned["gpu_usage"]["utilization_percent"] == 0
        while researcher.servers():
            researcher.report_activity("")
            assert time.monotonic() < deadline + 30, "the server was never stopped"
            time.sleep(0.3)
        wait_for(lambda: spawner_api.get(url).json()["state"] == "released", 15, "the release")
    finally:
        kernel.close()
    types = [kind for kind, _ in events(spawner_api, allocation["id"])]
    assert types.index("idle-warning") < types.index("idle-stop")
    assert f"stopping {researcher.name}'s default server" in service.log_text()


def test_a_busy_gpu_keeps_a_notebook_its_user_left(
    spawner_api: httpx.Client, researcher: Researcher, nvml: FakeNvml
) -> None:
    researcher.start()
    allocation = allocate(spawner_api, researcher.name, idle_timeout_seconds=IDLE_LIMIT)
    gpu = allocation["placement"][0]["gpus"][0]["index"]
    kernel = Kernel(nvml, researcher.name, gpu)
    kernel.busy(60)  # a training loop in the notebook; nobody at the keyboard
    url = f"allocations/{allocation['id']}"
    try:
        wait_for(lambda: spawner_api.get(url).json()["gpu_usage"], 10, "the first sample")
        working_until = time.monotonic() + 2 * IDLE_LIMIT
        while time.monotonic() < working_until:
            view = spawner_api.get(url).json()
            assert view["state"] == "running" and view["idle_warning"] is None, view
            time.sleep(0.5)
        assert researcher.servers()[""]["ready"]
        kernel.busy(0)  # the loop ends: now it idles
        warned = wait_for(lambda: spawner_api.get(url).json()["idle_warning"], 15, "a warning")
        assert WARNING.fullmatch(warned), warned
        wait_for(lambda: researcher.servers() == {}, 30, "the hub to stop the server")
        wait_for(lambda: spawner_api.get(url).json()["state"] == "released", 15, "the release")
    finally:
        kernel.close()
