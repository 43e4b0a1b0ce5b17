"""Each running job's GPU use through the real service (issue 27): real job subprocesses, the
fake NVML (``tests/fakenvml.py``) naming their pids with the memory and utilization the test
sets, and where a user reads them: the workload's ``gpu_usage``, its recent samples
(``/workloads/{id}/gpu``), the GPU map, the metrics, ``frachub jobs`` and ``describe``.

The service samples every 0.2 s; the declared GPUs hold 80 GiB, so a 0.5 share is 40 GiB.
Project vision deserves 1 GPU, so a second job of it beyond that runs on borrowed GPUs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fakenvml import GIB, FakeNvml, install_line
from hubharness import Hub, ServiceProcess
from service_client import service_config, submit, wait_for, wait_state, workload

from .test_cli import base_env, run_cli


@pytest.fixture(scope="module")
def nvml(tmp_path_factory: pytest.TempPathFactory) -> FakeNvml:
    return FakeNvml.in_directory(tmp_path_factory.mktemp("nvml"))


@pytest.fixture(scope="module")
def service(
    hub: Hub, nvml: FakeNvml, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    extra = (
        install_line(nvml.state_file)
        + "c.GpuMetrics.interval = 0.2\n"
        + "c.GpuMetrics.history_seconds = 2\n"  # 10 samples kept per workload
        + "c.MemoryWatchdog.jobs = 'off'\n"
        + 'c.Application.log_level = "INFO"\n'
    )
    process = ServiceProcess(
        hub, service_config(gpus=2, grace=1, extra=extra), tmp_path_factory.mktemp("gpuuse")
    ).start()
    yield process
    process.stop()


@pytest.fixture
def alice(service: ServiceProcess, make_user, api) -> httpx.Client:
    return api(make_user(groups=["vision"])[1])


def started_job(client: httpx.Client, tmp_path: Path, gpus: float, name: str) -> tuple[dict, int]:
    pid_file = tmp_path / f"pid-{time.monotonic_ns()}"
    job = submit(client, command=f"echo $$ > {pid_file}; exec sleep 300", gpus=gpus, name=name)
    running = wait_state(client, job["id"], "running")
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 20, "pid"))
    return running, pid


def test_a_jobs_gpu_use_is_shown_everywhere_a_user_looks(
    service: ServiceProcess, alice: httpx.Client, nvml: FakeNvml, hub: Hub, tmp_path: Path
) -> None:
    small, small_pid = started_job(alice, tmp_path, 0.5, "small")
    whole, whole_pid = started_job(alice, tmp_path, 1, "whole")
    small_gpu = small["placement"][0]["gpus"][0]["index"]
    whole_gpu = whole["placement"][0]["gpus"][0]["index"]
    assert small_gpu != whole_gpu
    nvml.set_processes(small_gpu, {small_pid: 12 * GIB})
    nvml.set_utilization(small_gpu, 70)
    nvml.set_process_utilization(small_gpu, {small_pid: 37})
    nvml.set_processes(whole_gpu, {whole_pid: 61 * GIB})
    nvml.set_utilization(whole_gpu, 87)
    nvml.set_process_utilization(whole_gpu, None)  # no per-process figures on this one
    try:
        seen = wait_for(
            lambda: (
                (w := workload(alice, small["id"]))["gpu_usage"]
                and w["gpu_usage"]["utilization_percent"] == 37
                and w
            ),
            20,
            "the small job's sample",
        )
        use = seen["gpu_usage"]
        assert use["utilization_of"] == "processes"
        assert (use["memory_bytes"], use["share_memory_bytes"]) == (12 * GIB, 40 * GIB)
        assert use["gpus"] == {
            f"GPU {small_gpu}": {"memory_bytes": 12 * GIB, "utilization_percent": 37}
        }
        other = wait_for(
            lambda: (w := workload(alice, whole["id"])["gpu_usage"]) and w["memory_bytes"] and w,
            20,
        )
        assert (other["utilization_percent"], other["utilization_of"]) == (87, "gpu")

        # the live chart's samples: bounded (history_seconds / interval)
        time.sleep(3)
        series = alice.get(f"workloads/{small['id']}/gpu").json()
        assert series["sampling"] and series["source"] == "NVML"
        assert series["interval_seconds"] == 0.2 and series["utilization_of"] == "processes"
        assert 5 <= len(series["samples"]) <= 10, len(series["samples"])
        assert series["samples"][-1]["utilization_percent"] == 37
        assert series["share_memory_bytes"] == 40 * GIB

        # the GPU map: per GPU its utilization; per share its memory; the borrowed marked
        gpus = {g["index"]: g for n in alice.get("nodes").json() for g in n["gpus"]}
        assert gpus[small_gpu]["utilization_percent"] == 70
        assert gpus[small_gpu]["memory_used_gib"] == 12
        assert gpus[small_gpu]["temperature_c"] == 75 and gpus[small_gpu]["power_watts"] == 310
        [holder] = gpus[small_gpu]["holders"]
        assert (holder["share_memory_gib"], holder["memory_used_gib"]) == (40, 12)
        assert holder["utilization_percent"] == 37 and holder["borrowed"] is False
        [borrower] = gpus[whole_gpu]["holders"]
        assert borrower["borrowed"] is True  # vision deserves 1 GPU and holds 1.5

        # the metrics, labelled the way users filter
        text = alice.get("../../metrics").text
        values = series_values(text)
        user = seen["user"]
        labels = (
            f'{{kind="training",name="small",project="vision",user="{user}",'
            f'workload="{small["id"]}"}}'
        )
        assert values[f"frachub_workload_gpu_utilization_percent{labels}"] == 37
        assert values[f"frachub_workload_gpu_memory_used_bytes{labels}"] == 12 * GIB
        assert values[f"frachub_workload_gpu_memory_share_bytes{labels}"] == 40 * GIB
        uuid = f"GPU-declared-local-{small_gpu}"
        gpu = f'{{gpu="{small_gpu}",model="declared",node="local",uuid="{uuid}"}}'
        assert values[f"frachub_gpu_utilization_percent{gpu}"] == 70
        assert values[f"frachub_gpu_memory_used_bytes{gpu}"] == 12 * GIB
        assert values[f"frachub_gpu_shares_allocated{gpu}"] == 0.5

        # the CLI, as nvidia-smi users read it
        token = alice.headers["Authorization"].split()[1]
        env = base_env(FRACHUB_URL=hub.service_url(), FRACHUB_TOKEN=token)
        listed = run_cli("jobs", env=env)
        assert listed.returncode == 0, listed.stderr
        header, *rows = listed.stdout.splitlines()
        at = header.index("GPU%")
        cells = {row.split()[1]: row[at:].split()[:2] for row in rows if row.split()[1:2]}
        assert cells["small"] == ["37%", "12.0/40GiB"], listed.stdout
        assert cells["whole"] == ["87%*", "61.0/80GiB"], listed.stdout
        assert "* GPU%: the whole GPU's utilization" in listed.stdout
        described = run_cli("describe", str(small["id"]), env=env)
        assert "37% busy (its own processes), 12.0 GiB of its 40 GiB share in use" in (
            described.stdout
        ), described.stdout
        log = service.log_text()
        assert "GPU use sampling: NVML every 0.2s, 10 samples kept per running workload" in log
    finally:
        nvml.set_processes(small_gpu, {})
        nvml.set_processes(whole_gpu, {})
        for job in (small, whole):
            alice.delete(f"workloads/{job['id']}")
    done = wait_state(alice, small["id"], "cancelled")
    assert done["gpu_usage"] is None
    assert alice.get(f"workloads/{small['id']}/gpu").json()["samples"] == []
    wait_state(alice, whole["id"], "cancelled")
    text = alice.get("../../metrics").text
    assert f'workload="{small["id"]}"' not in text  # no series outlives its workload


def series_values(text: str) -> dict[str, float]:
    """The exposition format's samples: ``name{labels}`` -> value."""
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
