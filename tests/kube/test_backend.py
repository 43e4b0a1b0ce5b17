"""The Kubernetes backend through the real kubernetes_asyncio client: inventory from GPU
feature discovery labels, Jobs created suspended and admitted onto their node, GPU sharing in
both modes, exits reported once, preemption by suspension with the grace period, gangs as
Indexed Jobs with a headless Service, adoption by a restarted backend, and the API's failure
modes (409, 410, 5xx, half-created attempts)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from scheduler.backends.base import BackendError, Exit, JobSpec
from scheduler.backends.kubernetes.backend import KubernetesBackend
from scheduler.backends.kubernetes.gpus import GPU, GPUMEM
from scheduler.backends.kubernetes.jobs import POD_FAILURE_POLICY, admit_patch
from scheduler.backends.kubernetes.labels import (
    ATTEMPT_NAME,
    COMPONENT,
    GPU_UUID,
    HOSTNAME,
    PROJECT,
    RESERVATION,
    STOPPED,
    USER,
    WORKLOAD,
    attempt_name,
)
from scheduler.backends.kubernetes.pods import pinned_node, pod_live, pod_phase, pod_rank
from scheduler.common.placement import GpuShare, ReplicaPlacement

from .conftest import Cluster, eventually, run, unschedulable
from .fakeapi import hami_allocation

RUNS = "trap 'exit 143' TERM; sleep 600 & wait"
"""The default job command: runs until stopped, and ends with 143 on SIGTERM as a Python
program does (a shell as PID 1 would otherwise ignore SIGTERM on a real node)."""


def make_job(
    workload_id: int,
    placement: list[tuple[str, list[int], float]],
    *,
    command: str | list[str] = RUNS,
    restart_count: int = 0,
) -> JobSpec:
    replicas = tuple(
        ReplicaPlacement(node, tuple(GpuShare(i, round(share * 1000)) for i in gpus))
        for node, gpus, share in placement
    )
    return JobSpec(
        workload_id=workload_id,
        name=f"job-{workload_id}",
        user="alice@example.org",
        project="vision",
        command=command,
        working_dir="work",
        env={"EPOCHS": "3"},
        placement=replicas,
        restart_count=restart_count,
        replicas=len(replicas),
    )


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    container = pod["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container.get("env", []) if "value" in e}


def limits_of(pod: dict[str, Any]) -> dict[str, str]:
    return (pod["spec"]["containers"][0].get("resources") or {}).get("limits") or {}


async def pods_of(cluster: Cluster, workload_id: int, count: int = 1) -> list[dict[str, Any]]:
    selector = f"{WORKLOAD}={workload_id}"

    def running() -> list[dict[str, Any]] | None:
        pods = [p for p in cluster.pods(selector) if pod_phase(p) == "Running"]
        return pods if len(pods) >= count else None

    return await eventually(
        running, cluster.patience, what=f"{count} running pod(s) of workload {workload_id}"
    )


async def seen_running(
    backend: KubernetesBackend, workload_id: int, count: int = 1, timeout: float = 10.0
) -> list[dict[str, Any]]:
    """Wait until the backend's own pod cache (its watch) shows ``count`` running pods of
    the workload: what ``stop`` deletes and ``poll`` reads. The API server may show them
    first; a loaded watch catches up later."""
    assert backend.caches is not None

    def running() -> list[dict[str, Any]] | None:
        pods = [
            p
            for p in backend.caches.pods.objects.values()  # type: ignore[union-attr]
            if (p["metadata"].get("labels") or {}).get(WORKLOAD) == str(workload_id)
            and pod_phase(p) == "Running"
        ]
        return pods if len(pods) >= count else None

    return await eventually(running, timeout, what=f"the backend's watch showing {workload_id}")


async def exits_of(backend: KubernetesBackend, count: int = 1, timeout: float = 10.0) -> list[Exit]:
    exits: list[Exit] = []

    async def collect() -> bool:
        exits.extend(await backend.poll())
        return len(exits) >= count

    await eventually(collect, timeout, what=f"{count} exit(s)")
    await asyncio.sleep(0.2)
    exits.extend(await backend.poll())
    return exits


# --- inventory --------------------------------------------------------------------------------


def test_inventory_from_gpu_feature_discovery_labels(cluster: Cluster, backend: Any) -> None:
    fake = cluster.require_fake("needs the test's nodes")
    fake.add_node("node-c", gpus=8, gfd=False)  # device plugin only: count from allocatable
    fake.add_node("node-d", gpus=2)
    fake.set_node_ready("node-d", False)
    fake.add_node("cpu-only", gpus=0)

    async def scenario() -> None:
        made = await backend(default_gpu_memory_mib=16384)
        try:
            inventory = made.inventory()
            nodes = {node.name: node for node in inventory.nodes}
            assert inventory.source == "kubernetes"
            assert sorted(nodes) == ["node-a", "node-b", "node-c"]
            assert (nodes["node-a"].gpus, nodes["node-a"].gpu_memory_mib) == (4, 81920)
            assert nodes["node-b"].gpu_model == "NVIDIA-A100-PCIE-40GB"
            assert (nodes["node-c"].gpus, nodes["node-c"].gpu_memory_mib) == (8, 16384)
            assert inventory.uuid("node-a", 3) == "GPU-unreserved-node-a-3"
            fake.set_node_ready("node-d", True)
            await eventually(lambda: len(made.inventory().nodes) == 4, what="node-d Ready")
            fake.remove_node("node-c")
            await eventually(lambda: len(made.inventory().nodes) == 3, what="node-c gone")
        finally:
            await made.close()

    run(scenario)


# --- training jobs ----------------------------------------------------------------------------


def test_fraction_in_reservation_mode_gets_the_reserved_uuid(
    cluster: Cluster, backend: Any
) -> None:
    fake = cluster.require_fake(
        "a reservation pod reports its GPU UUID only with NVIDIA's device plugin (kind has none)"
    )

    async def scenario() -> None:
        made = await backend()
        try:
            handle = await made.start(make_job(1, [("node-a", [1], 0.5)]))
            assert handle["jobs"] == ["frachub-1-0"]
            job = cluster.jobs(f"{WORKLOAD}=1")[0]
            assert job["spec"]["suspend"] is False  # admitted
            assert pinned_node(job["spec"]["template"]["spec"]) == "node-a"
            assert job["spec"]["completionMode"] == "Indexed"
            labels = job["metadata"]["labels"]
            assert labels[USER] == "alice-example.org" and labels[PROJECT] == "vision"
            assert job["metadata"]["annotations"][USER] == "alice@example.org"

            reservation = cluster.pods(f"{COMPONENT}={RESERVATION}")[0]
            assert reservation["metadata"]["name"] == "frachub-gpu-node-a-1"
            assert limits_of(reservation) == {GPU: "1"}
            uuid = reservation["metadata"]["annotations"][GPU_UUID]
            # the inventory reads the annotation from the backend's pod cache, not the API
            await eventually(
                lambda: made.inventory().uuid("node-a", 1) == uuid,
                what="the reserved UUID in the backend's inventory",
            )

            (pod,) = await pods_of(cluster, 1)
            env = env_of(pod)
            assert env["NVIDIA_VISIBLE_DEVICES"] == uuid == env["FRACHUB_GPU_UUIDS"]
            assert env["FRACHUB_GPU_FRACTION"] == "0.5"
            assert env["FRACHUB_GPU_MEMORY_MIB"] == "40960"
            assert env["FRACHUB_RESTART_COUNT"] == "0"
            assert env["EPOCHS"] == "3" and env["HOME"] == "/home/jovyan"
            assert "RANK" not in env and "MASTER_ADDR" not in env
            assert limits_of(pod) == {}  # the reservation pod holds the GPU
            assert pod["spec"]["containers"][0]["workingDir"] == "/home/jovyan/work"
            assert pod["spec"]["terminationGracePeriodSeconds"] == 2

            assert await made.poll() == []
            fake.finish_pod("default", pod["metadata"]["name"], 0)
            assert await exits_of(made) == [Exit(1, 0, "exited with code 0")]
        finally:
            await made.close()

    run(scenario)


def test_whole_gpus_are_requested_from_the_device_plugin(cluster: Cluster, backend: Any) -> None:
    node = cluster.node(0, gpus=2)

    async def scenario() -> None:
        made = await backend()
        try:
            await made.start(make_job(3, [(node, [0, 1], 1.0)]))
            (pod,) = await pods_of(cluster, 3)
            assert limits_of(pod) == {GPU: "2"}
            assert pod["spec"]["nodeName"] == node
            assert "NVIDIA_VISIBLE_DEVICES" not in env_of(pod)
            assert cluster.pods(f"{COMPONENT}={RESERVATION}") == []
        finally:
            await made.close()

    run(scenario)


@pytest.mark.parametrize("code", [0, 3], ids=["success", "failure"])
def test_exit_is_reported_once(cluster: Cluster, backend: Any, code: int) -> None:
    node = cluster.node(0)

    async def scenario() -> None:
        made = await backend()
        try:
            await made.start(make_job(4, [(node, [0], 1.0)], command=cluster.ends(code)))
            (pod,) = await pods_of(cluster, 4)
            cluster.finish(pod, code)
            exits = await exits_of(made, timeout=cluster.patience)
            assert exits == [Exit(4, code, f"exited with code {code}")]
            assert await made.poll() == []
        finally:
            await made.close()

    run(scenario)


def test_preemption_suspends_and_kills_after_the_grace(cluster: Cluster, backend: Any) -> None:
    node = cluster.node(0)
    share = 0.5 if cluster.fake else 1.0  # a reservation needs NVIDIA's device plugin
    command = cluster.ignoring_sigterm()

    async def scenario() -> None:
        # a grace of a few seconds: the poll below must come within it on a loaded machine
        made = await backend(termination_grace_seconds=3)
        try:
            handle = await made.start(make_job(5, [(node, [0], share)], command=command))
            await pods_of(cluster, 5)
            await seen_running(made, 5, timeout=cluster.patience)  # the code comes from it
            began = asyncio.get_running_loop().time()
            await made.stop(5, handle, 3.0)
            job = cluster.jobs(f"{WORKLOAD}=5")[0]
            assert job["spec"]["suspend"] is True
            assert STOPPED in job["metadata"]["annotations"]
            await eventually(
                lambda: all(
                    p["metadata"].get("deletionTimestamp") for p in cluster.pods(f"{WORKLOAD}=5")
                ),
                what="SIGTERM (deletionTimestamp)",
            )
            assert await made.poll() == []  # still within its grace
            exits = await exits_of(made, timeout=cluster.patience)
            assert exits == [Exit(5, 137, "stopped (code 137)")]
            assert asyncio.get_running_loop().time() - began >= 2.9
            await eventually(lambda: cluster.jobs(f"{WORKLOAD}=5") == [], what="job deleted")
        finally:
            await made.close()

    run(scenario)


def test_preempted_job_that_honours_sigterm_ends_early_and_restarts(
    cluster: Cluster, backend: Any
) -> None:
    node = cluster.node(0)
    share = 0.5 if cluster.fake else 1.0  # a reservation needs NVIDIA's device plugin

    async def scenario() -> None:
        made = await backend(termination_grace_seconds=30)
        try:
            handle = await made.start(make_job(6, [(node, [0], share)]))
            await pods_of(cluster, 6)
            # the code comes from the pod watch: it must have shown the pod before its end
            await seen_running(made, 6, timeout=cluster.patience)
            await made.stop(6, handle, 30.0)
            ends_early = cluster.patience if cluster.fake else 25  # well within the 30 s grace
            assert await exits_of(made, timeout=ends_early) == [Exit(6, 143, "stopped (code 143)")]
            # requeued by the service: the next attempt is a new Job with the restart count
            handle = await made.start(make_job(6, [(node, [0], share)], restart_count=1))
            assert handle["jobs"] == ["frachub-6-1"]
            (pod,) = await pods_of(cluster, 6)
            assert env_of(pod)["FRACHUB_RESTART_COUNT"] == "1"
            assert env_of(pod)["FRACHUB_CHECKPOINT_DIR"] == "/home/jovyan/.frachub/checkpoints/6"
        finally:
            await made.close()

    run(scenario)


def test_a_shorter_grace_deletes_the_pods_with_it(cluster: Cluster, backend: Any) -> None:
    node = cluster.node(0)
    command = cluster.ignoring_sigterm()

    async def scenario() -> None:
        made = await backend(termination_grace_seconds=30)
        try:
            handle = await made.start(make_job(7, [(node, [0], 1.0)], command=command))
            await pods_of(cluster, 7)
            # stop deletes the pods its watch has shown: wait for that view, not the API's
            await seen_running(made, 7, timeout=cluster.patience)
            await made.stop(7, handle, 0)  # node lost: no grace
            # well within the 30 s grace the suspension alone would give the pod
            (exit_,) = await exits_of(made, timeout=cluster.patience if cluster.fake else 25)
            assert exit_.workload_id == 7
        finally:
            await made.close()

    run(scenario)


# --- gangs ------------------------------------------------------------------------------------


def test_gang_is_an_indexed_job_with_a_headless_service(cluster: Cluster, backend: Any) -> None:
    node = cluster.node(0, gpus=2)
    ends = cluster.ends(0)

    async def scenario() -> None:
        made = await backend()
        try:
            job = make_job(8, [(node, [0], 1.0), (node, [1], 1.0)], command=ends)
            handle = await made.start(job)
            assert handle["jobs"] == ["frachub-8-0"] and handle["service"] == "frachub-8-0"
            job = cluster.jobs(f"{WORKLOAD}=8")[0]
            assert (job["spec"]["completions"], job["spec"]["parallelism"]) == (2, 2)
            (service,) = cluster.services(f"{ATTEMPT_NAME}=frachub-8-0")
            assert service["spec"]["clusterIP"] == "None"
            assert service["spec"]["selector"][ATTEMPT_NAME] == "frachub-8-0"
            pods = sorted(await pods_of(cluster, 8, 2), key=lambda p: p["spec"]["hostname"])
            assert [p["spec"]["hostname"] for p in pods] == ["frachub-8-0-0", "frachub-8-0-1"]
            assert {p["spec"]["subdomain"] for p in pods} == {"frachub-8-0"}
            env = env_of(pods[0])
            assert env["MASTER_ADDR"] == "frachub-8-0-0.frachub-8-0"
            assert (env["MASTER_PORT"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == (
                "29500",
                "2",
                "1",  # each pod is its own torchrun node (test_gang_env.py)
            )
            command = pods[0]["spec"]["containers"][0]["command"]
            assert (
                '"$JOB_COMPLETION_INDEX"' in command[2]
                and "1) RANK=1; LOCAL_RANK=0;;" in command[2]
            )
            assert command[2].endswith(ends)
            for pod in pods:
                cluster.finish(pod, 0)
            exits = await exits_of(made, timeout=cluster.patience)
            assert exits == [Exit(8, 0, "exited with code 0")]
            await eventually(
                lambda: cluster.services(f"{ATTEMPT_NAME}=frachub-8-0") == [],
                what="service deleted",
            )
        finally:
            await made.close()

    run(scenario)


def test_gang_across_nodes_is_one_indexed_job_per_node(cluster: Cluster, backend: Any) -> None:
    first, second = cluster.node(0, gpus=2), cluster.node(1)
    if first == second:
        second = cluster.node(2)

    async def scenario() -> None:
        made = await backend()
        try:
            placement = [(first, [0], 1.0), (second, [0], 1.0), (first, [1], 1.0)]
            handle = await made.start(make_job(9, placement))
            assert handle["jobs"] == ["frachub-9-0-g0", "frachub-9-0-g1"]
            jobs = {j["metadata"]["name"]: j for j in cluster.jobs(f"{WORKLOAD}=9")}
            assert jobs["frachub-9-0-g0"]["spec"]["completions"] == 2
            assert pinned_node(jobs["frachub-9-0-g1"]["spec"]["template"]["spec"]) == second
            pods = await pods_of(cluster, 9, 3)
            assert {p["spec"]["nodeName"] for p in pods} == {first, second}
            on_b = next(p for p in pods if p["spec"]["nodeName"] == second)
            assert env_of(on_b)["MASTER_ADDR"] == "frachub-9-0-g0-0.frachub-9-0"
            assert "0) RANK=1; LOCAL_RANK=0;;" in on_b["spec"]["containers"][0]["command"][2]
        finally:
            await made.close()

    run(scenario)


def test_gang_with_a_failing_replica_stops_the_rest(cluster: Cluster, backend: Any) -> None:
    fake = cluster.require_fake("fails one pod")

    async def scenario() -> None:
        made = await backend()
        try:
            await made.start(make_job(10, [("node-a", [0], 1.0), ("node-b", [0], 1.0)]))
            pods = await pods_of(cluster, 10, 2)
            failing = next(p for p in pods if p["spec"]["nodeName"] == "node-b")
            fake.finish_pod("default", failing["metadata"]["name"], 2)
            (exit_,) = await exits_of(made)
            assert exit_.workload_id == 10 and exit_.exit_code == 2
            assert "exited with code 2" in exit_.message
            assert not [p for p in cluster.pods(f"{WORKLOAD}=10") if pod_live(p)]
        finally:
            await made.close()

    run(scenario)


def test_a_failed_gang_ends_with_the_code_once_its_other_pods_are_gone(
    cluster: Cluster, backend: Any
) -> None:
    """The rest of a failed gang may take their grace period to go (the backend's own
    delete was refused here; the Job controller terminates them): the attempt ends with
    the failing replica's code once they are gone, not as lost while they still run."""
    fake = cluster.require_fake("fails one pod and refuses the backend's deletes")
    fake.ignore_sigterm = True

    async def scenario() -> None:
        made = await backend()
        try:
            await made.start(make_job(14, [("node-a", [0], 1.0), ("node-a", [1], 1.0)]))
            pods = await pods_of(cluster, 14, 2)
            fake.fail_next("DELETE", r"/pods/", 409, times=10)
            failing = next(p for p in pods if pod_rank(p) == 1)
            fake.finish_pod("default", failing["metadata"]["name"], 2)
            (exit_,) = await exits_of(made)
            assert exit_ == Exit(14, 2, "replica of frachub-14-0 index 1 exited with code 2")
            assert not [p for p in cluster.pods(f"{WORKLOAD}=14") if pod_live(p)]
        finally:
            await made.close()

    run(scenario)


