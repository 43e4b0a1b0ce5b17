"""One request cannot hurt another: each poison request an attacker or a careless
user sent is answered 4xx with the field named, stores nothing, and leaves every other user's
requests and the next scheduling cycle working at once; abandoned streams end with their
client."""

from __future__ import annotations

import asyncio
import json
import re

import httpx
from hubharness import SERVICE_PREFIX, ServiceProcess, module_service
from service_client import CHECKED, service_config, submit, wait_for, wait_state

BIG = 10_000_000
MAX_ID = 2**63 - 1


def job(**fields: object) -> dict:
    return {"command": "true", "gpus": 0.25, **fields}


def raw(text: str) -> bytes:
    return text.encode()


MEMORY = "gpu_memory_gib"
# (who, method, path, body: JSON value or raw bytes, words in the 4xx message)
POISONS = [
    ("user", "POST", "workloads", job(priority=-(10**20)), "priority"),
    ("user", "POST", "workloads", {"command": "true", MEMORY: 1e17}, MEMORY),
    ("user", "POST", "workloads", {"command": "true", MEMORY: 1e308}, MEMORY),
    ("user", "POST", "workloads", {"command": "true", MEMORY: 0.0001}, MEMORY),
    ("user", "POST", "workloads", {"command": "true", MEMORY: 200}, "can never start"),
    ("user", "POST", "workloads", job(priority=-(2**63) - 1), "priority"),
    ("user", "POST", "workloads", job(gpus=10**400), "gpus"),
    ("user", "POST", "workloads", job(gpus=4096), "gpus"),
    ("user", "POST", "workloads", job(gpus=4), "can never start"),
    ("user", "POST", "workloads", job(replicas=2**64), "replicas"),
    ("user", "POST", "workloads", job(max_runtime_seconds=1e300), "max_runtime_seconds"),
    ("user", "POST", "workloads", raw('{"command": "true", "gpus": 1e400}'), "gpus"),
    ("user", "POST", "workloads", raw('{"command": "t", "gpus": 1' + "0" * 5000 + "}"), "body"),
    ("user", "GET", f"workloads/{MAX_ID + 1}", None, "not found"),
    ("user", "DELETE", f"workloads/{10**30}", None, "not found"),
    ("user", "GET", f"workloads/{10**30}/logs", None, "not found"),
    ("user", "GET", f"allocations/{MAX_ID + 1}", None, "not found"),
    ("user", "GET", f"allocations/{MAX_ID + 1}/events", None, "not found"),
    ("user", "GET", f"workloads?offset={10**30}", None, "offset"),
    ("user", "GET", f"workloads?limit={MAX_ID + 1}", None, "limit"),
    ("user", "GET", "usage?start=", None, "start"),
    ("user", "GET", "workloads?limit=", None, "limit"),
    ("user", "GET", "workloads?project=", None, "project"),
    ("admin", "PATCH", "queues/hardening-q", None, "body"),
    ("user", "GET", "usage?end=0001-01-01T00:00:00%2B14:00", None, "end"),
    ("user", "GET", "usage?end=9999-12-31T23:59:59-14:00", None, "end"),
    ("user", "POST", "workloads", b"[" * 5000 + b"]" * 5000, "body"),
    ("user", "POST", "workloads", job(env={"A": [[[[[[[[[["x"]]]]]]]]]]}), "env"),
    ("admin", "POST", "queues", {"name": "poison-q", "priority": 10**20}, "priority"),
    ("admin", "POST", "queues", {"name": "poison-q", "deserved_gpus": 1e300}, "deserved_gpus"),
    ("admin", "POST", "queues", {"name": "poison-q", "members": ["\x00"]}, "members"),
    ("admin", "PATCH", "queues/hardening-q", {"priority": -(2**70)}, "priority"),
    ("admin", "PATCH", "queues/hardening-q", raw('{"limit_gpus": 1e309}'), "limit_gpus"),
    ("user", "POST", "workloads", job(command="echo \x00"), "command"),
    ("user", "POST", "workloads", job(command=["echo", "a\x00"]), "command[1]"),
    ("user", "POST", "workloads", job(env={"A": "\x00"}), "env.A"),
    ("user", "POST", "workloads", job(working_dir="/tmp\x00"), "working_dir"),
    ("user", "POST", "workloads", raw('{"command": "echo \\ud800", "gpus": 0.25}'), "surrogate"),
    ("user", "POST", "workloads", raw('{"command": "t", "env": {"A": "\\udfff"}}'), "env.A"),
    ("user", "POST", "workloads", job(command="x" * BIG), "command"),
    ("user", "POST", "workloads", job(env={"A": "x" * BIG}), "env.A"),
    ("user", "POST", "workloads", job(working_dir="/" * 5000), "working_dir"),
    ("user", "POST", "workloads", job(name="n" * BIG), "name"),
    ("user", "POST", "allocations", {"server_name": "s" * 300, "gpus": 0.25}, "server_name"),
    ("user", "POST", "allocations", {"server_name": "a\x00", "gpus": 0.25}, "server_name"),
    ("user", "POST", "allocations", {"server_name": "a/b", "gpus": 0.25}, "server_name"),
    ("user", "PUT", "workloads", {}, "405"),
]


