"""A notebook inside its quota that needs borrowed work evicted gets the eviction decided in
its own request (``SchedulingLoop._evict_now``): its ``201`` already says it starts as soon
as the victim releases its GPU, and the victim is already preempting; no cycle decides it
again. docs/service.md, "Cycles and arrivals"."""

from __future__ import annotations

import httpx
from service_client import service_config, submit, wait_for, wait_state


def one_borrowing(
    make_user, api, command: str = "sleep 300"
) -> tuple[httpx.Client, httpx.Client, list[dict]]:
    """Bob's two running jobs of one GPU each, on two GPUs: nlp deserves one, so the second
    borrows vision's; and a client for Alice, of vision (bob's, alice's, the jobs)."""
    _, bob_token = make_user(groups=["nlp"])
    _, alice_token = make_user(groups=["vision"])
    bob, alice = api(bob_token), api(alice_token)
    jobs = [submit(bob, command=command, gpus=1, name=f"borrow-{k}") for k in range(2)]
    for job in jobs:
        wait_state(bob, job["id"], "running")
    return bob, alice, jobs


def test_an_in_quota_notebook_evicts_borrowed_work_in_its_own_request(
    start_service, make_user, api
) -> None:
    start_service(service_config(gpus=2, grace=60))
    # the victim ignores SIGTERM, so it is still preempting (its grace runs) when we look:
    # one that exits at once may already be seen gone and pending again (the exit watch)
    bob, alice, jobs = one_borrowing(make_user, api, command="trap '' TERM; sleep 300")
    wait_for(  # a cycle has settled since (it says which job borrows)
        lambda: any(
            event["type"] == "borrowed"
            for job in jobs
            for event in bob.get(f"workloads/{job['id']}").json()["events"]
        ),
        20,
        "the borrowed note",
    )

    created = alice.post("allocations", json={"gpus": 1, "server_name": "nb"})
    assert created.status_code == 201, created.text
    allocation = created.json()
    assert allocation["state"] == "pending"
    assert allocation["pending_reason"] == (
        "starting as soon as the workloads evicted for it release their GPUs"
    ), allocation
    states = sorted(bob.get(f"workloads/{job['id']}").json()["state"] for job in jobs)
    assert states == ["preempting", "running"]


def test_the_victims_end_is_noticed_without_waiting_for_a_poll(
    start_service, make_user, api
) -> None:
    """The local backend wakes the service's poll when a replica ends (``exitwatch``): with
    a poll interval of an hour, the victim that exits on SIGTERM is still seen gone, and the
    notebook started on its GPU. docs/service.md, "Cycles and arrivals"."""
    extra = "c.FracHubService.poll_interval = 3600\n"
    service = start_service(service_config(gpus=2, grace=60, extra=extra))
    bob, alice, jobs = one_borrowing(make_user, api)
    # launched (their logs begin), not only decided: a victim evicted while its launch is
    # still under way was once never seen gone with this poll interval (the closing note
    # of this change); this test is about the exit watch on a launched victim
    for job in jobs:
        wait_for(
            lambda job=job: "=== frachub:" in bob.get(f"workloads/{job['id']}/logs").text,
            20,
            f"job {job['id']}'s log",
        )

    created = alice.post("allocations", json={"gpus": 1, "server_name": "nb"})
    assert created.status_code == 201, created.text
    try:
        wait_state(alice, created.json()["id"], "running", timeout=30)
    except AssertionError as error:  # say what the victims and the service did meanwhile
        victims = [bob.get(f"workloads/{job['id']}").json() for job in jobs]
        seen = [(v["state"], [e["type"] for e in v["events"]]) for v in victims]
        log = "\n".join(service.log_path.read_text(errors="replace").splitlines()[-60:])
        raise AssertionError(f"{error}\nbob's jobs: {seen}\nservice log:\n{log}") from None
    states = sorted(bob.get(f"workloads/{job['id']}").json()["state"] for job in jobs)
    assert states == ["pending", "running"]  # the victim was seen gone, and waits again
