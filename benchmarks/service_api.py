"""Throughput through the real API (docs/benchmarks.md, section 3).

Kueue's own performance test admits 15,000 workloads into 30 queues (about 351 s in its CI on
a real API server). This submits the same count through FracHub's REST API, on this machine,
with everything real: a JupyterHub with its configurable-http-proxy issues the tokens and
routes every request, the service checks each token with the hub, stores each workload in
SQLite before answering 201, runs the engine, and starts every workload that fits as a real
subprocess (``sleep``) through the local backend.

The cluster is a declared inventory (default 16 nodes x 8 GPUs = 128 GPUs); 30 projects of
one user each deserve 4 GPUs apiece; requests mix 0.25 / 0.5 / 1 GPU (50/30/20%), so a few
hundred fit and the rest queue. Measured:

- submission: wall time for all POSTs (``--concurrency`` in flight), POST latency p50/p99;
- time to settle: from the first POST until the last workload that fits has started (the
  largest ``started_at`` among running workloads, read back through the API);
- a reader polling ``GET workloads`` (one page, with the total) during the load: latency
  p50/p99;
- a notebook spawn every second during the load (``--notebook-every``): a user of the
  ``notebooks`` project asks for a 0.5-GPU share (``POST allocations``), long-polls it until
  it is granted, then releases it; from request to grant, p50/p99;
- the service's CPU time (user + system, from /proc) next to the wall time of the same span,
  since the machine is shared and wall time alone says little;
- every process's CPU during the submissions, per submission
  (``submit_cpu_ms_per_submission_by_part``): the service by thread, the jobs it started, the
  hub, its proxy, this client and the rest of the machine, with the load average: what of the
  2 cores is the service's;
- the service's resident memory at the end.

The 30 job projects sit in a department ``batch`` capped at the cluster less
``--notebook-gpus`` (default 4 of 128), and the ``notebooks`` project deserves those 4: the
way an operator keeps room for interactive work, so a notebook inside its quota starts on
idle GPUs instead of waiting out a reclaim's grace period.

    nice -n 10 .venv/bin/python benchmarks/service_api.py       # 15,000 workloads
    .venv/bin/python benchmarks/service_api.py --workloads 1000 --json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from hubharness import API_PATH, Hub, ServiceProcess, descendants  # noqa: E402

PAGINATED = {"Accept": "application/jupyterhub-pagination+json"}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


NOTEBOOK_USER = "bench-notebook"


def service_config(args: argparse.Namespace) -> str:
    capacity = args.nodes * args.gpus_per_node
    batch: dict = {"name": "batch"}
    if not args.no_batch_cap:
        batch["limit_gpus"] = capacity - args.notebook_gpus
    queues = [batch]
    queues += [
        {"name": f"p{i:02d}", "parent": "batch", "deserved_gpus": args.deserved}
        for i in range(args.projects)
    ]
    queues.append(
        {"name": "notebooks", "deserved_gpus": args.notebook_gpus, "members": [NOTEBOOK_USER]}
    )
    nodes = [
        {"name": f"node-{n:02d}", "gpus": args.gpus_per_node, "gpu_memory_gib": 80}
        for n in range(args.nodes)
    ]
    return "\n".join(
        [
            f"c.FracHubService.queues = {queues!r}",
            "c.FracHubService.page_max_limit = 1000",
            'c.LocalBackend.inventory_source = "declared"',
            f"c.LocalBackend.declared_inventory = {nodes!r}",
            "c.LocalBackend.run_as_user = False",
            "c.FracHubService.grace_period = 1",
            f"c.FracHubService.interactive_reserve_gpus = {args.reserve!r}",
            f"c.FracHubService.job_tokens = {not args.no_job_tokens!r}",
            'c.Application.log_level = "WARN"',
            *THREAD_NAMES,
            *profile_lines(args.profile),
        ]
    )


THREAD_NAMES = [
    "import ctypes as _ctypes, threading as _threading",
    "_prctl, _inner = _ctypes.CDLL(None).prctl, _threading.Thread._bootstrap_inner",
    "def _named(thread): _prctl(15, thread.name.encode()[:15], 0, 0, 0); _inner(thread)",
    "_threading.Thread._bootstrap_inner = _named",
]
"""Config lines that give each of the service's threads its Python name as its Linux name
(``/proc/PID/task/TID/comm``; Python 3.11 does not), so that ``cpu_parts`` can tell the
engine's thread from the store's writer. Benchmark only: PR_SET_NAME on the new thread."""


def profile_lines(path: str | None) -> list[str]:
    """Config lines that profile the service's event-loop thread with cProfile from start-up
    to exit (SIGTERM stops it cleanly) and write the stats to ``path`` (``--profile``): where
    the CPU per request goes. It counts the thread's CPU time (``time.thread_time``), not wall
    time, in which a socket write or an SQLite statement would include the wait for the
    interpreter lock. cProfile sees the thread that enables it, which is the one that answers
    requests; the engine's worker thread is measured by its own metric. The profiler costs
    the service about as much CPU again, so the run's own figures do not count."""
    if not path:
        return []
    return [
        "import atexit, cProfile, time",
        "_profile = cProfile.Profile(time.thread_time)",
        "_profile.enable()",
        f"atexit.register(_profile.dump_stats, {str(Path(path).resolve())!r})",
    ]


