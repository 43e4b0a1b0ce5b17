"""What a job that asked for GPU memory may use, and what it is told (docs/service.md,
"Memory within a share"). Needs a machine with an NVIDIA GPU.

A request of ``--gib`` GiB is placed as the engine places it (``Request.milli_on`` the GPU's
memory as NVML reports it) on GPU ``--gpu``, and started by the real ``LocalBackend``: NVML
inventory, the environment contract, FracHub's start-up hook. Each framework the jobs'
Python has (torch, JAX) then allocates 1 GiB at a time until it is refused, and reports what
it was told: ``torch.cuda.mem_get_info()`` (the share's view, and the real one behind it),
JAX's ``memory_stats()["bytes_limit"]``. A whole-GPU job shows that whole GPUs get no cap.
The GPU must be otherwise idle. Exits 1 if a framework could not allocate what was asked or
was told something other than its share.

    .venv/bin/python benchmarks/share_memory.py --gib 30
    .venv/bin/python benchmarks/share_memory.py --gib 1 --python /opt/torch/.venv/bin/python3 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler.backends.base import Exit, JobSpec  # noqa: E402
from scheduler.backends.local import LocalBackend  # noqa: E402
from scheduler.common.placement import GpuShare, ReplicaPlacement  # noqa: E402
from scheduler.common.share import MIB  # noqa: E402
from scheduler.engine.model import Request  # noqa: E402

GIB = 1 << 30
MARK = "SHARE_MEMORY "

TORCH = """
import json, os
try:
    import torch
except ImportError:
    raise SystemExit(0)
out = {"framework": "torch", "wrapped": hasattr(torch.cuda.mem_get_info, "__wrapped__")}
out["told"] = list(torch.cuda.mem_get_info())
real = getattr(torch.cuda.mem_get_info, "__wrapped__", torch.cuda.mem_get_info)
out["real"] = list(real())
held = []
try:
    while len(held) < LIMIT:
        held.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
except torch.OutOfMemoryError as error:
    out["refusal"] = str(error).split(";")[0][-80:]
out["allocated_gib"] = len(held)
out["told_when_full"] = list(torch.cuda.mem_get_info())
print("MARK" + json.dumps(out))
"""

JAX = """
import json, os
try:
    import jax, jax.numpy as jnp
    device = jax.devices("gpu")[0]
except Exception:
    raise SystemExit(0)
