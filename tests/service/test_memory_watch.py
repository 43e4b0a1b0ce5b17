"""The memory watchdog through the real service: real job subprocesses, the fake NVML
(``tests/fakenvml.py``) naming their pids with the memory the test says they hold, and what
the user sees: the timeline, the failure message, ``frachub describe``, the job's log and the
service log.

The service samples every 0.2 s with a 2-second grace period and a 1-second SIGTERM grace
(and the default 1 GiB of slack); the declared GPUs hold 80 GiB, so a 0.5 share is 40 GiB.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fakenvml import GIB, FakeNvml, install_line
from hubharness import Hub, ServiceProcess
from service_client import service_config, submit, wait_for, wait_state, workload

from scheduler.backends import confinement as cg

from .test_cli import base_env, run_cli

GRACE = 2.0
STATE = "nvml-state.json"


@pytest.fixture(scope="module")
def nvml(tmp_path_factory: pytest.TempPathFactory) -> FakeNvml:
    fake = FakeNvml(state_file=tmp_path_factory.mktemp("nvml") / STATE)
    fake.set_processes(0, {})
    return fake


@pytest.fixture(scope="module")
def service(
    hub: Hub, nvml: FakeNvml, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    extra = (
        install_line(nvml.state_file)
        + f"c.MemoryWatchdog.grace_seconds = {GRACE}\n"
        + "c.MemoryWatchdog.interval = 0.2\n"
        + "c.MemoryWatchdog.stop_grace_seconds = 1\n"
        + 'c.Application.log_level = "INFO"\n'
    )
    process = ServiceProcess(
        hub, service_config(gpus=2, grace=1, extra=extra), tmp_path_factory.mktemp("watch")
    ).start()
    yield process
    process.stop()


@pytest.fixture
def alice(service: ServiceProcess, make_user, api) -> httpx.Client:
    return api(make_user(groups=["vision"])[1])


def samples_taken(client: httpx.Client) -> float:
    text = client.get("../../metrics").text
    for line in text.splitlines():
        if line.startswith('frachub_gpu_memory_samples_total{outcome="ok"}'):
            return float(line.split()[-1])
    return 0.0


def wait_samples(client: httpx.Client, count: int) -> None:
    """Until ``count`` more samples were taken (what a test waits on to say "nothing
    happened")."""
    target = samples_taken(client) + count
    wait_for(lambda: samples_taken(client) >= target, 20, f"{count} more GPU samples")


def started_job(client: httpx.Client, tmp_path: Path, **body) -> tuple[dict, int, int]:
    """A 0.5-GPU job that writes its pid and sleeps; (its row, its pid, its GPU index)."""
    pid_file = tmp_path / f"pid-{time.monotonic_ns()}"
    job = submit(client, command=f"echo $$ > {pid_file}; exec sleep 300", gpus=0.5, **body)
    running = wait_state(client, job["id"], "running")
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 20, "pid"))
    return running, pid, running["placement"][0]["gpus"][0]["index"]


def test_a_job_over_its_share_is_stopped_with_the_reason(
    service: ServiceProcess, alice: httpx.Client, nvml: FakeNvml, hub: Hub, tmp_path: Path
) -> None:
    job, pid, gpu = started_job(alice, tmp_path, name="hog")
    nvml.set_processes(gpu, {pid: 52 * GIB})
    over_at = time.monotonic()
    failed = wait_state(alice, job["id"], "failed", timeout=30)
    took = time.monotonic() - over_at
    nvml.set_processes(gpu, {})
    reason = f"uses 52 GiB of its 40 GiB share of GPU {gpu} for more than {GRACE:g}s"
    assert failed["message"] == f"stopped: {reason}", failed
    assert GRACE <= took <= GRACE + 10, took
    texts = [event["text"] for event in failed["events"]]
    assert f"stopping: {reason}" in texts, texts
    log = alice.get(f"workloads/{job['id']}/logs").text
    assert f"stopping: {reason}" in log, log
    log = service.log_path.read_text()
    assert "memory watchdog: GPU memory read from NVML every 0.2s; over its share for 2s" in log
    assert f"memory watchdog: stopping workload {job['id']} (hog" in log
    token = alice.headers["Authorization"].split()[1]
    env = base_env(FRACHUB_URL=hub.service_url(), FRACHUB_TOKEN=token)
    described = run_cli("describe", str(job["id"]), env=env)
    assert described.returncode == 0, described.stderr
    assert reason in described.stdout, described.stdout


def test_a_job_within_its_share_or_over_it_briefly_is_left_alone(
    service: ServiceProcess, alice: httpx.Client, nvml: FakeNvml, tmp_path: Path
) -> None:
    job, pid, gpu = started_job(alice, tmp_path, name="fits")
    nvml.set_processes(gpu, {pid: 40 * GIB + 900 * 2**20})  # its share and a CUDA context
    wait_samples(alice, 15)  # 3 s: past the grace period
    nvml.set_processes(gpu, {pid: 45 * GIB})  # over, for less than the grace period
    time.sleep(GRACE / 2)
    nvml.set_processes(gpu, {pid: 30 * GIB})
    wait_samples(alice, 15)
    seen = workload(alice, job["id"])
    assert seen["state"] == "running", seen
    assert not [e for e in seen["events"] if "share" in e["text"]], seen["events"]
    nvml.set_processes(gpu, {})
    alice.delete(f"workloads/{job['id']}")
    wait_state(alice, job["id"], "cancelled")


def test_a_notebook_over_its_share_is_warned_never_stopped(
    service: ServiceProcess, alice: httpx.Client, nvml: FakeNvml, make_user
) -> None:
    """A process of alice's server (what the spawner's session mode marks it with; the
    spawner's control group is found the same way) holds 50 GiB of a 40 GiB share: the
    allocation's timeline says so and it keeps running; back under, the timeline says that
    too."""
    allocation = alice.post("allocations", json={"gpus": 0.5, "server_name": "lab"}).json()
    running = wait_state(alice, allocation["id"], "running")
    gpu = running["placement"][0]["gpus"][0]["index"]
    user = running["user"]
    server = cg.server_group_name(user, "lab")
    kernel = subprocess.Popen(["sleep", "300"], env={**os.environ, cg.ATTEMPT_VARIABLE: server})
    try:
        nvml.set_processes(gpu, {kernel.pid: 50 * GIB})
        words = f"uses 50 GiB of its 40 GiB share of GPU {gpu} for more than {GRACE:g}s"

        def warned() -> dict | None:
            seen = workload(alice, allocation["id"])
            return seen if f"over its GPU memory share: {words}" in texts(seen) else None

        seen = wait_for(warned, 20, "the warning")
        nvml.set_processes(gpu, {kernel.pid: 20 * GIB})
        back = "back within its share: uses 20 GiB of its 40 GiB"
        seen = wait_for(
            lambda: back in texts(s := workload(alice, allocation["id"])) and s, 20, "all clear"
        )
        assert seen["state"] == "running"
        assert texts(seen).count(f"over its GPU memory share: {words}") == 1
    finally:
        kernel.kill()
        kernel.wait()
        nvml.set_processes(gpu, {})
    alice.delete(f"allocations/{allocation['id']}")


def texts(seen: dict) -> list[str]:
    return [event["text"] for event in seen["events"]]
