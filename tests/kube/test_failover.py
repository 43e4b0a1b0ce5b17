"""Two scheduler replicas on one PostgreSQL database, as the chart runs them with
``replicas: 2``: the real ``frachub service`` twice, the KubernetesBackend's Lease deciding
which one acts. The leader is killed with SIGKILL in the middle of a burst of submissions;
the standby takes over, adopts the running Job, and nothing acknowledged is lost or doubled.

Each replica has its own address, as pods do; the standby answers 503 (``api/v1/health``
and every other path) until it holds the Lease, which is what keeps it out of a Service's
endpoints through the chart's readinessProbe. The takeover time (SIGKILL to the standby's
health answering 200) is printed; with the Lease timing below it is about
``lease_seconds`` plus the standby's start."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hubharness import API_PATH, SERVICE_PREFIX, Hub, ServiceProcess, free_port
from postgres import PostgresServer
from service_client import CHECKED, wait_for

from scheduler.backends.kubernetes.labels import MANAGED_SELECTOR, WORKLOAD
from scheduler.backends.kubernetes.pods import pod_phase

from .conftest import SERVICE_CONFIG, started_fake
from .fakeapi import FakeKube

NAMESPACE = "default"
CONFIG = (
    SERVICE_CONFIG
    + """
c.FracHubService.db_url = {db_url!r}
c.FracHubService.queues = [{{"name": "vision", "deserved_gpus": 2}}]
c.FracHubService.grace_period = 2
c.FracHubService.cycle_interval = 0.5
c.FracHubService.log_level = "INFO"
c.FracHubService.log_format = "%(asctime)s.%(msecs)03d %(message)s"
c.FracHubService.log_datefmt = "%H:%M:%S"
c.KubernetesBackend.identity = {identity!r}
"""
)


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    with PostgresServer() as server:
        yield server.database()


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with started_fake() as cluster:
        cluster.add_node("node-a", gpus=2, memory_mib=81920)
        yield cluster


def replica(
    hub: Hub, fake: FakeKube, database: str, workdir: Path, name: str, port: int
) -> tuple[ServiceProcess, str]:
    """One replica on its own port (each pod has its own address); its API's base URL."""
    workdir.mkdir(parents=True, exist_ok=True)
    kubeconfig = fake.kubeconfig(str(workdir / "kubeconfig"), NAMESPACE)
    config = CONFIG.format(
        db_url=database, kubeconfig=kubeconfig, namespace=NAMESPACE, identity=name
    )
    url = f"http://127.0.0.1:{port}"
    env = {"KUBECONFIG": kubeconfig, "JUPYTERHUB_SERVICE_URL": url}
    return ServiceProcess(hub, config, workdir, env=env), f"{url}{SERVICE_PREFIX}{API_PATH}"


def lease_holder(fake: FakeKube) -> str | None:
    lease = fake.get("leases", NAMESPACE, "frachub-scheduler")
    return (lease or {}).get("spec", {}).get("holderIdentity")


def health(base: str) -> int:
    try:
        return httpx.get(f"{base}health", timeout=2).status_code
    except httpx.HTTPError:
        return 0


