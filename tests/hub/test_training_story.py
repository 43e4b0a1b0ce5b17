"""The issue's newcomer story, end to end through the real parts: a notebook on half a GPU,
training submitted from it with the magics, preempted and requeued when another project
claims its quota, and restarted with its restart count when the quota frees up."""

from __future__ import annotations

import re
import time
from typing import Any

from hub.upharness import Up

TRAIN_CELL = """%%frachub submit --gpus 1 --name train
import os, signal, sys, time
restart = os.environ["FRACHUB_RESTART_COUNT"]
print(f"start restart={restart} gpus={os.environ['CUDA_VISIBLE_DEVICES']}")  # unbuffered
from hub_ext.client import checkpointed
checkpointed()  # nothing set by alice: the job's own token
print("told FracHub", flush=True)
def save(signum, frame):
    print("SIGTERM: saving checkpoint", flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, save)
for step in range(100000):
    time.sleep(0.2)
"""


def job(up: Up, user: str, name: str) -> dict[str, Any]:
    with up.client(user) as client:
        jobs = client.get(f"/services/frachub/api/v1/workloads?name={name}").json()
    (found,) = [j for j in jobs if j["name"] == name]
    with up.client(user) as client:
        return client.get(f"/services/frachub/api/v1/workloads/{found['id']}").json()


def wait_job(up: Up, user: str, name: str, predicate, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        current = job(up, user, name)
        if predicate(current):
            return current
        if time.monotonic() > deadline:
            raise AssertionError(f"job {name} never got there: {current}")
        time.sleep(0.2)


def logs(up: Up, user: str, workload_id: int) -> str:
    with up.client(user) as client:
        return client.get(f"/services/frachub/api/v1/workloads/{workload_id}/logs").text


def test_notebook_training_preempted_by_another_project_and_requeued(up: Up, kernel) -> None:
    # alice opens a notebook on half a GPU of vision's 1-GPU quota
    up.start_server("alice", {"profile": "gpu", "gpus": 0.5})
    up.wait_ready("alice")
    notebook = kernel("alice")

    # ... and submits training from a cell: the cell becomes a script in her home
    submitted = notebook.text(TRAIN_CELL)
    assert "train" in submitted, submitted
    scripts = list((up.data / "home" / "alice" / "frachub-jobs").glob("train-*.py"))
    assert len(scripts) == 1 and "FRACHUB_RESTART_COUNT" in scripts[0].read_text()

    # with the notebook's 0.5 it uses 1.5 GPUs: it borrows nlp's idle GPU
    running = wait_job(up, "alice", "train", lambda j: j["state"] == "running")
    assert running["project"] == "vision"
    borrowed = wait_job(up, "alice", "train", lambda j: j["borrowed"] is not None)["borrowed"]
    assert "may be preempted when nlp needs its GPUs" in borrowed, borrowed
    wait_job(up, "alice", "train", lambda j: "start restart=0" in logs(up, "alice", j["id"]))
    wait_job(up, "alice", "train", lambda j: "told FracHub" in logs(up, "alice", j["id"]))
    told = job(up, "alice", "train")  # read after the log line: wait_job's copy is older
    assert told["checkpointed_at"] is not None, logs(up, "alice", told["id"])
    table = notebook.text("%frachub jobs")
    assert "train" in table and "running" in table

    # carol (project nlp) claims her project's quota with a 1-GPU notebook
    up.start_server("carol", {"profile": "gpu", "gpus": 1})
    up.wait_ready("carol", timeout=60)

    # alice's training was preempted (SIGTERM, grace period) and requeued in its place
    requeued = wait_job(up, "alice", "train", lambda j: j["state"] == "pending")
    assert requeued["preemptions"] == 1
    assert requeued["queue_position"] == 1
    assert requeued["pending_reason"]
    assert "SIGTERM: saving checkpoint" in logs(up, "alice", requeued["id"])
    assert "pending" in notebook.text("%frachub jobs")
    # alice's notebook was never touched
    assert up.server("alice")["ready"]
    (kept,) = up.allocations("alice", ["running"])
    assert kept["preemptions"] == 0

    # when carol leaves, the job restarts with FRACHUB_RESTART_COUNT=1 (resume from a checkpoint)
    up.stop_server("carol")
    restarted = wait_job(up, "alice", "train", lambda j: j["state"] == "running")
    assert restarted["restart_count"] == 1
    wait_job(up, "alice", "train", lambda j: "start restart=1" in logs(up, "alice", j["id"]))
    # its timeline, as %frachub describe shows it: what happened, and why
    described = notebook.text(f"%frachub describe {restarted['id']}")
    for line in (
        "borrowed: vision is using",
        "preempted for nlp/notebook-carol",
        "grace period",
        "#1 in vision",
        "restarted: attempt 2",
    ):
        assert line in described, described
    assert re.search(r"Preempted:?\s+1 time\b", described), described

    cancelled = notebook.text(f"%frachub cancel {restarted['id']}")
    assert str(restarted["id"]) in cancelled
    wait_job(up, "alice", "train", lambda j: j["state"] == "cancelled")
