"""A reclaim that stops many borrowed jobs at once, through the real ``frachub service`` on
the Kubernetes backend against the fake API server (issue 29, KAI's "large" scale test in
small).

A project that deserves nothing fills 3 nodes of 8 GPUs with 24 one-GPU jobs; a project that
deserves them all submits a 24-replica gang, so one cycle evicts all 24. Their stops go side
by side, at most ``STOPS_AT_ONCE`` (16) at a time (scheduler/service/scheduling/effects.py):
the service's config wraps ``KubernetesBackend.stop`` to hold each stop 50 ms and count how
many are in flight together. One victim's Job refuses its suspension once (403): that stop
is logged and sent again at the next tick, and the gang still starts. The stopped attempts
are confirmed by a few pod lists (scheduler/backends/kubernetes/stopping.py), not one each.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hubharness import API_PATH, Hub, ServiceProcess
from service_client import CHECKED, submit, wait_for, wait_state

from scheduler.backends.kubernetes.labels import COMPONENT, MANAGED_SELECTOR, TRAINING, WORKLOAD
from scheduler.service.scheduling.effects import STOPS_AT_ONCE

from .conftest import SERVICE_CONFIG, started_fake
from .fakeapi import FakeKube

NAMESPACE = "default"
NODES, GPUS = 3, 8
VICTIMS = NODES * GPUS

HOOK = """
import asyncio as _asyncio
from scheduler.backends.kubernetes import backend as _backend

_stop = _backend.KubernetesBackend.stop
_in_flight = [0, 0]  # now, most at once


async def _counted(self, workload_id, handle, grace_seconds):
    _in_flight[0] += 1
    _in_flight[1] = max(_in_flight)
    try:
        await _asyncio.sleep(0.05)
        return await _stop(self, workload_id, handle, grace_seconds)
    finally:
        _in_flight[0] -= 1
        with open({path!r}, "w") as out:
            out.write(str(_in_flight[1]))


_backend.KubernetesBackend.stop = _counted
"""

CONFIG = (
    SERVICE_CONFIG
    + """
c.FracHubService.queues = [
    {{"name": "borrow", "deserved_gpus": 0}},
    {{"name": "claim", "deserved_gpus": ALL}},
]
c.FracHubService.grace_period = 1
c.FracHubService.cycle_interval = 1
c.FracHubService.job_tokens = False
""".replace("ALL", str(VICTIMS))
)


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with started_fake() as cluster:
        for n in range(NODES):
            cluster.add_node(f"node-{n}", gpus=GPUS, memory_mib=81920)
        yield cluster


def running(fake: FakeKube, workload_id: int | None = None) -> list[dict]:
    selector = f"{MANAGED_SELECTOR},{COMPONENT}={TRAINING}"
    if workload_id is not None:
        selector += f",{WORKLOAD}={workload_id}"
    pods = fake.objects("pods", NAMESPACE, selector)
    return [
        p
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def test_a_reclaim_stops_its_victims_side_by_side_and_retries_a_failed_stop(
    hub: Hub, fake: FakeKube, tmp_path: Path
) -> None:
    counted = tmp_path / "most-stops-at-once"
    kubeconfig = fake.kubeconfig(str(tmp_path / "kubeconfig"), NAMESPACE)
    config = CONFIG.format(kubeconfig=kubeconfig, namespace=NAMESPACE)
    config += HOOK.format(path=str(counted))
    clients = {}
    for project in ("borrow", "claim"):
        name = f"many-{project}"
        hub.create_user(name, groups=[project])
        clients[project] = httpx.Client(
            base_url=hub.service_url(API_PATH),
            headers={"Authorization": f"token {hub.token_for(name)}"},
            timeout=30,
            event_hooks=CHECKED,
        )
    with ServiceProcess(hub, config, tmp_path / "service", env={"KUBECONFIG": kubeconfig}) as svc:
        victims = [
            submit(clients["borrow"], name=f"v{i}", command="sleep infinity")["id"]
            for i in range(VICTIMS)
        ]
        wait_for(lambda: len(running(fake)) == VICTIMS, 60, "the borrowed jobs to run")
        # one victim's Job refuses its suspension once: its stop fails, the others go on
        [refusing] = fake.objects("jobs", NAMESPACE, f"{WORKLOAD}={victims[0]}")
        fake.fail_next("PATCH", f"/jobs/{refusing['metadata']['name']}$", 403)
        lists_before = sum(1 for method, path in fake.requests if method == "GET")
        gang = submit(clients["claim"], name="gang", replicas=VICTIMS, command="sleep infinity")[
            "id"
        ]
        wait_state(clients["claim"], gang, "running", timeout=60)
        wait_for(lambda: len(running(fake, gang)) == VICTIMS, 30, "every replica to run")
        log = Path(svc.log_path).read_text()
        gets = sum(1 for method, path in fake.requests if method == "GET") - lists_before
    for client in clients.values():
        client.close()
    assert int(counted.read_text()) == STOPS_AT_ONCE, "stops were not sent side by side"
    assert f"workload {victims[0]} (v0): stopping it failed" in log, log[-3000:]
    assert "trying again" in log
    # 24 stopped attempts confirmed by a few pod lists (50 attempts a list), not one each
    assert gets < VICTIMS, gets
