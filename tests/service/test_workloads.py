"""Training through the REST API: submit, run as a real subprocess, logs, exit codes,
preemption and requeue in the original place, cancel, validation, pagination, usage."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from hubharness import ServiceProcess
from service_client import service_config, submit, wait_for, wait_state, workload

from .conftest import DATABASES, database_config

PRINT_ENV = (
    'python3 -c "import json, os; print(json.dumps({k: v for k, v in os.environ.items() '
    "if k.startswith(('FRACHUB_', 'CUDA_', 'XLA_', 'TF_'))}))\""
)


@pytest.fixture(scope="module", params=DATABASES)
def service(hub, tmp_path_factory, request):
    """The service on SQLite, then on PostgreSQL (the same tests on both stores)."""
    process = ServiceProcess(
        hub,
        service_config(gpus=2, grace=1, extra=database_config(request, request.param)),
        tmp_path_factory.mktemp("workloads"),
    ).start()
    yield process
    process.stop()


@pytest.fixture
def user(service, make_user, api):
    """A client for a new member of ``vision`` (one per test, so lists start empty). What a
    test leaves running is cancelled after it, passed or failed: the service is the module's,
    and a failed test's jobs would hold the GPUs the next test needs."""
    made: list[httpx.Client] = []

    def make(group: str = "vision") -> httpx.Client:
        _, token = make_user(groups=[group])
        made.append(api(token))
        return made[-1]

    yield make
    for client in made:
        drain(client)


def drain(client: httpx.Client) -> None:
    """Cancel whatever the test left running so the next test finds free GPUs."""
    for item in client.get("workloads?active").json():
        client.delete(f"workloads/{item['id']}")
    wait_for(lambda: not client.get("workloads?active").json(), 20, "drained")


def test_a_job_runs_with_the_environment_contract(user) -> None:
    alice = user()
    job = submit(alice, command=PRINT_ENV, gpus=0.5, name="env-check", env={"MY_SETTING": "x"})
    # on idle GPUs the fast arrival path starts it before the 201; else the next cycle does
    assert job["state"] in ("pending", "running") and job["name"] == "env-check"
    done = wait_state(alice, job["id"], "succeeded", "failed")
    assert done["state"] == "succeeded" and done["exit_code"] == 0
    [replica] = done["placement"]
    assert replica["gpus"][0]["share"] == 0.5
    log = alice.get(f"workloads/{job['id']}/logs").text
    *output, ending = log.strip().splitlines()
    assert ending.startswith("=== frachub ") and ending.endswith(": succeeded: exit code 0 ===")
    env = json.loads(output[-1])
    assert env["FRACHUB_WORKLOAD_ID"] == str(job["id"])
    assert env["FRACHUB_GPU_FRACTION"] == "0.5"
    assert env["FRACHUB_GPU_MEMORY_MIB"] == str(40 * 1024)
    assert env["FRACHUB_RESTART_COUNT"] == "0"
    assert env["CUDA_VISIBLE_DEVICES"] == str(replica["gpus"][0]["index"])
    assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.5"
    assert [event["type"] for event in done["events"]] == ["submitted", "started", "succeeded"]


def test_exit_codes_become_failed(user) -> None:
    alice = user()
    job = submit(alice, command="echo bad >&2; exit 3", gpus=0.25)
    done = wait_state(alice, job["id"], "failed", "succeeded")
    assert done["state"] == "failed" and done["exit_code"] == 3
    assert "exited with code 3" in done["message"]
    last = alice.get(f"workloads/{job['id']}/logs?tail=2").text.splitlines()
    assert last[0] == "bad" and last[1].endswith(": failed: exited with code 3 ===")


def test_logs_follow_streams_until_the_job_ends(user) -> None:
    alice = user()
    job = submit(alice, command="for i in 1 2 3; do echo line-$i; sleep 0.4; done", gpus=0.25)
    wait_state(alice, job["id"], "running", "succeeded")
    began = time.monotonic()
    text = alice.get(f"workloads/{job['id']}/logs?follow=1").text
    assert "line-1" in text and "line-3" in text
    assert time.monotonic() - began > 0.3  # it waited for lines written after the request
    assert workload(alice, job["id"])["state"] == "succeeded"


