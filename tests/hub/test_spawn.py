"""Notebooks on a GPU share through the real hub: REST spawns with user_options, the
environment seen from inside the server, refusals, queueing with progress, release."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx
import pytest

from hub.upharness import SERVICE_API, Up
from scheduler.common.scopes import ADMIN_SCOPE, SCOPE_HOLDERS

ENV_PROBE = (
    "import json, os; print(json.dumps({k: v for k, v in os.environ.items() "
    "if k.startswith(('FRACHUB_', 'CUDA_', 'XLA_', 'TF_', 'JUPYTER_PATH', 'PYTHONPATH'))}))"
)


def test_rest_spawn_with_user_options_gives_the_server_its_share(up: Up, kernel) -> None:
    response = up.start_server("alice", {"profile": "gpu", "gpus": 0.5})
    assert response.status_code in (201, 202), response.text
    up.wait_ready("alice")

    env = json.loads(kernel("alice").text(ENV_PROBE))
    (allocation,) = up.allocations("alice", ["running"])
    assert allocation["gpus"] == 0.5 and allocation["project"] == "vision"
    gpu = allocation["placement"][0]["gpus"][0]
    assert env["FRACHUB_WORKLOAD_ID"] == str(allocation["id"])
    assert env["FRACHUB_GPU_FRACTION"] == "0.5"
    assert env["FRACHUB_GPU_MEMORY_MIB"] == str(24 * 1024 // 2)
    assert env["FRACHUB_GPU_UUIDS"] == gpu["uuid"]
    assert env["CUDA_VISIBLE_DEVICES"] == str(gpu["index"])
    assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.5"
    assert env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert env["FRACHUB_PROJECT"] == "vision"
    assert env["FRACHUB_URL"].endswith("/services/frachub/")
    assert "pyhook" in env["PYTHONPATH"]  # the PyTorch memory cap at start-up

    up.stop_server("alice")
    assert up.allocations("alice", ["pending", "running"]) == []


def test_server_token_acts_as_the_user_with_submit_scope(up: Up, kernel) -> None:
    up.start_server("bob", {"profile": "cpu"})
    up.wait_ready("bob")
    code = (
        "import os, httpx; r = httpx.get(os.environ['FRACHUB_URL'] + 'api/v1/user', "
        "headers={'Authorization': 'token ' + os.environ['JUPYTERHUB_API_TOKEN']}); "
        "print(r.status_code, r.text)"
    )
    status, body = kernel("bob").text(code).split(" ", 1)
    me = json.loads(body)
    assert status == "200"
    assert me["name"] == "bob" and me["kind"] == "user"
    assert me["submit"] is True and me["admin"] is False
    # a CPU-only server holds no allocation and sees no GPU
    assert up.allocations("bob", ["pending", "running"]) == []
    env = json.loads(kernel("bob").text(ENV_PROBE))
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    # `frachub` is on the PATH of the server and of its terminals: the terminal's command
    # (from the server's own command line) run as a terminal runs it, a login shell first
    found = kernel("bob").text(TERMINAL_PROBE).split()
    venv_frachub = str(Path(sys.executable).parent / "frachub")
    assert found == [venv_frachub, venv_frachub], found
    # asking for everyone's jobs: the refusal names the token and who gets the scope
    status, stderr = json.loads(kernel("bob").text(ALL_USERS_PROBE))
    assert status == 1
    assert stderr == (
        f"frachub: --all-users needs the FracHub admin scope {ADMIN_SCOPE}: the token in "
        f"JUPYTERHUB_API_TOKEN lacks it; the hub grants it to {SCOPE_HOLDERS[ADMIN_SCOPE]}\n"
    )


def test_an_admins_server_token_carries_the_admin_scope(up: Up, kernel) -> None:
    """The demo's admin (a FracHub admin by the frachub-admins group) gets a notebook token
    with the admin scope, so `frachub jobs --all-users` works in its own terminal."""
    with httpx.Client(
        base_url=f"{up.url}{SERVICE_API}",
        headers={"Authorization": f"token {up.token('alice')}"},
        timeout=60,
    ) as alice:
        job = alice.post("workloads", json={"command": "sleep 60", "gpus": 0.25, "name": "alices"})
        assert job.status_code == 201, job.text
    try:
        up.start_server("admin", {"profile": "cpu"})
        up.wait_ready("admin")
        me = json.loads(kernel("admin").text(USER_PROBE).split(" ", 1)[1])
        assert me["name"] == "admin" and me["admin"] is True
        probe = ALL_USERS_PROBE.replace("r.stderr", "r.stdout")
        status, stdout = json.loads(kernel("admin").text(probe))
        assert status == 0, stdout
        assert "alices" in stdout, stdout  # alice's job, in the admin's listing
    finally:
        up.stop_server("admin")


USER_PROBE = (
    "import os, httpx; r = httpx.get(os.environ['FRACHUB_URL'] + 'api/v1/user', "
    "headers={'Authorization': 'token ' + os.environ['JUPYTERHUB_API_TOKEN']}); "
    "print(r.status_code, r.text)"
)
ALL_USERS_PROBE = (
    "import json, os, subprocess; "
    "env = {k: v for k, v in os.environ.items() if k != 'FRACHUB_TOKEN'}; "
    "r = subprocess.run(['frachub', 'jobs', '--all-users'], capture_output=True, text=True, "
    "env=env); print(json.dumps([r.returncode, r.stderr]))"
)


TERMINAL_PROBE = """
import json, os, shutil, subprocess
argv = open(f"/proc/{os.getppid()}/cmdline").read().split("\\0")
[setting] = [arg for arg in argv if arg.startswith("--ServerApp.terminado_settings=")]
shell = json.loads(setting.split("=", 1)[1])["shell_command"]
typed = subprocess.run(shell, input="command -v frachub; exit\\n", capture_output=True,
                       text=True, timeout=30).stdout.split()
