"""Notebook allocations (what the spawner uses) and the queue tree admins edit."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from hubharness import ServiceProcess
from service_client import service_config, submit, wait_for, wait_state

from .conftest import DATABASES, database_config


@pytest.fixture(scope="module", params=DATABASES)
def service(hub, tmp_path_factory, request):
    """The service on SQLite, then on PostgreSQL (the same tests on both stores)."""
    process = ServiceProcess(
        hub,
        service_config(gpus=2, grace=1, extra=database_config(request, request.param)),
        tmp_path_factory.mktemp("alloc"),
    ).start()
    yield process
    process.stop()


@pytest.fixture
def client(service, make_user, api):
    def make(groups=("vision",), admin: bool = False) -> httpx.Client:
        _, token = make_user(groups=groups, admin=admin)
        return api(token)

    return make


def release_all(c: httpx.Client) -> None:
    for item in c.get("allocations?state=pending,running").json():
        c.delete(f"allocations/{item['id']}")


def test_a_notebook_gets_its_share_at_once_and_releases_it(client) -> None:
    alice = client()
    created = alice.post("allocations", json={"gpus": 0.5, "server_name": "gpu"})
    assert created.status_code == 201, created.text
    allocation = created.json()
    ready = alice.get(
        f"allocations/{allocation['id']}?wait=10&version={allocation['version']}"
    ).json()
    assert ready["state"] == "running" and ready["kind"] == "interactive"
    assert ready["placement"][0]["gpus"][0]["share"] == 0.5
    assert ready["server_name"] == "gpu"
    twice = alice.post("allocations", json={"gpus": 0.5, "server_name": "gpu"})
    assert twice.status_code == 409 and "already holds" in twice.json()["message"]
    released = alice.delete(f"allocations/{allocation['id']}").json()
    assert released["state"] == "released"
    again = alice.delete(f"allocations/{allocation['id']}")
    assert again.status_code == 409


def test_a_notebook_beyond_the_quota_waits_with_a_reason(client) -> None:
    """vision deserves 1 GPU; notebooks stay inside it, so a third 0.5-GPU notebook waits."""
    alice, carol = client(), client()
    first = alice.post("allocations", json={"gpus": 0.5}).json()
    second = carol.post("allocations", json={"gpus": 0.5}).json()
    for c, a in ((alice, first), (carol, second)):
        wait_for(lambda c=c, a=a: c.get(f"allocations/{a['id']}").json()["state"] == "running")
    dave = client()
    third = dave.post("allocations", json={"gpus": 0.5}).json()
    waited = dave.get(f"allocations/{third['id']}?wait=5&version=-1").json()
    waited = wait_for(
        lambda: (v := dave.get(f"allocations/{third['id']}").json())["queue_position"] and v
    )
    assert waited["state"] == "pending"
    assert "deserved" in waited["pending_reason"], waited["pending_reason"]
    # server-sent events: the first event says pending; releasing alice's lets dave's start
    events: list[dict] = []

    def listen() -> None:
        with dave.stream("GET", f"allocations/{third['id']}/events") as stream:
            for line in stream.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))

    listener = threading.Thread(target=listen)
    listener.start()
    wait_for(lambda: events, 10, "the first event")
    assert events[0]["state"] == "pending" and events[0]["queue_position"] == 1
    time.sleep(0.3)
    alice.delete(f"allocations/{first['id']}")
    listener.join(timeout=15)
    assert not listener.is_alive()
    assert events[-1]["state"] == "running"
    release_all(carol)
    release_all(dave)


def test_notebook_claims_its_quota_back_from_borrowed_training(client) -> None:
    """nlp's training borrows both GPUs; a vision notebook inside vision's quota preempts."""
    bob, alice = client(("nlp",)), client(("vision",))
    assert all(gpu["used"] == 0 for node in bob.get("nodes").json() for gpu in node["gpus"]), [
        gpu["holders"] for node in bob.get("nodes").json() for gpu in node["gpus"]
    ]
    jobs = [submit(bob, command="sleep 120", gpus=1) for _ in range(2)]
    for job in jobs:
        wait_state(bob, job["id"], "running")
    notebook = alice.post("allocations", json={"gpus": 0.25}).json()
    ready = wait_for(
        lambda: (
            (v := alice.get(f"allocations/{notebook['id']}").json())["state"] == "running" and v
        ),
        15,
        "the notebook to get its share back",
    )
    assert ready["placement"]
    states = sorted(bob.get(f"workloads/{job['id']}").json()["state"] for job in jobs)
    assert states == ["pending", "running"], states
    release_all(alice)
    for job in jobs:
        bob.delete(f"workloads/{job['id']}")


def test_admins_shape_the_queue_tree(client) -> None:
    admin = client((), admin=True)
    made = admin.post("queues", json={"name": "research", "priority": 1})
    assert made.status_code == 201, made.text
    assert made.json()["deserved_gpus"] is None
    for name, deserved in (("research-a", 1), ("research-b", 0.5)):
        child = admin.post(
            "queues",
            json={
                "name": name,
                "parent": "research",
                "deserved_gpus": deserved,
                "members": ["someone"],
            },
        )
        assert child.status_code == 201, child.text
    tree = {q["name"]: q for q in admin.get("queues").json()}
    assert tree["research"]["children"] == ["research-a", "research-b"]
    assert tree["research-a"]["members"] == ["someone"]
    changed = admin.patch("queues/research-b", json={"over_quota_weight": 3})
    assert changed.json()["over_quota_weight"] == 3 and changed.json()["deserved_gpus"] == 0.5
    for body, words in (
        ({"name": "research"}, "exists"),
        ({"name": "loop", "parent": "nowhere"}, "parent: unknown queue"),
        ({"name": "neg", "deserved_gpus": -1}, "deserved_gpus: must be >= 0"),
        ({"name": "x", "weight": 2}, "weight: unknown field"),
    ):
        refused = admin.post("queues", json=body)
        assert refused.status_code in (400, 409) and words in refused.json()["message"], body
    cycle = admin.patch("queues/research", json={"parent": "research-a"})
    assert cycle.status_code == 400 and "cycle" in cycle.json()["message"]
    busy = admin.delete("queues/research")
    assert busy.status_code == 409 and "child queues" in busy.json()["message"]
    for name in ("research-a", "research-b", "research"):
        assert admin.delete(f"queues/{name}").status_code == 204
    assert admin.get("queues/research").status_code == 404


def test_a_queue_with_work_cannot_be_deleted(client) -> None:
    admin = client((), admin=True)
    admin.post("queues", json={"name": "temp", "deserved_gpus": 0, "members": []})
    job = submit(admin, project="temp", command="sleep 60", gpus=0.25)
    refused = admin.delete("queues/temp")
    assert refused.status_code == 409 and "active workloads" in refused.json()["message"]
    admin.delete(f"workloads/{job['id']}")
    wait_state(admin, job["id"], "cancelled")
    assert admin.delete("queues/temp").status_code == 204


def test_admins_give_queues_cpu_and_memory_quotas(client) -> None:
    """Rule 3b through the API: CPU and memory quotas are set, shown, kept by a change of
    another field, refused out of bounds in words naming the field, and counted by the
    engine (the queue's CPU standing appears once a queue has a CPU quota)."""
    admin = client((), admin=True)
    made = admin.post(
        "queues",
        json={
            "name": "cpuq",
            "deserved_gpus": 0,
            "deserved_cpu": 8,
            "limit_cpu": 16.5,
            "over_quota_weight_cpu": 2,
            "limit_memory_gib": 64,
        },
    )
    assert made.status_code == 201, made.text
    shown = made.json()
    assert (shown["deserved_cpu"], shown["limit_cpu"], shown["over_quota_weight_cpu"]) == (
        8,
        16.5,
        2,
    )
    assert (shown["deserved_memory_gib"], shown["limit_memory_gib"]) == (None, 64)
    changed = admin.patch("queues/cpuq", json={"over_quota_weight": 3, "deserved_memory_gib": 32})
    assert changed.status_code == 200, changed.text
    assert changed.json()["limit_cpu"] == 16.5 and changed.json()["deserved_memory_gib"] == 32
    cleared = admin.patch("queues/cpuq", json={"limit_cpu": None})
    assert cleared.json()["limit_cpu"] is None and cleared.json()["deserved_cpu"] == 8
    for body, words in (
        ({"deserved_cpu": -1}, "deserved_cpu: must be >= 0"),
        ({"limit_cpu": 0.0001}, "limit_cpu: cores are counted in thousandths"),
        ({"limit_memory_gib": 2e9}, "limit_memory_gib: must be at most 1e+09"),
        ({"over_quota_weight_memory": "2"}, "over_quota_weight_memory: must be a number"),
    ):
        refused = admin.patch("queues/cpuq", json=body)
        assert refused.status_code == 400 and words in refused.json()["message"], refused.text

    def counted() -> dict | None:
        queue = admin.get("queues/cpuq").json()
        return queue if queue["fair_share_cpu"] is not None else None

    queue = wait_for(counted, what="the engine to count CPUs")
    assert queue["allocated_cpu"] == 0 and queue["allocated_memory_gib"] == 0
    assert admin.delete("queues/cpuq").status_code == 204
