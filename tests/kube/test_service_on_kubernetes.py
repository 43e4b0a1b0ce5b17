"""The issue-5 acceptance tests on Kubernetes: the real ``frachub service`` subprocess with
``backend_class = KubernetesBackend``, behind a real JupyterHub, against the fake API server.

The same scheduling behaviour as the local backend's service tests (tests/service/), seen
through the REST API with user tokens and in the cluster's objects: a notebook's share at
once, over-quota training suspended and restarted as a new Job, gangs all-or-nothing with
their rendezvous, exit codes reported once, and a SIGKILLed scheduler that adopts what runs.

One hub, one fake cluster (node-a: 2 x A100 80GB) and one service for the module; tests
leave no workload active. The restart test comes last: it kills and restarts that service.
"""

from __future__ import annotations

import base64
import itertools
import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hubharness import API_PATH, Hub, ServiceProcess
from service_client import (
    CHECKED,
    submit,
    wait_cycles,
    wait_for,
    wait_state,
    wait_token_refused,
    workload,
)

from hub_ext.client import checkpointed
from scheduler.backends.kubernetes.labels import (
    COMPONENT,
    MANAGED_SELECTOR,
    TRAINING,
    WORKLOAD,
    attempt_name,
)
from scheduler.backends.kubernetes.pods import condition, pod_live, pod_phase, pod_rank

from .conftest import SERVICE_CONFIG, started_fake
from .fakeapi import FakeKube

NAMESPACE = "default"
NODE = "node-a"

CONFIG = (
    SERVICE_CONFIG
    + """
c.FracHubService.queues = [
    {{"name": "vision", "deserved_gpus": 1}},
    {{"name": "nlp", "deserved_gpus": 1}},
]
# pods get this long between SIGTERM and SIGKILL (the backend's termination_grace_seconds)
c.FracHubService.grace_period = 5
c.FracHubService.cycle_interval = 1
c.KubernetesBackend.reservation_timeout = 10.0
c.KubernetesBackend.unschedulable_timeout = 3.0
"""
)


# --- fixtures: one hub, one fake cluster, one service -----------------------------------------


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeKube]:
    with started_fake() as cluster:
        cluster.add_node(NODE, gpus=2, memory_mib=81920)
        yield cluster