# --- restarts -------------------------------------------------------------------------------


def test_restarted_backend_adopts_running_and_finished_jobs(cluster: Cluster, backend: Any) -> None:
    fake = cluster.require_fake("finishes a pod while the scheduler is down")

    async def scenario() -> None:
        first = await backend()
        handles = {
            11: await first.start(make_job(11, [("node-a", [0], 0.5)])),
            12: await first.start(make_job(12, [("node-a", [1], 1.0)])),
            13: await first.start(make_job(13, [("node-b", [0], 1.0)])),
        }
        pods = {wid: (await pods_of(cluster, wid))[0] for wid in handles}
        await first.close()  # the scheduler goes away; the jobs do not
        fake.finish_pod("default", pods[12]["metadata"]["name"], 7)
        fake.call(  # someone deletes job 13 while nobody watches
            fake._delete, "jobs", "default", "frachub-13-0", {"propagationPolicy": "Background"}
        )
        second = await backend()
        try:
            assert second.adopt(11, handles[11]) is True
            assert second.adopt(12, handles[12]) is True
            assert second.adopt(13, handles[13]) is False  # lost: the service requeues it
            assert second.adopt(99, {"backend": "local", "attempt": "x"}) is False
            assert second.inventory().uuid("node-a", 0).startswith("GPU-node-a-")
            assert await exits_of(second) == [Exit(12, 7, "exited with code 7")]
            assert second.attempts_in_cluster() == {11: ["frachub-11-0"], 12: ["frachub-12-0"]}
            fake.finish_pod("default", pods[11]["metadata"]["name"], 0)
            assert await exits_of(second) == [Exit(11, 0, "exited with code 0")]
        finally:
            await second.close()

    run(scenario)


