"""MPS mode through the real service, with the stand-in ``nvidia-cuda-mps-control``
(``tests/backends/fake_mps``): the service starts a daemon per GPU and stops them with
itself, says so in ``api/v1/health``, the metrics and the node view, gives a job on a shared
GPU its MPS variables, and refuses to start when the binary is missing."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import httpx
import pytest
from hubharness import HarnessError, ServiceProcess
from service_client import service_config, submit, wait_for, wait_state, workload

FAKE = Path(__file__).parents[1] / "backends" / "fake_mps" / "nvidia-cuda-mps-control"
PRINT_ENV = f"{sys.executable} -c 'import json, os; print(json.dumps(dict(os.environ)))'"


def mps_config(control: Path) -> str:
    return service_config(
        gpus=2,
        extra=f'c.LocalBackend.gpu_sharing = "mps"\nc.LocalBackend.mps_control = "{control}"\n',
    )


def test_the_service_runs_a_daemon_per_gpu_and_jobs_are_its_clients(
    hub, make_user, api, tmp_path: Path
) -> None:
    service = ServiceProcess(hub, mps_config(FAKE), tmp_path).start()
    try:
        health = httpx.get(service.api_url.rstrip("/") + "/health", timeout=10).json()
        assert health["status"] == "ok"
        assert health["gpu_sharing"]["mode"] == "mps"
        assert [(d["gpu"], d["up"]) for d in health["gpu_sharing"]["daemons"]] == [
            (0, True),
            (1, True),
        ]
        alice = api(make_user(groups=["vision"])[1])
        assert {node["gpu_sharing"] for node in alice.get("nodes").json()} == {"mps"}
        metrics = alice.get("../../metrics").text
        assert re.search(r'^frachub_mps_daemon_up\{gpu="1",node="local"\} 1\.0$', metrics, re.M)
        assert re.search(r"^frachub_mps_daemon_restarts_total\{", metrics, re.M)
        job = submit(alice, command=PRINT_ENV, gpus=0.5)
        wait_state(alice, job["id"], "succeeded")
        log = alice.get(f"workloads/{job['id']}/logs").text
        env = json.loads(next(line for line in log.splitlines() if line.startswith("{")))
        gpu = job_gpu(alice, job["id"])
        assert (
            env["CUDA_MPS_PIPE_DIRECTORY"]
            == health["gpu_sharing"]["daemons"][gpu]["pipe_directory"]
        )
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={40960 + 1024}M"
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
        # a notebook's share: the spawner adds what the allocation carries
        created = alice.post("allocations", json={"gpus": 0.25})
        assert created.status_code == 201, created.text
        notebook = wait_state(alice, created.json()["id"], "running")
        gpu = notebook["placement"][0]["gpus"][0]["index"]
        assert notebook["sharing_env"] == {
            "CUDA_MPS_PIPE_DIRECTORY": health["gpu_sharing"]["daemons"][gpu]["pipe_directory"],
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={20480 + 1024}M",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
            "CUDA_VISIBLE_DEVICES": f"GPU-declared-local-{gpu}",
        }
        alice.delete(f"allocations/{notebook['id']}")
    finally:
        service.stop()
    for gpu in (0, 1):
        control_log = tmp_path / "frachub-data" / "mps" / f"gpu{gpu}" / "log" / "control.log"
        wait_for(lambda log=control_log: "# QUIT" in log.read_text(), 10, "the daemon's quit")


def job_gpu(client: httpx.Client, workload_id: int) -> int:
    [replica] = client.get(f"workloads/{workload_id}").json()["placement"]
    return replica["gpus"][0]["index"]


def test_the_service_refuses_mps_without_the_binary(hub, tmp_path: Path) -> None:
    service = ServiceProcess(hub, mps_config(tmp_path / "no-such-binary"), tmp_path)
    with pytest.raises(HarnessError, match="exited with status 2"):
        service.start()
    log = service.log_path.read_text()
    assert "LocalBackend.mps_control is" in log and "not an executable file" in log


@pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root (CI runs as root): jobs run as their users only then"
)
def test_with_jobs_run_as_their_users_a_gpu_serves_one_account_at_a_time(
    hub, make_user, api, tmp_path: Path
) -> None:
    """MPS serves one Linux account per GPU: notebooks' shares (allocations: no process is
    started) of different users go to different GPUs, a third user's waits saying why, and
    starts once the GPU's account has left it."""
    config = mps_config(FAKE) + "c.LocalBackend.run_as_user = True\n"
    service = ServiceProcess(hub, config, tmp_path).start()
    try:
        alice_name, alice_token = make_user(groups=["vision"])
        alice = api(alice_token)
        bob_name, bob_token = make_user(groups=["nlp"])
        bob = api(bob_token)
        carol = api(make_user(groups=["nlp"])[1])

        def allocate(client: httpx.Client, share: float, *states: str) -> dict:
            server = f"nb{share:g}".replace(".", "")  # one allocation per named server
            created = client.post("allocations", json={"gpus": share, "server_name": server})
            assert created.status_code == 201, created.text
            return wait_state(client, created.json()["id"], *states)

        first = allocate(alice, 0.5, "running")
        other = allocate(bob, 0.5, "running")
        assert job_gpu(alice, first["id"]) != job_gpu(bob, other["id"])
        beside = allocate(alice, 0.25, "running")
        assert job_gpu(alice, beside["id"]) == job_gpu(alice, first["id"])
        waiting = allocate(carol, 0.25, "pending")
        gpu = job_gpu(alice, first["id"])
        owner = alice_name if gpu == 0 else bob_name  # the reason names the first GPU it fits
        expected = (
            f"GPU 0 of node local runs MPS for {owner}'s workloads; "
            "MPS serves one account at a time"
        )
        reason = wait_for(  # the reason the next cycle gives
            lambda: (
                (r := workload(carol, waiting["id"])["pending_reason"]).endswith(expected) and r
            ),
            20,
            f"the pending reason {expected!r}",
        )
        assert reason.startswith("needs 0.25 of a GPU; "), reason
        for allocation in (first, beside):
            alice.delete(f"allocations/{allocation['id']}")
        wait_state(carol, waiting["id"], "running")
        assert job_gpu(carol, waiting["id"]) == gpu
    finally:
        service.stop()