def test_preempted_job_is_requeued_in_its_place_and_restarted(user) -> None:
    """vision borrows nlp's idle GPU; nlp submits; vision's newest job gets SIGTERM, then
    waits at the head of vision's queue and restarts with FRACHUB_RESTART_COUNT=1."""
    alice, bob = user("vision"), user("nlp")
    first = submit(alice, command="sleep 60", gpus=1)
    second = submit(
        alice,
        command='trap "echo got-term; exit 0" TERM; echo "restart=$FRACHUB_RESTART_COUNT"; '
        "sleep 60 & wait",
        gpus=1,
    )
    wait_state(alice, second["id"], "running")
    # beyond vision's 1-GPU quota, on nlp's idle GPU: marked, with who may take it back
    running = wait_for(lambda: (w := workload(alice, second["id"]))["borrowed"] and w, 10, "mark")
    assert "when nlp needs its GPUs" in running["borrowed"], running
    assert workload(alice, first["id"])["borrowed"] is None
    # its shell traps SIGTERM before it says so: a preemption before that would kill it
    wait_for(lambda: "restart=0" in alice.get(f"workloads/{second['id']}/logs").text, 10, "trap")
    later = submit(alice, command="sleep 1", gpus=1)
    claim = submit(bob, command="sleep 2", gpus=1)
    evicted = wait_state(alice, second["id"], "preempting", "pending")
    assert evicted["preemptions"] == 1
    wait_state(alice, second["id"], "pending")
    requeued = wait_for(
        lambda: (w := workload(alice, second["id"]))["queue_position"] is not None and w,
        10,
        "a queue position",
    )
    assert requeued["restart_count"] == 0  # counted when it restarts, not while it waits
    assert requeued["queue_position"] == 1, requeued  # ahead of `later`, submitted after it
    assert workload(alice, later["id"])["queue_position"] == 2
    assert "got-term" in alice.get(f"workloads/{second['id']}/logs").text
    assert wait_state(bob, claim["id"], "running", "succeeded")
    events = workload(alice, second["id"])["events"]
    types = [event["type"] for event in events]
    assert types[:5] == ["submitted", "started", "borrowed", "preempting", "requeued"]
    preempted = events[3]["text"]
    assert (
        preempted.startswith(f"preempted for nlp/{claim['name']}") and "grace period" in preempted
    )
    assert events[4]["text"].endswith("#1 in vision")
    # bob's short job ends; the requeued job, first in line, takes the GPU back
    restarted = wait_state(alice, second["id"], "running", timeout=30)
    assert restarted["restart_count"] == 1
    wait_for(lambda: "restart=1" in alice.get(f"workloads/{second['id']}/logs").text, 10, "restart")
    events = workload(alice, second["id"])["events"]
    assert events[5]["type"] == "restarted" and events[5]["text"].startswith("restarted: attempt 2")
    # the same milestones, in words, between the job's own lines in its log
    log = alice.get(f"workloads/{second['id']}/logs").text
    assert log.index("borrowed: vision is using") < log.index("preempted for nlp/")
    assert log.index("got-term") < log.index("requeued: back in its original place")
    assert workload(alice, first["id"])["preemptions"] == 0
    drain(alice)


def test_cancel_pending_and_running(user) -> None:
    alice = user()
    running, other = (submit(alice, command="sleep 60", gpus=1) for _ in range(2))
    wait_state(alice, other["id"], "running")  # both GPUs are busy now
    waiting = [submit(alice, command="sleep 60", gpus=1) for _ in range(3)]

    def positions() -> list[int | None]:
        return [workload(alice, job["id"])["queue_position"] for job in waiting]

    before = wait_for(lambda: None not in positions() and positions(), 10, "queue positions")
    assert before[1] == before[0] + 1 and before[2] == before[0] + 2, before
    head = workload(alice, waiting[0]["id"])
    assert head["state"] == "pending" and head["pending_reason"]
    cancelled = alice.delete(f"workloads/{waiting[0]['id']}").json()
    assert cancelled["state"] == "cancelled"
    wait_for(lambda: positions()[1:] == [before[0], before[1]], 10, "the others to move up")
    stopping = alice.delete(f"workloads/{running['id']}").json()
    assert stopping["state"] in ("cancelling", "cancelled")
    assert wait_state(alice, running["id"], "cancelled")["exit_code"] in (143, 137, -15)
    again = alice.delete(f"workloads/{running['id']}")
    assert again.status_code == 409 and "already cancelled" in again.json()["message"]
    drain(alice)