def test_a_retried_start_takes_over_its_job_instead_of_doubling_it(
    cluster: Cluster, backend: Any
) -> None:
    node = cluster.node(0, gpus=2)

    async def scenario() -> None:
        made = await backend()
        try:
            job = make_job(14, [(node, [0], 1.0), (node, [1], 1.0)])
            first = await made.start(job)
            # the service died before recording the handle, and starts the same attempt again
            again = await made.start(job)
            assert again["jobs"] == first["jobs"]
            assert len(cluster.jobs(f"{WORKLOAD}=14")) == 1
            assert len(await pods_of(cluster, 14, 2)) == 2
        finally:
            await made.close()

    run(scenario)


def test_a_start_reads_its_jobs_from_the_watch_cache_not_a_list(
    cluster: Cluster, backend: Any
) -> None:
    """Whether a start's Jobs exist already (a retried start) is read from the Jobs watch
    cache: a start used to list the namespace's Jobs, one list per start (4,000 in KAI's
    fill test, benchmarks/kai_scale.py)."""
    fake = cluster.require_fake("counts the requests the API server gets")
    node = cluster.node(0, gpus=2)

    async def scenario() -> None:
        def job_reads(requests: list[tuple[str, str]]) -> list[tuple[str, str]]:
            return [r for r in requests if r[0] == "GET" and r[1].endswith("/jobs")]

        connected = len(fake.requests)
        made = await backend()
        try:
            deadline = time.monotonic() + 10
            while len(job_reads(fake.requests[connected:])) < 2:  # the cache's list and watch
                assert time.monotonic() < deadline, "the Jobs watch did not start"
                await asyncio.sleep(0.01)
            before = len(fake.requests)
            await made.start(make_job(16, [(node, [0], 1.0)]))
            await made.start(make_job(17, [(node, [1], 1.0)]))
            sent = fake.requests[before:]
            assert job_reads(sent) == []
            assert len([r for r in sent if r[0] == "POST" and r[1].endswith("/jobs")]) == 2
            await pods_of(cluster, 16)
            await pods_of(cluster, 17)
        finally:
            await made.close()

    run(scenario)