print(shutil.which("frachub"), typed[-1] if typed else "none")
"""


@pytest.mark.parametrize(
    ("options", "status", "names"),
    [
        ({"profile": "gpu", "gpus": 0.3}, 400, "user_options.gpus"),
        ({"profile": "nope"}, 400, "user_options.profile"),
        ({"profile": "gpu", "gpus": 0.5, "gpu": "1"}, 400, "user_options.gpus"),
        ({"profile": "gpu", "gpus": True, "colour": "red"}, 400, "user_options.gpus"),
        ({"profile": "cpu", "gpus": 1}, 400, "user_options.gpus"),
        ({"profile": "gpu", "project": "nlp"}, 403, "not a member of project nlp"),
        # vision deserves 1 GPU and notebooks never borrow: it can never start
        ({"profile": "gpu", "gpus": 2}, 503, "can never start"),
    ],
)
def test_bad_requests_fail_fast_and_allocate_nothing(up: Up, options, status, names) -> None:
    started = time.monotonic()
    response = up.start_server("alice", options)
    assert response.status_code == status, response.text
    assert names in response.json()["message"]
    assert time.monotonic() - started < 10  # refused, not timed out
    assert up.server("alice") is None or not up.server("alice").get("ready")
    assert up.allocations("alice", ["pending", "running"]) == []


def test_unknown_user_options_are_ignored_with_a_log_line_as_kubespawner_does(up: Up) -> None:
    # an existing REST client sending a key FracHub does not read still gets its server
    response = up.start_server("bob", {"profile": "cpu", "from-an-old-client": "x"})
    assert response.status_code in (201, 202), response.text
    up.wait_ready("bob")
    assert "Ignoring unrecognized user_options for bob: from-an-old-client" in up.log_text()
    assert "Received unhandled user_options" not in up.log_text()  # FracHub reads them


def test_over_quota_notebook_waits_with_its_queue_position(up: Up) -> None:
    # bob takes vision's whole deserved GPU; alice's notebook must wait for it
    assert up.start_server("bob", {"profile": "gpu", "gpus": 1}).status_code in (201, 202)
    up.wait_ready("bob")
    response = up.start_server("alice", {"profile": "gpu", "gpus": 0.5})
    assert response.status_code in (201, 202), response.text
    assert up.server("alice")["pending"] == "spawn"  # it waits for its share
    events = up.progress("alice", until="position 1")
    messages = [event["message"] for event in events]
    assert any("position 1 in vision's queue" in m for m in messages), messages
    waiting = next(m for m in messages if "position 1" in m)
    assert "deserved 1 GPU" in waiting  # the reason, in words
    (pending,) = up.allocations("alice", ["pending"])

    up.stop_server("bob")
    up.wait_ready("alice")
    (running,) = up.allocations("alice", ["running"])
    assert running["id"] == pending["id"]  # the same request, not a second one


def test_a_pending_spawn_that_is_cancelled_releases_its_request(up: Up) -> None:
    up.start_server("bob", {"profile": "gpu", "gpus": 1})
    up.wait_ready("bob")
    up.start_server("alice", {"profile": "gpu", "gpus": 1})
    up.progress("alice", until="position 1")
    assert len(up.allocations("alice", ["pending"])) == 1
    up.stop_server("alice")  # the user gives up waiting
    deadline = time.monotonic() + 10
    while up.allocations("alice", ["pending", "running"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert up.allocations("alice", ["pending", "running"]) == []


def test_named_servers_hold_separate_shares(up: Up) -> None:
    up.start_server("carol", {"profile": "gpu", "gpus": 0.25}, name="small")
    up.start_server("carol", {"profile": "gpu", "gpus": 0.5}, name="medium")
    up.wait_ready("carol", "small")
    up.wait_ready("carol", "medium")
    held = {a["server_name"]: a["gpus"] for a in up.allocations("carol", ["running"])}
    assert held == {"small": 0.25, "medium": 0.5}
    up.stop_server("carol", "small")
    held = {a["server_name"]: a["gpus"] for a in up.allocations("carol", ["running"])}
    assert held == {"medium": 0.5}
