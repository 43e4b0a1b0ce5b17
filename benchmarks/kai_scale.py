"""KAI's nightly scale tests, end to end through FracHub (docs/benchmarks.md, "KAI's scale tests").

KAI publishes its scale tests' results (kai-scheduler/KAI-Scheduler, ``docs/scale-tests/``,
``test/e2e/scale/kwok_test.go``): 500 KWOK nodes of 8 GPUs, the pods of each test created
through the Kubernetes API, timed until they are scheduled. This runs the same shapes through
the real ``frachub service`` (Kubernetes backend) behind a real JupyterHub, against the
fake Kubernetes API server of the tests (tests/kube/fakeapi.py) in a process of its own
(tests/kube/fakeproc.py), which runs no containers: a pod bound to a node becomes Running at
once, as KWOK's pods do. Every submission is a ``POST workloads`` through the hub's proxy
with a user's token; the clock stops when the fake API server shows every pod of the test
Running.

    fill      4,000 single-GPU jobs in one project; from the first POST until all run
              (KAI: 6 m 37.8 s, timed from enabling its scheduler after the pods exist)
    reclaim   the cluster full of 4,000 single-GPU jobs of a project that deserves nothing
              and borrows everything; a project deserving the whole cluster submits one
              1-GPU job, ten times in turn; mean time from POST until it runs (KAI: 13.9 s)
    large     the cluster full of 500 whole-node (8-GPU) jobs of that borrowing project;
              the other submits one 500-replica gang of 8 GPUs each; from POST until all
              500 replicas run (KAI: 85 s)
    topology  512 nodes in 4 zones x 8 blocks x 8 racks x 2 nodes; one 512-replica gang of
              2 GPUs each, preferring a rack; from POST until all run (KAI: 48.7 s)

    python benchmarks/kai_scale.py                      # all four, 500 nodes, 3 runs each
    python benchmarks/kai_scale.py --test fill --runs 5
    python benchmarks/kai_scale.py --nodes 4 --runs 1 --json    # the CI-sized run
    python benchmarks/kai_scale.py --test large --engine-only   # the victims' cycle alone, CPU

At ``--nodes N`` the shapes scale as KAI's do with its NODE_COUNT: fill and reclaim use
N x 8 single-GPU jobs, large an N-replica gang; topology keeps KAI's 512 nodes in a
4 x 8 x 8 x 2 tree from ``--nodes 500`` up (KAI's topology test, like its others, runs on
its 500-node setting), and below that shrinks to N/2 racks of 2 nodes (one zone, one block).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from hubharness import API_PATH, Hub, ServiceProcess  # noqa: E402
from kube.conftest import SERVICE_CONFIG  # noqa: E402
from kube.fakeproc import FakeProcess  # noqa: E402

from scheduler.backends.kubernetes.labels import (  # noqa: E402
    COMPONENT,
    MANAGED_SELECTOR,
    TRAINING,
    WORKLOAD,
)

NAMESPACE = "default"
GPUS_PER_NODE = 8
KAI = {
    "fill": 397.77,  # "Fill Cluster with single GPU Jobs", 6m37.770565662s
    "reclaim": 13.93,  # "Measuring reclaim time for single GPU", mean of 10
    "large": 85.0,  # "Reclaim time for one very large job", 500 pods x 8 GPUs
    "topology": 48.72,  # "Allocate with preferred topology", 512 pods
}
"""KAI's figures (seconds), docs/scale-tests/example-results.json, run of 2026-07-03."""
TESTS = tuple(KAI)
ZONE, BLOCK, RACK = (
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "nvidia.com/gpu.clique",
)
"""KAI's three topology levels (zone, block, rack) on the three node labels FracHub reads."""


