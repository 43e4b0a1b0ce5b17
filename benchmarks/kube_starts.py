"""The Kubernetes backend's start path alone (docs/benchmarks.md, "KAI's scale tests").

KAI's fill without the hub, the store and the engine: ``--jobs`` single-GPU starts through
``KubernetesBackend.start`` (16 at once, each with credentials, so a Secret too, as with
job tokens), job ``i`` on GPU ``i % 8`` of node ``i // 8``, against the fake API server in
a process of its own (``tests/kube/fakeproc.py``), while ``poll()`` and ``inventory()`` run
every 0.1 s as the service's loop calls them; until the fake shows every pod Running.
Reports the CPU per job of this process (the backend, its watches and polls) and of the
fake (``/proc``).

    python benchmarks/kube_starts.py                       # 500 nodes, 4,000 jobs
    python benchmarks/kube_starts.py --nodes 100 --jobs 800 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from kube.fakeproc import FakeProcess  # noqa: E402

from scheduler.backends.base import JobSpec  # noqa: E402
from scheduler.backends.kubernetes import KubernetesBackend  # noqa: E402
from scheduler.backends.kubernetes.labels import MANAGED_SELECTOR, WORKLOAD  # noqa: E402
from scheduler.common.placement import GpuShare, ReplicaPlacement  # noqa: E402

GPUS_PER_NODE = 8
AT_ONCE = 16
POLL_SECONDS = 0.1


def own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def job(i: int) -> JobSpec:
    node = f"kwok-{i // GPUS_PER_NODE:04d}"
    return JobSpec(
        workload_id=i + 1,
        name=f"fill-{i}",
        user="kai-sanity",
        project="sanity",
        command="sleep infinity",
        working_dir=None,
        env={},
        placement=(ReplicaPlacement(node, (GpuShare(i % GPUS_PER_NODE, 1000),)),),
        credentials={"JUPYTERHUB_API_TOKEN": "t" * 32, "FRACHUB_URL": "http://hub/"},
    )


async def run(nodes: int, jobs: int, timeout: float) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="frachub-kube-starts-"))
    kubeconfig = str(work / "kubeconfig")
    fake_args = ("--nodes", str(nodes), "--gpus", str(GPUS_PER_NODE), "--namespace", "default")
    with FakeProcess(kubeconfig, *fake_args, log=str(work / "fake.log")) as fake:
        backend = KubernetesBackend(
            kubeconfig=kubeconfig,
            namespace="default",
            image="busybox:1.36",
            home_volumes=[],
            home_volume_mounts=[],
            termination_grace_seconds=1,
            unschedulable_timeout=600.0,
        )
        await backend.connect()
        url = fake.running_url("default", MANAGED_SELECTOR, WORKLOAD)
        cpu, fake_cpu, began = own_cpu(), fake.cpu_seconds(), time.monotonic()
        limit = asyncio.Semaphore(AT_ONCE)
        polling = True

        async def start(i: int) -> None:
            async with limit:
                await backend.start(job(i))

        async def poll() -> None:
            while polling:
                await backend.poll()
                backend.inventory()
                await asyncio.sleep(POLL_SECONDS)

        poller = asyncio.create_task(poll())
        await asyncio.gather(*(start(i) for i in range(jobs)))
        started = time.monotonic() - began
        async with httpx.AsyncClient(timeout=60) as client:
            deadline = time.monotonic() + timeout
            while len((await client.get(url)).json()["running"]) < jobs:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{jobs} pods running: not within {timeout:.0f} s")
                await asyncio.sleep(0.2)
        running = time.monotonic() - began
        polling = False
        await poller
        result = {
            "nodes": nodes,
            "jobs": jobs,
            "starts_seconds": round(started, 1),
            "running_seconds": round(running, 1),
            "backend_cpu_ms_per_job": round((own_cpu() - cpu) / jobs * 1000, 2),
            "fake_cpu_ms_per_job": round((fake.cpu_seconds() - fake_cpu) / jobs * 1000, 2),
            "load": round(os.getloadavg()[0], 2),
        }
        await backend.close()
        return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=500, help="fake nodes of 8 GPUs")
    parser.add_argument("--jobs", type=int, default=0, help="single-GPU starts (default: all)")
    parser.add_argument("--timeout", type=float, default=1800, help="s until all run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    jobs = args.jobs or args.nodes * GPUS_PER_NODE
    result = asyncio.run(run(args.nodes, jobs, args.timeout))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{jobs} starts on {args.nodes} nodes: all running after "
            f"{result['running_seconds']} s; "
            f"CPU per job: backend {result['backend_cpu_ms_per_job']} ms, fake "
            f"{result['fake_cpu_ms_per_job']} ms; load {result['load']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