class LeanConnection:
    """One keep-alive HTTP/1.1 connection that POSTs JSON and reads the answer, with nothing
    else: the submissions' client for ``--lean-client``. httpx spent about 0.9 ms of CPU a
    request on this machine's 2 cores, which the service, the hub and the proxy share: a
    load generator that costs less leaves more of them to the system measured (the requests
    still go through the proxy with a user's token, and every answer is checked)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.path = parts.path
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def post(self, path: str, token: str, body: dict) -> tuple[int, bytes]:
        if self.streams is None:
            self.streams = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.streams
        data = json.dumps(body).encode()
        writer.write(
            f"POST {self.path}{path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Authorization: token {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in lines[1:] if line)
        }
        if "content-length" in headers:
            answer = await reader.readexactly(int(headers["content-length"]))
        else:  # chunked
            answer = b""
            while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
                answer += (await reader.readexactly(size + 2))[:-2]
            await reader.readuntil(b"\r\n")
        if headers.get("connection", "").lower() == "close":
            writer.close()
            self.streams = None
        return status, answer

    def close(self) -> None:
        if self.streams is not None:
            self.streams[1].close()


async def submit_all(
    clients: list[httpx.AsyncClient], args: argparse.Namespace, tokens: list[str], url: str
) -> tuple[list[float], float, float]:
    rng = random.Random(args.seed)
    sizes = rng.choices([0.25, 0.5, 1], weights=[50, 30, 20], k=args.workloads)
    latencies: list[float] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(args.workloads):
        queue.put_nowait(i)
    progress = {"done": 0}

    async def worker() -> None:
        lean = LeanConnection(url) if args.lean_client else None
        while not queue.empty():
            i = queue.get_nowait()
            body = {"command": f"sleep {args.sleep}", "gpus": sizes[i], "name": f"bench-{i}"}
            began = time.perf_counter()
            if lean is None:
                response = await clients[i % len(clients)].post("workloads", json=body)
                status, text = response.status_code, response.text
            else:
                status, answer = await lean.post("workloads", tokens[i % len(tokens)], body)
                text = answer.decode()
            latencies.append(time.perf_counter() - began)
            if status != 201 or json.loads(text)["name"] != body["name"]:
                raise RuntimeError(f"submission {i}: {status} {text}")
            progress["done"] += 1
            if progress["done"] % 1000 == 0:
                print(f"  submitted {progress['done']:,}", file=sys.stderr, flush=True)
        if lean is not None:
            lean.close()

    first = time.time()
    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    return latencies, first, time.perf_counter() - began


async def read_while(client: httpx.AsyncClient, stop: asyncio.Event) -> list[float]:
    latencies: list[float] = []
    while not stop.is_set():
        began = time.perf_counter()
        response = await client.get("workloads?limit=50", headers=PAGINATED)
        latencies.append(time.perf_counter() - began)
        response.raise_for_status()
        await asyncio.sleep(0.2)
    return latencies


async def running_workloads(client: httpx.AsyncClient) -> list[dict]:
    found, offset = [], 0
    while True:
        response = await client.get(
            f"workloads?state=running&limit=1000&offset={offset}", headers=PAGINATED
        )
        response.raise_for_status()
        page = response.json()
        found.extend(page["items"])
        if page["_pagination"]["next"] is None:
            return found
        offset += 1000


async def settle(admin: httpx.AsyncClient, quiet_seconds: float) -> list[dict]:
    """Wait until the number of running workloads has not changed for ``quiet_seconds``."""
    last, since = -1, time.monotonic()
    while True:
        queues = (await admin.get("queues")).json()
        # the job projects only: the notebooks come and go every second
        running = sum(queue["running"] for queue in queues if queue["parent"] == "batch")
        if running != last:
            last, since = running, time.monotonic()
            print(f"  running {running:,}", file=sys.stderr, flush=True)
        elif time.monotonic() - since > quiet_seconds:
            return await running_workloads(admin)
        await asyncio.sleep(0.5)


async def spawn_notebooks(
    client: httpx.AsyncClient, every: float, stop: asyncio.Event
) -> tuple[list[float], list[float]]:
    """A notebook spawn every ``every`` seconds until ``stop``: ask for a share, wait until it
    is granted (long-poll, as the spawner does), release it. Seconds from request to grant
    as the client saw them, and as the service recorded them (its ``submitted`` and
    ``allocated`` events: the scheduler's part, without the proxy, the hub's token check and
    the queueing of a starved process)."""
    grants: list[float] = []
    recorded: list[float] = []
    n = 0
    while not stop.is_set():
        n += 1
        began = time.perf_counter()
        response = await client.post(
            "allocations", json={"gpus": 0.5, "server_name": f"s{n}", "project": "notebooks"}
        )
        if response.status_code != 201:
            raise RuntimeError(f"notebook {n}: {response.status_code} {response.text}")
        allocation = response.json()
        while allocation["state"] == "pending":
            response = await client.get(
                f"allocations/{allocation['id']}?wait=30&version={allocation['version']}"
            )
            response.raise_for_status()
            allocation = response.json()
        if allocation["state"] != "running":
            raise RuntimeError(f"notebook {n} ended {allocation['state']}: {allocation}")
        grants.append(time.perf_counter() - began)
        (await client.delete(f"allocations/{allocation['id']}")).raise_for_status()
        events = (await client.get(f"workloads/{allocation['id']}")).json()["events"]
        times = {event["type"]: stamp(event["time"]) for event in events}
        recorded.append(times["allocated"] - times["submitted"])
        await asyncio.sleep(max(0.0, every - (time.perf_counter() - began)))
    return grants, recorded


FAST_PATH_SECONDS = 0.05
"""A grant recorded this soon after the submission, with no eviction for it, was the fast
path's: a cycle's grant comes after the cycle's spacing (twice the last cycle's length) and
its decision, never this soon under this load."""


def notebook_timelines(database: Path) -> list[dict]:
    """Each notebook's way to its grant, from the store's events (read after the service
    stopped): how it was granted, and, when work was evicted for it, the three parts of its
    wait: until the cycle that evicted (``decide``), the victims' grace period and the
    backend noticing them gone (``grace_exit``: the last victim's ``preempting`` to its
    ``requeued``), and until the notebook started on what they freed (``claim``)."""
    import sqlite3

    with sqlite3.connect(database) as db:
        notebooks = db.execute(
            "SELECT w.id, e.type, e.time FROM workloads w JOIN events e ON e.workload_id = w.id"
            " WHERE w.kind = 'interactive' AND e.type IN ('submitted', 'allocated')"
        ).fetchall()
        victims = db.execute(
            "SELECT p.workload_id, p.time, (SELECT MIN(r.time) FROM events r WHERE"
            " r.workload_id = p.workload_id AND r.time >= p.time AND r.type = 'requeued')"
            " FROM events p WHERE p.type = 'preempting' AND p.message LIKE '%for notebooks/%'"
        ).fetchall()
    times: dict[int, dict[str, float]] = {}
    for workload_id, kind, at in notebooks:
        times.setdefault(workload_id, {})[kind] = at
    rows = []
    for workload_id, seen in sorted(times.items()):
        if "allocated" not in seen:
            continue
        submitted, granted = seen["submitted"], seen["allocated"]
        # notebooks come one at a time, so the evictions between its request and its grant
        # were for it
        mine = [(p, r) for _, p, r in victims if submitted <= p <= granted]
        row: dict = {"id": workload_id, "recorded_ms": ms(granted - submitted)}
        if mine:
            first = min(p for p, _ in mine)
            gone = max((r for _, r in mine if r is not None), default=granted)
            row.update(
                path="evicted",
                victims=len(mine),
                decide_ms=ms(first - submitted),
                grace_exit_ms=ms(gone - first),
                claim_ms=ms(granted - gone),
            )
        elif granted - submitted < FAST_PATH_SECONDS:
            row["path"] = "fast path"
        else:
            row["path"] = "cycle, idle GPUs"
        rows.append(row)
    return rows


def breakdown(rows: list[dict]) -> dict:
    """The notebooks' breakdown as the report's fields: how many took each path, and the
    median of each part of the evicted ones' wait."""
    found: dict = {}
    for path in ("fast path", "cycle, idle GPUs", "evicted"):
        mine = [row for row in rows if row["path"] == path]
        key = path.split(",")[0].replace(" ", "_")
        found[f"notebooks_{key}"] = len(mine)
        if mine:
            found[f"notebooks_{key}_recorded_p50_ms"] = statistics.median(
                row["recorded_ms"] for row in mine
            )
    evicted = [row for row in rows if row["path"] == "evicted"]
    for part in ("decide_ms", "grace_exit_ms", "claim_ms"):
        if evicted:
            found[f"notebooks_evicted_{part[:-3]}_p50_ms"] = statistics.median(
                row[part] for row in evicted
            )
    return found


