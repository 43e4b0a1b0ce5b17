"""Lists page by cursor over HTTP, on SQLite and on PostgreSQL: pages come newest first in
a stable order; workloads submitted between pages never shift them (no duplicate, no miss);
a cursor shows nobody another user's workloads; offsets still work as the hub's clients use
them; a cursor or limit the service did not give answers 400 naming the field."""

from __future__ import annotations

import httpx
import pytest
from hubharness import ServiceProcess
from service_client import service_config, submit, wait_for

from .conftest import DATABASES, database_config

ENVELOPE = {"Accept": "application/jupyterhub-pagination+json"}
PAGE = 3
"""The service's default page size here: a handful of jobs makes several pages."""


@pytest.fixture(scope="module", params=DATABASES)
def service(hub, tmp_path_factory, request):
    extra = database_config(request, request.param) + (
        f"\nc.FracHubService.page_default_limit = {PAGE}\nc.FracHubService.page_max_limit = 4\n"
    )
    process = ServiceProcess(
        hub, service_config(gpus=1, grace=1, extra=extra), tmp_path_factory.mktemp("paging")
    ).start()
    yield process
    process.stop()


@pytest.fixture
def member(service, make_user, api):
    """member() -> (name, client) of a new member of ``vision``; their jobs are cancelled
    after the test (one runs on the one GPU, the others wait)."""
    clients: list[httpx.Client] = []

    def make() -> tuple[str, httpx.Client]:
        name, token = make_user(groups=["vision"])
        clients.append(api(token))
        return name, clients[-1]

    yield make
    for client in clients:
        for item in walk(client, "workloads?active"):
            client.delete(f"workloads/{item['id']}")
    for client in clients:
        wait_for(lambda c=client: not walk(c, "workloads?active"), 20, "cancelled")


def follow(client: httpx.Client, url: str) -> httpx.Response:
    """GET a ``next.url`` or ``Link`` target: a path from the server's root."""
    return client.get(client.base_url.join(url), headers=ENVELOPE)


def walk(client: httpx.Client, first: str) -> list[dict]:
    """Every item of a bare list, following its ``Link: <…>; rel="next"`` headers."""
    response = client.get(first)
    assert response.status_code == 200, response.text
    items = response.json()
    while "link" in response.headers:
        url = response.headers["link"].removeprefix("<").split(">;")[0]
        response = client.get(client.base_url.join(url))
        assert response.status_code == 200, response.text
        items += response.json()
    return items


def jobs(client: httpx.Client, count: int) -> list[int]:
    return [submit(client, command="sleep 300")["id"] for _ in range(count)]


def test_pages_stay_put_while_work_arrives_and_show_only_the_callers_own(member) -> None:
    (alice_name, alice), (_, bob) = member(), member()
    mine: list[int] = []
    for _ in range(4):  # interleaved: bob's ids sit between alice's
        mine += jobs(alice, 2)
        jobs(bob, 1)
    expected = sorted(mine, reverse=True)

    page = alice.get("workloads", headers=ENVELOPE).json()
    seen = [item["id"] for item in page["items"]]
    assert seen == expected[:PAGE]
    assert page["_pagination"]["total"] == len(mine)
    while page["_pagination"]["next"] is not None:
        following = page["_pagination"]["next"]
        assert following["limit"] == PAGE and following["offset"] == len(seen)
        assert f"cursor={following['cursor']}" in following["url"]
        later = jobs(alice, 1) + jobs(bob, 1)  # newer than every page: they come before it
        page = follow(alice, following["url"]).json()
        assert page["_pagination"]["offset"] == len(seen)
        seen += [item["id"] for item in page["items"]]
    assert seen == expected  # in order, none twice, none missed, nobody else's
    assert later[0] > expected[0]

    # the bare list walks the same way by its Link header, now with the later ones first
    everything = [item["id"] for item in walk(alice, "workloads")]
    assert everything == sorted(everything, reverse=True)
    assert set(everything) >= set(expected) and everything[-len(expected) :] == expected
    assert {item["user"] for item in walk(alice, "workloads?limit=4")} == {alice_name}

    # alice's cursor in bob's hands pages through bob's own workloads only
    cursor = alice.get("workloads", headers=ENVELOPE).json()["_pagination"]["next"]
    theirs = bob.get("workloads", params={"cursor": cursor["cursor"]}).json()
    assert theirs and not set(item["id"] for item in theirs) & set(everything)
    assert bob.get("workloads?user=" + "x").status_code == 403


