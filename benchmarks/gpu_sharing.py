"""What a GPU share holds on a real NVIDIA GPU, in each sharing mode (docs/gpu-sharing.md).

Every job here goes the way a user's job goes: the GPU is found through NVML (the local
backend's inventory), the engine places each request on it, ``LocalBackend.start`` runs the
job with the environment contract, the PyTorch hook and, in ``mps`` mode, the MPS daemon
FracHub supervises; the memory watchdog is the service's own, sampling NVML. The job itself
is ``benchmarks/gpu_probe.py``, which allocates, computes or faults and says what it saw.

For each mode it measures: how much memory PyTorch, JAX and raw CUDA (CuPy's ``cudaMalloc``)
can take at a 0.25 share; whether a job that asked for 30 GiB can allocate 30 GiB; what
each framework reports as the GPU's memory; the compute two jobs at 0.25 and 0.75 get side
by side; whether a job survives a GPU fault of the job sharing its GPU; what two Linux
accounts sharing one GPU get (mps); and how soon the watchdog stops raw CUDA over its share.
It prints the table and writes it into docs/gpu-sharing.md with the GPU, driver and date.

    sudo python3 benchmarks/gpu_sharing.py                       # both modes, as root
    python3 benchmarks/gpu_sharing.py --modes cooperative --doc '' --json result.json

It needs an NVIDIA GPU and, for ``mps``, ``nvidia-cuda-mps-control``; for the two-account
measurement it creates two Linux accounts (``frachub-bench-a``, ``-b``) and so needs root.
A machine without a GPU gets a message saying so and exit status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler.backends.base import Exit, JobSpec  # noqa: E402
from scheduler.backends.local import LocalBackend  # noqa: E402
from scheduler.common.placement import Placement  # noqa: E402
from scheduler.common.share import share_of  # noqa: E402
from scheduler.engine import (  # noqa: E402
    Kind,
    Node,
    Queue,
    Request,
    Snapshot,
    Start,
    WorkloadRequest,
    run_cycle,
)
from scheduler.engine.placement import scorer_named  # noqa: E402
from scheduler.engine.session import Policy  # noqa: E402

PROBE = REPO / "benchmarks" / "gpu_probe.py"
MODES = ("cooperative", "mps")
ACCOUNTS = ("frachub-bench-a", "frachub-bench-b")
BEGIN, END = "<!-- gpu-sharing-table:begin -->", "<!-- gpu-sharing-table:end -->"
JOB_TIMEOUT = 90.0
GIB = 1024


class NoGpu(Exception):
    """This machine cannot run the measurement; the message says why."""


@dataclass
class Job:
    workload_id: int
    placement: Placement
    started: float
    ended: float | None = None
    exit: Exit | None = None
    probes: list[dict[str, Any]] = field(default_factory=list)


class Bench:
    """One sharing mode on this machine's GPU 0: places, starts and watches probe jobs."""

    def __init__(self, mode: str, data_dir: Path, *, run_as_user: bool = False) -> None:
        self.mode = mode
        self.backend = LocalBackend(
            data_dir=str(data_dir),
            inventory_source="nvml",
            run_as_user=run_as_user,
            gpu_sharing=mode,
        )
        try:
            nodes = self.backend.inventory().nodes
        except Exception as e:  # NVML missing or failing: say so, no traceback
            raise NoGpu(f"NVML found no GPU here ({e})") from e
        if not nodes or not nodes[0].gpus:
            raise NoGpu("NVML found no GPU on this machine")
        self.node: Node = nodes[0]
        self.jobs: dict[int, Job] = {}
        self.handles: dict[int, Any] = {}
        self.next_id = 1
        self.go = data_dir / "go"

    async def __aenter__(self) -> Bench:
        # the service's own start: MPS daemons (mps), refused in words where MPS cannot run
        await self.backend.begin()
        self._poller = asyncio.create_task(self._poll())
        return self

    async def __aexit__(self, *exc: object) -> None:
        for job in self.jobs.values():
            if job.exit is None:
                with contextlib.suppress(Exception):
                    await self.backend.stop(job.workload_id, self.handles[job.workload_id], 1.0)
        self._poller.cancel()
        await self.backend.close()

    # -- placing -------------------------------------------------------------------------------

    def place(
        self, asks: Sequence[tuple[Request, str | None]], node: Node | None = None
    ) -> tuple[list[Placement | None], dict[str, str]]:
        """The engine's placements for ``asks`` (request, user) on this node, all arriving
        at once, in order; None and the engine's reason for those left pending."""
        names = [f"w{i}" for i in range(len(asks))]
        workloads = tuple(
            WorkloadRequest.of(
                kind=Kind.TRAINING, request=request, project="bench", user=user
            ).workload(name, seq, float(seq))
            for seq, (name, (request, user)) in enumerate(zip(names, asks, strict=True))
        )
        snapshot = Snapshot(
            nodes=(node or self.node,),
            queues=(Queue("bench", deserved_gpus=float(self.node.gpus)),),
            workloads=workloads,
        )
        result = run_cycle(snapshot, 100.0, Policy(scorer=scorer_named("pack")))
        starts = {d.workload: d.placement for d in result.decisions if isinstance(d, Start)}
        reasons = {name: str(info) for name, info in result.pending.items()}
        return [starts.get(name) for name in names], reasons

    # -- running -------------------------------------------------------------------------------

    async def start(self, argv: list[str], placement: Placement, user: str | None = None) -> Job:
        workload_id = self.next_id
        self.next_id += 1
        job = JobSpec(
            workload_id=workload_id,
            name=f"probe-{workload_id}",
            user=user or pwd.getpwuid(os.getuid()).pw_name,
            project="bench",
            command=[sys.executable, str(PROBE), *argv],
            working_dir=None if user else str(REPO),
            env={},
            placement=placement,
        )
        self.handles[workload_id] = await self.backend.start(job)
        self.jobs[workload_id] = Job(workload_id, placement, time.time())
        return self.jobs[workload_id]

    async def _poll(self) -> None:
        while True:
            for report in await self.backend.poll():
                if isinstance(report, Exit) and report.workload_id in self.jobs:
                    job = self.jobs[report.workload_id]
                    job.exit, job.ended = report, report.ended_at or time.time()
            await asyncio.sleep(0.1)

    def probes(self, job: Job) -> list[dict[str, Any]]:
        path = self.backend.log_path(job.workload_id)
        lines = Path(path).read_text(errors="replace").splitlines() if path else []
        found = []
        for line in lines:
            if line.startswith('{"probe": true'):
                with contextlib.suppress(ValueError):
                    found.append(json.loads(line))
        job.probes = found
        return found

    def log_tail(self, job: Job, lines: int = 6) -> str:
        path = self.backend.log_path(job.workload_id)
        text = Path(path).read_text(errors="replace") if path else ""
        return "\n".join(text.splitlines()[-lines:])

    async def wait(self, *jobs: Job, timeout: float = JOB_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while any(job.exit is None for job in jobs):
            if time.monotonic() > deadline:
                for job in jobs:
                    if job.exit is None:
                        await self.backend.stop(job.workload_id, self.handles[job.workload_id], 1)
                deadline = time.monotonic() + 15
            await asyncio.sleep(0.1)

    async def until(self, job: Job, action: str, timeout: float = 60.0) -> dict[str, Any]:
        """The probe line ``action`` of a running job, once it has printed it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for probe in self.probes(job):
                if probe.get("action") == action:
                    return probe
            if job.exit is not None:
                break
            await asyncio.sleep(0.05)
        raise RuntimeError(f"job {job.workload_id} never said {action!r}:\n{self.log_tail(job)}")

    async def run(self, argv: list[str], placement: Placement) -> dict[str, Any]:
        job = await self.start(argv, placement)
        await self.wait(job)
        probes = self.probes(job)
        if not probes:
            return {"error": f"no result (exit {job.exit}):\n{self.log_tail(job)}"}
        return probes[-1]


# -- the measurements -----------------------------------------------------------------------------


async def caps(bench: Bench, out: dict[str, Any]) -> None:
    """Each framework filling a 0.25 share; each allocating 30 GiB it asked for."""
    [quarter], _ = bench.place([(Request(gpus=0.25), None)])
    assert quarter is not None
    share = share_of(quarter[0], bench.node.gpu_memory_mib)
    out["share_gib"] = round(share.memory_mib / GIB, 2)
    ceiling = round(2 * share.memory_mib / GIB + 8)
    for framework in ("torch", "jax", "cupy"):
        out[f"fill_{framework}"] = await bench.run(
            ["fill", framework, "--ceiling-gib", str(ceiling)], quarter
        )
    [asked], _ = bench.place([(Request(gpu_memory_mib=30 * GIB), None)])
    assert asked is not None
    out["asked_30_share_gib"] = round(
        share_of(asked[0], bench.node.gpu_memory_mib).memory_mib / GIB, 2
    )
    for framework in ("torch", "jax", "cupy"):
        out[f"alloc30_{framework}"] = await bench.run(["alloc", framework, "--gib", "30"], asked)


async def compute(bench: Bench, out: dict[str, Any]) -> None:
    """Two jobs at 0.25 and 0.75 multiplying matrices at the same moment."""
    placements, _ = bench.place([(Request(gpus=0.25), None), (Request(gpus=0.75), None)])
    assert all(placements), placements
    with contextlib.suppress(FileNotFoundError):
        bench.go.unlink()
    jobs = [
        await bench.start(["matmul", "--seconds", "8", "--go", str(bench.go)], p)
        for p in placements
        if p is not None
    ]
    for job in jobs:
        await bench.until(job, "ready")
    bench.go.touch()
    await bench.wait(*jobs)
    out["compute"] = [
        (bench.probes(job)[-1].get("tflops") if bench.probes(job) else None) for job in jobs
    ]


async def fault(bench: Bench, out: dict[str, Any]) -> None:
    """A job at 0.5 keeps computing while the job at 0.25 beside it faults."""
    placements, _ = bench.place([(Request(gpus=0.5), None), (Request(gpus=0.25), None)])
    assert all(placements), placements
    victim = await bench.start(["survive", "--seconds", "8"], placements[0])
    await bench.until(victim, "ready")
    culprit = await bench.start(["fault"], placements[1])
    await bench.wait(victim, culprit)
    out["fault"] = {
        "culprit": bench.probes(culprit)[-1] if bench.probes(culprit) else bench.log_tail(culprit),
        "culprit_exit": culprit.exit.exit_code if culprit.exit else None,
        "culprit_said": culprit.exit.message if culprit.exit else None,
        "victim": bench.probes(victim)[-1] if bench.probes(victim) else bench.log_tail(victim),
        "victim_exit": victim.exit.exit_code if victim.exit else None,
        # what FracHub makes of the victim's end (mps: "stopped by a GPU fault of ..."; the
        # service requeues an end with no exit code)
        "victim_said": victim.exit.message if victim.exit else None,
        "ended_apart_s": round(abs((victim.ended or 0) - (culprit.ended or 0)), 2),
    }


async def run_mode(mode: str, work: Path, out: dict[str, Any], save) -> None:
    async with Bench(mode, work / mode) as bench:
        out["gpu"] = bench.node.gpu_model
        out["gpu_memory_gib"] = round(bench.node.gpu_memory_mib / GIB, 1)
        for step in (caps, compute, fault):
            began = time.perf_counter()
            try:
                await step(bench, out)
            except Exception as e:  # one step's failure must not cost the others
                out[f"{step.__name__}_error"] = f"{type(e).__name__}: {e}"
            out[f"{step.__name__}_seconds"] = round(time.perf_counter() - began, 1)
            save()  # what a run cut short had measured is kept


# -- the table ------------------------------------------------------------------------------------


def _fill_words(result: dict[str, Any] | None, share_gib: float) -> str:
    if not result or "allocated_gib" not in result:
        return f"no result: {(result or {}).get('error', '?')[:80]}"
    got = result["allocated_gib"]
    if not result.get("stopped"):
        return f"{got:g} GiB, **not stopped** (the probe's ceiling)"
    return f"{got:g} GiB, then refused ({got - share_gib:+.2f} GiB from the share)"


def _seen_words(result: dict[str, Any] | None) -> str:
    seen = (result or {}).get("seen") or {}
    if "total_gib" in seen:
        return f"{seen['free_gib']:.1f} free of {seen['total_gib']:.1f} GiB"
    if "bytes_limit_gib" in seen:
        return f"bytes_limit {seen['bytes_limit_gib']:.1f} GiB"
    return "?"


def table(results: dict[str, dict[str, Any]]) -> str:
    modes = list(results)
    rows: list[tuple[str, list[str]]] = []

    def row(what: str, cell) -> None:
        rows.append((what, [cell(results[mode]) for mode in modes]))

    for framework, name in (("torch", "PyTorch"), ("jax", "JAX"), ("cupy", "raw CUDA (CuPy)")):
        row(
            f"{name} job at 0.25: memory it could take",
            lambda r, f=framework: _fill_words(r.get(f"fill_{f}"), r.get("share_gib", 0)),
        )
    for framework, name in (("torch", "PyTorch"), ("jax", "JAX"), ("cupy", "raw CUDA")):
        row(
            f"asked for 30 GiB: {name} allocates 30 GiB",
            lambda r, f=framework: (
                "yes"
                if (r.get(f"alloc30_{f}") or {}).get("ok")
                else f"no: {(r.get(f'alloc30_{f}') or {}).get('error', '?')[:60]}"
            ),
        )
    row(
        "what `torch.cuda.mem_get_info()` reports at 0.25",
        lambda r: _seen_words(r.get("fill_torch")),
    )
    row("what JAX reports at 0.25", lambda r: _seen_words(r.get("fill_jax")))
    row("what `cudaMemGetInfo` reports at 0.25", lambda r: _seen_words(r.get("fill_cupy")))

    def compute_words(r: dict[str, Any]) -> str:
        pair = r.get("compute") or []
        if len(pair) != 2 or not all(pair):
            return f"no result {r.get('compute_error', '')}"[:80]
        return f"{pair[0]:g} + {pair[1]:g} TFLOP/s (1 : {pair[1] / pair[0]:.2f})"

    row("bf16 matmul, jobs at 0.25 and 0.75 at once", compute_words)

    def fault_words(r: dict[str, Any]) -> str:
        f = r.get("fault")
        if not f:
            return f"no result {r.get('fault_error', '')}"[:80]
        victim = f.get("victim") or {}
        if isinstance(victim, dict) and victim.get("ok"):
            return "the job beside it finished unharmed"
        said = f.get("victim_said") or ""
        if f.get("victim_exit") is None and said:
            return f"**the job beside it died too**; FracHub: “{said}”"
        return "**the job beside it died too**"

    row("one job faults (illegal address)", fault_words)
    for extra in ("accounts", "watchdog"):
        if any(extra in results[mode] for mode in modes):
            row(*_extra_row(extra))
    rows = [(what, [" ".join(cell.split()) for cell in cells]) for what, cells in rows]
    head = "| what | " + " | ".join(f"`{mode}`" for mode in modes) + " |"
    rule = "|---|" + "---|" * len(modes)
    body = ["| " + what + " | " + " | ".join(cells) + " |" for what, cells in rows]
    return "\n".join([head, rule, *body])


def _extra_row(name: str):
    if name == "accounts":
        return (
            "two Linux accounts at 0.25 each",
            lambda r: r.get("accounts", {}).get("words", "—"),
        )
    return ("raw CUDA over its share (watchdog)", lambda r: r.get("watchdog", {}).get("words", "—"))


def machine() -> dict[str, str]:
    facts = {"date": time.strftime("%Y-%m-%d")}
    with contextlib.suppress(Exception):
        query = "--query-gpu=name,driver_version,memory.total"
        line = (
            subprocess.run(
                ["nvidia-smi", query, "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            .stdout.strip()
            .splitlines()[0]
        )
        facts["gpu"], facts["driver"], facts["memory"] = (part.strip() for part in line.split(","))
    with contextlib.suppress(Exception):
        import torch

        facts["torch"] = torch.__version__
        facts["cuda"] = str(torch.version.cuda)
    return facts


def write_doc(doc: Path, text: str) -> None:
    content = doc.read_text()
    before, _, rest = content.partition(BEGIN)
    _, _, after = rest.partition(END)
    if not rest:
        raise SystemExit(f"{doc} has no {BEGIN} … {END} block to fill")
    doc.write_text(f"{before}{BEGIN}\n{text}\n{END}{after}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--doc", default=str(REPO / "docs" / "gpu-sharing.md"))
    parser.add_argument("--json", default="")
    parser.add_argument("--keep", default="", help="copy the jobs' logs and MPS logs here")
    parser.add_argument(
        "--from-json", default="", help="render the table of a saved --json result; measure nothing"
    )
    args = parser.parse_args(argv)
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        return report(saved["machine"], saved["results"], args.doc)
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    results: dict[str, dict[str, Any]] = {}
    facts = machine()

    def save() -> None:
        if args.json:
            saved = {"machine": facts, "results": results}
            Path(args.json).write_text(json.dumps(saved, indent=1))

    work = Path(tempfile.mkdtemp(prefix="frachub-gpu-sharing-"))
    os.chmod(work, 0o755)
    try:
        for mode in modes:
            results[mode] = {}
            began = time.perf_counter()
            print(f"--- {mode}", flush=True)
            try:
                asyncio.run(run_mode(mode, work, results[mode], save))
            except NoGpu as e:
                print(f"gpu_sharing: {e}; this benchmark needs an NVIDIA GPU", file=sys.stderr)
                return 2
            except Exception as e:
                results[mode]["error"] = f"{type(e).__name__}: {e}"
            results[mode]["seconds"] = round(time.perf_counter() - began, 1)
            print(json.dumps(results[mode], indent=1), flush=True)
    finally:
        if args.keep:  # the MPS pipes are sockets and fifos: only files are worth keeping
            shutil.copytree(work, args.keep, dirs_exist_ok=True, ignore=_not_files)
        shutil.rmtree(work, ignore_errors=True)
    save()
    return report(facts, results, args.doc)


def _not_files(directory: str, names: list[str]) -> list[str]:
    paths = ((name, os.path.join(directory, name)) for name in names)
    return [name for name, path in paths if not (os.path.isfile(path) or os.path.isdir(path))]


def report(facts: dict[str, str], results: dict[str, dict[str, Any]], doc: str) -> int:
    """Print the table, and write it into ``doc`` (unless empty) with the machine's facts."""
    stamp = ", ".join(f"{key} {value}" for key, value in facts.items())
    text = f"Measured on {stamp} with `python3 benchmarks/gpu_sharing.py`:\n\n{table(results)}"
    print(text)
    if doc:
        write_doc(Path(doc), text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