def test_the_standby_takes_over_from_a_killed_leader(
    hub: Hub, fake: FakeKube, database: str, tmp_path: Path
) -> None:
    """A Service in front of both replicas sends requests to the ready one (health 200);
    the callers here do the same: the first replica that accepts."""
    leader, leader_api = replica(
        hub,
        fake,
        database,
        tmp_path / "a",
        "replica-a",
        int(hub.service_bind_url.rsplit(":", 1)[1]),
    )
    leader.start()
    wait_for(lambda: lease_holder(fake) == "replica-a", 10, "replica-a leading")
    standby, standby_api = replica(hub, fake, database, tmp_path / "b", "replica-b", free_port())
    standby.start()  # its own _wait_up asks the hub's URL, where the leader answers
    wait_for(lambda: health(standby_api) == 503, 60, "the standby answering 503 (not ready)")
    refused = httpx.get(f"{standby_api}workloads", timeout=5)
    assert refused.status_code == 503 and "standby" in refused.json()["message"]
    assert health(leader_api) == 200
    apis = [leader_api, standby_api]
    checking = httpx.Client(timeout=5, event_hooks=CHECKED)
    # the submitter threads count what they get: a failed check there would end a thread
    # unseen, so they go without the hook
    plain = httpx.Client(timeout=5)
    try:
        hub.create_user("failover-alice", groups=["vision"])
        headers = {"Authorization": f"token {hub.token_for('failover-alice')}"}

        def call(
            method: str, path: str, client: httpx.Client = checking, **kwargs: Any
        ) -> httpx.Response:
            """What a Service does: the request goes to a ready replica."""
            for base in apis:
                try:
                    response = client.request(method, f"{base}{path}", headers=headers, **kwargs)
                except httpx.HTTPError:
                    continue
                if response.status_code != 503:
                    return response
            raise httpx.ConnectError("no replica is ready")

        survivor = call(
            "POST", "workloads", json={"command": "sleep 600", "gpus": 1, "name": "s"}
        ).json()
        wait_for(
            lambda: call("GET", f"workloads/{survivor['id']}").json()["state"] == "running",
            20,
            "the survivor running",
        )
        [survivor_pod] = wait_for(
            lambda: [
                p
                for p in fake.objects("pods", NAMESPACE, f"{WORKLOAD}={survivor['id']}")
                if pod_phase(p) == "Running"
            ],
            10,
            "the survivor's pod running",
        )

        acknowledged: list[int] = []
        errors: list[str] = []
        stop = threading.Event()

        def submitter() -> None:
            while not stop.is_set():
                try:
                    response = call(
                        "POST", "workloads", client=plain, json={"command": "sleep 600", "gpus": 1}
                    )
                except httpx.HTTPError:
                    time.sleep(0.05)  # no replica ready: between the kill and the takeover
                    continue
                if response.status_code == 201:
                    acknowledged.append(response.json()["id"])
                else:
                    errors.append(response.text)

        threads = [threading.Thread(target=submitter) for _ in range(2)]
        for thread in threads:
            thread.start()
        wait_for(lambda: len(acknowledged) >= 10, 30, "10 acknowledged submissions")
        killed_at = time.monotonic()
        leader.kill(signal.SIGKILL)
        before_kill = len(acknowledged)
        leased: list[float] = []

        def ready() -> bool:
            if not leased and lease_holder(fake) == "replica-b":
                leased.append(time.monotonic() - killed_at)
            return health(standby_api) == 200

        wait_for(ready, 30, "the standby ready")
        takeover = time.monotonic() - killed_at
        wait_for(lambda: len(acknowledged) >= before_kill + 10, 30, "submissions after")
        stop.set()
        for thread in threads:
            thread.join()
        assert not errors, errors[:3]

        listed = call("GET", "workloads?limit=500").json()
        ids = [item["id"] for item in listed]
        lost = set(acknowledged) - set(ids)
        doubled = len(ids) - len(set(ids))
        kept = call("GET", f"workloads/{survivor['id']}").json()
        assert kept["state"] == "running" and kept["restart_count"] == 0
        assert [e["type"] for e in kept["events"]] == ["submitted", "started"]
        jobs = fake.objects("jobs", NAMESPACE, MANAGED_SELECTOR)
        per_workload: dict[str, int] = {}
        for job in jobs:
            key = job["metadata"]["labels"][WORKLOAD]
            per_workload[key] = per_workload.get(key, 0) + 1
        [pod] = fake.objects("pods", NAMESPACE, f"{WORKLOAD}={survivor['id']}")
        running = [item for item in listed if item["state"] == "running"]
        print(
            f"\nfailover: the standby held the Lease {leased[0] if leased else takeover:.2f} s "
            f"and was ready (health 200) {takeover:.2f} s after the leader's SIGKILL; "
            f"{len(acknowledged)} acknowledged submissions ({before_kill} before the kill), "
            f"{len(lost)} lost, {doubled} doubled; {len(jobs)} Jobs for {len(per_workload)} "
            "workloads"
        )
        assert not lost and doubled == 0
        assert pod["metadata"]["uid"] == survivor_pod["metadata"]["uid"]  # adopted
        assert all(count == 1 for count in per_workload.values()), per_workload
        assert len(running) == 2  # two GPUs, whole-GPU jobs: never more than two
        for item in listed:
            call("DELETE", f"workloads/{item['id']}")
    finally:
        checking.close()
        plain.close()
        standby.stop()
        leader.stop()
