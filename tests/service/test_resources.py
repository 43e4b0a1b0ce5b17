"""CPU and memory through the REST API: asked for beside GPUs (or the admin's default for the
kind), refused in words when malformed, shown on workloads and nodes, enforced on the local
backend by the job's real control group (a job past its memory is killed by the kernel and
its timeline says so), and counted as CPU core-hours and memory GiB-hours."""

from __future__ import annotations

import sys

import httpx
import pytest
from hubharness import ServiceProcess
from service_client import service_config, submit, wait_for, wait_state

EXTRA = """
c.LocalBackend.declared_inventory = [
    {"name": "local", "gpus": 2, "gpu_memory_gib": 80, "cpu": 8, "memory_gib": 32},
]
c.FracHubService.default_cpu = {"training": 0.5, "notebook": 1}
c.FracHubService.default_memory_gib = {"training": 1}
"""

HOG = (
    f"{sys.executable} -c \"import time; hog = b'x' * (256 * 2**20); "
    "print('survived', len(hog), flush=True); time.sleep(0.2)\""
)


@pytest.fixture(scope="module")
def service(hub, tmp_path_factory):
    process = ServiceProcess(
        hub, service_config(gpus=2, grace=1, extra=EXTRA), tmp_path_factory.mktemp("resources")
    ).start()
    yield process
    process.stop()


@pytest.fixture
def alice(service, make_user, api) -> httpx.Client:
    _, token = make_user(groups=["vision"])
    return api(token)


def test_a_job_past_its_memory_is_killed_and_its_timeline_says_why(alice) -> None:
    job = submit(alice, command=HOG, gpus=0.25, cpu=1.5, memory_gib=0.0625)
    assert (job["cpu"], job["memory_gib"]) == (1.5, 0.0625)
    done = wait_state(alice, job["id"], "failed", "succeeded", timeout=60)
    assert done["state"] == "failed" and done["exit_code"] == 137
    said = "killed: used more than its 64 MiB memory (the kernel's OOM killer, SIGKILL)"
    assert said in done["message"]
    [ending] = [event for event in done["events"] if event["type"] == "failed"]
    assert said in ending["text"]
    assert "survived" not in alice.get(f"workloads/{job['id']}/logs").text


def test_what_is_not_asked_is_the_admins_default_for_the_kind(alice) -> None:
    job = submit(alice, command="true", gpus=0.25)
    assert (job["cpu"], job["memory_gib"]) == (0.5, 1.0)  # the training defaults
    wait_state(alice, job["id"], "succeeded", timeout=30)
    notebook = alice.post("allocations", json={"gpus": 0.25, "server_name": "cpu"}).json()
    assert (notebook["cpu"], notebook["memory_gib"]) == (1.0, 0.0)  # no notebook memory set
    asked = alice.post(
        "allocations", json={"gpus": 0.25, "server_name": "big", "cpu": 4, "memory_gib": 16}
    ).json()
    assert (asked["cpu"], asked["memory_gib"]) == (4.0, 16.0)
    for allocation in (notebook, asked):
        alice.delete(f"allocations/{allocation['id']}")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"cpu": "two"}, "cpu: must be a number, got 'two'"),
        ({"cpu": -1}, "cpu: must be >= 0, got -1"),
        ({"cpu": 5000}, "cpu: must be at most 4096, got 5000"),
        ({"cpu": 0.0001}, "cpu: cores are counted in thousandths, got 0.0001"),
        ({"memory_gib": "16G"}, "memory_gib: must be a number, got '16G'"),
        ({"memory_gib": 0.0001}, "memory_gib: must be 0 or at least 1 MiB"),
        ({"memory_gib": 10**6}, "memory_gib: must be at most 65536, got 1000000"),
    ],
)
def test_a_malformed_cpu_or_memory_is_refused_naming_the_field(alice, body, message) -> None:
    for path, base in (
        ("workloads", {"command": "true", "gpus": 0.25}),
        ("allocations", {"gpus": 0.25, "server_name": "bad"}),
    ):
        response = alice.post(path, json={**base, **body})
        assert response.status_code == 400, response.text
        assert response.json()["message"].startswith(message)
    dry = alice.post("allocations/dry-run", json={"requests": [{"gpus": 0.25, **body}]})
    assert dry.status_code == 400 and dry.json()["message"].startswith(f"requests[0].{message}")


def test_nodes_show_the_cores_and_memory_they_offer(alice) -> None:
    [node] = alice.get("nodes").json()
    assert (node["cpu"], node["memory_gib"]) == (8.0, 32.0)


def test_usage_counts_cpu_and_memory_hours(make_user, api, service) -> None:
    _, token = make_user(groups=["vision"])
    bob = api(token)
    job = submit(bob, command="sleep 1", gpus=0.5, cpu=2, memory_gib=4)
    wait_state(bob, job["id"], "succeeded", timeout=30)
    [row] = bob.get("usage").json()["rows"]
    hours = row["gpu_hours"] / 0.5
    # each figure is rounded to six decimals (half a unit off at most): gpu_hours' error is
    # multiplied by 2 / 0.5 = 4 (and 8) on the way to hours, then the compared figure's own
    unit = 0.5e-6
    assert row["cpu_hours"] == pytest.approx(2 * hours, abs=4 * unit + unit + 1e-9)
    assert row["memory_gib_hours"] == pytest.approx(4 * hours, abs=8 * unit + unit + 1e-9)
    lines = bob.get("usage.csv").text.splitlines()
    assert lines[0] == "project,user,gpu_hours,cpu_hours,memory_gib_hours,start,end"
    assert lines[1].split(",")[3] == f"{row['cpu_hours']:.6f}"


def test_metrics_per_resource(make_user, api, service) -> None:
    _, token = make_user(groups=["nlp"])
    carol = api(token)
    job = submit(carol, command="sleep 30", gpus=0.25, cpu=3, memory_gib=2)
    wait_state(carol, job["id"], "running")
    metrics = "../../metrics"
    held = 'frachub_queue_allocated_cpu_cores{queue="nlp"} 3.0'
    wait_for(lambda: held in carol.get(metrics).text, 10, "the next cycle's metrics")
    text = carol.get(metrics).text
    assert 'frachub_queue_allocated_memory_gib{queue="nlp"} 2.0' in text
    assert 'frachub_node_cpu_cores{node="local"} 8.0' in text
    assert 'frachub_node_memory_gib{node="local"} 32.0' in text
    carol.delete(f"workloads/{job['id']}")
    wait_state(carol, job["id"], "cancelled")
    gone = 'frachub_queue_allocated_cpu_cores{queue="nlp"} 0.0'
    wait_for(lambda: gone in carol.get(metrics).text, 10, "the project's CPU released")


def test_a_cpu_only_job_runs_with_no_gpu(alice) -> None:
    job = submit(alice, command='echo "gpus=[$CUDA_VISIBLE_DEVICES]"', gpus=0, cpu=1)
    assert (job["gpus"], job["cpu"]) == (0.0, 1.0)
    done = wait_state(alice, job["id"], "succeeded", "failed", timeout=30)
    assert done["state"] == "succeeded", done
    assert [replica["gpus"] for replica in done["placement"]] == [[]]
    assert "gpus=[]" in alice.get(f"workloads/{job['id']}/logs").text
    body = {"command": "true", "gpus": 0, "cpu": 0, "memory_gib": 0}  # the defaults named away
    refused = alice.post("workloads", json=body)
    assert refused.status_code == 400
    assert refused.json()["message"] == (
        "gpus: 0 (a CPU-only job) needs cpu or memory_gib, and no gpu_memory_gib"
    )