def test_a_stopped_attempt_is_not_taken_over(cluster: Cluster, backend: Any) -> None:
    node = cluster.node(0)

    async def scenario() -> None:
        made = await backend()
        try:
            job = make_job(15, [(node, [0], 1.0)])
            handle = await made.start(job)
            await pods_of(cluster, 15)
            await made.close()
            made = await backend()
            await made.stop(15, handle, 30)  # stopped but not yet deleted
            again = await made.start(job)
            assert again["jobs"] != handle["jobs"]
            await pods_of(cluster, 15)
        finally:
            await made.close()

    run(scenario)


# --- API failures ---------------------------------------------------------------------------


def test_server_errors_and_timeouts_are_retried(cluster: Cluster, backend: Any) -> None:
    fake = cluster.require_fake("injects API errors")

    async def scenario() -> None:
        made = await backend(request_timeout=0.5)
        try:
            fake.fail_next("POST", r"/jobs$", 503, times=2)
            fake.fail_next("PATCH", r"/jobs/frachub-16-0$", 0)  # hangs: a timeout
            handle = await made.start(make_job(16, [("node-a", [0], 1.0)]))
            assert handle["jobs"] == ["frachub-16-0"]
            await pods_of(cluster, 16)
        finally:
            await made.close()

    run(scenario)