out = {"framework": "jax", "fraction": os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")}
out["bytes_limit"] = device.memory_stats()["bytes_limit"]
held = []
try:
    while len(held) < LIMIT:
        held.append(jnp.ones((1 << 28,), jnp.float32, device=device).block_until_ready())
except Exception as error:
    out["refusal"] = str(error).splitlines()[0][:80]
out["allocated_gib"] = len(held)
print("MARK" + json.dumps(out))
"""


def program(template: str, limit: int) -> str:
    return template.replace("LIMIT", str(limit)).replace("MARK", MARK)


async def run_job(
    backend: LocalBackend, workload_id: int, replica: ReplicaPlacement, code: str, python: str
) -> dict[str, Any] | None:
    """Start one job through the backend, wait for its end, and return its report line."""
    job = JobSpec(
        workload_id=workload_id,
        name=f"share-memory-{workload_id}",
        user="bench",
        project="bench",
        command=[python, "-c", code],
        working_dir=tempfile.gettempdir(),
        env={},
        placement=(replica,),
    )
    await backend.start(job)
    deadline = time.monotonic() + 300
    while not [r for r in await backend.poll() if isinstance(r, Exit)]:
        if time.monotonic() > deadline:
            raise SystemExit(f"job {workload_id} did not end within 300 s")
        await asyncio.sleep(0.2)
    log = Path(backend.log_path(workload_id) or "").read_text()
    lines = [line[len(MARK) :] for line in log.splitlines() if line.startswith(MARK)]
    if not lines and "Traceback" in log:
        print(log, file=sys.stderr)
    return json.loads(lines[-1]) if lines else None


async def measure(gib: float, gpu: int, python: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as data:
        backend = LocalBackend(data_dir=data, inventory_source="nvml", run_as_user=False)
        inventory = backend.inventory()
        found = next(g for g in inventory.gpus if g.index == gpu)
        milli = Request(gpu_memory_mib=round(gib * 1024)).milli_on(found.memory_mib)
        shared = ReplicaPlacement(found.node, (GpuShare(gpu, milli),))
        whole = ReplicaPlacement(found.node, (GpuShare(gpu, 1000),))
        share = inventory.share(shared)
        limit = int(share.memory_bytes // GIB) + 2
        rows = []
        for number, (replica, template) in enumerate(
            [(shared, TORCH), (shared, JAX), (whole, TORCH.replace("LIMIT", "2"))], start=1
        ):
            row = await run_job(backend, number, replica, program(template, limit), python)
            if row is not None:
                row["whole"] = replica is whole
                rows.append(row)
    return {
        "gpu": found.model,
        "gpu_memory_mib": found.memory_mib,
        "asked_gib": gib,
        "milli": share.milli,
        "share_mib": share.memory_mib,
        "rows": rows,
    }


def verdicts(result: dict[str, Any]) -> list[str]:
    """What went wrong, in words; empty when each framework got and was told its share."""
    share = result["share_mib"] * MIB
    asked = int(result["asked_gib"])
    wrong = []
    for row in result["rows"]:
        name = row["framework"] + (" (whole GPU)" if row["whole"] else "")
        if row["whole"]:
            if row.get("wrapped"):
                wrong.append(f"{name}: mem_get_info was replaced for a whole GPU")
            continue
        if row["allocated_gib"] < asked:
            wrong.append(f"{name}: allocated {row['allocated_gib']} GiB of {asked} asked")
        if row["framework"] == "torch" and row["told"][1] != share:
            wrong.append(f"{name}: mem_get_info's total {row['told'][1]} is not the share {share}")
        if row["framework"] == "jax" and row["bytes_limit"] < share:
            wrong.append(f"{name}: bytes_limit {row['bytes_limit']} is below the share {share}")
    return wrong


def table(result: dict[str, Any]) -> str:
    head = (
        f"{result['asked_gib']:g} GiB asked on a {result['gpu']} of {result['gpu_memory_mib']} "
        f"MiB: share {result['milli'] / 1000:g}, {result['share_mib']} MiB\n\n"
        "| job | allocated (1 GiB steps) | cap | told (free, total GiB) |\n|---|---|---|---|"
    )
    lines = [head]
    for row in result["rows"]:
        name = row["framework"] + (", whole GPU" if row["whole"] else "")
        if row["framework"] == "torch":
            cap = re.search(r"[\d.]+ GiB allowed", row.get("refusal", ""))
            cap = cap.group(0) if cap else "none reached"
            told = ", ".join(f"{x / GIB:.2f}" for x in row["told"])
        else:
            cap = f"bytes_limit {row['bytes_limit'] / GIB:.2f} GiB (fraction {row['fraction']})"
            told = "(memory_stats)"
        lines.append(f"| {name} | {row['allocated_gib']} GiB | {cap} | {told} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=30.0, help="GPU memory to ask for")
    parser.add_argument("--gpu", type=int, default=0, help="the GPU's NVML index")
    parser.add_argument(
        "--python", default=sys.executable, help="the interpreter (with torch, JAX) for the jobs"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    result = asyncio.run(measure(args.gib, args.gpu, args.python))
    result["wrong"] = verdicts(result)
    print(json.dumps(result, indent=2) if args.json else table(result))
    for line in result["wrong"]:
        print(f"WRONG: {line}", file=sys.stderr)
    sys.exit(1 if result["wrong"] else 0)


if __name__ == "__main__":
    main()
