"""What one user's checkpoint files cost everyone else (docs/benchmarks.md, "Checkpoint scans").

The local backend learns that a job saved its work from the files in the job's
``FRACHUB_CHECKPOINT_DIR``, a directory its user fills at will. This measures, through the
real service (a JupyterHub with its proxy routing every request, the service checking each
token with the hub, the local backend running real ``sleep`` jobs), what another user's
``GET workloads?limit=5`` costs while ``--jobs`` running jobs of one user keep ``--files``
files each in their checkpoint directories (5 x 10,000 = 50,000 by default), against the
same jobs with empty directories. The reader sends one request at a time, with a short
random pause between them so that its samples fall all over the backend's poll interval
(0.5 s). Latencies p50/p95/max for each phase; the service's CPU time in each.

    nice -n 10 .venv/bin/python benchmarks/checkpoint_scan.py
    .venv/bin/python benchmarks/checkpoint_scan.py --jobs 5 --files 10000 --samples 300 --json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from hubharness import API_PATH, Hub, ServiceProcess  # noqa: E402

OWNER = "bench-saver"
READER = "bench-reader"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def service_config(data_dir: Path, jobs: int) -> str:
    queues = [{"name": "savers", "deserved_gpus": jobs}, {"name": "readers", "deserved_gpus": 1}]
    nodes = [{"name": "node-0", "gpus": jobs + 1, "gpu_memory_gib": 80}]
    return "\n".join(
        [
            f"c.FracHubService.queues = {queues!r}",
            'c.LocalBackend.inventory_source = "declared"',
            f"c.LocalBackend.declared_inventory = {nodes!r}",
            f"c.FracHubService.data_dir = {str(data_dir)!r}",
            "c.LocalBackend.run_as_user = False",
            'c.Application.log_level = "WARN"',
        ]
    )


def sample(reader: httpx.Client, count: int, pid: int, rng: random.Random) -> dict[str, float]:
    """``count`` requests one after another: latency figures (ms) and the service's CPU."""
    latencies = []
    cpu_before, wall_before = cpu_seconds(pid), time.perf_counter()
    for _ in range(count):
        began = time.perf_counter()
        response = reader.get("workloads?limit=5")
        latencies.append(time.perf_counter() - began)
        response.raise_for_status()
        time.sleep(rng.uniform(0.0, 0.1))
    wall = time.perf_counter() - wall_before
    return {
        "p50_ms": round(1000 * statistics.median(latencies), 1),
        "p95_ms": round(1000 * percentile(latencies, 95), 1),
        "max_ms": round(1000 * max(latencies), 1),
        "samples": len(latencies),
        "service_cpu_percent": round(100 * (cpu_seconds(pid) - cpu_before) / wall, 1),
    }


def fill(directory: Path, files: int) -> None:
    """``files`` small files, as a job saving many shards would leave."""
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        (directory / f"shard-{i:06d}.pt").write_bytes(b"x")


def measure(hub: Hub, service: ServiceProcess, data_dir: Path, args: argparse.Namespace) -> dict:
    hub.create_user(OWNER, groups=["savers"])
    hub.create_user(READER, groups=["readers"])

    def client(user: str) -> httpx.Client:
        return httpx.Client(
            base_url=hub.service_url(API_PATH),
            headers={"Authorization": f"token {hub.token_for(user)}"},
            timeout=60,
        )

    owner, reader = client(OWNER), client(READER)
    ids = []
    for i in range(args.jobs):
        body = {"command": "sleep 3600", "gpus": 1, "name": f"saver-{i}"}
        response = owner.post("workloads", json=body)
        response.raise_for_status()
        ids.append(response.json()["id"])
    deadline = time.monotonic() + 60
    while any(owner.get(f"workloads/{i}").json()["state"] != "running" for i in ids):
        if time.monotonic() > deadline:
            raise RuntimeError("the jobs did not start within 60 s")
        time.sleep(0.2)
    rng = random.Random(args.seed)
    time.sleep(2)  # past the start-up's own work
    print(f"  {args.jobs} jobs running, empty checkpoint directories", file=sys.stderr)
    empty = sample(reader, args.samples, service.pid, rng)
    for i in ids:
        fill(data_dir / "checkpoints" / str(i), args.files)
    time.sleep(2)
    print(f"  {args.jobs} x {args.files:,} checkpoint files", file=sys.stderr)
    full = sample(reader, args.samples, service.pid, rng)
    for i in ids:
        owner.delete(f"workloads/{i}")
    owner.close()
    reader.close()
    return {
        "jobs": args.jobs,
        "files_per_job": args.files,
        "files": args.jobs * args.files,
        "empty": empty,
        "full": full,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5)
    parser.add_argument("--files", type=int, default=10_000, help="per job")
    parser.add_argument("--samples", type=int, default=300, help="requests per phase")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="frachub-bench-"))
    data_dir = work / "data"
    print(f"starting JupyterHub and the service in {work}", file=sys.stderr)
    with (
        Hub(work / "hub") as hub,
        ServiceProcess(hub, service_config(data_dir, args.jobs), work / "service") as service,
    ):
        result = measure(hub, service, data_dir, args)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"another user's GET workloads?limit=5, {args.jobs} running jobs of one user:")
    for phase, label in (
        ("empty", "empty checkpoint dirs"),
        ("full", f"{result['files']:,} checkpoint files"),
    ):
        figures = result[phase]
        print(
            f"  {label:<24} p50 {figures['p50_ms']:>7} ms  p95 {figures['p95_ms']:>7} ms  "
            f"max {figures['max_ms']:>7} ms  ({figures['samples']} requests, service CPU "
            f"{figures['service_cpu_percent']}%)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