def test_429_waits_as_long_as_retry_after_says(cluster: Cluster, backend: Any) -> None:
    """API priority and fairness answers 429 with Retry-After; the client waits that long
    (not its own 0.1-0.2 s first backoff) before trying again."""
    fake = cluster.require_fake("injects API errors")

    async def scenario() -> None:
        made = await backend()
        try:
            fake.fail_next("POST", r"/jobs$", 429)
            began = asyncio.get_running_loop().time()
            await made.start(make_job(17, [("node-a", [0], 1.0)]))
            assert asyncio.get_running_loop().time() - began >= 1.0
            posts = [
                path
                for method, path in fake.requests
                if method == "POST" and path.endswith("/jobs")
            ]
            assert len(posts) == 2
        finally:
            await made.close()

    run(scenario)


def test_a_half_created_gang_is_cleaned_up(cluster: Cluster, backend: Any) -> None:
    fake = cluster.require_fake("injects API errors")

    async def scenario() -> None:
        made = await backend()
        try:
            fake.fail_next("POST", r"/services$", 403, reason="Forbidden")
            with pytest.raises(BackendError, match="refused"):
                await made.start(make_job(17, [("node-a", [0], 1.0), ("node-a", [1], 1.0)]))
            assert cluster.jobs(f"{WORKLOAD}=17") == []
            assert cluster.pods(f"{WORKLOAD}=17") == []
        finally:
            await made.close()

    run(scenario)


def test_start_refuses_a_placement_that_does_not_match(cluster: Cluster, backend: Any) -> None:
    node = cluster.node(0)

    async def scenario() -> None:
        made = await backend()
        try:
            job = make_job(18, [(node, [0], 1.0)])
            with pytest.raises(BackendError, match="placement"):
                await made.start(JobSpec(**{**job.__dict__, "replicas": 2}))
        finally:
            await made.close()

    run(scenario)


def test_a_watch_that_gets_410_gone_lists_again(cluster: Cluster, backend: Any) -> None:
    fake = cluster.require_fake("compacts the watch history")

    async def scenario() -> None:
        made = await backend()
        try:
            await made.start(make_job(19, [("node-a", [0], 1.0)]))
            (pod,) = await pods_of(cluster, 19)
            assert made.caches is not None
            # the caches have seen the latest change of each (no event in flight to move
            # the versions set below)
            (job,) = cluster.jobs(f"{WORKLOAD}=19")
            for cache, seen in ((made.caches.jobs, job), (made.caches.pods, pod)):
                version = int(seen["metadata"]["resourceVersion"])
                await eventually(
                    lambda c=cache, v=version: int(c.resource_version or 0) >= v,
                    what="the caches up to date",
                )
            # the watches resume from a version the server has forgotten (a long disconnect)
            fake.compact()
            made.caches.pods.resource_version = made.caches.jobs.resource_version = "1"
            fake.drop_watches()
            await eventually(
                lambda: made.caches.jobs.relists >= 1, timeout=cluster.patience, what="a relist"
            )
            fake.finish_pod("default", pod["metadata"]["name"], 0)
            assert await exits_of(made) == [Exit(19, 0, "exited with code 0")]
        finally:
            await made.close()

    run(scenario)


def test_a_watch_resumes_from_its_bookmark_after_the_history_is_compacted(
    cluster: Cluster, backend: Any
) -> None:
    """The watches select FracHub's objects only, so the last version they saw ages while
    the rest of the cluster changes; the server's BOOKMARK events (allowWatchBookmarks)
    move it on, and a watch renewed after the server forgot the older history resumes from
    the bookmark instead of getting 410 and listing everything again."""
    fake = cluster.require_fake("compacts the watch history")
    fake.bookmark_interval = 0.2

    async def scenario() -> None:
        made = await backend()
        try:
            await made.start(make_job(20, [("node-a", [0], 1.0)]))
            (pod,) = await pods_of(cluster, 20)
            assert made.caches is not None
            for number in range(5):  # the rest of the cluster changes
                fake.call(
                    fake._create, "configmaps", "default", {"metadata": {"name": f"other-{number}"}}
                )
            latest = fake.call(lambda: fake._last_rv)
            informers = (made.caches.pods, made.caches.jobs, made.caches.nodes)
            await eventually(
                lambda: all(int(i.resource_version) >= latest for i in informers),  # type: ignore[union-attr]
                timeout=cluster.patience,
                what=f"bookmarks at version {latest}",
            )
            fake.compact()
            fake.drop_watches()
            await asyncio.sleep(0.5)
            fake.finish_pod("default", pod["metadata"]["name"], 0)
            assert await exits_of(made) == [Exit(20, 0, "exited with code 0")]
            assert [i.relists for i in informers] == [0, 0, 0]  # type: ignore[union-attr]
        finally:
            await made.close()

    run(scenario)


def test_unused_reservations_are_released(cluster: Cluster, backend: Any) -> None:
    fake = cluster.require_fake(
        "a reservation pod reports its GPU UUID only with NVIDIA's device plugin (kind has none)"
    )

    async def scenario() -> None:
        made = await backend(reservation_linger_seconds=0.2)
        try:
            await made.start(make_job(20, [("node-b", [1], 0.5)]))
            (pod,) = await pods_of(cluster, 20)
            await asyncio.sleep(0.3)
            await made.poll()
            assert cluster.pods(f"{COMPONENT}={RESERVATION}") != []  # still in use
            fake.finish_pod("default", pod["metadata"]["name"], 0)
            await exits_of(made)

            async def released() -> bool:
                made._reservations.last_gc = 0.0
                await made.poll()
                return cluster.pods(f"{COMPONENT}={RESERVATION}") == []

            await eventually(released, what="the reservation released")
        finally:
            await made.close()

    run(scenario)


