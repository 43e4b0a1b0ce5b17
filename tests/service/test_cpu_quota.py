"""A project at its CPU limit, through the REST API: its next job waits with a reason that
names CPUs (issue 26's "done when"), and starts once the CPUs are given back."""

from __future__ import annotations

import httpx
import pytest
from hubharness import ServiceProcess
from service_client import service_config, submit, wait_for, wait_state

EXTRA = """
c.FracHubService.queues = [
    {"name": "vision", "deserved_gpus": 1, "limit_cpu": 1},
    {"name": "nlp", "deserved_gpus": 1},
]
c.LocalBackend.declared_inventory = [
    {"name": "local", "gpus": 2, "gpu_memory_gib": 80, "cpu": 8, "memory_gib": 32},
]
"""


@pytest.fixture(scope="module")
def service(hub, tmp_path_factory):
    process = ServiceProcess(
        hub, service_config(gpus=2, grace=1, extra=EXTRA), tmp_path_factory.mktemp("cpu-quota")
    ).start()
    yield process
    process.stop()


@pytest.fixture
def alice(service, make_user, api) -> httpx.Client:
    _, token = make_user(groups=["vision"])
    return api(token)


def test_a_project_at_its_cpu_limit_queues_its_next_job_naming_cpus(alice) -> None:
    first = submit(alice, command="sleep 60", gpus=0, cpu=0.5)
    wait_state(alice, first["id"], "running")
    second = submit(alice, command="true", gpus=0, cpu=1)
    waiting = wait_for(
        lambda: (
            "CPU" in ((w := alice.get(f"workloads/{second['id']}").json())["pending_reason"] or "")
            and w
        ),
        20,
        "the cycle's pending reason",
    )
    assert waiting["state"] == "pending"
    assert "needs 1 CPU; vision uses 0.5 of its 1-CPU limit" in waiting["pending_reason"]
    assert alice.delete(f"workloads/{first['id']}").status_code in (200, 202, 204)
    assert wait_state(alice, second["id"], "succeeded", timeout=30)["state"] == "succeeded"