@pytest.fixture(scope="module")
def service(
    hub: Hub, fake: FakeKube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    workdir = tmp_path_factory.mktemp("kube-service")
    kubeconfig = fake.kubeconfig(str(workdir / "kubeconfig"), NAMESPACE)
    config = CONFIG.format(kubeconfig=kubeconfig, namespace=NAMESPACE)
    process = ServiceProcess(hub, config, workdir, env={"KUBECONFIG": kubeconfig}).start()
    yield process
    process.stop()


_serial = itertools.count(1)


@pytest.fixture
def client(
    hub: Hub, service: ServiceProcess, request: pytest.FixtureRequest
) -> Iterator[Callable[..., httpx.Client]]:
    """client(group=None, admin=False, name=None) -> an API client (a token of all the user's
    permissions) for a new user in that group; the name is made up unless given."""
    stem = request.node.name.removeprefix("test_").replace("_", "-")[:24]
    made: list[httpx.Client] = []

    def make(group: str | None = None, admin: bool = False, name: str = "") -> httpx.Client:
        name = name or f"k-{stem}-{next(_serial)}"
        hub.create_user(name, admin=admin, groups=[group] if group else [])
        c = httpx.Client(
            base_url=hub.service_url(API_PATH),
            headers={"Authorization": f"token {hub.token_for(name)}"},
            timeout=30,
            event_hooks=CHECKED,
        )
        made.append(c)
        return c

    yield make
    for c in made:  # a failed test may leave work behind: cancel it
        active = c.get("workloads?active")
        for item in active.json() if active.is_success else []:
            c.delete(f"workloads/{item['id']}")
        c.close()


@pytest.fixture(autouse=True)
def nothing_left_behind(fake: FakeKube, service: ServiceProcess) -> Iterator[None]:
    """Every test ends with no training pod alive: finished Jobs stay until their TTL (with
    their pods' logs), stopped ones are deleted."""
    yield
    fake.ignore_sigterm = False
    wait_for(lambda: not [p for p in training(fake, "pods") if pod_live(p)], 20, "no live pod left")


# --- reading the cluster ------------------------------------------------------------------------


def training(fake: FakeKube, plural: str, workload_id: int | None = None) -> list[dict[str, Any]]:
    selector = f"{COMPONENT}={TRAINING}"
    if workload_id is not None:
        selector += f",{WORKLOAD}={workload_id}"
    return fake.objects(plural, NAMESPACE, selector)


def running_pods(fake: FakeKube, workload_id: int, count: int = 1) -> list[dict[str, Any]]:
    def found() -> list[dict[str, Any]] | None:
        pods = [
            pod
            for pod in training(fake, "pods", workload_id)
            if pod_phase(pod) == "Running" and not pod["metadata"].get("deletionTimestamp")
        ]
        return pods if len(pods) == count else None

    try:
        return wait_for(found, 20, f"{count} running pod(s) of workload {workload_id}")
    except AssertionError as error:
        seen = [
            (p["metadata"]["name"], pod_phase(p), p["spec"].get("nodeName"))
            for p in fake.objects("pods", NAMESPACE, MANAGED_SELECTOR)
        ]
        raise AssertionError(f"{error}; FracHub's pods: {seen}") from None


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    container = pod["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def finish(fake: FakeKube, pod: dict[str, Any], code: int) -> None:
    fake.finish_pod(NAMESPACE, pod["metadata"]["name"], code)


def event_types(c: httpx.Client, workload_id: int) -> list[str]:
    return [event["type"] for event in workload(c, workload_id)["events"]]


def drain(c: httpx.Client) -> None:
    for item in c.get("workloads?active").json():
        c.delete(f"workloads/{item['id']}")
    wait_for(lambda: not c.get("workloads?active").json(), 20, "drained")


# --- the tests ------------------------------------------------------------------------------------


def test_a_notebook_gets_a_fraction_of_a_cluster_gpu_at_once(client, fake) -> None:
    """The spawner's request (an admin token, on the user's behalf) is placed at once on a
    GPU of the fake's node, described by its GPU feature discovery labels."""
    spawner, alice = client(admin=True), client("vision", name="k-notebook-alice")
    created = spawner.post(
        "allocations", json={"user": "k-notebook-alice", "gpus": 0.5, "server_name": "gpu"}
    )
    assert created.status_code == 201, created.text
    allocation = created.json()
    ready = spawner.get(
        f"allocations/{allocation['id']}?wait=10&version={allocation['version']}"
    ).json()
    assert ready["state"] == "running" and ready["kind"] == "interactive", ready
    assert (ready["user"], ready["project"]) == ("k-notebook-alice", "vision")
    [replica] = ready["placement"]
    [gpu] = replica["gpus"]
    assert replica["node"] == NODE and gpu["index"] in (0, 1)
    assert gpu["share"] == 0.5
    assert gpu["memory_mib"] == 81920  # nvidia.com/gpu.memory
    # no reservation pod holds it yet (FracKubeSpawner makes one): the placeholder UUID
    assert gpu["uuid"] == f"GPU-unreserved-{NODE}-{gpu['index']}"
    nodes = alice.get("nodes").json()
    assert [(n["name"], len(n["gpus"])) for n in nodes] == [(NODE, 2)]
    assert sum(g["used"] for g in nodes[0]["gpus"]) == 0.5
    # the user sees it as theirs; nothing was created in the cluster for it
    assert [a["id"] for a in alice.get("allocations").json()] == [allocation["id"]]
    assert not training(fake, "jobs")
    released = spawner.delete(f"allocations/{allocation['id']}").json()
    assert released["state"] == "released"


def test_over_quota_training_is_suspended_requeued_and_restarted(client, fake) -> None:
    """vision borrows nlp's idle GPU; nlp submits; vision's borrowing Job is suspended (its
    pod gets SIGTERM and exits), the workload waits at the head of vision's queue and, when
    nlp's job ends, restarts as a new Job with FRACHUB_RESTART_COUNT=1."""
    alice, bob = client("vision"), client("nlp")
    fake.ignore_sigterm = True  # pods end only when the test says they handled SIGTERM
    first = submit(alice, command="sleep 600", gpus=1)
    wait_state(alice, first["id"], "running")
    second = submit(alice, command="python train.py", gpus=1)
    wait_state(alice, second["id"], "running")
    [pod] = running_pods(fake, second["id"])
    [job] = training(fake, "jobs", second["id"])
    assert job["metadata"]["name"] == attempt_name(second["id"], 0)
    assert job["spec"]["suspend"] is False  # admitted
    assert pod["spec"]["nodeName"] == NODE
    assert env_of(pod)["FRACHUB_RESTART_COUNT"] == "0"
    later = submit(alice, command="python later.py", gpus=1)

    claim = submit(bob, command="python claim.py", gpus=1)
    evicted = wait_state(alice, second["id"], "preempting")
    assert evicted["preemptions"] == 1
    wait_for(
        lambda: (fake.get("jobs", NAMESPACE, job["metadata"]["name"]) or {})["spec"]["suspend"],
        10,
        "the Job suspended",
    )
    terminating = wait_for(
        lambda: (
            (p := fake.get("pods", NAMESPACE, pod["metadata"]["name"]))
            and p["metadata"].get("deletionTimestamp")
            and p
        ),
        10,
        "SIGTERM to the pod",
    )
    assert terminating["status"]["phase"] == "Running"  # in its grace period
    assert workload(alice, second["id"])["state"] == "preempting"
    fake.exit_on_sigterm(NAMESPACE, pod["metadata"]["name"])

    requeued = wait_for(
        lambda: (
            (w := workload(alice, second["id"]))["state"] == "pending"
            and w["queue_position"] is not None
            and w
        ),
        15,
        "the preempted job back in the queue",
    )
    # a restart is counted when it happens, not while the job waits
    assert requeued["preemptions"] == 1 and requeued["restart_count"] == 0
    assert requeued["queue_position"] == 1, requeued  # ahead of `later`, submitted after it
    assert workload(alice, later["id"])["queue_position"] == 2
    # the stopped attempt's Job goes away; nlp's job runs on the GPU it freed
    wait_for(
        lambda: fake.get("jobs", NAMESPACE, job["metadata"]["name"]) is None, 10, "old Job deleted"
    )
    wait_state(bob, claim["id"], "running")
    [claimed] = running_pods(fake, claim["id"])
    assert event_types(alice, second["id"]) == [
        "submitted",
        "started",
        "borrowed",
        "preempting",
        "requeued",
    ]

    finish(fake, claimed, 0)
    assert wait_state(bob, claim["id"], "succeeded", "failed")["exit_code"] == 0
    restarted = wait_state(alice, second["id"], "running", timeout=30)
    assert restarted["restart_count"] == 1 and restarted["preemptions"] == 1
    [new_pod] = running_pods(fake, second["id"])
    [new_job] = training(fake, "jobs", second["id"])
    assert new_job["metadata"]["name"] == attempt_name(second["id"], 1)
    assert env_of(new_pod)["FRACHUB_RESTART_COUNT"] == "1"
    assert env_of(new_pod)["FRACHUB_WORKLOAD_ID"] == str(second["id"])
    assert event_types(alice, second["id"]) == [
        "submitted",
        "started",
        "borrowed",
        "preempting",
        "requeued",
        "restarted",
        "borrowed",  # on nlp's idle GPU again
    ]
    assert workload(alice, first["id"])["preemptions"] == 0
    assert workload(alice, later["id"])["state"] == "pending"
    fake.ignore_sigterm = False
    drain(alice)


def test_a_gang_starts_all_or_nothing_with_its_rendezvous(client, fake) -> None:
    """Two replicas need two GPUs: with one free the gang waits and nothing is created;
    when the other frees, both replicas start together as one Indexed Job."""
    alice, bob = client("vision"), client("nlp")
    blocker = submit(bob, command="sleep 600", gpus=1)
    wait_state(bob, blocker["id"], "running")
    [blocking_pod] = running_pods(fake, blocker["id"])
    gang = submit(alice, command="python -m torch.distributed.run train.py", gpus=1, replicas=2)
    wait_for(
        lambda: workload(alice, gang["id"])["queue_position"] is not None,
        10,
        "the gang to be queued",
    )
    wait_cycles(alice)  # two scheduling cycles: still nothing started
    waiting = workload(alice, gang["id"])
    assert waiting["state"] == "pending" and waiting["placement"] in (None, []), waiting
    assert not training(fake, "jobs", gang["id"]) and not training(fake, "pods", gang["id"])
    assert workload(bob, blocker["id"])["preemptions"] == 0  # in nlp's quota: not touched

    finish(fake, blocking_pod, 0)
    started = wait_state(alice, gang["id"], "running")
    assert [r["node"] for r in started["placement"]] == [NODE, NODE]
    assert sorted(r["gpus"][0]["index"] for r in started["placement"]) == [0, 1]
    # the start is recorded before the backend creates the Job: wait for it
    [job] = wait_for(lambda: training(fake, "jobs", gang["id"]), 10, "the gang's Job")
    assert (job["spec"]["completions"], job["spec"]["parallelism"]) == (2, 2)
    pods = sorted(running_pods(fake, gang["id"], 2), key=lambda p: p["spec"]["hostname"])
    envs = [env_of(pod) for pod in pods]
    master = f"{pods[0]['spec']['hostname']}.{job['metadata']['name']}"
    for rank, env in enumerate(envs):
        assert env["WORLD_SIZE"] == "2" and env["MASTER_ADDR"] == master, env
        assert env["MASTER_PORT"] == "29500"
        assert env["JOB_COMPLETION_INDEX"] == str(rank)  # RANK is set from it at start
    command = pods[0]["spec"]["containers"][0]["command"][2]
    assert "0) RANK=0;" in command and "1) RANK=1;" in command, command
    assert fake.get("services", NAMESPACE, job["metadata"]["name"]) is not None  # headless DNS
    # 2 GPUs in vision, whose quota is 1: the gang runs on nlp's idle GPU
    assert event_types(alice, gang["id"]) == ["submitted", "started", "borrowed"]
    drain(alice)
    wait_for(
        lambda: fake.get("services", NAMESPACE, job["metadata"]["name"]) is None,
        10,
        "the gang's Service deleted",
    )


def test_an_exit_code_is_reported_once(client, fake) -> None:
    """A fraction runs on a reserved GPU; its pod exits 3: failed with code 3, one event,
    no second attempt."""
    alice = client("vision")
    job = submit(alice, command="python train.py", gpus=0.5)
    running = wait_state(alice, job["id"], "running")
    [pod] = running_pods(fake, job["id"])
    [gpu] = running["placement"][0]["gpus"]
    # the reservation pod reported the device plugin's UUID; the job's pod sees only it
    reserved = f"GPU-{NODE}-"
    assert env_of(pod)["NVIDIA_VISIBLE_DEVICES"].startswith(reserved), env_of(pod)
    # the API shows that UUID once the next cycle has read the inventory again
    wait_for(
        lambda: (
            workload(alice, job["id"])["placement"][0]["gpus"][0]["uuid"]
            == env_of(pod)["NVIDIA_VISIBLE_DEVICES"]
        ),
        20,
        "the reserved UUID in the placement",
    )
    assert gpu["share"] == 0.5 and env_of(pod)["FRACHUB_GPU_FRACTION"] == "0.5"

    finish(fake, pod, 3)
    done = wait_state(alice, job["id"], "failed", "succeeded")
    assert done["state"] == "failed" and done["exit_code"] == 3, done
    assert "exited with code 3" in done["message"]
    wait_cycles(alice)  # two cycles (and the polls between): still one end, no restart
    after = workload(alice, job["id"])
    assert [e["type"] for e in after["events"]] == ["submitted", "started", "failed"]
    assert after["restart_count"] == 0 and after["exit_code"] == 3
    assert fake.get("jobs", NAMESPACE, attempt_name(job["id"], 1)) is None
    assert len(training(fake, "pods", job["id"])) == 1


def test_job_logs_come_from_the_pods(client, fake) -> None:
    """GET workloads/{id}/logs reads the pod's log through pods/log: per replica, tail, and
    follow until the pod ends."""
    alice = client("vision")
    job = submit(alice, command="python train.py", gpus=0.5, replicas=2)
    wait_state(alice, job["id"], "running")
    pods = running_pods(fake, job["id"], count=2)
    by_rank = {pod_rank(pod): pod for pod in pods}
    for rank, pod in by_rank.items():
        fake.write_log(
            NAMESPACE, pod["metadata"]["name"], f"rank {rank} epoch 1\nrank {rank} epoch 2"
        )
    # the service picks the pod from its backend's watch, which may show the pods a moment
    # after the API does: until then it has no log to give
    wait_for(
        lambda: alice.get(f"workloads/{job['id']}/logs").text == "rank 0 epoch 1\nrank 0 epoch 2\n",
        20,
        "rank 0's log through the service",
    )
    wait_for(
        lambda: (
            alice.get(f"workloads/{job['id']}/logs?replica=1&tail=1").text == "rank 1 epoch 2\n"
        ),
        20,
        "rank 1's last line through the service",
    )
    log_path = f"/api/v1/namespaces/{NAMESPACE}/pods/{by_rank[0]['metadata']['name']}/log"

    def log_reads() -> int:
        return sum(1 for method, path in list(fake.requests) if (method, path) == ("GET", log_path))

    reads = log_reads()

    def later() -> None:  # the job prints while the client follows, then ends
        # once the follow has reached the API server (tail=0: a line printed before it
        # would not be followed), however long the hub and service take on a loaded machine
        wait_for(lambda: log_reads() > reads, 20, "the follow reaching the API server")
        fake.write_log(NAMESPACE, by_rank[0]["metadata"]["name"], "rank 0 epoch 3")
        time.sleep(0.5)
        finish(fake, by_rank[0], 0)

    threading.Thread(target=later).start()
    with alice.stream("GET", f"workloads/{job['id']}/logs?follow=1&tail=0", timeout=20) as stream:
        received = list(stream.iter_lines())  # ends with the pod
    assert received == ["rank 0 epoch 3"], received
    drain(alice)


def test_a_job_the_cluster_cannot_place_waits_again_with_the_clusters_words(client, fake) -> None:
    """An operator taints the node (maintenance) after FracHub counted it: the job's pod
    finds no node. After ``unschedulable_timeout`` the attempt ends, the workload waits again
    with kube-scheduler's words in its timeline (API, panel, CLI), and runs once the taint
    is gone."""
    alice = client("vision")
    taint = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
    fake.patch_object("nodes", "", NODE, {"spec": {"taints": [taint]}})
    try:
        job = submit(alice, command="python train.py", gpus=1)
        lost = wait_for(
            lambda: [e for e in workload(alice, job["id"])["events"] if e["type"] == "lost"],
            20,
            "the attempt ended in words",
        )
        text = lost[0]["text"]
        assert text.startswith("Kubernetes found no node for its pod frachub-"), text
        assert "for 3 s: " in text and text.endswith("; requeued"), text
        assert "lost its process" not in text, text
        assert f"node {NODE}: untolerated taint maintenance=true:NoSchedule" in text, text
    finally:
        fake.patch_object("nodes", "", NODE, {"spec": {"taints": None}})
    [pod] = running_pods(fake, job["id"])
    finish(fake, pod, 0)
    assert wait_state(alice, job["id"], "succeeded", "failed")["state"] == "succeeded"


def test_a_job_checkpoints_with_the_token_from_its_secret(hub, client, fake) -> None:
    """Nothing set by the user: the pod reads FRACHUB_URL and its own hub token from the
    Secret its Job owns, and ``checkpointed()`` with that environment (what the pod's
    process would run; the fake's kubelet runs none) reaches the service. The hub refuses the
    token once the job has ended."""
    alice = client("vision")
    job = submit(alice, command="python train.py", gpus=0.5)
    wait_state(alice, job["id"], "running")
    [pod] = running_pods(fake, job["id"])
    container = pod["spec"]["containers"][0]
    refs = {
        e["name"]: e["valueFrom"]["secretKeyRef"]
        for e in container["env"]
        if "secretKeyRef" in e.get("valueFrom", {})
    }
    assert refs["JUPYTERHUB_API_TOKEN"]["name"] == refs["FRACHUB_URL"]["name"]
    secret = fake.get("secrets", NAMESPACE, refs["JUPYTERHUB_API_TOKEN"]["name"])
    env = {
        **env_of(pod),
        **{
            name: base64.b64decode(secret["data"][ref["key"]]).decode()
            for name, ref in refs.items()
            if ref["name"] == secret["metadata"]["name"]
        },
    }
    token = env["JUPYTERHUB_API_TOKEN"]
    assert token not in json.dumps(fake.get("jobs", NAMESPACE, attempt_name(job["id"], 0)))
    checkpointed(environ=env)
    assert workload(alice, job["id"])["checkpointed_at"] is not None
    finish(fake, pod, 0)
    wait_state(alice, job["id"], "succeeded")
    wait_token_refused(hub.api_url, token)


def test_a_sigkilled_scheduler_loses_nothing_and_doubles_nothing(
    client, fake, service: ServiceProcess
) -> None:
    """SIGKILL the service with a job running, one ending while it is down and two queued;
    the new process adopts the running Job (same start, same pod), reports the ended one's
    code, keeps the queue, and counts every GPU once."""
    alice, bob = client("vision"), client("nlp")
    survivor = submit(alice, command="sleep 600", gpus=1, name="survivor")
    finisher = submit(bob, command="python train.py", gpus=1, name="finisher")
    for c, item in ((alice, survivor), (bob, finisher)):
        wait_state(c, item["id"], "running")
    waiting = [submit(alice, command="sleep 600", gpus=2, name=f"queued-{i}") for i in range(2)]
    positions = wait_for(
        lambda: (
            (p := [workload(alice, w["id"])["queue_position"] for w in waiting]) and all(p) and p
        ),
        10,
        "queue positions",
    )
    assert positions == [1, 2]
    before = workload(alice, survivor["id"])
    [survivor_pod] = running_pods(fake, survivor["id"])
    [finisher_pod] = running_pods(fake, finisher["id"])
    jobs_before = sorted(j["metadata"]["name"] for j in training(fake, "jobs"))

    service.kill(signal.SIGKILL)
    finish(fake, finisher_pod, 7)  # ends while nobody watches
    wait_for(
        lambda: condition(fake.get("jobs", NAMESPACE, attempt_name(finisher["id"], 0)), "Failed"),
        5,
        "the finisher's Job failed",
    )
    service.start()  # a standby until the dead one's Lease expires: 503 until then
    wait_for(
        lambda: httpx.get(f"{service.api_url}health", timeout=2).status_code == 200,
        20,
        "the restarted service holding the Lease (health 200)",
    )

    done = wait_state(bob, finisher["id"], "failed", "succeeded")
    assert done["exit_code"] == 7, done
    kept = workload(alice, survivor["id"])
    assert kept["state"] == "running" and kept["restart_count"] == 0
    assert kept["started_at"] == before["started_at"]  # adopted, not restarted
    # (borrowed too when an earlier test's vision job was still stopping as it started)
    types = [e["type"] for e in kept["events"] if e["type"] != "borrowed"]
    assert types == ["submitted", "started"], kept["events"]
    [job] = training(fake, "jobs", survivor["id"])
    assert job["metadata"]["name"] == attempt_name(survivor["id"], 0)
    [pod] = training(fake, "pods", survivor["id"])
    assert pod["metadata"]["uid"] == survivor_pod["metadata"]["uid"]
    after = [workload(alice, w["id"]) for w in waiting]
    assert [w["state"] for w in after] == ["pending", "pending"]
    assert [w["queue_position"] for w in after] == positions
    wait_cycles(alice)  # two more cycles: the finisher is reported once, nothing new created
    assert [e["type"] for e in workload(bob, finisher["id"])["events"]] == [
        "submitted",
        "started",
        "failed",
    ]
    # the failed Job stays (its pod's logs) until its TTL; nothing was created twice
    assert sorted(j["metadata"]["name"] for j in training(fake, "jobs")) == jobs_before
    assert len(training(fake, "pods", survivor["id"])) == 1
    used = [gpu["used"] for node in alice.get("nodes").json() for gpu in node["gpus"]]
    assert sorted(used) == [0.0, 1.0], used  # the survivor's GPU, counted once
    drain(alice)