def ms(seconds: float) -> float:
    return round(1000 * seconds, 1)


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """User + system CPU time of process ``pid`` so far (its threads included), or of its
    thread ``thread`` alone (the main thread's id is the process's: the event loop)."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _ticks(path: str) -> float:
    """User + system seconds from a /proc stat file (0 when the task is gone)."""
    try:
        fields = Path(path).read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_parts(hub: Hub, service: ServiceProcess) -> dict[str, float]:
    """CPU seconds so far of every process on the submissions' path, the service by thread:
    the event loop (the main thread), each named thread (``THREAD_NAMES``; numbered pool
    threads summed), threads that have ended (the process's total less its live threads),
    the jobs it started; the hub, its configurable-http-proxy, this client; and the whole
    machine's busy time, so that the difference is everything else that ran."""
    parts: dict[str, float] = {}

    def add(name: str, seconds: float) -> None:
        parts[name] = parts.get(name, 0.0) + seconds

    live = 0.0
    for task in Path(f"/proc/{service.pid}/task").iterdir():
        try:
            comm = (task / "comm").read_text().strip()
        except OSError:
            continue
        seconds = _ticks(f"{task}/stat")
        live += seconds
        name = "event loop" if int(task.name) == service.pid else comm.rstrip("0123456789_")
        add(f"service: {name}", seconds)
    add("service: ended threads", _ticks(f"/proc/{service.pid}/stat") - live)
    for pid in descendants(service.pid):
        add("service's jobs", _ticks(f"/proc/{pid}/stat"))
    assert hub.proc is not None
    add("hub", _ticks(f"/proc/{hub.proc.pid}/stat"))
    for pid in descendants(hub.proc.pid):
        cmdline = (
            Path(f"/proc/{pid}/cmdline").read_bytes() if Path(f"/proc/{pid}").exists() else b""
        )
        name = "configurable-http-proxy" if b"configurable-http-proxy" in cmdline else "hub"
        if pid != service.pid:
            add(name, _ticks(f"/proc/{pid}/stat"))
    times = os.times()
    add("benchmark client", times.user + times.system)
    cpu = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    idle = int(cpu[3]) + int(cpu[4])
    add("machine", (sum(int(value) for value in cpu[:8]) - idle) / os.sysconf("SC_CLK_TCK"))
    return parts


def cpu_per_submission(
    before: dict[str, float], after: dict[str, float], count: int
) -> dict[str, float]:
    """ms of CPU per submission by part between two ``cpu_parts`` (parts under 0.005 ms
    left out), with ``everything else`` = the machine's less every part measured."""
    spent = {name: after[name] - before.get(name, 0.0) for name in after}
    machine = spent.pop("machine")
    spent["everything else"] = machine - sum(spent.values())
    spent["machine"] = machine
    found = {name: round(1000 * seconds / count, 3) for name, seconds in spent.items()}
    return {name: ms for name, ms in sorted(found.items()) if abs(ms) >= 0.005}


def stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


async def measure(hub: Hub, service: ServiceProcess, args: argparse.Namespace) -> dict:
    tokens = []
    for i in range(args.projects):
        name = f"bench-user-{i:02d}"
        hub.create_user(name, groups=[f"p{i:02d}"])
        tokens.append(hub.token_for(name))
    hub.create_user("bench-admin", admin=True)
    admin_token = hub.token_for("bench-admin")
    hub.create_user(NOTEBOOK_USER)
    notebook_token = hub.token_for(NOTEBOOK_USER)
    limits = httpx.Limits(max_connections=args.concurrency)

    def client(token: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=hub.service_url(API_PATH),
            headers={"Authorization": f"token {token}"},
            timeout=120,
            limits=limits,
        )

    clients = [client(token) for token in tokens]
    admin = client(admin_token)
    notebook = client(notebook_token)
    stop = asyncio.Event()
    cpu_before, wall_before = cpu_seconds(service.pid), time.perf_counter()
    loop_cpu_before = cpu_seconds(service.pid, service.pid)
    parts_before = cpu_parts(hub, service)
    reader = asyncio.create_task(read_while(client(tokens[0]), stop))
    spawner = None
    if args.notebook_every > 0:
        spawner = asyncio.create_task(spawn_notebooks(notebook, args.notebook_every, stop))
    post_latencies, first_post, submit_seconds = await submit_all(
        clients, args, tokens, hub.service_url(API_PATH)
    )
    submit_cpu = cpu_seconds(service.pid) - cpu_before
    submit_loop_cpu = cpu_seconds(service.pid, service.pid) - loop_cpu_before
    submit_parts = cpu_per_submission(parts_before, cpu_parts(hub, service), args.workloads)
    load = Path("/proc/loadavg").read_text().split()[:3]
    running = await settle(admin, args.quiet)
    stop.set()
    read_latencies = await reader
    grants, recorded = await spawner if spawner is not None else ([], [])
    cpu_total, wall_total = cpu_seconds(service.pid) - cpu_before, time.perf_counter() - wall_before
    running = [item for item in running if item["kind"] != "interactive"]
    last_start = max(stamp(item["started_at"]) for item in running)
    used = sum(
        share["share"]
        for item in running
        for replica in item["placement"]
        for share in replica["gpus"]
    )
    metrics = (await admin.get("../../metrics")).text
    preemptions = sum(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("frachub_preemptions_total")
    )
    cycles = {
        line.split()[0]: float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith(
            ("frachub_cycle_duration_seconds_count", "frachub_cycle_duration_seconds_sum")
        )
    }
    arrivals = {
        line.split('"')[1]: int(float(line.split()[-1]))
        for line in metrics.splitlines()
        if line.startswith("frachub_arrivals_total{")
    }
    engine_cpu = sum(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("frachub_engine_cpu_seconds_total")
    )
    rss_kib = 0
    status = Path(f"/proc/{service.pid}/status").read_text()
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            rss_kib = int(line.split()[1])
    for c in [*clients, admin, notebook]:
        await c.aclose()
    capacity = args.nodes * args.gpus_per_node
    return {
        "workloads": args.workloads,
        "projects": args.projects,
        "gpus": capacity,
        "concurrency": args.concurrency,
        "client": "lean" if args.lean_client else "httpx",
        "submit_seconds": round(submit_seconds, 2),
        "submissions_per_second": round(args.workloads / submit_seconds, 1),
        "submit_service_cpu_seconds": round(submit_cpu, 2),
        # the event loop's thread alone (requests, the group commit, applying cycles), per
        # submission: the figure that bounds the submissions a second, whatever the load
        "submit_loop_cpu_ms_per_submission": round(1000 * submit_loop_cpu / args.workloads, 3),
        # every process's CPU during the submissions, ms per submission (the hub, its proxy
        # and this client share the machine's 2 cores with the service)
        "submit_cpu_ms_per_submission_by_part": submit_parts,
        "load_average_after_submissions": " ".join(load),
        "post_p50_ms": round(1000 * statistics.median(post_latencies), 1),
        "post_p99_ms": round(1000 * percentile(post_latencies, 99), 1),
        "list_p50_ms": round(1000 * statistics.median(read_latencies), 1),
        "list_p99_ms": round(1000 * percentile(read_latencies, 99), 1),
        "list_samples": len(read_latencies),
        "notebook_grant_p50_ms": round(1000 * statistics.median(grants), 1) if grants else None,
        "notebook_grant_p99_ms": round(1000 * percentile(grants, 99), 1) if grants else None,
        "notebook_grant_max_ms": round(1000 * max(grants), 1) if grants else None,
        "notebook_samples": len(grants),
        "notebook_recorded_p50_ms": ms(statistics.median(recorded)) if recorded else None,
        "notebook_recorded_p99_ms": ms(percentile(recorded, 99)) if recorded else None,
        "running": len(running),
        "gpus_allocated": round(used, 2),
        "time_to_settle_seconds": round(last_start - first_post, 2),
        "service_rss_mib": round(rss_kib / 1024, 1),
        "service_cpu_seconds": round(cpu_total, 2),
        "wall_seconds": round(wall_total, 2),
        "niceness": os.nice(0),
        "preemptions": int(preemptions),
        "arrivals": arrivals,
        "cycles": int(cycles.get("frachub_cycle_duration_seconds_count", 0)),
        "engine_cpu_seconds": round(engine_cpu, 2),
        "cycle_seconds_total": round(cycles.get("frachub_cycle_duration_seconds_sum", 0), 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=15_000)
    parser.add_argument("--projects", type=int, default=30)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--deserved", type=float, default=4)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--sleep", type=int, default=3600, help="each job's run time (s)")
    parser.add_argument("--quiet", type=float, default=5, help="settled after this many s")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--notebook-every", type=float, default=1.0, help="s between notebook spawns (0: none)"
    )
    parser.add_argument(
        "--notebook-gpus", type=float, default=4, help="GPUs the notebooks project deserves"
    )
    parser.add_argument(
        "--no-batch-cap",
        action="store_true",
        help="no department limit on the job projects: batch may borrow every GPU, so a "
        "notebook needs an eviction or the interactive reserve",
    )
    parser.add_argument(
        "--reserve",
        type=float,
        default=0.0,
        metavar="GPUS",
        help="FracHubService.interactive_reserve_gpus (default 0: off)",
    )
    parser.add_argument(
        "--timeline",
        action="store_true",
        help="print each notebook's breakdown (from the store's events) on stderr",
    )
    parser.add_argument(
        "--profile", metavar="FILE", help="write a cProfile of the service's event loop to FILE"
    )
    parser.add_argument(
        "--postgres", action="store_true", help="the store on a throwaway PostgreSQL server"
    )
    parser.add_argument(
        "--no-job-tokens",
        action="store_true",
        help="FracHubService.job_tokens = False: the started jobs get no hub token of their "
        "own (what the hub's CPU during the submissions is for)",
    )
    parser.add_argument(
        "--lean-client",
        action="store_true",
        help="submit over plain keep-alive connections instead of httpx (still through the "
        "proxy, a user's token each): the client's CPU, about 0.9 ms a request with httpx, "
        "is not the service's",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="frachub-bench-"))
    print(f"starting JupyterHub and the service in {work}", file=sys.stderr)
    with contextlib.ExitStack() as stack:
        config = service_config(args)
        if args.postgres:
            from postgres import PostgresServer

            database = stack.enter_context(PostgresServer()).database()
            config += f"\nc.FracHubService.db_url = {database!r}"
        hub = stack.enter_context(Hub(work / "hub"))
        service = stack.enter_context(ServiceProcess(hub, config, work / "service"))
        result = asyncio.run(measure(hub, service, args))
        result["database"] = "postgresql" if args.postgres else "sqlite"
    if not args.postgres:  # the notebooks' timelines are read from the SQLite file
        rows = notebook_timelines(work / "service" / "frachub-data" / "frachub.sqlite")
        result.update(breakdown(rows))
        if args.timeline:
            for row in rows:
                print("  " + json.dumps(row), file=sys.stderr)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        width = max(len(key) for key in result)
        for key, value in result.items():
            print(
                f"{key:<{width}}  {value:,}"
                if isinstance(value, int)
                else f"{key:<{width}}  {value}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
