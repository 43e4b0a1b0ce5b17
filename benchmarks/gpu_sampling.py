"""What sampling the GPUs costs the service (docs/benchmarks.md, "GPU use sampling").

Issue 27 asks the GPU use sampler to cost the service under 1% of a CPU with 8 GPUs and 200
running jobs. This runs ``--jobs`` real jobs (``sleep``) through the real ``LocalBackend``,
each on a 1/25 share of one of ``--gpus`` GPUs, and a fake NVML (``tests/fakenvml.py``, held
in memory) that names every job's process on its GPU with its memory and its own
utilization, plus one process no job holds per GPU. Then it takes ``--samples`` samples the
way ``GpuWatch.check`` does: ``LocalBackend.gpu_usage`` (one NVML read of every GPU on the
sampler's thread, each pid told to its job through ``/proc``) and ``GpuHistory.record``, and
counts the CPU time of the whole process (all its threads) per sample. The CPU share at an
interval is that time over the interval.

The fake NVML answers in microseconds; the real library's calls cost more (a driver ioctl
each: about 10 calls per GPU per sample). Run it on a GPU machine with ``--real-nvml`` to
count the real library's reads (its processes are then the machine's own, not the jobs').

    .venv/bin/python benchmarks/gpu_sampling.py                 # 8 GPUs, 200 jobs, 300 samples
    .venv/bin/python benchmarks/gpu_sampling.py --confinement session --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from fakenvml import GIB, FakeNvml  # noqa: E402

from scheduler.backends.base import JobSpec  # noqa: E402
from scheduler.backends.gpu_usage import MemoryReader, NvmlSampler  # noqa: E402
from scheduler.backends.local import LocalBackend  # noqa: E402
from scheduler.common.placement import GpuShare, ReplicaPlacement  # noqa: E402
from scheduler.service.runtime.gpu_history import GpuHistory  # noqa: E402

INTERVALS = (1.0, 2.0, 5.0)


def job(workload_id: int, gpu: int, milli: int, pid_file: Path) -> JobSpec:
    return JobSpec(
        workload_id=workload_id,
        name=f"bench-{workload_id}",
        user="bench",
        project="bench",
        command=f"echo $$ > {pid_file}; exec sleep 3600",
        working_dir=None,
        env={},
        placement=(ReplicaPlacement("local", (GpuShare(gpu, milli),)),),
        restart_count=0,
        replicas=1,
    )


async def wait_pid(path: Path) -> int:
    for _ in range(1000):
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        await asyncio.sleep(0.01)
    raise RuntimeError(f"{path} was never written")


async def measure(args: argparse.Namespace, work: Path) -> dict:
    backend = LocalBackend(
        data_dir=str(work / "data"),
        inventory_source="declared",
        declared_inventory=[{"name": "local", "gpus": args.gpus, "gpu_memory_gib": 80}],
        run_as_user=False,
        confinement=args.confinement,
    )
    nvml = FakeNvml(gpus=args.gpus)
    if not args.real_nvml:
        backend.gpu_reader = MemoryReader(NvmlSampler(nvml), log=logging.getLogger("bench"))
    per_gpu = -(-args.jobs // args.gpus)
    milli = 1000 // per_gpu
    handles = {}
    pids: dict[int, list[int]] = {gpu: [] for gpu in range(args.gpus)}
    began = time.monotonic()
    try:
        for wid in range(1, args.jobs + 1):
            gpu = (wid - 1) % args.gpus
            pid_file = work / f"pid-{wid}"
            handles[wid] = await backend.start(job(wid, gpu, milli, pid_file))
            pids[gpu].append(await wait_pid(pid_file))
        started = time.monotonic() - began
        for gpu, listed in pids.items():
            held = {pid: (1 + i % 7) * GIB // 4 for i, pid in enumerate(listed)}
            held[os.getpid()] = GIB  # a process no job holds (the benchmark's own)
            nvml.set_processes(gpu, held)
            nvml.set_utilization(gpu, 90)
            nvml.set_process_utilization(gpu, {pid: 3 + i % 5 for i, pid in enumerate(listed)})
        history = GpuHistory(points=180, busy_percent=5, interval=5, source="NVML")
        counts = {wid: 1 for wid in handles}
        await backend.gpu_usage({})  # NVML initialised, the thread started
        cpu: list[float] = []
        wall: list[float] = []
        attributed = 0
        for _ in range(args.samples):
            c0, w0 = time.process_time(), time.perf_counter()
            usage = await backend.gpu_usage({})
            history.record(time.time(), usage, counts)
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
            attributed = len(usage)
        per_sample = statistics.mean(cpu)
        return {
            "gpus": args.gpus,
            "jobs": args.jobs,
            "confinement": backend.confined.mode,
            "nvml": "real" if args.real_nvml else "fake",
            "samples": args.samples,
            "jobs_attributed": attributed,
            "start_seconds": round(started, 1),
            "cpu_ms_per_sample": round(1000 * per_sample, 2),
            "wall_ms_p50": round(1000 * statistics.median(wall), 2),
            "wall_ms_p99": round(1000 * sorted(wall)[int(0.99 * (len(wall) - 1))], 2),
            "cpu_percent_at": {f"{i:g}s": round(100 * per_sample / i, 3) for i in INTERVALS},
            "load_average": round(os.getloadavg()[0], 1),
        }
    finally:
        for wid, handle in handles.items():
            await backend.stop(wid, handle, 0)
        await backend.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--confinement", default="auto", help="auto, cgroup, session")
    parser.add_argument("--real-nvml", action="store_true", help="read this machine's NVML")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="frachub-gpu-sampling-") as work:
        result = asyncio.run(measure(args, Path(work)))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"{result['gpus']} GPUs, {result['jobs']} jobs ({result['confinement']} confinement, "
        f"{result['nvml']} NVML), {result['samples']} samples, "
        f"{result['jobs_attributed']} jobs attributed per sample"
    )
    print(
        f"CPU per sample {result['cpu_ms_per_sample']} ms; wall p50 {result['wall_ms_p50']} ms, "
        f"p99 {result['wall_ms_p99']} ms; load average {result['load_average']}"
    )
    for interval, percent in result["cpu_percent_at"].items():
        print(f"  sampling every {interval}: {percent}% of one CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