service = module_service(service_config(gpus=2, grace=1), "hardening")


def send(client: httpx.Client, method: str, path: str, body: object) -> httpx.Response:
    if isinstance(body, bytes):
        return client.request(
            method, path, content=body, headers={"Content-Type": "application/json"}
        )
    if body is None:
        return client.request(method, path)
    return client.request(method, path, json=body)


def others_work(bob: httpx.Client) -> list[str]:
    """Another user's requests and the next cycle, at once: what failed, if anything."""
    failed = []
    for path in ("workloads", "queues", "user", "nodes", "usage"):
        response = bob.get(path)
        if response.status_code != 200:
            failed.append(f"GET {path}: {response.status_code} {response.text[:200]}")
    response = bob.post("workloads", json={"command": "true", "gpus": 0.25})
    if response.status_code != 201:
        return [*failed, f"POST workloads: {response.status_code} {response.text[:200]}"]
    done = wait_state(bob, response.json()["id"], "succeeded", "failed", timeout=20)
    if done["state"] != "succeeded":
        failed.append(f"bob's job {done['state']}: {done.get('message')}")
    return failed


def test_poison_requests_hurt_nobody_and_store_nothing(service, make_user, api) -> None:
    alice, alice_token = make_user(groups=["vision"])
    _, bob_token = make_user(groups=["nlp"])
    _, admin_token = make_user(admin=True)
    clients = {"user": api(alice_token, timeout=60), "admin": api(admin_token, timeout=60)}
    bob, admin = api(bob_token), clients["admin"]
    admin.post("queues", json={"name": "hardening-q", "deserved_gpus": 0})

    def queues() -> list:
        fields = ("name", "parent", "deserved_gpus", "limit_gpus", "priority", "members")
        return [{k: q[k] for k in fields} for q in admin.get("queues").json()]

    queues_before = queues()
    assert others_work(bob) == []
    hurt: dict[str, list[str]] = {}
    for who, method, path, body, words in POISONS:
        response = send(clients[who], method, path, body)
        label = f"{method} {path[:60]} {str(body)[:80]}"
        assert 400 <= response.status_code < 500, (label, response.text[:300])
        message = response.json()["message"]
        assert words in message or words == str(response.status_code), (label, message)
        assert len(message) < 500, label  # a 10 MB value is not echoed back
        failed = others_work(bob)
        if failed:
            hurt[label] = failed
    assert hurt == {}
    # nothing stored: alice has no workloads or allocations, the queues are as they were
    assert admin.get("workloads", params={"user": alice}).json() == []
    assert admin.get("allocations", params={"user": alice}).json() == []
    assert queues() == queues_before


def test_records_name_who_acted(hub, service, make_user, api) -> None:
    alice, alice_token = make_user(groups=["vision"])
    admin_name, admin_token = make_user(admin=True)
    owner, admin = api(alice_token), api(admin_token)
    spawner = httpx.Client(
        base_url=owner.base_url,
        headers={"Authorization": f"token {hub.frachub_token}"},
        event_hooks=CHECKED,
    )
    with spawner:
        cancelled = {}
        for who, client in (("its owner", owner), (f"admin {admin_name}", admin)):
            job = submit(owner, command="sleep 60", gpus=0.25)
            wait_state(owner, job["id"], "running")
            client.delete(f"workloads/{job['id']}")
            cancelled[who] = wait_state(owner, job["id"], "cancelled")
        notebook = spawner.post("allocations", json={"user": alice, "gpus": 0.25})
        released = spawner.delete(f"allocations/{notebook.json()['id']}").json()
    for who, record in cancelled.items():
        assert record["message"] == f"cancelled by {who}"
        assert f"stopping at the request of {who}" in [e["message"] for e in record["events"]]
    assert released["message"] == f"released by the frachub service for {alice}"


