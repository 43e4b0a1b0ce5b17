"""What each process of a gang on Kubernetes sees: every pod is its own torchrun "node".

The device plugin (and HAMi) show a pod only the GPUs it was given, so two replicas on one
node each see theirs as ``cuda:0``; the contract (scheduler/backends/kubernetes/jobs.py,
``job_environment``) is then ``LOCAL_RANK=0``, ``LOCAL_WORLD_SIZE=1``, with the gang's own
``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``, and a distinct physical GPU
per pod. The tests run each pod's real command line (the Job's shell prelude that turns
``JOB_COMPLETION_INDEX`` into ``RANK``) under ``/bin/sh`` with the pod's environment, so the
variables checked are the ones the process gets."""

from __future__ import annotations

import subprocess
from typing import Any

from scheduler.backends.kubernetes.gpus import GPU

from .conftest import Cluster, eventually, run
from .test_backend import limits_of, make_job, pods_of

TORCHRUN = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def process_env(pod: dict[str, Any]) -> dict[str, str]:
    """The environment the pod's process starts with: its command (``env`` in place of the
    program) run by /bin/sh with the pod's variables, as the container runtime would."""
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    env["PATH"] = "/usr/bin:/bin"
    out = subprocess.run(
        container["command"], env=env, capture_output=True, text=True, check=True, timeout=10
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def test_whole_gpu_gang_pods_are_each_a_torchrun_node(cluster: Cluster, backend: Any) -> None:
    fake = cluster.require_fake("reads the devices the fake's device plugin gave each pod")

    async def scenario() -> None:
        made = await backend()
        try:
            placement = [("node-a", [0], 1.0), ("node-a", [1], 1.0), ("node-b", [0], 1.0)]
            await made.start(make_job(61, placement, command=["env"]))
            pods = await pods_of(cluster, 61, 3)
            seen = {}
            for pod in pods:
                env = process_env(pod)
                seen[int(env["RANK"])] = (pod["spec"]["nodeName"], {k: env[k] for k in TORCHRUN})
                assert limits_of(pod) == {GPU: "1"}
            assert sorted(seen) == [0, 1, 2]
            for rank, (_node, env) in seen.items():
                assert env == {
                    "RANK": str(rank),
                    "WORLD_SIZE": "3",
                    "LOCAL_RANK": "0",  # cuda:0 is the pod's one GPU
                    "LOCAL_WORLD_SIZE": "1",
                    "MASTER_ADDR": "frachub-61-0-g0-0.frachub-61-0",  # rank 0's pod
                    "MASTER_PORT": "29500",
                }
            assert [seen[r][0] for r in range(3)] == ["node-a", "node-a", "node-b"]
            devices = [tuple(fake.devices(p["metadata"]["uid"])) for p in pods]
            assert all(len(d) == 1 for d in devices) and len(set(devices)) == 3  # no duplicate
            rank0 = next(p for p in pods if process_env(p)["RANK"] == "0")
            assert rank0["spec"]["hostname"] == "frachub-61-0-g0-0"  # MASTER_ADDR's pod
            assert rank0["spec"]["subdomain"] == "frachub-61-0"
        finally:
            await made.close()

    run(scenario)


def test_a_fractional_gang_on_one_node_sees_each_its_own_share(
    cluster: Cluster, backend: Any
) -> None:
    """Reservation mode could show both pods both UUIDs; they are shown their own only (a
    process never sees a GPU that is not its own), with the same torchrun variables."""
    cluster.require_fake("reads the pods' environment")

    async def scenario() -> None:
        made = await backend()
        try:
            await made.start(
                make_job(62, [("node-a", [2], 0.5), ("node-a", [1], 0.5)], command=["env"])
            )
            pods = await pods_of(cluster, 62, count=2)
            # the inventory reads the reserved UUIDs from the backend's pod watch, which may
            # show the reservation pods' annotations after the API does
            await eventually(
                lambda: (
                    not any(
                        made.inventory().uuid("node-a", i).startswith("GPU-unreserved-")
                        for i in (1, 2)
                    )
                ),
                what="both reserved UUIDs in the backend's inventory",
            )
            uuid_of = made.inventory().uuid
            by_rank = {int(e["RANK"]): e for e in map(process_env, pods)}
            assert sorted(by_rank) == [0, 1]
            for rank, index in ((0, 2), (1, 1)):
                env = by_rank[rank]
                assert env["NVIDIA_VISIBLE_DEVICES"] == uuid_of("node-a", index)
                assert env["FRACHUB_GPU_UUIDS"] == uuid_of("node-a", index)
                assert (env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"], env["WORLD_SIZE"]) == (
                    "0",
                    "1",
                    "2",
                )
        finally:
            await made.close()

    run(scenario)
