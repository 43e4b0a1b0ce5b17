"""Kill the service with SIGKILL in the middle of work and start it again.

Queued work keeps its place, running work is re-adopted (or requeued if its process is gone),
a job that ended while the service was down is reported with its real exit code, no GPU share
is counted twice, and nothing acknowledged is lost or half-written.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from hubharness import ServiceProcess
from service_client import service_config, submit, wait_for, wait_state, workload
from sqlalchemy import create_engine

from hub_ext.client.api import FracHubClient
from hub_ext.client.session import FracHubError
from scheduler.service.persistence.store import engine_url

from .conftest import DATABASES, database_config


@pytest.fixture(params=DATABASES)
def crashable(hub, tmp_path, request):
    """A service to SIGKILL, on SQLite and on PostgreSQL (``database_url`` says where)."""
    extra = database_config(request, request.param)
    process = ServiceProcess(
        hub, service_config(gpus=2, grace=1, extra=extra), tmp_path / "svc"
    ).start()
    process.database_url = (
        extra.split("=", 1)[1].strip().strip("'")
        if extra
        else f"sqlite:///{tmp_path / 'svc' / 'frachub-data' / 'frachub.sqlite'}"
    )
    yield process
    process.stop()


@pytest.fixture
def alice(crashable, make_user, api):
    _, token = make_user(groups=["vision"])
    return api(token)


def used_per_gpu(client: httpx.Client) -> dict[int, float]:
    nodes = client.get("nodes").json()
    return {gpu["index"]: gpu["used"] for node in nodes for gpu in node["gpus"]}


def pids_of(workdir: Path, workload_id: int) -> list[int]:
    """The job's processes, found the way an operator would: by the job's log file."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if f"FRACHUB_WORKLOAD_ID={workload_id}\0".encode() in environ and str(workdir) in str(
            Path(f"/proc/{entry}/cwd").resolve()
        ):
            found.append(int(entry))
    return found


def test_sigkill_loses_nothing(crashable, alice) -> None:
    marker = crashable.workdir / "finish-now"
    survivor = submit(alice, command="sleep 120", gpus=1, name="survivor")
    finisher = submit(
        alice,
        command=f"while [ ! -e {marker} ]; do sleep 0.1; done; exit 3",
        gpus=0.5,
        name="finisher",
    )
    victim = submit(alice, command="sleep 120", gpus=0.5, name="victim")
    waiting = [submit(alice, command="sleep 120", gpus=1, name=f"queued-{i}") for i in range(2)]
    for job in (survivor, finisher, victim):
        wait_state(alice, job["id"], "running")
    positions = wait_for(
        lambda: (
            [workload(alice, job["id"])["queue_position"] for job in waiting]
            if all(workload(alice, job["id"])["queue_position"] for job in waiting)
            else None
        ),
        10,
        "queue positions",
    )
    before = {job["id"]: workload(alice, job["id"]) for job in (survivor, finisher, victim)}
    # "running" is stored before the backend launches (store first): a fast-path start's 201
    # may say so a moment before its process exists
    victim_pids = wait_for(
        lambda: pids_of(crashable.workdir, victim["id"]), 10, "the victim's processes"
    )

    crashable.kill(signal.SIGKILL)
    # while the service is down: one job finishes on its own, another's process dies
    marker.touch()
    for pid in victim_pids:
        os.kill(pid, signal.SIGKILL)
    time.sleep(1.0)
    crashable.start()

    done = wait_state(alice, finisher["id"], "failed", "succeeded")
    assert done["exit_code"] == 3, done  # the real code, though nobody was watching
    kept = workload(alice, survivor["id"])
    assert kept["state"] == "running"
    assert kept["started_at"] == before[survivor["id"]]["started_at"]  # adopted, not restarted
    assert kept["restart_count"] == 0
    # the victim's process died while nobody watched: requeued in its original place (ahead
    # of the queued jobs, submitted after it), so it restarts on the GPU share it left
    lost = wait_state(alice, victim["id"], "running")
    assert lost["restart_count"] == 1
    assert "lost" in [event["type"] for event in lost["events"]]
    after = [workload(alice, job["id"]) for job in waiting]
    assert [w["state"] for w in after] == ["pending", "pending"]
    assert [w["queue_position"] for w in after] == positions
    # no GPU is counted twice
    assert all(used <= 1.0 for used in used_per_gpu(alice).values()), used_per_gpu(alice)
    alice.delete(f"workloads/{survivor['id']}")
    for job in waiting:
        alice.delete(f"workloads/{job['id']}")


def test_a_job_that_ended_while_the_service_was_down_ends_when_it_ended(crashable, alice) -> None:
    """Its end is its exit record's time, not the restart's (which would inflate its run
    time and GPU-hours by the whole outage)."""
    marker = crashable.workdir / "end-now"
    job = submit(
        alice, command=f"while [ ! -e {marker} ]; do sleep 0.1; done", gpus=0.5, name="quick"
    )
    wait_state(alice, job["id"], "running")
    wait_for(lambda: pids_of(crashable.workdir, job["id"]), 10, "the job's processes")
    crashable.kill(signal.SIGKILL)
    marker.touch()
    wait_for(lambda: not pids_of(crashable.workdir, job["id"]), 10, "the job's end")
    ended = time.time()
    time.sleep(3.0)  # the outage
    restarted = time.time()
    crashable.start()
    done = wait_state(alice, job["id"], "succeeded")
    finished = datetime.fromisoformat(done["finished_at"]).timestamp()
    assert ended - 1.0 <= finished < restarted, (ended, finished, restarted)