def test_405_names_the_allowed_methods(service, make_user, api) -> None:
    _, token = make_user(groups=["vision"])
    response = api(token).put("workloads/1")
    assert response.status_code == 405
    assert response.headers["Allow"] == "DELETE, GET"


# -- streams end with their client -----------------------------------------------------------


def task_count(service: ServiceProcess, token: str) -> int:
    """The service's live asyncio tasks, from its metrics, on a fresh connection."""
    with httpx.Client(timeout=10) as client:
        text = client.get(
            f"{service.url}{SERVICE_PREFIX}metrics",
            headers={"Authorization": f"token {token}", "Connection": "close"},
        ).text
    return int(float(re.search(r"^frachub_service_tasks (\S+)$", text, re.M).group(1)))


async def abandon(service: ServiceProcess, token: str, path: str, count: int) -> int:
    """Open ``count`` streams straight to the service, read their first bytes, and hang up.
    Returns how many answered 200."""
    api = service.api_url.removeprefix(service.url)
    port = int(service.url.rsplit(":", 1)[1])

    async def one() -> bool:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            f"GET {api}{path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: token {token}\r\n\r\n".encode()
        )
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), 20)
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
        writer.close()
        return b" 200 " in status

    answers = []
    for start in range(0, count, 50):
        answers += await asyncio.gather(*(one() for _ in range(start, min(start + 50, count))))
    return sum(answers)


def test_abandoned_follows_and_event_streams_end(service, make_user, api) -> None:
    _, owner_token = make_user(groups=["nlp"])
    _, first_token = make_user(groups=["vision"])
    _, second_token = make_user(groups=["vision"])
    owner = api(owner_token)
    job = submit(owner, command="echo started; sleep 600", gpus=0.25)
    wait_state(owner, job["id"], "running")
    wait_for(lambda: "started" in owner.get(f"workloads/{job['id']}/logs").text, 10, "output")
    # a notebook holding vision's whole quota, and a second one that must wait for it
    api(first_token).post("allocations", json={"gpus": 1})
    waiting = api(second_token).post("allocations", json={"gpus": 1}).json()
    assert waiting["state"] == "pending"
    baseline = task_count(service, owner_token)
    try:
        follows = asyncio.run(
            abandon(service, owner_token, f"workloads/{job['id']}/logs?follow=1", 200)
        )
        events = asyncio.run(
            abandon(service, second_token, f"allocations/{waiting['id']}/events", 50)
        )
        polls = asyncio.run(
            abandon(service, second_token, f"allocations/{waiting['id']}?wait=60", 50)
        )
        assert (follows, events, polls) == (200, 50, 50)
        # the 15 s wait for news of an event stream and the long poll's 60 s are not waited out
        settled = wait_for(
            lambda: task_count(service, owner_token) <= baseline, 8, "streams to end"
        )
        assert settled
    finally:
        owner.delete(f"workloads/{job['id']}")
        for token in (first_token, second_token):
            for allocation in api(token).get("allocations?state=pending,running").json():
                api(token).delete(f"allocations/{allocation['id']}")
    text = json.dumps(owner.get(f"workloads/{job['id']}").json())
    assert "cancel" in text


def test_a_token_in_a_url_never_reaches_the_log(service, make_user) -> None:
    """A token sent in the query string (refused: tokens go in the header) is logged as
    ``[redacted]``, by the service's request log and by tornado's warning alike."""
    _, token = make_user(groups=["vision"])
    with httpx.Client(base_url=service.api_url, event_hooks=CHECKED) as client:
        for path in (
            f"workloads?token={token}",
            f"workloads?limit=5&access_token={token}",
            f"no-such-endpoint?token={token}",
        ):
            assert client.get(path).status_code in (403, 404)
    log = wait_for(
        lambda: (text := service.log_text()).count("token=[redacted]") >= 3 and text,
        10,
        "the refused requests in the service's log",
    )
    assert token not in log
