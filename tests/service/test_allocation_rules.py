"""Two rules on notebook allocations, against a real hub:

* an allocation that can never start is refused at once (409, the numbers named, nothing
  stored) instead of waiting out the spawner's timeout;
* acting for another user (an admin, or the spawner with the service's token), the project
  must be one of that user's; an admin's own allocations may still go anywhere.

Plus the request's ``idle_timeout_seconds`` field as the API takes and shows it.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from hubharness import module_service
from service_client import CHECKED, service_config, wait_for

QUEUES = """
c.FracHubService.queues = [
    {"name": "vision", "deserved_gpus": 1},
    {"name": "research", "deserved_gpus": 1},
    {"name": "nlp", "parent": "research", "deserved_gpus": 2},
    {"name": "big", "deserved_gpus": 8},
    {"name": "small", "deserved_gpus": 0.5},
]
"""


service = module_service(service_config(gpus=2, extra=QUEUES), "rules")


@pytest.fixture
def as_member(service, make_user, api):
    def make(*groups: str, admin: bool = False) -> tuple[str, httpx.Client]:
        name, token = make_user(groups=groups, admin=admin)
        return name, api(token)

    return make


def allocations_of(client: httpx.Client, user: str) -> list[dict]:
    return client.get(f"allocations?user={user}").json()


def release(client: httpx.Client, allocation: dict) -> None:
    client.delete(f"allocations/{allocation['id']}")


# (id, the user's project, body, words of the 409 message)
NEVER = [
    (
        "beyond-the-projects-quota",
        "vision",
        {"gpus": 2},
        "vision deserves 1 GPU; a notebook of 2 GPUs can never start: notebooks run only "
        "inside the project's deserved quota",
    ),
    (
        "beyond-the-departments-smaller-quota",
        "nlp",
        {"gpus": 2},
        "department research (above nlp) deserves 1 GPU; a notebook of 2 GPUs can never start",
    ),
    (
        "more-gpus-than-any-node",
        "big",
        {"gpus": 4},
        "a notebook that needs 4 GPUs on one node; the largest node has 2 GPUs, so it can "
        "never start",
    ),
    (
        "more-memory-than-any-gpu",
        "big",
        {"gpu_memory_gib": 100},
        "a notebook that needs 100 GiB on one GPU; the largest GPU has 80 GiB, so it can "
        "never start",
    ),
    (
        "memory-beyond-the-quota",
        "small",
        {"gpu_memory_gib": 60, "preemptible": False},
        "small deserves 0.5 GPU; a notebook of 0.75 GPU can never start",
    ),
    (
        "a-preemptible-one-may-borrow-but-not-grow-a-node",
        "vision",
        {"gpus": 4, "preemptible": True},
        "the largest node has 2 GPUs",
    ),
]


@pytest.mark.parametrize(
    "project, body, words", [row[1:] for row in NEVER], ids=[row[0] for row in NEVER]
)
def test_a_notebook_that_can_never_start_is_refused_and_nothing_is_stored(
    as_member, project: str, body: dict[str, Any], words: str
) -> None:
    name, client = as_member(project)
    refused = client.post("allocations", json={"server_name": "gpu", **body})
    assert refused.status_code == 409, refused.text
    assert words in refused.json()["message"]
    assert allocations_of(client, name) == []
    assert client.get("workloads").json() == []


@pytest.mark.parametrize(
    "project, body",
    [
        ("vision", {"gpus": 1}),
        ("nlp", {"gpus": 1}),
        ("vision", {"gpu_memory_gib": 80}),
        ("vision", {"gpus": 2, "preemptible": True}),
        ("big", {"gpus": 2}),
    ],
    ids=["at-the-quota", "at-the-department-cap", "a-whole-gpu-of-memory", "borrows", "a-node"],
)
def test_a_notebook_that_fits_is_taken(as_member, project: str, body: dict[str, Any]) -> None:
    _, client = as_member(project)
    created = client.post("allocations", json=body)
    assert created.status_code == 201, created.text
    running = wait_for(
        lambda: (
            (v := client.get(f"allocations/{created.json()['id']}").json())["state"] == "running"
            and v
        ),
        what="the allocation to run",
    )
    release(client, running)


def test_cancelling_a_notebooks_share_says_to_stop_the_server(as_member) -> None:
    """``frachub cancel N`` prints this message: what to do, in the hub's words."""
    name, client = as_member("vision")
    created = client.post("allocations", json={"gpus": 0.5})
    assert created.status_code == 201, created.text
    allocation = created.json()
    refused = client.delete(f"workloads/{allocation['id']}")
    assert refused.status_code == 409
    assert refused.json()["message"] == (
        f"workload {allocation['id']} is the GPU share of {name}'s notebook server, not a job: "
        "stop that server to give the GPU back (Stop My Server on the hub's home page)"
    )
    release(client, allocation)


