"""Who may do what, refusal by refusal: every row is one request and the status it must get.

One service and a handful of principals serve the whole table. Another user's workload
answers 404 (as the hub does), a missing scope 403 naming the scope, a project the user is
not in 403 naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from hubharness import ACCESS_SCOPE, API_PATH, READ_SCOPE, ServiceProcess
from service_client import CHECKED, service_config, submit


@dataclass
class World:
    clients: dict[str, httpx.Client]
    names: dict[str, str]
    alice_job: int
    bob_job: int
    alice_allocation: int


@pytest.fixture(scope="module")
def world(hub, tmp_path_factory) -> World:
    service = ServiceProcess(hub, service_config(gpus=4), tmp_path_factory.mktemp("authz")).start()
    names, tokens = {}, {}
    for key, groups, admin in (
        ("alice", ["vision"], False),
        ("bob", ["nlp"], False),
        ("admin", [], True),
    ):
        names[key] = f"authz-{key}"
        hub.create_user(names[key], admin=admin, groups=groups)
        tokens[key] = hub.token_for(names[key])
    alice = names["alice"]
    tokens["alice-access-only"] = hub.token_for(alice, scopes=[ACCESS_SCOPE])
    tokens["alice-read-only"] = hub.token_for(alice, scopes=[ACCESS_SCOPE, READ_SCOPE])
    tokens["alice-no-access"] = hub.token_for(alice, scopes=[f"read:users!user={alice}"])
    tokens["bogus"] = "0123456789abcdef0123456789abcdef"
    clients = {
        key: httpx.Client(
            base_url=hub.service_url(API_PATH),
            headers={"Authorization": f"token {token}"},
            timeout=30,
            event_hooks=CHECKED,
        )
        for key, token in tokens.items()
    }
    clients["anonymous"] = httpx.Client(
        base_url=hub.service_url(API_PATH), timeout=30, event_hooks=CHECKED
    )
    alice_job = submit(clients["alice"], command="sleep 120", gpus=0.25)["id"]
    bob_job = submit(clients["bob"], command="sleep 120", gpus=0.25)["id"]
    allocation = clients["alice"].post("allocations", json={"gpus": 0.25}).json()["id"]
    yield World(clients, names, alice_job, bob_job, allocation)
    for client in clients.values():
        client.close()
    service.stop()


# (id, who, method, path, body, status, words the message must contain)
REFUSALS: list[tuple[str, str, str, str, Any, int, str]] = [
    ("no-token", "anonymous", "GET", "workloads", None, 403, "authentication required"),
    ("bogus-token", "bogus", "GET", "workloads", None, 403, "authentication required"),
    (
        "token-cannot-reach-service",
        "alice-no-access",
        "GET",
        "workloads",
        None,
        403,
        "access:services!service=frachub",
    ),
    ("no-read-scope", "alice-access-only", "GET", "workloads", None, 403, "custom:frachub:read"),
    (
        "no-read-scope-queues",
        "alice-access-only",
        "GET",
        "queues",
        None,
        403,
        "custom:frachub:read",
    ),
    (
        "no-submit-scope",
        "alice-read-only",
        "POST",
        "workloads",
        {"command": "true", "gpus": 1},
        403,
        "custom:frachub:submit",
    ),
    (
        "no-submit-scope-cancel",
        "alice-read-only",
        "DELETE",
        "workloads/{alice_job}",
        None,
        403,
        "custom:frachub:submit",
    ),
    (
        "no-submit-scope-allocate",
        "alice-read-only",
        "POST",
        "allocations",
        {"gpus": 0.5},
        403,
        "custom:frachub:submit",
    ),
    ("other-users-workload", "alice", "GET", "workloads/{bob_job}", None, 404, "not found"),
    ("other-users-logs", "alice", "GET", "workloads/{bob_job}/logs", None, 404, "not found"),
    (
        "cancel-other-users-workload",
        "alice",
        "DELETE",
        "workloads/{bob_job}",
        None,
        404,
        "not found",
    ),
    (
        "other-users-allocation",
        "bob",
        "GET",
        "allocations/{alice_allocation}",
        None,
        404,
        "not found",
    ),
    (
        "release-other-users-allocation",
        "bob",
        "DELETE",
        "allocations/{alice_allocation}",
        None,
        404,
        "not found",
    ),
    (
        "list-other-users-workloads",
        "alice",
        "GET",
        "workloads?user={bob}",
        None,
        403,
        "custom:frachub:admin",
    ),
    ("other-users-usage", "alice", "GET", "usage?user={bob}", None, 403, "custom:frachub:admin"),
    (
        "project-not-a-member",
        "alice",
        "POST",
        "workloads",
        {"command": "true", "gpus": 1, "project": "nlp"},
        403,
        "not a member of project nlp",
    ),
    (
        "allocate-in-foreign-project",
        "alice",
        "POST",
        "allocations",
        {"gpus": 0.5, "project": "nlp", "server_name": "x"},
        403,
        "not a member of project nlp",
    ),
    (
        "allocate-for-another-user",
        "alice",
        "POST",
        "allocations",
        {"gpus": 0.5, "user": "{bob}"},
        403,
        "custom:frachub:admin",
    ),
    (
        "create-queue",
        "alice",
        "POST",
        "queues",
        {"name": "mine", "deserved_gpus": 4},
        403,
        "custom:frachub:admin",
    ),
    (
        "change-queue",
        "alice",
        "PATCH",
        "queues/vision",
        {"deserved_gpus": 4},
        403,
        "custom:frachub:admin",
    ),
    ("delete-queue", "alice", "DELETE", "queues/vision", None, 403, "custom:frachub:admin"),
    (
        "raise-own-priority",
        "alice",
        "POST",
        "workloads",
        {"command": "true", "gpus": 1, "priority": 500},
        400,
        "priority",
    ),
    (
        "admin-edits-config-queue",
        "admin",
        "PATCH",
        "queues/vision",
        {"deserved_gpus": 4},
        409,
        "configuration file",
    ),
]


def _fill(text: str, world: World) -> str:
    return text.format(
        alice_job=world.alice_job,
        bob_job=world.bob_job,
        alice_allocation=world.alice_allocation,
        bob=world.names["bob"],
    )


def _fill_body(body: Any, world: World) -> Any:
    if isinstance(body, dict):
        return {k: _fill(v, world) if isinstance(v, str) else v for k, v in body.items()}
    return body


@pytest.mark.parametrize(
    "who, method, path, body, status, words",
    [row[1:] for row in REFUSALS],
    ids=[row[0] for row in REFUSALS],
)
def test_refusal(world: World, who, method, path, body, status, words) -> None:
    response = world.clients[who].request(method, _fill(path, world), json=_fill_body(body, world))
    assert response.status_code == status, response.text
    assert words in response.json()["message"]


def test_refusals_change_nothing(world: World) -> None:
    """After the whole table ran, bob's job and alice's allocation are as they were."""
    admin = world.clients["admin"]
    bob_job = admin.get(f"workloads/{world.bob_job}").json()
    assert bob_job["state"] in ("pending", "running")
    assert bob_job["user"] == world.names["bob"]
    allocation = admin.get(f"allocations/{world.alice_allocation}").json()
    assert allocation["state"] in ("pending", "running")
    queue = admin.get("queues/vision").json()
    assert queue["deserved_gpus"] == 1


def test_users_see_only_their_own_workloads(world: World) -> None:
    listed = world.clients["alice"].get("workloads").json()
    assert {item["user"] for item in listed} == {world.names["alice"]}
    everyone = world.clients["admin"].get("workloads").json()
    assert {world.names["alice"], world.names["bob"]} <= {item["user"] for item in everyone}


def test_other_users_on_the_gpu_map_are_anonymous(world: World) -> None:
    holders = [
        holder
        for node in world.clients["alice"].get("nodes").json()
        for gpu in node["gpus"]
        for holder in gpu["holders"]
    ]
    assert {holder["project"] for holder in holders} >= {"vision", "nlp"}
    for holder in holders:
        if holder["project"] == "nlp":
            assert holder["user"] is None and holder["workload"] is None


def test_admin_may_act_for_anyone(world: World) -> None:
    admin = world.clients["admin"]
    assert admin.get(f"workloads/{world.bob_job}").status_code == 200
    job = submit(admin, command="sleep 30", gpus=0.25, project="nlp")
    assert job["project"] == "nlp" and job["user"] == world.names["admin"]
    assert admin.delete(f"workloads/{job['id']}").status_code == 200
    created = admin.post("queues", json={"name": "authz-scratch", "deserved_gpus": 0})
    assert created.status_code == 201, created.text
    assert admin.delete("queues/authz-scratch").status_code == 204


def test_members_listed_in_the_config_belong_without_a_group(hub, world: World) -> None:
    hub.create_user("guest-listed")
    client = httpx.Client(
        base_url=hub.service_url(API_PATH),
        headers={"Authorization": f"token {hub.token_for('guest-listed')}"},
        event_hooks=CHECKED,
    )
    with client:
        me = client.get("user").json()
        assert me["projects"] == ["guests"]
        assert me["admin"] is False