def test_filters_page_by_cursor_and_offsets_still_work(member, make_user, api) -> None:
    alice_name, alice = member()
    mine = sorted(jobs(alice, 5), reverse=True)
    _, admin_token = make_user(admin=True)
    admin = api(admin_token)

    filtered = walk(admin, f"workloads?user={alice_name}&project=vision&kind=training&limit=2")
    assert [item["id"] for item in filtered] == mine
    pending = walk(alice, "workloads?state=pending&limit=2")
    assert [item["id"] for item in pending] == [i for i in mine if i in {p["id"] for p in pending}]
    assert len(pending) >= len(mine) - 1  # all but the one on the GPU

    # the hub's offset paging, as before: the same rows at the same offsets
    page = alice.get("workloads?offset=2&limit=2", headers=ENVELOPE).json()
    assert [item["id"] for item in page["items"]] == mine[2:4]
    assert page["_pagination"]["offset"] == 2 and page["_pagination"]["total"] == 5
    assert page["_pagination"]["next"]["offset"] == 4
    rest = follow(alice, page["_pagination"]["next"]["url"]).json()
    assert [item["id"] for item in rest["items"]] == mine[4:]
    assert rest["_pagination"]["next"] is None

    # limit is clamped to page_max_limit (4), and a list that fits has no next
    assert len(alice.get("workloads?limit=1000").json()) == 4
    last = alice.get("workloads?limit=4&offset=1")
    assert "link" not in last.headers and len(last.json()) == 4


BAD_PAGES = [
    ("cursor=abc", "cursor"),
    ("cursor=", "cursor"),
    ("cursor=12", "cursor"),
    ("cursor=1.2.3", "cursor"),
    ("cursor=-1.0", "cursor"),
    ("cursor=" + "9" * 20 + ".0", "cursor"),
    ("cursor=5.0&offset=3", "offset"),
    ("limit=-1", "limit"),
    ("limit=ten", "limit"),
    ("offset=" + "9" * 30, "offset"),
]


@pytest.mark.parametrize("endpoint", ["workloads", "allocations"])
def test_a_cursor_or_limit_the_service_did_not_give_is_refused(member, endpoint) -> None:
    _, alice = member()
    jobs(alice, 1)
    for query, field in BAD_PAGES:
        response = alice.get(f"{endpoint}?{query}")
        assert response.status_code == 400, (query, response.text)
        assert response.json()["message"].startswith(f"{field}:"), (query, response.text)
    assert len(alice.get("workloads").json()) == 1  # and nothing else changed


def test_allocations_page_by_cursor_too(member) -> None:
    _, alice = member()
    made = [
        alice.post("allocations", json={"gpus": 0.25, "server_name": f"s{i}"}).json()
        for i in range(3)
    ]
    ids = sorted((allocation["id"] for allocation in made), reverse=True)
    page = alice.get("allocations?limit=2", headers=ENVELOPE).json()
    assert [item["id"] for item in page["items"]] == ids[:2]
    rest = follow(alice, page["_pagination"]["next"]["url"]).json()
    assert [item["id"] for item in rest["items"]] == ids[2:]
    assert [item["id"] for item in walk(alice, "allocations?limit=1")] == ids
    for allocation in made:
        alice.delete(f"allocations/{allocation['id']}")
