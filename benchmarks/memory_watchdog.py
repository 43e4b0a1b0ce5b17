"""The memory watchdog's reaction on a machine with an NVIDIA GPU (CHANGELOG.md, "The service").

Two jobs on GPU 0 through ``LocalBackend`` with the real NVML, each on a 0.25 share: a raw
CUDA job (CuPy) that allocates ``--hog-gib`` (52 GiB: over a 0.25 share of an H200's 140 GiB)
and a PyTorch job that fills its own share but for 512 MiB. Each tick does what the service's
watchdog does (``scheduler/service/runtime/memory_watch.py``) without the store: one sample
(``LocalBackend.gpu_memory``: NVML on its thread, processes told to jobs by their control
groups), the policy (``memory_watch.judge``), and ``LocalBackend.stop`` for a stop. Prints
how long after the hog's allocation the stop was decided and the job gone (the promise:
within 10 s of the grace period), whether the PyTorch job ran on, and what a sample costs.
Needs CuPy and PyTorch with CUDA, ``nvidia-ml-py``, and root for cgroups (else the process
tree tells the jobs apart).

    python benchmarks/memory_watchdog.py
    python benchmarks/memory_watchdog.py --grace 10 --interval 2 --stop-grace 5 --json
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler.backends.base import Exit, JobSpec  # noqa: E402
from scheduler.backends.local import LocalBackend  # noqa: E402
from scheduler.common.placement import GpuShare, ReplicaPlacement  # noqa: E402
from scheduler.common.share import Share, share_of  # noqa: E402
from scheduler.service.policies.memory_watch import Verdict, Watched, judge  # noqa: E402

HOG, TORCH = 1, 2


def job(workload_id: int, command: str, replica: ReplicaPlacement, share: Share) -> JobSpec:
    return JobSpec(
        workload_id=workload_id,
        name=f"bench-{workload_id}",
        user="bench",
        project="bench",
        command=command,
        working_dir="/tmp",
        env={},
        placement=(replica,),
    )


async def measure(args: argparse.Namespace, work: Path) -> dict:
    backend = LocalBackend(data_dir=str(work / "data"), inventory_source="nvml", run_as_user=False)
    gpu = backend.inventory().gpus[0]
    replica = ReplicaPlacement(gpu.node, (GpuShare(0, 250),))
    share = share_of(replica, gpu.memory_mib)
    marker = work / "over"
    py = sys.executable
    # the moment it is over its share is its allocation (cudaMalloc: NVML counts it at once),
    # marked before the fill, whose first kernel CuPy compiles (part of a second)
    hog = (
        f'{py} -c "import cupy, time; a = cupy.empty({args.hog_gib} * 2**30, dtype=cupy.uint8); '
        f"cupy.cuda.Device().synchronize(); open('{marker}', 'w').write(repr(time.time())); "
        f'a[:] = 1; cupy.cuda.Device().synchronize(); time.sleep(600)"'
    )
    fill = share.memory_bytes - (512 << 20)
    torch_job = (
        f"{py} -c \"import torch, time; a = torch.ones({fill}, dtype=torch.uint8, device='cuda'); "
        f'torch.cuda.synchronize(); time.sleep(600)"'
    )
    handles = {
        HOG: await backend.start(job(HOG, hog, replica, share)),
        TORCH: await backend.start(job(TORCH, torch_job, replica, share)),
    }
    over: dict = {}
    decided = reached = None
    ended: dict[int, tuple[float, str]] = {}
    samples: list[float] = []
    peak: dict[int, int] = {}
    began = time.time()
    try:
        while time.time() - began < args.timeout:
            t0 = time.perf_counter()
            memory = await backend.gpu_memory({})
            samples.append(time.perf_counter() - t0)
            now = time.time()
            for wid, per_gpu in memory.items():
                peak[wid] = max(peak.get(wid, 0), *per_gpu.values())
            if reached is None and marker.exists():
                reached = float(marker.read_text())
            watched = [
                Watched(w, share.memory_bytes, memory.get(w, {}), "stop")
                for w in (HOG, TORCH)
                if w not in ended
            ]
            judgement = judge(watched, over, now, args.grace, args.slack_mib << 20)
            over = judgement.over
            for finding in judgement.findings:
                if finding.verdict is Verdict.STOP:
                    decided = decided or now
                    await backend.stop(
                        finding.workload_id, handles[finding.workload_id], args.stop_grace
                    )
            for report in await backend.poll():
                if isinstance(report, Exit):
                    ended[report.workload_id] = (time.time(), report.message)
            if HOG in ended and time.time() - ended[HOG][0] > args.interval * 2:
                break
            await asyncio.sleep(args.interval if decided is None else 0.1)
    finally:
        for wid, handle in handles.items():
            if wid not in ended:
                await backend.stop(wid, handle, 1)
        await asyncio.sleep(2)
        await backend.poll()
        await backend.close()
    gone = ended.get(HOG, (None, ""))[0]
    return {
        "gpu": gpu.model,
        "share_gib": round(share.memory_bytes / 2**30, 2),
        "hog_gib": round(peak.get(HOG, 0) / 2**30, 2),
        "torch_gib": round(peak.get(TORCH, 0) / 2**30, 2),
        "grace_s": args.grace,
        "stop_decided_after_s": round(decided - reached, 2) if decided and reached else None,
        "gone_after_s": round(gone - reached, 2) if gone and reached else None,
        "past_grace_s": round(gone - reached - args.grace, 2) if gone and reached else None,
        "hog_ended": ended.get(HOG, (None, None))[1],
        "torch_job_ran_on": TORCH not in ended,
        "confinement": backend.confined.mode,
        "sample_ms_median": round(sorted(samples)[len(samples) // 2] * 1000, 3)
        if samples
        else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grace", type=float, default=10.0)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--stop-grace", type=float, default=5.0)
    parser.add_argument("--slack-mib", type=int, default=1024)
    parser.add_argument("--hog-gib", type=int, default=52)
    parser.add_argument("--timeout", type=float, default=90.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="frachub-watchdog-") as work:
        result = asyncio.run(measure(args, Path(work)))
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:24} {value}")
    ok = result["past_grace_s"] is not None and result["past_grace_s"] <= 10
    return 0 if ok and result["torch_job_ran_on"] else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
