"""Job dependencies (``after``/``after_ok``) and time limits (``time_limit``) through the REST
API, with real subprocesses: a dependent waits with a reason in words, starts when its
dependency ends, is cancelled with an event when an ``after_ok`` dependency fails, keeps
waiting across a service restart; a job past its time limit gets SIGTERM and fails with the
limit in words."""

from __future__ import annotations

import signal

import httpx
import pytest
from hubharness import ServiceProcess
from service_client import service_config, submit, wait_for, wait_state, workload

from .conftest import DATABASES, database_config


@pytest.fixture(params=DATABASES)
def service(hub, tmp_path, request):
    """A service of its own (a test restarts it), on SQLite and on PostgreSQL."""
    process = ServiceProcess(
        hub,
        service_config(gpus=2, grace=1, extra=database_config(request, request.param)),
        tmp_path / "svc",
    ).start()
    yield process
    process.stop()


@pytest.fixture
def alice(service, make_user, api) -> httpx.Client:
    _, token = make_user(groups=["vision"])
    return api(token)


def waits_for(client: httpx.Client, workload_id: int, text: str) -> dict:
    """The workload once its pending reason says ``text``."""
    return wait_for(
        lambda: (w := workload(client, workload_id))["pending_reason"] == text and w,
        20,
        f"workload {workload_id} to wait with {text!r}",
    )


def running_until(client: httpx.Client, marker, code: int = 0) -> dict:
    """A running 1-GPU job that ends with ``code`` once ``marker`` exists."""
    job = submit(
        client, command=f"while [ ! -e {marker} ]; do sleep 0.1; done; exit {code}", gpus=1
    )
    wait_state(client, job["id"], "running")
    return job


def test_refusals_name_the_field(service, alice, make_user, api) -> None:
    _, token = make_user(groups=["vision"])
    bob = api(token)
    theirs = submit(bob, command="sleep 30", gpus=0.25)
    failed = submit(alice, command="exit 3", gpus=0.25)
    wait_state(alice, failed["id"], "failed")
    cases = [
        ({"after": 999_999}, "after: no job 999999 of yours"),
        ({"after_ok": theirs["id"]}, f"after_ok: no job {theirs['id']} of yours"),
        ({"after": 1, "after_ok": 1}, "after_ok: give after or after_ok, not both"),
        ({"after": "1"}, "after: must be a job id"),
        ({"after_ok": failed["id"]}, f"after_ok: job {failed['id']} already failed"),
        ({"time_limit": "2h"}, "time_limit: must be a time limit as Slurm writes it"),
        ({"time_limit": "0"}, "time_limit: must be a time limit"),
        ({"time_limit": "30", "max_runtime_seconds": 60}, "time_limit: give time_limit or"),
    ]
    for fields, message in cases:
        answer = alice.post("workloads", json={"command": "true", "gpus": 0.25, **fields})
        assert answer.status_code == 400, (fields, answer.text)
        body = answer.json()
        assert set(body) == {"status", "message"} and body["message"].startswith(message), body
    # after a job that already ended (any outcome): it starts at once
    after = submit(alice, command="true", gpus=0.25, after=failed["id"])
    assert after["after"] == failed["id"] and after["after_ok"] is None
    wait_state(alice, after["id"], "succeeded")


def test_after_ok_cancels_when_the_dependency_fails_and_after_runs(service, alice) -> None:
    marker = service.workdir / "fail-now"
    first = running_until(alice, marker, code=2)
    needs_ok = submit(alice, command="true", gpus=0.25, after_ok=first["id"])
    anyway = submit(alice, command="true", gpus=0.25, after=first["id"])
    assert needs_ok["after_ok"] == first["id"]
    waits_for(alice, needs_ok["id"], f"waits for job {first['id']} (running) to succeed")
    waits_for(alice, anyway["id"], f"waits for job {first['id']} (running)")
    assert workload(alice, anyway["id"])["state"] == "pending"  # a GPU is free: it is held
    marker.touch()
    wait_state(alice, first["id"], "failed")
    cancelled = wait_state(alice, needs_ok["id"], "cancelled")
    why = f"job {first['id']}, which it had to follow (--after-ok), failed"
    assert cancelled["message"] == f"cancelled: {why}"
    assert any(why in event["text"] for event in cancelled["events"]), cancelled["events"]
    ran = wait_state(alice, anyway["id"], "succeeded")
    waited = f"done waiting: job {first['id']} ended (failed)"
    assert any(event["text"] == waited for event in ran["events"]), ran["events"]


