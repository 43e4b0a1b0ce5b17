"""Node labels and GPU models through the real service: a declared inventory with topology
labels and two GPU models, jobs submitted over HTTP behind a real hub.

A gang lands within one topology zone; a job that names a GPU model (``gpu_model``) waits
for that model, with a pending reason that says so, while GPUs of another model sit free.
"""

from __future__ import annotations

import pytest
from hubharness import module_service
from service_client import service_config, submit, wait_for, wait_state, workload

ZONE = "topology.kubernetes.io/zone"

INVENTORY = f"""
c.FracHubService.queues = [{{"name": "lab", "deserved_gpus": 16}}]
c.LocalBackend.declared_inventory = [
    {{"name": "a100-a-0", "gpus": 4, "model": "A100", "labels": {{"{ZONE}": "a"}}}},
    {{"name": "a100-b-0", "gpus": 4, "model": "A100", "labels": {{"{ZONE}": "b"}}}},
    {{"name": "a100-b-1", "gpus": 4, "model": "A100", "labels": {{"{ZONE}": "b"}}}},
    {{"name": "t4", "gpus": 4, "model": "T4", "labels": {{"{ZONE}": "a"}}}},
]
"""


service = module_service(service_config(extra=INVENTORY), "labels")


def test_a_gang_stays_in_one_zone_and_a_job_waits_for_its_gpu_model(service, make_user, api):
    _, token = make_user(groups=("lab",))
    client = api(token)
    nodes = {node["name"]: node for node in client.get("nodes").json()}
    assert nodes["a100-b-1"]["labels"] == {ZONE: "b"}
    assert nodes["t4"]["gpu_model"] == "T4"

    busy = submit(client, gpus=2, gpu_model="A100")
    assert busy["gpu_model"] == ["A100"]
    busy = wait_state(client, busy["id"], "running")
    assert [r["node"] for r in busy["placement"]] == ["a100-a-0"]

    # The first replica would pack onto a100-a-0 (fewest free), but zone a has no room for
    # the others on an A100 (the T4 there is the wrong model): the whole gang goes to zone b.
    gang = submit(client, gpus=2, replicas=3, gpu_model=["A100"])
    gang = wait_state(client, gang["id"], "running")
    assert {nodes[r["node"]]["labels"][ZONE] for r in gang["placement"]} == {"b"}

    for _ in range(2):  # the A100s' last two GPUs on each of a100-a-0 and a100-b-1
        wait_state(client, submit(client, gpus=2, gpu_model="A100")["id"], "running")
    held = submit(client, gpus=1, gpu_model="A100")
    anywhere = wait_state(client, submit(client, gpus=1)["id"], "running")
    assert [r["node"] for r in anywhere["placement"]] == ["t4"]

    reason = wait_for(
        lambda: (
            "gpu_model" in (why := workload(client, held["id"])["pending_reason"] or "") and why
        ),
        what="the held job's pending reason",
    )
    assert workload(client, held["id"])["state"] == "pending"
    assert reason.startswith("waits for a GPU of model A100 (its gpu_model): needs 1 GPU"), reason
    assert "other models do not count" in reason, reason

    # a model the cluster does not have can never start: refused at once, in the
    # engine's words
    never = client.post("workloads", json={"command": "true", "gpus": 0.5, "gpu_model": "H100"})
    assert never.status_code == 409, never.text
    assert never.json()["message"] == (
        "a job that needs a GPU of model H100 (its gpu_model); this cluster has only A100, T4, "
        "so it can never start"
    )


@pytest.mark.parametrize(
    "value", [7, "", [], ["A100", 3], ["x" * 254]], ids=["number", "empty", "none", "mixed", "long"]
)
def test_a_bad_gpu_model_is_refused_naming_the_field(service, make_user, api, value):
    _, token = make_user(groups=("lab",))
    response = api(token).post("workloads", json={"command": "true", "gpus": 1, "gpu_model": value})
    assert response.status_code == 400
    assert response.json()["message"].startswith("gpu_model: must be a GPU model name")


def test_a_dry_run_naming_a_gpu_model_is_decided_on_that_model(service, make_user, api):
    """The spawn form's hint for a GPU-model choice: with every A100 held by work that cannot
    be preempted and the T4 free, "0.5 of an A100" waits (and the allocation then does wait),
    while "0.5 of any GPU" starts now and "0.5 of an H100" never."""
    admin = api(make_user(admin=True)[1])
    for item in admin.get("workloads", params={"active": 1}).json():
        admin.delete(f"workloads/{item['id']}")
    wait_for(
        lambda: not admin.get("workloads", params={"active": 1}).json(),
        what="the cluster to be idle",
    )
    _, token = make_user(groups=("lab",))
    client = api(token)
    for _ in range(3):
        job = submit(client, gpus=4, gpu_model="A100", preemptible=False, command="sleep 120")
        wait_state(client, job["id"], "running")
    answer = client.post(
        "allocations/dry-run",
        json={
            "requests": [
                {"gpus": 0.5, "gpu_model": "A100"},
                {"gpus": 0.5},
                {"gpus": 0.5, "gpu_model": ["H100"]},
            ]
        },
    )
    assert answer.status_code == 200, answer.text
    on_a100, anywhere, on_h100 = answer.json()["results"]
    assert on_a100["outcome"] == "wait", on_a100
    assert "model A100" in on_a100["message"], on_a100
    assert anywhere["outcome"] == "now" and "t4" in anywhere["message"], anywhere
    assert on_h100["outcome"] == "never", on_h100
    # what the hint said is what happens
    held = client.post("allocations", json={"gpus": 0.5, "gpu_model": "A100"})
    assert held.status_code in (200, 201, 202), held.text
    assert workload(client, held.json()["id"])["state"] == "pending"
    client.delete(f"allocations/{held.json()['id']}")
    bad = client.post("allocations/dry-run", json={"requests": [{"gpus": 0.5, "gpu_model": 7}]})
    assert bad.status_code == 400
    assert bad.json()["message"].startswith("requests[0].gpu_model: must be a GPU model"), bad.text
    for item in client.get("workloads", params={"active": 1}).json():
        client.delete(f"workloads/{item['id']}")
