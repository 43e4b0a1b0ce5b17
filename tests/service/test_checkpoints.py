"""Checkpoints through the real service: a job tells FracHub it saved its work,
through the API (``hub_ext.client.checkpointed()``, run inside the job) or by a file in its
``FRACHUB_CHECKPOINT_DIR`` (the local backend sees it), and the scheduler then evicts the
work that loses the least, saying how much was lost."""

from __future__ import annotations

import shlex
import sys

import pytest
from hubharness import module_service
from service_client import service_config, submit, wait_for, wait_state, workload

ONE_LINER = (
    f"{shlex.quote(sys.executable)} -c 'from hub_ext.client import checkpointed; checkpointed()'"
)


service = module_service(service_config(gpus=2, grace=1), "checkpoints")


def drain(client) -> None:
    for item in client.get("workloads?active").json():
        client.delete(f"workloads/{item['id']}")
    wait_for(lambda: not client.get("workloads?active").json(), 20, "drained")


def test_the_job_that_checkpointed_is_evicted_not_the_one_started_last(
    service, make_user, api
) -> None:
    """vision borrows nlp's GPU with two jobs; the first started saves (a new file in its
    checkpoint directory) after the second started. When nlp claims its GPU, the saver goes,
    although "most recently started" would have chosen the other, and its history says what
    the eviction cost."""
    alice = api(make_user(groups=["vision"])[1])
    bob = api(make_user(groups=["nlp"])[1])
    saver = submit(
        alice,
        command='sleep 2; echo step > "$FRACHUB_CHECKPOINT_DIR/step-1"; echo saved; '
        "trap 'exit 0' TERM; sleep 60 & wait",
        gpus=1,
        name="saver",
        checkpoint_interval_seconds=3600,
    )
    wait_state(alice, saver["id"], "running")
    plain = submit(alice, command="trap 'exit 0' TERM; sleep 60 & wait", gpus=1, name="plain")
    wait_state(alice, plain["id"], "running")
    saved = wait_for(
        lambda: (w := workload(alice, saver["id"]))["checkpointed_at"] and w, 20, "a checkpoint"
    )
    assert saved["checkpoint_interval_seconds"] == 3600
    assert saved["checkpointed_at"] > workload(alice, plain["id"])["started_at"]
    claim = submit(bob, command="sleep 1", gpus=1, name="claim")
    evicted = wait_state(alice, saver["id"], "preempting", "pending")
    assert workload(alice, plain["id"])["state"] == "running"
    [event] = [e for e in evicted["events"] if e["type"] == "preempting"]
    assert event["message"].startswith(
        f"preempted for nlp/{claim['name']} (borrowed GPUs reclaimed); "
    ), event
    assert "of work lost (" in event["message"], event
    assert wait_state(bob, claim["id"], "running", "succeeded")
    drain(alice)


def test_a_job_reports_its_checkpoint_through_the_api(service, hub, make_user, api) -> None:
    """The one-liner inside the job, with its owner's token in the job's environment; the
    endpoint answers the owner and admins, 404 to others, 409 once it holds no GPUs."""
    _, token = make_user(groups=["vision"])
    alice = api(token)
    carol = api(make_user(groups=["vision"])[1])
    admin = api(make_user(admin=True)[1])
    # every job has its own token (tests/service/test_job_tokens.py); one its owner gives it in
    # FRACHUB_TOKEN wins (a submission may not set FRACHUB_*, so the job's script sets it)
    reach = f"FRACHUB_URL={hub.service_url()} FRACHUB_TOKEN={token}"
    job = submit(alice, command=f"{reach} {ONE_LINER} && echo told; sleep 60", gpus=0.5)
    told = wait_for(
        lambda: (w := workload(alice, job["id"]))["checkpointed_at"] and w, 20, "a checkpoint"
    )
    logs = f"workloads/{job['id']}/logs"
    wait_for(lambda: "told" in alice.get(logs).text, 10, "the one-liner to return")
    assert told["state"] == "running"
    gone = carol.post(f"workloads/{job['id']}/checkpoint")
    assert gone.status_code == 404 and "not found" in gone.json()["message"]
    by_admin = admin.post(f"workloads/{job['id']}/checkpoint")
    assert by_admin.status_code == 200
    assert by_admin.json()["checkpointed_at"] >= told["checkpointed_at"]
    alice.delete(f"workloads/{job['id']}")
    wait_state(alice, job["id"], "cancelled")
    late = alice.post(f"workloads/{job['id']}/checkpoint")
    assert late.status_code == 409 and "only a running job" in late.json()["message"]


@pytest.mark.parametrize("value", [0, -5, "10m", 10 * 365 * 24 * 3600 + 1])
def test_a_bad_checkpoint_interval_is_refused_naming_the_field(
    service, make_user, api, value
) -> None:
    alice = api(make_user(groups=["vision"])[1])
    answer = alice.post(
        "workloads", json={"command": "true", "gpus": 0.5, "checkpoint_interval_seconds": value}
    )
    assert answer.status_code == 400
    assert answer.json()["message"].startswith("checkpoint_interval_seconds: ")
    assert alice.get("workloads").json() == []
