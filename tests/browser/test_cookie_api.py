"""The REST API called the way the panel calls it: with the login cookie the service set
after the hub's OAuth, instead of a token. Refusal by refusal, like
tests/service/test_authorization.py: a cookie alone changes nothing (XSRF), a cookie does not
reach another user's work, and token callers are not touched by any of it.

No browser here: httpx logs in through the hub's real login form and OAuth, as a browser
would. These run with the service tests (marker ``service``), on the browser tests' hub,
whose frachub service has the OAuth settings the panel needs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from hubharness import API_PATH, Hub, ServiceProcess
from service_client import CHECKED, check_error_shape, service_config, submit, wait_state

from browser.browserharness import panel_session

pytestmark = pytest.mark.service


@dataclass
class Session:
    """A logged-in browser-like client and the XSRF token its panel page carried."""

    client: httpx.Client
    xsrf: str
    hub: Hub

    def request(
        self, method: str, path: str, *, xsrf: str | None = None, **kwargs: Any
    ) -> httpx.Response:
        """An API request on the cookie alone; xsrf="page" sends the page's token."""
        headers = dict(kwargs.pop("headers", {}))
        if xsrf is not None:
            headers["X-XSRFToken"] = self.xsrf if xsrf == "page" else xsrf
        url = self.hub.service_url(API_PATH + path)
        answer = self.client.request(method, url, headers=headers, **kwargs)
        check_error_shape(answer)  # a browser session's client also reads pages: no hook
        return answer


@dataclass
class World:
    alice: Session
    bob: Session
    alice_token: httpx.Client
    bob_job: int
    alice_job: int


@pytest.fixture(scope="module")
def world(oauth_hub: Hub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    service = ServiceProcess(
        oauth_hub, service_config(gpus=2), tmp_path_factory.mktemp("cookie-api")
    ).start()
    sessions, tokens = {}, {}
    for key, group in (("alice", "vision"), ("bob", "nlp")):
        name = f"cookie-{key}"
        oauth_hub.create_user(name, groups=[group])
        tokens[key] = oauth_hub.token_for(name)
        client, xsrf = panel_session(oauth_hub, name)
        sessions[key] = Session(client, xsrf, oauth_hub)
    alice_token = httpx.Client(
        base_url=oauth_hub.service_url(API_PATH),
        headers={"Authorization": f"token {tokens['alice']}"},
        timeout=30,
        event_hooks=CHECKED,
    )
    bob_token = httpx.Client(
        base_url=oauth_hub.service_url(API_PATH),
        headers={"Authorization": f"token {tokens['bob']}"},
        timeout=30,
        event_hooks=CHECKED,
    )
    bob_job = submit(bob_token, command="sleep 120", gpus=0.25)["id"]
    alice_job = submit(alice_token, command="sleep 120", gpus=0.25)["id"]
    wait_state(alice_token, alice_job, "running")
    yield World(sessions["alice"], sessions["bob"], alice_token, bob_job, alice_job)
    for closing in (alice_token, bob_token, *(s.client for s in sessions.values())):
        closing.close()
    service.stop()


def alice_workloads(world: World) -> int:
    return len(world.alice_token.get("workloads").json())


# (id, method, path, body, xsrf, extra headers, status, words the message must contain)
REFUSALS: list[tuple[str, str, str, Any, str | None, dict, int, str]] = [
    (
        "post-without-xsrf",
        "POST",
        "workloads",
        {"command": "true", "gpus": 1},
        None,
        {},
        403,
        "XSRF check failed",
    ),
    (
        "post-with-a-wrong-xsrf",
        "POST",
        "workloads",
        {"command": "true", "gpus": 1},
        "forged",
        {},
        403,
        "XSRF",
    ),
    (
        "post-with-bobs-xsrf",
        "POST",
        "workloads",
        {"command": "true", "gpus": 1},
        "bob",
        {},
        403,
        "XSRF",
    ),
    ("delete-without-xsrf", "DELETE", "workloads/{alice_job}", None, None, {}, 403, "XSRF"),
    ("allocate-without-xsrf", "POST", "allocations", {"gpus": 0.25}, None, {}, 403, "XSRF"),
    # a page on another site can make the browser fetch with the cookie: it must not read
    (
        "cross-site-fetch-without-xsrf",
        "GET",
        "workloads",
        None,
        None,
        {"Sec-Fetch-Mode": "cors", "Sec-Fetch-Site": "cross-site"},
        403,
        "XSRF",
    ),
    ("other-users-job", "GET", "workloads/{bob_job}", None, "page", {}, 404, "not found"),
    ("other-users-log", "GET", "workloads/{bob_job}/logs", None, "page", {}, 404, "not found"),
    ("cancel-other-users-job", "DELETE", "workloads/{bob_job}", None, "page", {}, 404, "not found"),
    (
        "list-other-users-jobs",
        "GET",
        "workloads?user=cookie-bob",
        None,
        "page",
        {},
        403,
        "custom:frachub:admin",
    ),
    (
        "edit-a-queue",
        "PATCH",
        "queues/vision",
        {"deserved_gpus": 2},
        "page",
        {},
        403,
        "custom:frachub:admin",
    ),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "xsrf", "headers", "status", "words"),
    [pytest.param(*row[1:], id=row[0]) for row in REFUSALS],
)
def test_cookie_refusals(
    world: World,
    method: str,
    path: str,
    body: Any,
    xsrf: str | None,
    headers: dict,
    status: int,
    words: str,
) -> None:
    before = alice_workloads(world)
    if xsrf == "bob":
        xsrf = world.bob.xsrf
    path = path.format(alice_job=world.alice_job, bob_job=world.bob_job)
    answer = world.alice.request(method, path, xsrf=xsrf, json=body, headers=headers)
    assert answer.status_code == status, answer.text
    assert words in answer.json()["message"]
    assert alice_workloads(world) == before, "a refused request changed nothing"
    assert workload(world.alice, world.alice_job)["state"] == "running"
    assert workload(world.bob, world.bob_job)["state"] == "running"


