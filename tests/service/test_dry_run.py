"""The spawn form's hints come from ``POST allocations/dry-run``: the scheduler's own decision
for each request as if it arrived now. Against a real hub and service with real job
processes, each hint is then checked against what actually happens when the same request is
made: starts now, starts after reclaiming the GPUs another project borrowed, waits on the
quota, never. And jobs, gangs included, that can never start are refused at submit (409).

Two GPUs; vision and nlp deserve one each (tests/service_client.py).
"""

from __future__ import annotations

import httpx
import pytest
from hubharness import module_service
from service_client import service_config, wait_for

SLEEP = ["python", "-c", "import time; time.sleep(120)"]


service = module_service(service_config(gpus=2), "dry")


@pytest.fixture
def member(service, make_user, api):
    clients: list[httpx.Client] = []

    def make(*groups: str, admin: bool = False) -> tuple[str, httpx.Client]:
        name, token = make_user(groups=groups, admin=admin)
        clients.append(api(token))
        return name, clients[-1]

    yield make
    for client in clients:  # leave the cluster idle for the next test
        for item in client.get("workloads", params={"active": 1}).json():
            path = "allocations" if item["kind"] == "interactive" else "workloads"
            client.delete(f"{path}/{item['id']}")
        wait_for(
            lambda c=client: not c.get("workloads", params={"active": 1}).json(),
            what="the test's work to end",
        )


def dry_run(client: httpx.Client, *requests: dict, **fields) -> list[dict]:
    answer = client.post("allocations/dry-run", json={"requests": list(requests), **fields})
    assert answer.status_code == 200, answer.text
    return answer.json()["results"]


def running(client: httpx.Client, path: str, item: dict) -> dict:
    return wait_for(
        lambda: (v := client.get(f"{path}/{item['id']}").json())["state"] == "running" and v,
        what=f"{path} {item['id']} to run",
    )


def test_on_an_idle_cluster_choices_start_now_or_never(member) -> None:
    _, alice = member("vision")
    now, memory, beyond, huge = dry_run(
        alice, {"gpus": 0.5}, {"gpu_memory_gib": 40}, {"gpus": 2}, {"gpus": 4, "preemptible": True}
    )
    assert now["outcome"] == "now" and now["message"].startswith("starts now on local")
    assert memory["outcome"] == "now" and memory["gpu_memory_gib"] == 40
    assert beyond["outcome"] == "never"
    assert "vision deserves 1 GPU; a notebook of 2 GPUs can never start" in beyond["message"]
    assert huge["outcome"] == "never" and "the largest node has 2 GPUs" in huge["message"]
    # a dry run stores nothing
    assert alice.get("workloads").json() == []


def test_the_hints_match_what_then_happens(member) -> None:
    _, alice = member("vision")
    _, bob = member("vision")
    _, carol = member("nlp")
    # alice's preemptible job borrows nlp's idle GPU
    job = alice.post("workloads", json={"command": SLEEP, "gpus": 2}).json()
    running(alice, "workloads", job)

    (hint,) = dry_run(carol, {"gpus": 1})
    assert hint["outcome"] == "reclaim", hint
    assert hint["reclaims_from"] == ["vision"]
    assert hint["message"] == (
        "starts after reclaiming GPUs that vision borrowed (1 workload); "
        "they get 1s to save their work"
    )
    # what then happens: carol's notebook starts once alice's job has been evicted
    notebook = carol.post("allocations", json={"gpus": 1}).json()
    running(carol, "allocations", notebook)
    evicted = carol.get(f"allocations/{notebook['id']}").json()
    assert evicted["state"] == "running"
    assert alice.get(f"workloads/{job['id']}").json()["state"] == "pending"

    # bob's notebook would wait on vision's quota, now that alice holds it with a notebook
    alice.delete(f"workloads/{job['id']}")
    held = alice.post("allocations", json={"gpus": 1}).json()
    running(alice, "allocations", held)
    (wait,) = dry_run(bob, {"gpus": 0.5})
    assert wait["outcome"] == "wait", wait
    assert "vision's notebooks already use its deserved 1 GPU" in wait["message"]
    waiting = bob.post("allocations", json={"gpus": 0.5}).json()
    seen = wait_for(
        lambda: (
            "deserved" in (v := bob.get(f"allocations/{waiting['id']}").json())["pending_reason"]
            and v
        ),
        what="bob's pending reason",
    )
    assert seen["state"] == "pending"
    assert "vision's notebooks already use its deserved 1 GPU" in seen["pending_reason"]


def test_a_dry_run_for_someone_else_needs_the_admin_scope(member) -> None:
    alice, _ = member("vision")
    _, bob = member("vision")
    admin_name, admin = member(admin=True)
    refused = bob.post("allocations/dry-run", json={"user": alice, "requests": [{"gpus": 1}]})
    assert refused.status_code == 403 and "custom:frachub:admin" in refused.json()["message"]
    (result,) = dry_run(admin, {"gpus": 1}, user=alice)
    assert result["outcome"] == "now"
    # the admin is in no project: told to name one, not to ask an admin
    nobody = admin.post("allocations/dry-run", json={"requests": [{"gpus": 1}]})
    assert nobody.status_code == 400, nobody.text
    assert nobody.json()["message"] == (
        "project: is required: "
        f"{admin_name} is in no project, and as an admin may name any of vision, nlp, guests"
    )
    (named,) = dry_run(admin, {"gpus": 1}, project="nlp")
    assert named["outcome"] == "now"


@pytest.mark.parametrize(
    "body, words",
    [
        (
            {"gpus": 2, "replicas": 3},
            "a job that can never start here: even on the idle cluster it needs 3 replicas × 2 "
            "GPUs on one node, all at once",
        ),
        (
            {"gpus": 1, "replicas": 3, "preemptible": True},
            "needs 3 replicas × 1 GPU, all at once",
        ),
        ({"gpus": 4}, "a job that needs 4 GPUs on one node; the largest node has 2 GPUs"),
        (
            {"gpus": 2, "preemptible": False},
            "even on the idle cluster it would wait: vision's non-preemptible jobs use 0 GPUs of "
            "its deserved 1 GPU; 2 GPUs more would go beyond it",
        ),
    ],
    ids=["gang-of-3x2", "gang-of-3x1", "beyond-a-node", "non-preemptible-beyond-quota"],
)
def test_a_job_that_can_never_start_is_refused_at_submit(member, body, words) -> None:
    _, alice = member("vision")
    refused = alice.post("workloads", json={"command": SLEEP, **body})
    assert refused.status_code == 409, refused.text
    assert words in refused.json()["message"]
    assert alice.get("workloads").json() == []


def test_a_gang_that_fits_the_idle_cluster_is_taken(member) -> None:
    _, alice = member("vision")
    gang = alice.post("workloads", json={"command": SLEEP, "gpus": 1, "replicas": 2})
    assert gang.status_code == 201, gang.text
    running(alice, "workloads", gang.json())
