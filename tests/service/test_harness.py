"""The harness itself, against a real JupyterHub and proxy, without FracHub's service.

Besides proving the fixtures work, these pin down what JupyterHub tells a service about a
token (GET /hub/api/user, which is what HubAuth.user_for_token returns): the service
learns project membership from "groups" and permissions from "scopes".
"""

from __future__ import annotations

import json
import signal
import sys
import textwrap
from pathlib import Path

import httpx
import pytest
from hubharness import (
    ACCESS_SCOPE,
    ADMIN_GROUP,
    ADMIN_SCOPE,
    PASSWORD,
    READ_SCOPE,
    SUBMIT_SCOPE,
    HarnessError,
    Hub,
    descendants,
    identify,
)

from scheduler.common.scopes import JOB_TOKEN_SCOPES

pytestmark = pytest.mark.service

# The model a service gets for a user's token that carries only the scopes it asked for:
# the identify scopes read:users:name/groups!user=<name> are always added by the hub.
NARROW_MODEL_KEYS = {
    "kind",
    "name",
    "admin",
    "groups",
    "user_info",
    "token_id",
    "session_id",
    "scopes",
}
# with read:users!user=<name> (any token inheriting the default "self") the model has more
FULL_MODEL_KEYS = NARROW_MODEL_KEYS | {
    "roles",
    "server",
    "pending",
    "created",
    "last_activity",
    "servers",
}

# Stand-in for the frachub service: writes its JUPYTERHUB_* environment and pid where it
# serves them, under $JUPYTERHUB_SERVICE_PREFIX, and answers GETs on the service URL.
STAND_IN = textwrap.dedent(
    """
    import functools, http.server, json, os, subprocess, sys, urllib.parse

    root = sys.argv[1]
    prefix = os.path.join(root, os.environ["JUPYTERHUB_SERVICE_PREFIX"].strip("/"))
    os.makedirs(os.path.join(prefix, "api", "v1"), exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k.startswith(("JUPYTERHUB_", "FRACHUB_"))}
    # a workload of its own, which must outlive a crash of the service
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    with open(os.path.join(prefix, "env.json"), "w") as f:
        json.dump({"pid": os.getpid(), "child": child.pid, "cwd": os.getcwd(), "env": env}, f)
    url = urllib.parse.urlparse(os.environ["JUPYTERHUB_SERVICE_URL"])
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=root)
    http.server.ThreadingHTTPServer((url.hostname, url.port), handler).serve_forever()
    """
)


@pytest.fixture
def stand_in(tmp_path: Path) -> list[str]:
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    root = tmp_path / "www"
    root.mkdir()
    return [sys.executable, str(script), str(root)]


def hub_auth(hub: Hub):
    """What our service does: HubAuth with the service's own token, no cache."""
    from jupyterhub.services.auth import HubAuth  # here: without jupyterhub, `hub` skips

    return HubAuth(
        api_token=hub.frachub_token,
        api_url=hub.api_url,
        cache_max_age=0,
        access_scopes={ACCESS_SCOPE},
    )


def test_hub_answers_through_the_proxy_with_a_route_for_frachub(hub: Hub) -> None:
    info = httpx.get(f"{hub.url}/hub/api/").json()
    assert info["version"].split(".")[0] in {"5", "6"}
    routes = hub.harness_request("GET", "/proxy").json()
    assert routes["/services/frachub/"]["target"] == hub.service_bind_url
    # nothing listens there yet: the proxy answers 503 through the hub's error page
    assert httpx.get(hub.service_url("api/v1/")).status_code == 503


def test_users_groups_and_membership_changes(hub: Hub, make_user) -> None:
    name, token = make_user(groups=["vision", "nlp"])
    assert name in hub.harness_request("GET", "/groups/vision").json()["users"]
    assert sorted(hub.whoami(token)["groups"]) == ["nlp", "vision"]

    hub.remove_from_group("nlp", [name])
    assert hub.whoami(token)["groups"] == ["vision"]  # the hub itself does not cache
    hub.add_to_group("robotics", [name])  # creates the group
    assert sorted(hub.whoami(token)["groups"]) == ["robotics", "vision"]