BAD_SUBMISSIONS = [
    ("unknown-field", {"command": "true", "gpus": 1, "gpu": 2}, "gpu: unknown field"),
    ("odd-fraction", {"command": "true", "gpus": 0.3333}, "gpus: fractions"),
    ("fraction-above-one", {"command": "true", "gpus": 1.5}, "gpus: must be"),
    (
        "both-gpus-and-memory",
        {"command": "true", "gpus": 1, "gpu_memory_gib": 20},
        "gpu_memory_gib: give either",
    ),
    ("no-command", {"gpus": 1}, "command: is required"),
    ("empty-command-list", {"command": [], "gpus": 1}, "command: is required"),
    (
        "reserved-env",
        {"command": "true", "gpus": 1, "env": {"CUDA_VISIBLE_DEVICES": "3"}},
        "env.CUDA_VISIBLE_DEVICES",
    ),
    ("bad-replicas", {"command": "true", "gpus": 1, "replicas": 0}, "replicas: must be"),
    ("bad-kind", {"command": "true", "gpus": 1, "kind": "interactive"}, "kind: must be"),
    ("bad-name", {"command": "true", "gpus": 1, "name": "job\n"}, "name: must be"),
    ("not-an-object", [1, 2], "body: must be a JSON object"),
    (
        "no-such-project",
        {"command": "true", "gpus": 1, "project": "nope"},
        "project: no such project",
    ),
    ("nan", "NaN", "body: not valid JSON"),
]


@pytest.mark.parametrize(
    "body, words", [row[1:] for row in BAD_SUBMISSIONS], ids=[row[0] for row in BAD_SUBMISSIONS]
)
def test_bad_submissions_are_refused_and_store_nothing(user, body, words) -> None:
    alice = user()
    if isinstance(body, str):
        response = alice.post(
            "workloads", content=f'{{"command": "true", "gpu_memory_gib": {body}}}'
        )
    else:
        response = alice.post("workloads", json=body)
    assert response.status_code == 400, response.text
    assert words in response.json()["message"]
    assert alice.get("workloads").json() == []


KEY = "Idempotency-Key"


def test_a_retried_submission_with_its_key_stores_one_job(user) -> None:
    """A retry (the same key, the same body) is answered with the first job and stores
    nothing, also when the retries arrive together; the same key with another body is
    refused; another user's identical key is their own; a sweep is found by its key too."""
    alice, bob = user(), user()
    body = {"command": "sleep 60", "gpus": 0.25, "name": "keyed"}
    key = "8e03978e-40d5-43e8-bc93-6894a57f9324"
    first = alice.post("workloads", json=body, headers={KEY: f'"{key}"'})
    assert first.status_code == 201, first.text
    assert "Idempotent-Replayed" not in first.headers
    job = first.json()["id"]
    # the same body in another field order, the key bare rather than quoted: the same request
    again = alice.post("workloads", json=dict(reversed(body.items())), headers={KEY: key})
    assert again.status_code == 201, again.text
    assert again.json()["id"] == job and again.json()["name"] == "keyed"
    assert again.headers["Location"] == first.headers["Location"]
    assert again.headers["Idempotent-Replayed"] == "true"
    assert [item["id"] for item in alice.get("workloads").json()] == [job]

    other = alice.post("workloads", json={**body, "gpus": 0.5}, headers={KEY: key})
    assert other.status_code == 422, other.text
    message = other.json()["message"]
    assert message.startswith(f"{KEY}: ") and "another body" in message and str(job) in message

    bobs = bob.post("workloads", json=body, headers={KEY: key})
    assert bobs.status_code == 201 and bobs.json()["id"] != job
    assert "Idempotent-Replayed" not in bobs.headers
    assert [item["id"] for item in bob.get("workloads").json()] == [bobs.json()["id"]]

    def send(_: int) -> httpx.Response:
        return alice.post("workloads", json=body, headers={KEY: "burst"})

    with ThreadPoolExecutor(6) as pool:  # retries racing the first: one job for all
        burst = list(pool.map(send, range(6)))
    assert [answer.status_code for answer in burst] == [201] * 6
    assert len({answer.json()["id"] for answer in burst}) == 1
    assert sum("Idempotent-Replayed" in answer.headers for answer in burst) == 5

    sweep = {"command": "sleep 60", "gpus": 0.25, "sweep": {"parameters": {"lr": [1, 2]}}}
    sweeps = [alice.post("workloads", json=sweep, headers={KEY: "s"}) for _ in range(2)]
    assert [answer.status_code for answer in sweeps] == [201, 201]
    assert sweeps[0].json()["id"] == sweeps[1].json()["id"]
    assert sweeps[1].headers["Location"].endswith(f"/sweeps/{sweeps[0].json()['id']}")
    assert [m["id"] for m in sweeps[1].json()["workloads"]] == [
        m["id"] for m in sweeps[0].json()["workloads"]
    ]
    assert len(alice.get("workloads").json()) == 4  # the job, the burst's, two sweep members
    drain(alice)
    drain(bob)