def test_sigkill_during_a_burst_of_submissions(crashable, alice) -> None:
    """Every submission the service acknowledged survives; no row is half-written."""
    acknowledged: list[int] = []
    errors: list[str] = []
    stop = threading.Event()

    def submitter() -> None:
        with httpx.Client(base_url=str(alice.base_url), headers=alice.headers, timeout=5) as c:
            while not stop.is_set():
                try:
                    response = c.post("workloads", json={"command": "sleep 300", "gpus": 1})
                except httpx.HTTPError:
                    continue  # the service is gone; the request may or may not have landed
                if response.status_code == 201:
                    acknowledged.append(response.json()["id"])
                elif response.status_code != 502 and response.status_code != 503:
                    errors.append(response.text)

    threads = [threading.Thread(target=submitter) for _ in range(4)]
    for thread in threads:
        thread.start()
    wait_for(lambda: len(acknowledged) >= 40, 30, "40 acknowledged submissions")
    crashable.kill(signal.SIGKILL)
    stop.set()
    for thread in threads:
        thread.join()
    assert not errors, errors[:3]

    engine = create_engine(engine_url(crashable.database_url))
    with engine.connect() as db:
        if engine.dialect.name == "sqlite":
            assert db.exec_driver_sql("PRAGMA integrity_check").fetchone() == ("ok",)
        rows = db.exec_driver_sql(
            'SELECT id, state, "user", project, command FROM workloads'
        ).fetchall()
        without_event = db.exec_driver_sql(
            "SELECT count(*) FROM workloads w WHERE NOT EXISTS "
            "(SELECT 1 FROM events e WHERE e.workload_id = w.id AND e.type = 'submitted')"
        ).fetchone()[0]
    engine.dispose()
    stored = {row[0] for row in rows}
    assert set(acknowledged) <= stored
    assert without_event == 0
    assert all(row[2] and row[3] == "vision" and row[4] for row in rows)

    crashable.start()
    listed = alice.get("workloads?limit=500&active").json()
    assert {item["id"] for item in listed} >= set(acknowledged)
    running = [item for item in listed if item["state"] == "running"]
    assert len(running) <= 2  # two GPUs, whole-GPU jobs: never more than two hold one
    pending = sorted((item for item in listed if item["state"] == "pending"), key=lambda i: i["id"])
    wait_for(
        lambda: all(
            workload(alice, item["id"])["queue_position"] is not None for item in pending[:3]
        ),
        10,
        "positions after restart",
    )
    heads = [workload(alice, item["id"])["queue_position"] for item in pending[:3]]
    assert heads == sorted(heads)  # submission order is the queue order, restart or not
    for item in listed:
        alice.delete(f"workloads/{item['id']}")


def test_sigkill_during_the_clients_submissions_stores_each_once(
    crashable, hub, make_user, api
) -> None:
    """The probe's case, with the client: submissions answered 503 (or not at all) while
    the service is SIGKILLed and started again are sent again under their idempotency keys,
    and every one ends as exactly one job, however many of its tries the service stored."""
    _, token = make_user(groups=["vision"])
    answered: dict[str, int] = {}
    failed: dict[str, str] = {}
    retried: list[str] = []
    stop = threading.Event()

    def submitter(worker: int) -> None:
        with FracHubClient(hub.service_url(), token, notice=retried.append, timeout=5) as c:
            for n in range(10_000):
                if stop.is_set():
                    return
                name = f"probe-{worker}-{n}"
                try:
                    answered[name] = c.submit("sleep 300", gpus=1, name=name)["id"]
                except FracHubError as error:
                    failed[name] = str(error)

    threads = [threading.Thread(target=submitter, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    wait_for(lambda: len(answered) >= 40, 30, "40 answered submissions")
    crashable.kill(signal.SIGKILL)
    crashable.start()
    wait_for(lambda: len(answered) >= 100, 60, "100 answered submissions")
    stop.set()
    for thread in threads:
        thread.join()

    engine = create_engine(engine_url(crashable.database_url))
    with engine.connect() as db:
        rows = db.exec_driver_sql("SELECT id, name FROM workloads").fetchall()
    engine.dispose()
    stored = Counter(name for _, name in rows)
    print(
        f"{len(answered) + len(failed)} submissions, {len(retried)} tries sent again, "
        f"{len(failed)} failed after every try, {len(rows)} rows, "
        f"{sum(count > 1 for count in stored.values())} stored twice"
    )
    assert retried, "the kill fell between submissions: nothing was sent again"
    assert not failed, list(failed.items())[:3]
    assert [name for name, count in stored.items() if count > 1] == []
    assert {name: id_ for id_, name in rows} == answered
    alice = api(token)
    for item in alice.get("workloads?limit=500&active").json():
        alice.delete(f"workloads/{item['id']}")