def workload(session: Session, workload_id: int) -> dict:
    answer = session.request("GET", f"workloads/{workload_id}", xsrf="page")
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_the_cookie_with_the_pages_xsrf_token_acts_as_its_user(world: World) -> None:
    me = world.alice.request("GET", "user", xsrf="page").json()
    assert (me["name"], me["projects"], me["submit"], me["admin"]) == (
        "cookie-alice",
        ["vision"],
        True,
        False,
    )
    created = world.alice.request(
        "POST", "workloads", xsrf="page", json={"command": "sleep 60", "gpus": 0.25}
    )
    assert created.status_code == 201, created.text
    assert created.json()["user"] == "cookie-alice"
    cancelled = world.alice.request("DELETE", f"workloads/{created.json()['id']}", xsrf="page")
    assert cancelled.status_code == 200, cancelled.text


def test_reading_by_navigation_needs_no_xsrf(world: World) -> None:
    """Typing an API URL into the address bar shows the JSON, as on the hub's API."""
    answer = world.alice.request("GET", "workloads", headers={"Sec-Fetch-Mode": "navigate"})
    assert answer.status_code == 200
    assert {job["user"] for job in answer.json()} == {"cookie-alice"}


def test_token_callers_need_no_xsrf(world: World) -> None:
    job = submit(world.alice_token, command="sleep 60", gpus=0.25)
    answer = world.alice_token.delete(f"workloads/{job['id']}")
    assert answer.status_code == 200, answer.text


def test_without_a_login_the_panel_sends_the_browser_to_the_hub(oauth_hub: Hub, world) -> None:
    """Also what the hub's start-up check sees: a redirect, not an error."""
    answer = httpx.get(oauth_hub.service_url(), timeout=30)
    assert answer.status_code == 302
    assert answer.headers["Location"].startswith("/hub/api/oauth2/authorize?")
    assert "client_id=service-frachub" in answer.headers["Location"]


def test_the_admin_page_refuses_a_user(oauth_hub: Hub, world: World) -> None:
    answer = world.alice.client.get(oauth_hub.service_url("admin"))
    assert answer.status_code == 403
    assert "custom:frachub:admin" in answer.text


def test_a_broken_oauth_return_says_what_to_do_in_the_hubs_look(oauth_hub: Hub, world) -> None:
    answer = httpx.get(oauth_hub.service_url("oauth_callback?code=x"), timeout=30)
    assert answer.status_code == 400
    assert answer.headers["Content-Type"].startswith("text/html")
    assert "OAuth state is missing. Try logging in again." in answer.text
    assert "jupyterhub-logo" in answer.text
