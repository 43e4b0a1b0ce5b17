"""The interactive reserve against a real hub and service: batch work borrowing beyond its
quota leaves 1 GPU idle and says why it waits; an in-quota notebook starts on it at once,
with no eviction (the grace period here is 60 s, so one would show), and a released
notebook's GPU goes straight to the next one (docs/scheduling.md, "The interactive
reserve")."""

from __future__ import annotations

from service_client import service_config, submit, wait_for, wait_state

RESERVE = """
c.FracHubService.interactive_reserve_gpus = 1
"""


def test_a_notebook_starts_on_the_reserve_while_batch_fills_the_rest(
    start_service, make_user, api
) -> None:
    start_service(service_config(gpus=4, grace=60, extra=RESERVE))
    _, bob_token = make_user(groups=["nlp"])
    _, alice_token = make_user(groups=["vision"])
    bob, alice = api(bob_token), api(alice_token)
    jobs = [submit(bob, command="sleep 300", gpus=1, name=f"batch-{k}") for k in range(5)]
    for job in jobs[:3]:  # nlp deserves 1 GPU and borrows 2 more, not the reserve's
        wait_state(bob, job["id"], "running")
    waiting = wait_for(
        lambda: (w := bob.get(f"workloads/{jobs[3]['id']}").json())["pending_reason"] and w,
        20,
        "the fourth job's pending reason",
    )
    assert waiting["state"] == "pending"
    assert "interactive reserve" in waiting["pending_reason"], waiting["pending_reason"]

    for server in ("one", "two"):  # the second takes the GPU the first released
        created = alice.post("allocations", json={"gpus": 1, "server_name": server})
        assert created.status_code == 201, created.text
        allocation = created.json()
        assert allocation["state"] == "running", allocation  # decided in the request
        assert allocation["placement"][0]["gpus"][0]["share"] == 1
        released = alice.delete(f"allocations/{allocation['id']}")
        assert released.json()["state"] == "released"

    for job in jobs[:3]:
        seen = bob.get(f"workloads/{job['id']}").json()
        assert seen["state"] == "running" and seen["preemptions"] == 0, seen
    assert bob.get(f"workloads/{jobs[4]['id']}").json()["state"] == "pending"