@pytest.mark.parametrize(
    "value, words",
    [
        ("k" * 201, "must be 1 to 200 printable ASCII characters"),
        ("", "got 0 characters"),
        ('""', "empty quoted string"),
        ("caf\xe9".encode("latin-1"), "got other characters"),
    ],
    ids=["too-long", "empty", "empty-quoted", "not-ascii"],
)
def test_a_bad_idempotency_key_is_refused_naming_the_header(user, value, words) -> None:
    alice = user()
    response = alice.post("workloads", json={"command": "true", "gpus": 0.25}, headers={KEY: value})
    assert response.status_code == 400, response.text
    assert response.json()["message"].startswith(f"{KEY}: ") and words in response.text
    assert alice.get("workloads").json() == []


def test_lists_filter_and_paginate_like_the_hub(user) -> None:
    alice = user()
    ids = [submit(alice, command="true", gpus=0.25)["id"] for _ in range(5)]
    wait_for(lambda: all(workload(alice, i)["state"] == "succeeded" for i in ids), 20, "all done")
    page = alice.get(
        "workloads?limit=2&state=succeeded",
        headers={"Accept": "application/jupyterhub-pagination+json"},
    ).json()
    assert [item["id"] for item in page["items"]] == ids[::-1][:2]
    assert page["_pagination"]["total"] == 5
    following = page["_pagination"]["next"]
    assert following["offset"] == 2 and "state=succeeded" in following["url"]
    assert len(alice.get("workloads?state=running").json()) == 0
    bad = alice.get("workloads?state=sleeping")
    assert bad.status_code == 400 and "state" in bad.json()["message"]
    assert alice.get("workloads/999999").status_code == 404
    assert alice.get("no-such-endpoint").status_code == 404


def test_usage_counts_gpu_hours(user) -> None:
    alice = user()
    job = submit(alice, command="sleep 1", gpus=0.5)
    wait_state(alice, job["id"], "succeeded")
    usage = alice.get("usage").json()
    [row] = usage["rows"]
    assert row["project"] == "vision"
    assert 0.5 * 0.9 / 3600 < row["gpu_hours"] < 0.5 * 5 / 3600
    bad = alice.get("usage?start=yesterday")
    assert bad.status_code == 400 and "start" in bad.json()["message"]


def test_max_runtime_stops_a_job(user) -> None:
    alice = user()
    job = submit(alice, command="sleep 60", gpus=0.25, max_runtime_seconds=1)
    done = wait_state(alice, job["id"], "failed", timeout=30)
    assert "stopped: reached its 1 s time limit" in done["message"]


def test_metrics_for_prometheus(user) -> None:
    alice = user()
    job = submit(alice, command="true", gpus=0.25)
    wait_state(alice, job["id"], "succeeded")
    text = alice.get("../../metrics").text
    assert 'frachub_queue_deserved_gpus{queue="vision"} 1.0' in text
    assert "frachub_time_to_start_seconds_bucket" in text
    assert "frachub_cycle_duration_seconds_count" in text


def test_logs_never_follow_a_symlink_planted_by_the_job(user, service) -> None:
    """A job owns its log directory; pointing its log at another file must not make the
    service read that file."""
    alice = user()
    secret = service.workdir / "secret.txt"
    secret.write_text("the service's secret\n")
    job = submit(alice, command="echo mine", gpus=0.25)
    wait_state(alice, job["id"], "succeeded")
    log = service.workdir / "frachub-data" / "logs" / str(job["id"]) / "replica-0.log"
    assert log.exists()
    log.unlink()
    log.symlink_to(secret)
    response = alice.get(f"workloads/{job['id']}/logs")
    assert response.status_code == 404
    assert "secret" not in response.text


def test_a_long_notebook_name_fits_its_column_on_either_database(user) -> None:
    """A server name may be 255 characters, and so may ``notebook-<user>-<server>`` be
    no longer: the stored name is cut to fit with a hash of the whole (two long server names
    still differ), on SQLite as on PostgreSQL, whose varchar(255) refused the row (500)."""
    alice = user()
    made = []
    for server in ("s" * 255, "s" * 254 + "t"):
        response = alice.post("allocations", json={"server_name": server, "gpus": 0.25})
        assert response.status_code == 201, response.text
        made.append(response.json())
    try:
        stored = {
            item["id"]: item
            for item in alice.get("allocations").json()
            if item["id"] in {allocation["id"] for allocation in made}
        }
        assert len(stored) == 2
        names = set()
        for allocation in made:
            row = stored[allocation["id"]]
            assert row["server_name"] == allocation["server_name"]
            assert row["name"] == allocation["name"]
            assert len(row["name"]) <= 255 and row["name"].startswith("notebook-")
            names.add(row["name"])
        assert len(names) == 2
    finally:
        for allocation in made:
            alice.delete(f"allocations/{allocation['id']}")
