"""CPU and memory on Kubernetes, through the fake API server the real clients talk to: the
inventory offers each node's allocatable CPU and memory less what other teams' pods request,
and a job's pods request and are limited to the CPU and memory it asked for."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduler.backends.kubernetes.gpus import GPU
from scheduler.backends.kubernetes.labels import HOSTNAME

from .conftest import Cluster, eventually, run
from .test_backend import make_job, pods_of


def resources(made: Any, node: str) -> tuple[int | None, int | None]:
    found = {n.name: n for n in made.inventory().nodes}[node]
    return found.cpu_milli, found.memory_mib


def test_nodes_offer_their_allocatable_less_what_other_pods_request(
    cluster: Cluster, backend: Any
) -> None:
    fake = cluster.require_fake("adds a node of known size and another team's pod")
    fake.call(fake._put_namespace, "other-team")

    async def scenario() -> None:
        made = await backend()
        try:
            assert resources(made, "node-a") == (64_000, 512 * 1024)  # "64", "512Gi"
            fake.call(
                fake._create,
                "pods",
                "other-team",
                {
                    "metadata": {"name": "their-service"},
                    "spec": {
                        "nodeSelector": {HOSTNAME: "node-a"},
                        "initContainers": [
                            {"name": "setup", "resources": {"requests": {"cpu": "6"}}}
                        ],
                        "containers": [
                            {"name": "a", "resources": {"requests": {"cpu": "2500m"}}},
                            {
                                "name": "b",
                                "resources": {"requests": {"cpu": "1", "memory": "8Gi"}},
                            },
                        ],
                    },
                },
            )
            # the largest of the containers together (3.5 cores) and the init container (6)
            await eventually(
                lambda: resources(made, "node-a") == (58_000, 504 * 1024),
                what="node-a less the other team's requests",
            )
            job = replace(make_job(51, [("node-a", [0], 1.0)]), cpu_milli=1500, memory_mib=1024)
            await made.start(job)
            await pods_of(cluster, 51)
            assert resources(made, "node-a") == (58_000, 504 * 1024)  # FracHub's own: engine's
            fake.call(fake._delete_now, "pods", "other-team", "their-service")
            await eventually(
                lambda: resources(made, "node-a") == (64_000, 512 * 1024),
                what="node-a whole again",
            )
        finally:
            await made.close()

    run(scenario)


def test_a_jobs_pods_request_and_are_limited_to_what_it_asked(
    cluster: Cluster, backend: Any
) -> None:
    node = cluster.node(0)

    async def scenario() -> None:
        made = await backend()
        try:
            job = replace(make_job(52, [(node, [0], 1.0)]), cpu_milli=1500, memory_mib=16384)
            await made.start(job)
            (pod,) = await pods_of(cluster, 52)
            asked = pod["spec"]["containers"][0]["resources"]
            assert asked["requests"] == {"cpu": "1500m", "memory": "16Gi"}
            assert asked["limits"] == {GPU: "1", "cpu": "1500m", "memory": "16Gi"}
            plain = make_job(53, [(node, [0], 0.5)])  # asked for neither: nothing set
            await made.start(plain)
            (pod,) = await pods_of(cluster, 53)
            assert pod["spec"]["containers"][0].get("resources") in ({}, None)
        finally:
            await made.close()

    run(scenario)