def test_acting_for_a_user_charges_only_their_projects(hub, as_member) -> None:
    alice, _ = as_member("vision")
    admin_name, admin = as_member(admin=True)
    spawner = httpx.Client(
        base_url=admin.base_url,
        headers={"Authorization": f"token {hub.frachub_token}"},
        event_hooks=CHECKED,
    )
    with spawner:
        for client in (admin, spawner):
            foreign = client.post(
                "allocations", json={"user": alice, "project": "nlp", "gpus": 0.25}
            )
            assert foreign.status_code == 403, foreign.text
            assert foreign.json()["message"] == (
                f"{alice} is not a member of project nlp; their projects: vision"
            )
        assert allocations_of(admin, alice) == []
        own = spawner.post("allocations", json={"user": alice, "gpus": 0.25})
        assert own.status_code == 201 and own.json()["project"] == "vision", own.text
        release(spawner, own.json())
        named = spawner.post(
            "allocations",
            json={"user": alice, "project": "vision", "gpus": 0.25, "server_name": "b"},
        )
        assert named.status_code == 201, named.text
        release(spawner, named.json())
    # an admin's own notebook may still go to any project
    anywhere = admin.post("allocations", json={"project": "nlp", "gpus": 0.25})
    assert anywhere.status_code == 201 and anywhere.json()["user"] == admin_name, anywhere.text
    release(admin, anywhere.json())


@pytest.mark.parametrize(
    "value, words",
    [
        (0, "idle_timeout_seconds: must be greater than 0, got 0"),
        (-5, "idle_timeout_seconds: must be greater than 0"),
        ("3600", "idle_timeout_seconds: must be a number, got '3600'"),
        (True, "idle_timeout_seconds: must be a number"),
        (10**9, "idle_timeout_seconds: must be at most 31536000 (a year)"),
    ],
    ids=["zero", "negative", "string", "bool", "beyond-a-year"],
)
def test_a_bad_idle_timeout_is_refused_naming_the_field(as_member, value, words) -> None:
    name, client = as_member("vision")
    refused = client.post("allocations", json={"gpus": 0.25, "idle_timeout_seconds": value})
    assert refused.status_code == 400, refused.text
    assert words in refused.json()["message"]
    assert allocations_of(client, name) == []


def test_the_idle_timeout_is_kept_and_shown(as_member) -> None:
    _, client = as_member("vision")
    limited = client.post("allocations", json={"gpus": 0.25, "idle_timeout_seconds": 5400}).json()
    forever = client.post(
        "allocations", json={"gpus": 0.25, "server_name": "b", "idle_timeout_seconds": None}
    ).json()
    assert limited["idle_timeout_seconds"] == 5400 and forever["idle_timeout_seconds"] is None
    for allocation in (limited, forever):
        # nothing known of the server's activity yet: no stop time, no warning
        assert allocation["idle_stop_at"] is None and allocation["idle_warning"] is None
        release(client, allocation)
    listed = client.get("workloads?kind=interactive").json()
    assert {item["idle_timeout_seconds"] for item in listed} == {5400, None}