def test_a_whole_gpu_job_releases_a_lingering_reservation(cluster: Cluster, backend: Any) -> None:
    """A reservation kept for a notebook still holds its device: a job given that GPU whole
    would wait for a device until the linger ended, so its start releases it."""
    fake = cluster.require_fake(
        "a reservation pod reports its GPU UUID only with NVIDIA's device plugin (kind has none)"
    )

    async def scenario() -> None:
        made = await backend(reservation_linger_seconds=600)
        try:
            await made.start(make_job(21, [("node-b", [1], 0.5)]))
            (pod,) = await pods_of(cluster, 21)
            fake.finish_pod("default", pod["metadata"]["name"], 0)
            await exits_of(made)
            # the exit may come from the Job watch before the pod watch shows the pod ended;
            # until it does, the start below counts the share as still in use
            await eventually(
                lambda: (
                    not [
                        p
                        for p in made.caches.pods.objects.values()  # type: ignore[union-attr]
                        if (p["metadata"].get("labels") or {}).get(WORKLOAD) == "21" and pod_live(p)
                    ]
                ),
                what="the backend's watch showing the pod of 21 ended",
            )
            assert len(cluster.pods(f"{COMPONENT}={RESERVATION}")) == 1  # lingering
            await made.start(make_job(22, [("node-b", [0, 1], 1.0)]))
            (whole,) = await pods_of(cluster, 22)
            assert limits_of(whole) == {GPU: "2"}
            assert cluster.pods(f"{COMPONENT}={RESERVATION}") == []
        finally:
            await made.close()

    run(scenario)


# --- leader election ------------------------------------------------------------------------


def test_a_second_scheduler_takes_over_when_the_lease_expires(cluster: Cluster) -> None:
    from scheduler.backends.kubernetes.client import Kube, load_configuration
    from scheduler.backends.kubernetes.leader import LeaseElector

    async def scenario() -> None:
        kube = Kube(await load_configuration(cluster.kubeconfig))
        timing = {"lease_seconds": 1.0, "renew_seconds": 0.2, "retry_seconds": 0.1}
        lost: list[str] = []
        first = LeaseElector(kube, cluster.namespace, "frachub-test-lease", "first", **timing)
        second = LeaseElector(
            kube,
            cluster.namespace,
            "frachub-test-lease",
            "second",
            on_lost=lambda: lost.append("second"),
            **timing,
        )
        try:
            await first.acquire()
            first.keep()
            assert await second.try_acquire_or_renew() is False
            await asyncio.sleep(1.3)  # first keeps renewing: second still waits
            assert await second.try_acquire_or_renew() is False
            assert first._task is not None
            first._task.cancel()  # first dies without releasing
            began = asyncio.get_running_loop().time()
            await second.acquire()
            assert asyncio.get_running_loop().time() - began >= 0.9
            lease = await kube.call(
                kube.coordination.read_namespaced_lease, "frachub-test-lease", cluster.namespace
            )
            assert lease["spec"]["holderIdentity"] == "second"
            assert lease["spec"]["leaseTransitions"] == 1
            # a graceful hand-back lets the next one in at once
            second.keep()
            await second.release()
            third = LeaseElector(kube, cluster.namespace, "frachub-test-lease", "third", **timing)
            await asyncio.wait_for(third.acquire(), 1.5)
            assert lost == []
        finally:
            await kube.call(
                kube.coordination.delete_namespaced_lease, "frachub-test-lease", cluster.namespace
            )
            await kube.close()

    run(scenario)


def test_connect_waits_for_the_lease(cluster: Cluster) -> None:
    from .conftest import backend_for

    async def scenario() -> None:
        timing = {"lease_seconds": 1.0, "lease_renew_seconds": 0.2, "lease_retry_seconds": 0.1}
        first = backend_for(cluster, leader_election=True, identity="one", **timing)
        second = backend_for(cluster, leader_election=True, identity="two", **timing)
        await first.connect()
        waiting = asyncio.ensure_future(second.connect())
        seen: set = set()

        def refused_after_a_renewal() -> bool:
            """The second has read the lease twice, the first renewing it in between."""
            if second.elector is not None and second.elector._observed is not None:
                seen.add(second.elector._observed)
            return len(seen) >= 2

        await eventually(
            refused_after_a_renewal,
            timeout=cluster.patience,
            what="the second to read the lease the first keeps renewing",
        )
        assert not waiting.done()
        await first.close()  # hands the lease back
        await asyncio.wait_for(waiting, cluster.patience)
        assert second.elector is not None and second.elector.is_leader
        await second.close()

    run(scenario)


def test_gpus_held_by_pods_frachub_did_not_create_are_left_out(
    cluster: Cluster, backend: Any
) -> None:
    fake = cluster.require_fake("creates another team's pod")
    fake.call(fake._put_namespace, "other-team")

    async def scenario() -> None:
        made = await backend()
        try:
            assert {n.name: n.gpus for n in made.inventory().nodes}["node-a"] == 4
            fake.call(
                fake._create,
                "pods",
                "other-team",
                {
                    "metadata": {"name": "their-training"},
                    "spec": {
                        "nodeSelector": {HOSTNAME: "node-a"},
                        "containers": [{"name": "main", "resources": {"limits": {GPU: "3"}}}],
                    },
                },
            )
            await eventually(
                lambda: {n.name: n.gpus for n in made.inventory().nodes}["node-a"] == 1,
                what="node-a down to the one GPU nobody else holds",
            )
            await made.start(make_job(41, [("node-a", [0], 1.0)]))  # FracHub's own: not foreign
            await pods_of(cluster, 41)
            assert {n.name: n.gpus for n in made.inventory().nodes}["node-a"] == 1
            fake.call(fake._delete_now, "pods", "other-team", "their-training")
            await eventually(
                lambda: {n.name: n.gpus for n in made.inventory().nodes}["node-a"] == 4,
                what="node-a whole again",
            )
        finally:
            await made.close()

    run(scenario)


