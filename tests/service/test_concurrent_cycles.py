"""Requests during a scheduling cycle, through the real service over HTTP.

The cycle decides on a worker thread while the event loop answers requests; whatever changed
meanwhile must not be undone by the cycle's decisions (scheduler/service/policies/decisions.py).
To catch a cycle in the middle, the service's config file (Python, run by the service) wraps
the loop's ``_decide``: once the real engine has decided something, the worker waits while a
"hold" file exists, after writing a "decided" file. The engine itself is not touched.
"""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
from service_client import service_config, submit, wait_for, wait_state, workload

from .conftest import DATABASES, database_config

HOOK = """
import os as _os, time as _time
from scheduler.service.scheduling import loop as _loop

_decide = _loop.SchedulingLoop._decide


def _held(self, *args):
    outcome = _decide(self, *args)
    if outcome[1].decisions and _os.path.exists({hold!r}):
        with open({decided!r}, "a") as marker:
            marker.write(f"{{len(outcome[1].decisions)}}\\n")
        while _os.path.exists({hold!r}):
            _time.sleep(0.02)
    return outcome


_loop.SchedulingLoop._decide = _held
"""


class Held:
    """The hold on the service's next deciding cycle."""

    def __init__(self, folder: Path) -> None:
        self.hold = folder / "hold"
        self.decided = folder / "decided"

    def config(self) -> str:
        return HOOK.format(hold=str(self.hold), decided=str(self.decided))

    def on(self) -> None:
        self.decided.unlink(missing_ok=True)
        self.hold.touch()

    def wait_decided(self) -> None:
        wait_for(self.decided.exists, 20, "a cycle to decide and wait")

    def off(self) -> None:
        self.hold.unlink(missing_ok=True)

    @property
    def holding(self) -> bool:
        return self.hold.exists() and self.decided.exists()


@pytest.fixture(params=DATABASES)
def held(tmp_path: Path, start_service, request) -> Held:
    """A service on SQLite, then on PostgreSQL, whose deciding cycles can be held."""
    held = Held(tmp_path)
    extra = held.config() + database_config(request, request.param)
    start_service(service_config(gpus=2, grace=1, extra=extra))
    yield held
    held.off()


HOLDING = ("running", "preempting", "cancelling", "stopping")


def holding(admin: httpx.Client) -> list[dict]:
    query = "&".join(f"state={state}" for state in HOLDING)
    return admin.get(f"workloads?{query}&limit=500").json()


def assert_no_gpu_given_twice(admin: httpx.Client) -> None:
    """Every GPU holds at most one GPU's worth of shares, and nobody started twice."""
    used: dict[tuple[str, int], float] = {}
    for item in holding(admin):
        for replica in item["placement"]:
            for share in replica["gpus"]:
                key = (replica["node"], share["index"])
                used[key] = used.get(key, 0.0) + share["share"]
        starts = [
            e
            for e in workload(admin, item["id"])["events"]
            if e["type"] in ("started", "allocated")
        ]
        assert len(starts) <= 1 + item["restart_count"], (item["id"], starts)
    assert all(total <= 1.0 + 1e-9 for total in used.values()), used