def test_a_chain_survives_a_service_restart_and_a_sweep_waits_too(service, alice) -> None:
    marker = service.workdir / "finish-now"
    first = running_until(alice, marker)
    second = submit(alice, command="true", gpus=0.25, after_ok=first["id"])
    sweep = alice.post(
        "workloads",
        json={
            "command": "true",
            "gpus": 0.25,
            "after": second["id"],
            "sweep": {"parameters": {"lr": ["0.1", "0.01"]}},
        },
    )
    assert sweep.status_code == 201, sweep.text
    members = [member["id"] for member in sweep.json()["workloads"]]
    service.kill(signal.SIGKILL)
    service.start()
    waits_for(alice, second["id"], f"waits for job {first['id']} (running) to succeed")
    for member in members:
        waits_for(alice, member, f"waits for job {second['id']} (pending)")
    marker.touch()
    wait_state(alice, first["id"], "succeeded", timeout=30)
    done = wait_state(alice, second["id"], "succeeded")
    waited = f"done waiting: job {first['id']} ended (succeeded)"
    assert any(event["text"] == waited for event in done["events"]), done["events"]
    for member in members:
        wait_state(alice, member, "succeeded")


def test_a_job_past_its_time_limit_gets_sigterm_and_says_so(service, alice) -> None:
    caught = service.workdir / "caught-term"
    script = f"trap 'touch {caught}; exit 143' TERM; while true; do sleep 0.1; done"
    job = submit(alice, command=script, gpus=0.25, time_limit="0:02")
    assert job["max_runtime_seconds"] == 2
    done = wait_state(alice, job["id"], "failed", timeout=30)
    assert done["message"] == "stopped: reached its 2 s time limit"
    assert caught.exists()  # SIGTERM first, as Slurm does, with the grace period to save work
    assert any("reached its 2 s time limit" in e["text"] for e in done["events"])


def test_a_project_gives_its_jobs_a_default_time_limit_and_a_maximum(
    service, alice, make_user, api
) -> None:
    _, token = make_user(admin=True)
    admin = api(token)
    name = alice.get("user").json()["name"]
    created = admin.post(
        "queues",
        json={
            "name": "hpc-limits",
            "deserved_gpus": 1,
            "members": [name],
            "default_time_limit": "0:03",
            "max_time_limit": "10",
        },
    )
    assert created.status_code == 201, created.text
    assert created.json()["default_time_limit"] == "00:00:03"
    assert created.json()["max_time_limit"] == "00:10:00"
    # no time given: the project's default, and it is enforced
    job = submit(alice, command="sleep 60", gpus=0.25, project="hpc-limits")
    assert job["max_runtime_seconds"] == 3
    done = wait_state(alice, job["id"], "failed", timeout=30)
    assert done["message"] == "stopped: reached its 3 s time limit"
    # longer than the maximum: refused, naming the field and the project's limit
    refused = alice.post(
        "workloads",
        json={"command": "true", "gpus": 0.25, "project": "hpc-limits", "time_limit": "1:00:00"},
    )
    assert refused.status_code == 400
    assert refused.json()["message"] == (
        "time_limit: must be at most 00:10:00 in project hpc-limits (its max_time_limit), "
        "got 01:00:00"
    )
    within = submit(alice, command="true", gpus=0.25, project="hpc-limits", time_limit="5")
    assert within["max_runtime_seconds"] == 300
    # without a default, the maximum is the limit; a default above it is refused
    patched = admin.patch("queues/hpc-limits", json={"default_time_limit": None})
    assert patched.status_code == 200 and patched.json()["default_time_limit"] is None
    assert (
        submit(alice, command="true", gpus=0.25, project="hpc-limits")["max_runtime_seconds"] == 600
    )
    wrong = admin.patch("queues/hpc-limits", json={"default_time_limit": "1-00"})
    assert wrong.status_code == 400
    assert wrong.json()["message"] == (
        "default_time_limit: must be at most max_time_limit (00:10:00), got 1-00:00:00"
    )
    assert admin.get("queues/hpc-limits").json()["max_time_limit"] == "00:10:00"