def test_pods_are_pinned_by_node_name_where_the_hostname_label_differs(
    cluster: Cluster, backend: Any
) -> None:
    """hostname-override or FQDN node names: kubernetes.io/hostname is not the Node's name,
    so a nodeSelector on it would match no node; affinity on metadata.name does."""
    fake = cluster.require_fake("adds a node whose hostname label differs")
    fake.add_node("gpu-1.cluster.internal", gpus=2, hostname="gpu-1")

    async def scenario() -> None:
        made = await backend()
        try:
            await made.start(make_job(51, [("gpu-1.cluster.internal", [0], 1.0)]))
            await made.start(make_job(52, [("gpu-1.cluster.internal", [1], 0.5)]))
            for workload_id in (51, 52):
                (pod,) = await pods_of(cluster, workload_id)
                assert pod["spec"]["nodeName"] == "gpu-1.cluster.internal"
            reservation = cluster.pods(f"{COMPONENT}={RESERVATION}")[0]
            assert pinned_node(reservation["spec"]) == "gpu-1.cluster.internal"
        finally:
            await made.close()
        labelled = await backend(node_label=HOSTNAME)  # the old way: pinned by the label
        try:
            await labelled.start(make_job(53, [("gpu-1.cluster.internal", [1], 1.0)]))
            pods = await eventually(
                lambda: (
                    (found := cluster.pods(f"{WORKLOAD}=53"))
                    and all(unschedulable(p) for p in found)
                    and found
                ),
                timeout=cluster.patience,
                what="the scheduler to find no node for the labelled Job's pod",
            )
            assert all(pod_phase(p) == "Pending" for p in pods)
            (job,) = cluster.jobs(f"{WORKLOAD}=53")
            assert job["spec"]["template"]["spec"]["nodeSelector"] == {
                HOSTNAME: "gpu-1.cluster.internal"
            }
        finally:
            await labelled.close()

    run(scenario)


def test_an_evicted_pod_is_lost_and_requeued_not_failed(cluster: Cluster, backend: Any) -> None:
    """A drain or eviction gives the pod DisruptionTarget; with backoffLimit 0 the Job
    fails, but the program did not: the attempt ends with no exit code (the service
    requeues it) and a message saying why."""
    fake = cluster.require_fake("evicts a pod")

    async def scenario() -> None:
        made = await backend()
        try:
            await made.start(make_job(61, [("node-a", [0], 1.0)]))
            (pod,) = await pods_of(cluster, 61)
            fake.evict(cluster.namespace, pod["metadata"]["name"])
            [end] = await exits_of(made)
            assert end.workload_id == 61 and end.exit_code is None, end
            assert "disrupted (EvictionByEvictionAPI" in end.message
        finally:
            await made.close()

    run(scenario)


def test_a_stop_whose_deleted_pods_fail_the_job_is_still_a_stop(
    cluster: Cluster, backend: Any
) -> None:
    """The Job controller counts pods deleted while the Job is not (yet) suspended as
    failures (job-tracking finalizers); a stop FracHub asked for stays a stop."""
    fake = cluster.require_fake("deletes a pod behind the backend's back")

    async def scenario() -> None:
        made = await backend()
        try:
            handle = await made.start(make_job(62, [("node-a", [0], 1.0)]))
            (pod,) = await pods_of(cluster, 62)
            attempt = made._attempts[handle["attempt"]]
            attempt.stopping = True  # the stop is under way; its pod goes first
            fake.call(
                fake._delete_pod, fake.get("pods", cluster.namespace, pod["metadata"]["name"]), 0
            )
            await made.stop(62, handle, 0)
            [end] = await exits_of(made)
            assert end.exit_code != 0 and end.message.startswith("stopped"), end
        finally:
            await made.close()

    run(scenario)


def test_a_stop_is_not_reported_before_the_watch_has_shown_the_attempt(
    cluster: Cluster, backend: Any
) -> None:
    """A loaded watch shows the attempt's Job and pod seconds after the API does: a stop
    right after the start (a cancel, a preemption) is reported once the pod is gone, not
    while it still runs on its GPU because the caches do not show it (yet)."""
    fake = cluster.require_fake("delays the watches")
    fake.ignore_sigterm = True  # the pod runs through its grace

    async def scenario() -> None:
        made = await backend(termination_grace_seconds=5)
        try:
            fake.watch_lag = 3.0  # shorter than the grace: the caches catch up before its end
            handle = await made.start(make_job(65, [("node-a", [0], 1.0)]))
            (pod,) = await pods_of(cluster, 65)  # through the API, not the watch
            began = asyncio.get_running_loop().time()
            await made.stop(65, handle, 5.0)
            assert await made.poll() == []  # neither cache has the Job nor its pod yet
            current = fake.get("pods", cluster.namespace, pod["metadata"]["name"])
            assert current is not None and pod_live(current)  # still on its GPU
            [end] = await exits_of(made, timeout=cluster.patience)
            assert end.workload_id == 65 and end.message.startswith("stopped"), end
            # not while the caches, one catching up before the other, showed no live pod
            assert asyncio.get_running_loop().time() - began >= 4.9
        finally:
            fake.watch_lag = 0.0
            await made.close()

    run(scenario)


def test_a_retried_start_leaves_a_started_jobs_template_alone(
    cluster: Cluster, backend: Any
) -> None:
    """A started Job's pod template is immutable on a real server (the fake refuses it
    too): a retried start that finds its Job running, here one an older FracHub pinned with
    a nodeSelector, takes it over without re-admitting it."""
    fake = cluster.require_fake("edits a Job as an older version left it")

    async def scenario() -> None:
        made = await backend()
        try:
            job = make_job(15, [("node-a", [0], 1.0)])
            await made.start(job)
            await pods_of(cluster, 15)
            name = attempt_name(15, 0)
            current = fake.get("jobs", cluster.namespace, name)
            assert current is not None
            template = current["spec"]["template"]["spec"]
            template.pop("affinity")
            template["nodeSelector"] = {HOSTNAME: "node-a"}
            fake.call(fake._update, "jobs", current)  # as an older FracHub admitted it
            with pytest.raises(Exception, match=r"422.*immutable"):
                await made.kube.call(  # type: ignore[union-attr]
                    made.kube.batch.patch_namespaced_job,  # type: ignore[union-attr]
                    name,
                    cluster.namespace,
                    admit_patch("node-a", made.settings),
                    _content_type="application/merge-patch+json",
                )
            again = await made.start(job)
            assert again["jobs"] == [name]
            assert len(await pods_of(cluster, 15)) == 1
            assert len(cluster.jobs(f"{WORKLOAD}=15")) == 1
        finally:
            await made.close()

    run(scenario)