def test_requests_are_answered_while_a_cycle_decides_and_nothing_is_applied_stale(
    held: Held, make_user, api
) -> None:
    alice = api(make_user(groups=["vision"])[1])
    bob = api(make_user(groups=["nlp"])[1])
    carol = api(make_user(groups=["vision"])[1])
    admin = api(make_user(admin=True)[1])
    held.on()
    # sweep members skip the fast path: the cycle decides them, and then waits
    sweep = submit(
        alice,
        command="sleep 120",
        sweep={"parameters": {"seed": ["1", "2"]}, "parallel": 2},
    )
    first, second = (member["id"] for member in sweep["workloads"])
    held.wait_decided()

    # while it waits: a notebook, concurrent submissions, a list and a cancel are answered;
    # nlp's notebook is inside its quota on an idle GPU: granted in the 201 itself
    notebook = bob.post("allocations", json={"gpus": 1}).json()
    # nlp's notebook is inside its quota on an idle GPU: granted in the 201 itself
    assert notebook["state"] == "running", notebook
    answers: list[httpx.Response] = []

    def post(i: int) -> None:
        with httpx.Client(base_url=carol.base_url, headers=carol.headers, timeout=30) as client:
            answers.append(client.post("workloads", json={"command": "sleep 120", "gpus": 0.25}))

    threads = [threading.Thread(target=post, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [answer.status_code for answer in answers] == [201] * 12, [a.text for a in answers]
    listed = carol.get("workloads?limit=50").json()
    assert len(listed) == 12
    cancelled = alice.delete(f"workloads/{first}").json()
    assert cancelled["state"] == "cancelled"
    assert held.holding, "the cycle finished before the requests were made"

    held.off()
    wait_for(
        lambda: (w := workload(alice, second))["state"] == "running" or w["pending_reason"],
        20,
        "the next cycle to decide the sweep's second job",
    )
    done = workload(alice, first)
    assert done["state"] == "cancelled"
    assert [event["type"] for event in done["events"]] == ["submitted", "cancelled"]
    assert_no_gpu_given_twice(admin)
    assert workload(bob, notebook["id"])["state"] == "running"
    stored = carol.get("workloads?limit=50").json()
    assert sorted(item["id"] for item in stored) == sorted(a.json()["id"] for a in answers)


def test_an_exit_during_the_cycle_makes_its_eviction_stale(
    held: Held, make_user, api, tmp_path: Path
) -> None:
    alice = api(make_user(groups=["vision"])[1])
    bob = api(make_user(groups=["nlp"])[1])
    admin = api(make_user(admin=True)[1])
    go = tmp_path / "go"
    keep = submit(alice, command="sleep 120", gpus=1)
    wait_state(alice, keep["id"], "running")
    # borrows nlp's idle GPU; exits when told to
    borrower = submit(alice, command=f"while [ ! -e {go} ]; do sleep 0.1; done", gpus=1)
    wait_state(alice, borrower["id"], "running")
    held.on()
    # nlp wants its GPU back: the cycle decides to evict the borrower, and waits
    claimant = submit(bob, command="sleep 120", gpus=1)
    held.wait_decided()
    go.touch()
    ended = wait_state(alice, borrower["id"], "succeeded", "failed", timeout=20)
    assert ended["state"] == "succeeded"
    assert held.holding
    held.off()
    started = wait_state(bob, claimant["id"], "running")
    assert started["placement"] == ended["placement"]
    ended = workload(alice, borrower["id"])
    # the eviction was about a job that had ended meanwhile: skipped, not applied
    assert ended["state"] == "succeeded" and ended["preemptions"] == 0
    types = [event["type"] for event in ended["events"]]
    assert types == ["submitted", "started", "borrowed", "succeeded"], types
    kept = workload(alice, keep["id"])
    assert kept["state"] == "running" and kept["preemptions"] == 0
    assert_no_gpu_given_twice(admin)


SLICES_HOOK = """
import asyncio as _asyncio, os as _os
from scheduler.service.scheduling import loop as _loop

_loop.SLICE_SECONDS = 0.0  # one decision a slice: a cycle of n decisions has n slices
_between = _loop.SchedulingLoop._between_slices


async def _held_between(self):
    if _os.path.exists({hold!r}):
        with open({decided!r}, "a") as marker:
            marker.write("between slices\\n")
        while _os.path.exists({hold!r}):
            await _asyncio.sleep(0.02)  # the event loop answers requests meanwhile
    await _between(self)


_loop.SchedulingLoop._between_slices = _held_between
"""


@pytest.fixture(params=DATABASES)
def sliced(tmp_path: Path, start_service, request) -> Held:
    """A service on SQLite, then on PostgreSQL, whose cycles can be held between two slices
    of their decisions (after the first decision is applied and committed)."""
    held = Held(tmp_path)
    hook = SLICES_HOOK.format(hold=str(held.hold), decided=str(held.decided))
    start_service(
        service_config(gpus=4, grace=1, extra=hook + database_config(request, request.param))
    )
    yield held
    held.off()


def test_requests_are_answered_between_two_slices_of_a_cycle_and_each_decision_is_rechecked(
    sliced: Held, make_user, api
) -> None:
    alice = api(make_user(groups=["vision"])[1])
    bob = api(make_user(groups=["nlp"])[1])
    admin = api(make_user(admin=True)[1])
    sliced.on()
    # sweep members skip the fast path: one cycle decides all three starts (vision borrows
    # two idle GPUs), applies the first, and waits before the second
    sweep = submit(
        alice,
        command="sleep 120",
        gpus=1,
        sweep={"parameters": {"seed": ["1", "2", "3"]}, "parallel": 3},
    )
    members = [member["id"] for member in sweep["workloads"]]
    sliced.wait_decided()

    # between the slices: the first start is applied (and committed), the others are not
    states = [workload(alice, member)["state"] for member in members]
    assert sorted(states) == ["pending", "pending", "running"], states
    applied = members[states.index("running")]
    waiting = [member for member, state in zip(members, states, strict=True) if state == "pending"]
    # a cancel is answered, and makes that member's start, decided already, stale
    assert alice.delete(f"workloads/{waiting[0]}").json()["state"] == "cancelled"
    # nlp's notebook is decided on the cycle's outcome, which counts the starts not applied
    # yet: granted in its 201 on the one GPU the cycle left idle
    notebook = bob.post("allocations", json={"gpus": 1}).json()
    assert notebook["state"] == "running", notebook
    assert sliced.holding, "the cycle's apply finished before the requests were made"

    sliced.off()
    started = wait_state(alice, waiting[1], "running")
    gone = workload(alice, waiting[0])
    assert gone["state"] == "cancelled"
    assert [event["type"] for event in gone["events"]] == ["submitted", "cancelled"]
    assert workload(alice, applied)["state"] == "running"
    assert workload(bob, notebook["id"])["state"] == "running"
    used = {
        (replica["node"], share["index"])
        for item in (workload(alice, applied), started, workload(bob, notebook["id"]))
        for replica in item["placement"]
        for share in replica["gpus"]
    }
    assert len(used) == 3, used
    assert_no_gpu_given_twice(admin)