def service_config(kubeconfig: str, capacity: int, job_tokens: bool = True) -> str:
    """The service as tests/kube runs it, with KAI's two queues: ``sanity`` deserves nothing
    and may borrow the whole cluster (KAI: quota 0, over-quota weight 0, no limit), ``reclaim``
    deserves it all (KAI: quota -1, its whole parent)."""
    queues = [
        {"name": "sanity", "deserved_gpus": 0},
        {"name": "reclaim", "deserved_gpus": capacity},
    ]
    return (
        SERVICE_CONFIG.format(kubeconfig=kubeconfig, namespace=NAMESPACE)
        + f"""
c.FracHubService.queues = {queues!r}
c.FracHubService.grace_period = 1
c.FracHubService.page_max_limit = 1000
c.KubernetesBackend.unschedulable_timeout = 600.0
c.Application.log_level = "WARN"
c.FracHubService.job_tokens = {job_tokens!r}
"""
    )


def topology_nodes(nodes: int) -> list[tuple[str, dict[str, str]]]:
    """KAI's topology tree (4 zones x 8 blocks x 8 racks x 2 nodes), or a single zone and
    block of nodes/2 racks when fewer nodes are asked for."""
    zones, blocks, racks = (4, 8, 8) if nodes >= 500 else (1, 1, max(1, nodes // 2))
    made = []
    for z in range(zones):
        for b in range(blocks):
            for r in range(racks):
                for n in range(2):
                    labels = {ZONE: f"zone-{z}", BLOCK: f"block-{z}-{b}", RACK: f"rack-{z}-{b}-{r}"}
                    made.append((f"kwok-{z}-{b}-{r}-{n}", labels))
    return made


class Fake:
    """The fake API server's process, and its one read the benchmark polls."""

    def __init__(self, process: FakeProcess) -> None:
        self.process = process
        self.client = httpx.AsyncClient(timeout=60)
        self.url = process.running_url(
            NAMESPACE, f"{MANAGED_SELECTOR},{COMPONENT}={TRAINING}", WORKLOAD
        )

    async def running(self, workload_ids: Iterable[int] | None = None) -> list[str]:
        """The nodes of FracHub's training pods the fake shows Running (not being deleted),
        of ``workload_ids`` when given (one cheap read: ``/_fake/running``)."""
        wanted = None if workload_ids is None else {str(i) for i in workload_ids}
        body = (await self.client.get(self.url)).json()
        return [node for node, workload in body["running"] if wanted is None or workload in wanted]


async def until(
    check: Callable[[], Awaitable[bool]], timeout: float, what: str, interval: float = 0.2
) -> float:
    """Poll ``check`` until true; the monotonic time."""
    deadline = time.monotonic() + timeout
    while True:
        if await check():
            return time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        await asyncio.sleep(interval)


async def submit_many(
    client: httpx.AsyncClient, bodies: list[dict[str, Any]], concurrency: int = 16
) -> list[int]:
    """POST every body (``concurrency`` in flight); the workload ids, in order."""
    ids: list[int] = [0] * len(bodies)
    todo = list(enumerate(bodies))

    async def worker() -> None:
        while todo:
            index, body = todo.pop()
            response = await client.post("workloads", json=body)
            if response.status_code != 201:
                raise RuntimeError(f"POST workloads {body}: {response.status_code} {response.text}")
            ids[index] = response.json()["id"]

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return ids


def jobs(count: int, gpus: int, name: str, replicas: int = 1) -> list[dict[str, Any]]:
    body: dict[str, Any] = {"command": "sleep infinity", "gpus": gpus}
    if replicas > 1:
        body["replicas"] = replicas
    return [{**body, "name": f"{name}-{i}"} for i in range(count)]


async def fill_cluster(
    fake: Fake, sanity: httpx.AsyncClient, count: int, gpus: int, timeout: float
) -> tuple[float, float]:
    """Submit ``count`` jobs of ``gpus`` GPUs as the sanity project and wait until all run:
    (seconds from the first POST until all run, seconds the POSTs took)."""
    began = time.monotonic()
    await submit_many(sanity, jobs(count, gpus, f"fill{gpus}"))
    posted = time.monotonic() - began

    async def full() -> bool:
        return len(await fake.running()) >= count

    done = await until(full, timeout, f"{count} jobs running")
    return done - began, posted


async def one_test(
    test: str,
    nodes: int,
    hub: Hub,
    users: dict[str, str],
    work: Path,
    timeout: float,
    job_tokens: bool = True,
    profile: bool = False,
) -> dict[str, Any]:
    """One run of ``test`` on a fresh fake cluster and a fresh service: its figures, with
    the CPU seconds the service, the hub and the fake API server used during it. ``profile``: the
    service and the fake run under cProfile, their profiles written to ``work/service.prof``
    and ``work/fake.prof``."""
    if test == "topology":
        layout = topology_nodes(nodes)
    else:
        layout = [(f"kwok-{n:04d}", {}) for n in range(nodes)]
    capacity = len(layout) * GPUS_PER_NODE
    work.mkdir(parents=True, exist_ok=True)
    (work / "nodes.json").write_text(json.dumps(layout))
    kubeconfig = str(work / "kubeconfig")
    with FakeProcess(
        kubeconfig,
        "--layout",
        str(work / "nodes.json"),
        "--gpus",
        str(GPUS_PER_NODE),
        "--namespace",
        NAMESPACE,
        log=str(work / "fake.log"),
        profile=str(work / "fake.prof") if profile else "",
    ) as process:
        fake = Fake(process)
        config = service_config(kubeconfig, capacity, job_tokens)
        command = None
        if profile:
            config_file = str(work / "service" / "frachub_config.py")
            profiled = ["-m", "cProfile", "-o", str(work / "service.prof")]
            command = [sys.executable, *profiled, "-m", "hub_ext.cli", "service"]
            command += ["--config", config_file]
        with ServiceProcess(
            hub,
            config,
            work / "service",
            env={"KUBECONFIG": kubeconfig},
            start_timeout=120,
            command=command,
        ) as service:

            def client(user: str) -> httpx.AsyncClient:
                return httpx.AsyncClient(
                    base_url=hub.service_url(API_PATH),
                    headers={"Authorization": f"token {users[user]}"},
                    timeout=timeout,
                    limits=httpx.Limits(max_connections=16),
                )

            assert service.proc is not None and hub.proc is not None
            pids = {"service": service.proc.pid, "hub": hub.proc.pid}
            cpu = {name: cpu_seconds(pid) for name, pid in pids.items()}
            cpu["fake"] = process.cpu_seconds()
            async with client("kai-sanity") as sanity, client("kai-reclaim") as reclaim:
                if test in ("reclaim", "large"):
                    watched = Watched(service.proc.pid, hub.service_url("metrics"))
                    run = run_reclaim if test == "reclaim" else run_large
                    result = await run(fake, sanity, reclaim, layout, timeout, watched)
                else:
                    result = await TESTS_RUN[test](fake, sanity, reclaim, layout, timeout)
            for name, pid in pids.items():
                result[f"{name}_cpu_seconds"] = round(cpu_seconds(pid) - cpu[name], 1)
            result["fake_cpu_seconds"] = round(process.cpu_seconds() - cpu["fake"], 1)
            await fake.client.aclose()
            return result


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


Layout = list[tuple[str, dict[str, str]]]


async def run_fill(
    fake: Fake,
    sanity: httpx.AsyncClient,
    reclaim: httpx.AsyncClient,
    layout: Layout,
    timeout: float,
) -> dict[str, Any]:
    capacity = len(layout) * GPUS_PER_NODE
    seconds, posted = await fill_cluster(fake, sanity, capacity, 1, timeout)
    return {"seconds": seconds, "jobs": capacity, "post_seconds": posted}


def metric_values(text: str, name: str) -> dict[str, float]:
    """The samples of metric ``name`` in Prometheus text: {labels as written: value}."""
    values = {}
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
            key, _, value = line[len(name) :].rpartition(" ")
            values[key.strip()] = float(value)
    return values


class Watched(NamedTuple):
    """The service as ``settle`` watches it: its process and its metrics' URL."""

    pid: int
    metrics_url: str


async def settle(
    client: httpx.AsyncClient, service: Watched, running: int, timeout: float
) -> float:
    """Wait until the service has absorbed what came before: its metrics show ``running``
    workloads running and none in another active state, no cycle ran in the last second,
    and the service used under 10% of a core in that second (the fill's last watch
    events, token requests and store writes are done). The monotonic time it was so."""

    async def settled() -> bool:
        before = cpu_seconds(service.pid)
        first = (await client.get(service.metrics_url)).text
        await asyncio.sleep(1.0)
        second = (await client.get(service.metrics_url)).text
        busy = cpu_seconds(service.pid) - before
        states = metric_values(second, "frachub_active_workloads")
        cycles = [metric_values(t, "frachub_cycle_duration_seconds_count") for t in (first, second)]
        others = sum(v for k, v in states.items() if 'state="running"' not in k)
        return (
            states.get('{state="running"}') == running
            and others == 0
            and cycles[0] == cycles[1]
            and busy < 0.1
        )

    return await until(settled, timeout, "the service settled", 0.0)


async def run_reclaim(
    fake: Fake,
    sanity: httpx.AsyncClient,
    reclaim: httpx.AsyncClient,
    layout: Layout,
    timeout: float,
    service: Watched | None = None,
) -> dict[str, Any]:
    """Fill, wait until the service has settled (reported as ``settle_seconds``, from all
    running to settled), then ten reclaims, each from its POST until its pod runs; the
    next one once the cluster is full again (its victim's replacement is not waited
    for: KAI's victims are not replaced either)."""
    capacity = len(layout) * GPUS_PER_NODE
    await fill_cluster(fake, sanity, capacity, 1, timeout)
    full = time.monotonic()
    settled = full if service is None else await settle(reclaim, service, capacity, timeout)
    samples: list[float] = []
    decided: list[float] = []
    for i in range(10):
        began = time.monotonic()
        [wid] = await submit_many(reclaim, jobs(1, 1, f"reclaim-{i}"), 1)

        async def runs(wid: int = wid) -> bool:
            return bool(await fake.running([wid]))

        done = await until(runs, timeout, f"reclaim {i}", 0.02)
        samples.append(done - began)
        decided.append(await submitted_to_started(reclaim, wid))
    return {
        "seconds": statistics.mean(samples),
        "samples": [round(s, 3) for s in samples],
        "to_started": [round(s, 3) for s in decided],
        "running_jobs": capacity,
        "settle_seconds": round(settled - full, 2),
    }


async def submitted_to_started(client: httpx.AsyncClient, wid: int) -> float:
    """Seconds from the workload's ``submitted`` event to its ``started`` one, in the
    service's own clock: the cycles, the victim's eviction, its stop and the poll that sees
    it gone. The rest of a sample is the POST's way in, the launch (a Job, its admission)
    and the pod's start as the benchmark sees it."""
    events = (await client.get(f"workloads/{wid}")).json()["events"]
    at = {e["type"]: datetime.fromisoformat(e["time"].replace("Z", "+00:00")) for e in events}
    return (at["started"] - at["submitted"]).total_seconds()


async def run_large(
    fake: Fake,
    sanity: httpx.AsyncClient,
    reclaim: httpx.AsyncClient,
    layout: Layout,
    timeout: float,
    service: Watched | None = None,
) -> dict[str, Any]:
    """Fill with whole-node jobs, wait until the service has settled (as for reclaim: KAI
    waits for its reclaimees' pods), then the gang, from its POST until all its replicas
    run. ``engine_cpu_seconds``: the CPU the service's engine spent meanwhile (its
    ``/metrics``): the cycle that picks 500 victims for the gang is most of the time until
    the victims are stopped."""
    replicas = len(layout)
    await fill_cluster(fake, sanity, replicas, GPUS_PER_NODE, timeout)
    full = time.monotonic()
    settled = full if service is None else await settle(reclaim, service, replicas, timeout)
    engine_before = await engine_cpu(reclaim, service)
    began = time.monotonic()
    [wid] = await submit_many(reclaim, jobs(1, GPUS_PER_NODE, "large", replicas), 1)

    phases: dict[str, float] = {}

    async def all_run() -> bool:
        everything = await fake.running()
        gang = len(await fake.running([wid]))
        now = time.monotonic() - began
        if len(everything) == gang:  # no victim left running
            phases.setdefault("victims_gone_seconds", round(now, 2))
        if gang:
            phases.setdefault("first_replica_seconds", round(now, 2))
        return gang >= replicas

    done = await until(all_run, timeout, f"{replicas} replicas running")
    engine = await engine_cpu(reclaim, service)
    return {
        "seconds": done - began,
        "replicas": replicas,
        "gpus": replicas * GPUS_PER_NODE,
        **phases,
        "to_started": round(await submitted_to_started(reclaim, wid), 2),
        "settle_seconds": round(settled - full, 2),
        **(
            {"engine_cpu_seconds": round(engine - engine_before, 2)}
            if engine is not None and engine_before is not None
            else {}
        ),
    }


async def engine_cpu(client: httpx.AsyncClient, service: Watched | None) -> float | None:
    """The CPU seconds the service's engine has spent so far (``/metrics``), or None."""
    if service is None:
        return None
    text = (await client.get(service.metrics_url)).text
    return sum(metric_values(text, "frachub_engine_cpu_seconds_total").values())


async def run_topology(
    fake: Fake,
    sanity: httpx.AsyncClient,
    reclaim: httpx.AsyncClient,
    layout: Layout,
    timeout: float,
) -> dict[str, Any]:
    replicas = len(layout)
    began = time.monotonic()
    [wid] = await submit_many(sanity, jobs(1, 2, "topo", replicas), 1)

    async def all_run() -> bool:
        return len(await fake.running([wid])) >= replicas

    done = await until(all_run, timeout, f"{replicas} replicas running")
    rack_of = {name: labels[RACK] for name, labels in layout}
    racks = {rack_of[node] for node in await fake.running([wid])}
    return {
        "seconds": done - began,
        "replicas": replicas,
        "racks_used": len(racks),
        "racks_needed": -(-replicas * 2 // (2 * GPUS_PER_NODE)),
    }


TESTS_RUN = {"fill": run_fill, "reclaim": run_reclaim, "large": run_large, "topology": run_topology}


def large_decision(nodes: int) -> dict[str, Any]:
    """The engine alone on the large test's moment of decision: ``nodes`` nodes of 8 GPUs,
    each held by one 8-GPU job of the borrowing project, and the claimant's gang of
    ``nodes`` replicas arriving; one cycle (``run_cycle``, the service's default scorer)
    timed in CPU seconds. No service, hub or fake: what this costs is the engine's share
    of the time until the victims are stopped, measured apart from the load."""
    from scheduler.common.placement import GpuShare, ReplicaPlacement
    from scheduler.engine.cycle import run_cycle
    from scheduler.engine.model import (
        Evict,
        Kind,
        Node,
        Queue,
        Request,
        Snapshot,
        State,
        Workload,
        default_priority,
    )
    from scheduler.engine.placement import scorer_named
    from scheduler.engine.session import Policy

    machines = tuple(Node(f"kwok-{n:04d}", GPUS_PER_NODE) for n in range(nodes))
    queues = (
        Queue("sanity", deserved_gpus=0),
        Queue("reclaim", deserved_gpus=nodes * GPUS_PER_NODE),
    )
    priority = default_priority(Kind.TRAINING, True)
    whole = tuple(GpuShare(g, 1000) for g in range(GPUS_PER_NODE))
    workloads = [
        Workload(
            name=str(n + 1),
            queue="sanity",
            kind=Kind.TRAINING,
            request=Request(gpus=GPUS_PER_NODE),
            priority=priority,
            preemptible=True,
            submitted_at=float(n),
            seq=n + 1,
            state=State.RUNNING,
            placement=(ReplicaPlacement(machine.name, whole),),
            started_at=1000.0 + n,
            start_seq=n + 1,
        )
        for n, machine in enumerate(machines)
    ]
    gang = Request(gpus=GPUS_PER_NODE, replicas=nodes)
    workloads.append(
        Workload(str(nodes + 1), "reclaim", Kind.TRAINING, gang, priority, True, 2000.0, nodes + 1)
    )
    snapshot = Snapshot(machines, queues, tuple(workloads))
    began = time.process_time()
    result = run_cycle(snapshot, 3000.0, Policy(scorer=scorer_named("frachub")))
    cpu = time.process_time() - began
    evicted = sum(isinstance(d, Evict) for d in result.decisions)
    return {"engine_cpu_seconds": round(cpu, 3), "evictions": evicted, "load": load()}


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f} / {five:.2f} (1 / 5 min) on {os.cpu_count()} CPUs"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--test", choices=(*TESTS, "all"), default="all")
    parser.add_argument("--nodes", type=int, default=500, help="KWOK-like nodes of 8 GPUs")
    parser.add_argument("--runs", type=int, default=3, help="runs of each test (median)")
    parser.add_argument("--timeout", type=float, default=1800, help="s per wait")
    parser.add_argument(
        "--no-job-tokens",
        action="store_true",
        help="jobs get no hub token of their own (FracHubService.job_tokens = False)",
    )
    parser.add_argument(
        "--hub-trusts-config-tokens",
        action="store_true",
        help="the hub hashes the service's config-given token once "
        "(JupyterHub.trust_user_provided_tokens), a hub admin's setting",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="profile the service and the fake (cProfile: service.prof, fake.prof)",
    )
    parser.add_argument(
        "--engine-only",
        action="store_true",
        help="large: time the engine's cycle that picks the victims, alone (CPU seconds)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.engine_only:
        print(json.dumps(large_decision(args.nodes)))
        return 0
    tests = TESTS if args.test == "all" else (args.test,)
    work = Path(tempfile.mkdtemp(prefix="frachub-kai-"))
    print(f"starting JupyterHub in {work}; load {load()}", file=sys.stderr)
    results: dict[str, Any] = {
        "nodes": args.nodes,
        "job_tokens": not args.no_job_tokens,
        "hub_trusts_config_tokens": args.hub_trusts_config_tokens,
        "load_before": load(),
    }
    hub_config = (
        "c.JupyterHub.trust_user_provided_tokens = True" if args.hub_trusts_config_tokens else ""
    )
    with Hub(work / "hub", extra_config=hub_config) as hub:
        users = {}
        for user, group in (("kai-sanity", "sanity"), ("kai-reclaim", "reclaim")):
            hub.create_user(user, groups=[group])
            users[user] = hub.token_for(user)
        for test in tests:
            runs = []
            for run in range(args.runs):
                result = asyncio.run(
                    one_test(
                        test,
                        args.nodes,
                        hub,
                        users,
                        work / f"{test}-{run}",
                        args.timeout,
                        not args.no_job_tokens,
                        args.profile,
                    )
                )
                print(f"{test} run {run + 1}: {json.dumps(result)}", file=sys.stderr, flush=True)
                runs.append(result)
            median = statistics.median(r["seconds"] for r in runs)
            results[test] = {
                "median_seconds": round(median, 3),
                "kai_seconds": KAI[test],
                "times_faster": round(KAI[test] / median, 1),
                "runs": runs,
            }
    results["load_after"] = load()
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for test in tests:
            r = results[test]
            print(
                f"{test:<9} median {r['median_seconds']:8.2f} s over {args.runs} run(s)   "
                f"KAI {r['kai_seconds']:7.2f} s   {r['times_faster']}x"
            )
        print(f"load before {results['load_before']}; after {results['load_after']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