@pytest.mark.parametrize("code", [0, 3], ids=["success", "failure"])
def test_the_interim_condition_ends_the_attempt(cluster: Cluster, backend: Any, code: int) -> None:
    """Kubernetes 1.31+ says a Job succeeded (SuccessCriteriaMet) or failed (FailureTarget)
    before it adds Complete or Failed, which waits for every pod to terminate and for the
    controller's next sync: the attempt ends on the first word."""
    fake = cluster.require_fake("a Job controller slow to add the terminal condition")
    fake.terminal_condition_delay = 60.0

    async def scenario() -> None:
        made = await backend()
        try:
            await made.start(make_job(63, [("node-a", [0], 1.0)]))
            (pod,) = await pods_of(cluster, 63)
            fake.finish_pod(cluster.namespace, pod["metadata"]["name"], code)
            assert await exits_of(made) == [Exit(63, code, f"exited with code {code}")]
            (job,) = cluster.jobs(f"{WORKLOAD}=63")
            kinds = [c["type"] for c in job["status"]["conditions"]]
            assert kinds == ["SuccessCriteriaMet" if code == 0 else "FailureTarget"]
        finally:
            await made.close()

    run(scenario)


@pytest.mark.parametrize("how", ["exit", "eviction"])
def test_a_restarted_scheduler_reads_how_a_job_failed_from_its_condition(
    cluster: Cluster, backend: Any, how: str
) -> None:
    """The Jobs carry a podFailurePolicy (FailJob on DisruptionTarget and on a non-zero
    exit), so the Job's condition says why it failed after its pod is gone: a scheduler
    restarted after a program failed and its pod was deleted reports the exit code (it
    used to requeue it as lost), and an eviction stays a disruption (requeued)."""
    fake = cluster.require_fake("fails a pod while the scheduler is down")

    async def scenario() -> None:
        first = await backend()
        handle = await first.start(make_job(64, [("node-a", [0], 1.0)]))
        (pod,) = await pods_of(cluster, 64)
        (job,) = cluster.jobs(f"{WORKLOAD}=64")
        assert job["spec"]["podFailurePolicy"] == POD_FAILURE_POLICY
        await first.close()
        name = pod["metadata"]["name"]
        if how == "exit":
            fake.finish_pod(cluster.namespace, name, 3)
        else:
            fake.evict(cluster.namespace, name)

        def failed() -> bool:
            (job,) = cluster.jobs(f"{WORKLOAD}=64")
            return any(c["type"] == "Failed" for c in job["status"].get("conditions", []))

        await eventually(failed, what="the Job failed")
        if fake.get("pods", cluster.namespace, name) is not None:
            fake.call(fake._delete_now, "pods", cluster.namespace, name)  # pod GC, a user
        second = await backend()
        try:
            assert second.adopt(64, handle) is True
            [end] = await exits_of(second)
            if how == "exit":
                assert end == Exit(64, 3, "exited with code 3")
            else:
                assert end.exit_code is None and "disrupted (DisruptionTarget" in end.message, end
        finally:
            await second.close()

    run(scenario)


def test_hami_shares_by_memory_and_a_share_that_does_not_fit_is_requeued(
    cluster: Cluster, backend: Any
) -> None:
    """HAMi mode: each fractional pod gets its memory share of a GPU from HAMi. A share the
    engine thought free but HAMi cannot give (memory held by pods FracHub does not see:
    ``count_foreign_pods`` off) leaves the pod unschedulable: the attempt ends with HAMi's
    words after ``unschedulable_timeout`` and the workload is requeued, rather than waiting
    forever."""
    fake = cluster.require_fake("runs HAMi")
    fake.add_node("node-h", gpus=2, memory_mib=40960, hami=True)

    async def scenario() -> None:
        made = await backend(
            sharing_mode="hami",
            scheduler_name="hami-scheduler",
            unschedulable_timeout=0.3,
            count_foreign_pods=False,
        )
        try:
            for workload in (71, 72):
                await made.start(make_job(workload, [("node-h", [0], 0.5)]))
            shares = [
                hami_allocation(pod)
                for workload in (71, 72)
                for pod in await pods_of(cluster, workload)
            ]
            assert [memory for ((_, memory, _),) in shares] == [20480, 20480]
            assert {device for ((device, _, _),) in shares} <= {"GPU-node-h-0", "GPU-node-h-1"}
            for number in range(2):  # another team's HAMi pods fill what is left
                fake.call(
                    fake._create,
                    "pods",
                    "other",
                    {
                        "metadata": {"name": f"theirs-{number}"},
                        "spec": {
                            "schedulerName": "hami-scheduler",
                            "nodeSelector": {HOSTNAME: "node-h"},
                            "containers": [
                                {
                                    "name": "main",
                                    "image": "theirs",
                                    "resources": {"limits": {GPU: "1", GPUMEM: "20480"}},
                                }
                            ],
                        },
                    },
                )
            await made.start(make_job(73, [("node-h", [1], 0.5)]))
            [end] = await exits_of(made)
            assert end.workload_id == 73 and end.exit_code is None, end
            assert "Kubernetes found no node for its pod frachub-73-" in end.message
            assert "for 0.3 s: " in end.message
            assert "node node-h: CardInsufficientMemory" in end.message
            await eventually(lambda: cluster.jobs(f"{WORKLOAD}=73") == [], what="no Job left")
        finally:
            await made.close()

    run(scenario)