def test_a_token_with_access_and_custom_scopes(hub: Hub, make_user) -> None:
    name, token = make_user(groups=["vision"], scopes=[ACCESS_SCOPE, READ_SCOPE, SUBMIT_SCOPE])
    model = hub.whoami(token)
    print("GET /hub/api/user:", json.dumps(model, indent=1, sort_keys=True))
    assert set(model) == NARROW_MODEL_KEYS
    assert model["kind"] == "user" and model["name"] == name and model["admin"] is False
    assert model["groups"] == ["vision"]
    identify = [f"read:users:groups!user={name}", f"read:users:name!user={name}"]
    assert model["scopes"] == sorted([ACCESS_SCOPE, READ_SCOPE, SUBMIT_SCOPE, *identify])
    # HubAuth, as the service will use it, returns exactly that model
    auth = hub_auth(hub)
    assert auth.user_for_token(token) == model
    assert auth.check_scopes(auth.access_scopes, model) == {ACCESS_SCOPE}


def test_a_default_token_has_all_the_user_role_gives(hub: Hub, make_user) -> None:
    _, token = make_user(groups=["nlp"])
    model = hub.whoami(token)
    print("GET /hub/api/user:", json.dumps(model, indent=1, sort_keys=True))
    assert set(model) == FULL_MODEL_KEYS
    assert model["roles"] == ["user"] and model["groups"] == ["nlp"]
    assert {ACCESS_SCOPE, READ_SCOPE, SUBMIT_SCOPE} <= set(model["scopes"])
    assert ADMIN_SCOPE not in model["scopes"]


def test_an_admin_has_the_admin_scope_through_the_admin_group(hub: Hub, make_user) -> None:
    _, token = make_user(groups=["vision"], admin=True)
    model = hub.whoami(token)
    assert {ACCESS_SCOPE, READ_SCOPE, SUBMIT_SCOPE, ADMIN_SCOPE} <= set(model["scopes"])
    # the price of granting the role at run time: the group shows among the user's groups
    assert sorted(model["groups"]) == sorted(["vision", ADMIN_GROUP])
    assert model["admin"] is False  # not a JupyterHub admin
    assert model["roles"] == ["user"]  # the user's own roles, not those via groups


def test_tokens_without_the_custom_scopes(hub: Hub, make_user) -> None:
    name, token = make_user(groups=["vision"], scopes=[ACCESS_SCOPE])
    model = hub_auth(hub).user_for_token(token)
    assert model["groups"] == ["vision"]  # membership is always visible
    assert not {READ_SCOPE, SUBMIT_SCOPE, ADMIN_SCOPE} & set(model["scopes"])

    # a token that cannot even reach the service: HubAuth finds no access scope
    blind = hub.token_for(name, scopes=[f"read:users!user={name}"])
    auth = hub_auth(hub)
    model = auth.user_for_token(blind)
    assert ACCESS_SCOPE not in model["scopes"]
    assert not auth.check_scopes(auth.access_scopes, model)

    # nor can a token hold more than its owner has
    with pytest.raises(HarnessError, match="400"):
        hub.token_for(name, scopes=[ADMIN_SCOPE])
    # and a revoked or made-up token is nobody
    assert hub_auth(hub).user_for_token("not-a-token") is None


def test_the_frachub_service_token_reads_users_and_groups_but_changes_nothing(
    hub: Hub, make_user
) -> None:
    """Nothing but tokens: it issues and revokes the jobs' own tokens (the hub's ``tokens``
    scope, docs/service.md "A job's own token"); it creates no user and changes no group."""
    name, _ = make_user(groups=["vision"])
    service = httpx.Client(
        base_url=hub.api_url, headers={"Authorization": f"token {hub.frachub_token}"}
    )
    with service:
        assert service.get("/user").json()["kind"] == "service"
        users = {u["name"]: u for u in service.get("/users").json()}
        assert "vision" in users[name]["groups"]
        assert name in service.get("/groups/vision").json()["users"]
        assert service.get("/groups").status_code == 200
        assert service.post(f"/users/{name}-x").status_code == 403
        assert service.post("/groups/vision/users", json={"users": [name]}).status_code == 403
        assert service.patch(f"/users/{name}", json={"admin": True}).status_code == 403
        issued = service.post(f"/users/{name}/tokens", json={"scopes": JOB_TOKEN_SCOPES})
        assert issued.status_code == 201, issued.text
        gone = service.delete(f"/users/{name}/tokens/{issued.json()['id']}")
        assert gone.status_code == 204


def test_password_login_works(hub: Hub, make_user) -> None:
    name, _ = make_user()
    with httpx.Client(base_url=hub.url, follow_redirects=False) as browser:
        browser.get("/hub/login")  # the xsrf cookie
        response = browser.post(
            "/hub/login",
            data={"username": name, "password": PASSWORD, "_xsrf": browser.cookies["_xsrf"]},
        )
    assert response.status_code == 302, response.text[:300]


def test_external_service_process_is_reached_through_the_proxy(
    hub: Hub, make_user, api, start_service, stand_in
) -> None:
    service = start_service("answer: 42\n", command=stand_in)
    assert service.config_path.read_text() == "answer: 42\n"
    _, token = make_user()
    assert api(token).get("").status_code == 200  # …/services/frachub/api/v1/ via the proxy

    started = httpx.get(hub.service_url("env.json")).json()
    assert started["pid"] == service.pid
    env = {k: v for k, v in started["env"].items() if k.startswith("JUPYTERHUB_")}
    assert env == hub.service_env()
    assert env["JUPYTERHUB_API_TOKEN"] == hub.frachub_token
    assert env["JUPYTERHUB_API_URL"] == hub.api_url
    assert env["JUPYTERHUB_SERVICE_URL"] == hub.service_bind_url

    assert service.kill(signal.SIGKILL) == -signal.SIGKILL
    assert not service.running
    assert service.leftovers == [started["child"]]  # its workload outlived the crash
    assert httpx.get(hub.service_url("env.json")).status_code == 503
    service.start()
    again = httpx.get(hub.service_url("env.json")).json()
    assert again["pid"] == service.pid
    service.restart()  # SIGTERM, then start
    assert service.pid != again["pid"] and service.running
    assert service.leftovers == sorted([started["child"], again["child"]])
    assert service.log_text().count("--- hubharness: start") == 3

    service.stop()  # ends the service and everything it ever started
    assert not service.running and service.leftovers == []
    assert identify([started["child"], again["child"]]) == {}


def test_a_service_that_dies_at_start_is_reported_with_its_log(hub: Hub, tmp_path) -> None:
    from hubharness import ServiceProcess

    service = ServiceProcess(
        hub,
        "",
        tmp_path,
        command=[sys.executable, "-c", "import sys; print('no config, bye'); sys.exit(3)"],
    )
    with pytest.raises(HarnessError, match=r"(?s)status 3.*no config, bye"):
        service.start()
    assert not service.running


def test_hub_managed_service_gets_its_environment_and_leaves_nothing_behind(
    tmp_path: Path, stand_in
) -> None:
    hub = Hub(
        tmp_path / "hub",
        service_command=stand_in,
        service_environment={"FRACHUB_CONFIG": "/some/where.yaml"},
        frachub_admins=["boss"],
        groups={"vision": ["boss", "carol"]},
    )
    with hub:
        started = httpx.get(hub.service_url("env.json")).json()
        env = started["env"]
        print("managed service environment:", json.dumps(env, indent=1, sort_keys=True))
        assert env["JUPYTERHUB_API_TOKEN"] == hub.frachub_token
        assert env["JUPYTERHUB_API_URL"] == hub.api_url
        assert env["JUPYTERHUB_SERVICE_URL"] == hub.service_bind_url
        assert env["JUPYTERHUB_SERVICE_PREFIX"] == "/services/frachub/"
        assert env["JUPYTERHUB_SERVICE_NAME"] == "frachub"
        assert env["JUPYTERHUB_BASE_URL"] == "/"
        assert env["FRACHUB_CONFIG"] == "/some/where.yaml"
        assert Path(started["cwd"]) == hub.workdir
        # ServiceProcess gives an external service the very same JUPYTERHUB_* variables
        assert {k: v for k, v in env.items() if k.startswith("JUPYTERHUB_")} == hub.service_env()

        # a config-time FracHub admin (not in the admin group) and config-time groups
        model = hub.whoami(hub.token_for("boss"))
        assert ADMIN_SCOPE in model["scopes"] and model["groups"] == ["vision"]
        model = hub.whoami(hub.token_for("carol"))
        assert ADMIN_SCOPE not in model["scopes"] and model["groups"] == ["vision"]

        family = descendants(hub.proc.pid)
        assert started["pid"] in family and len(family) >= 2  # the proxy and the service
    assert not hub.running
    assert identify(family) == {}  # none alive (a zombie waiting for init is not)


def test_hub_start_failure_is_reported_with_the_log(tmp_path: Path) -> None:
    hub = Hub(tmp_path, service_command=[sys.executable, "-c", "raise SystemExit(7)"])
    with pytest.raises(HarnessError, match=r"(?s)exited with status.*Service frachub exited"):
        hub.start()
    assert not hub.running
    # the hub died without stopping its proxy: stop() found and ended it
    proxy_pid = int((tmp_path / "jupyterhub-proxy.pid").read_text())
    assert identify([proxy_pid]) == {}
