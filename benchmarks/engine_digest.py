"""A digest of the engine's decisions on the speed benchmark's clusters (docs/benchmarks.md,
section 2), so that speed work can show it changed no decision.

Speed work on the engine must leave every decision as it was; the scenarios check small
clusters byte for byte, and this checks the 1,000- and 4,000-node ones: sha256 of the burst
cycle on the lifecycle's standing state (decisions, pending reasons and positions, queue
status, next wake-up), the cycle after applying it (decisions, pending reasons), and the
decision for each probe notebook (0.5 and 1 GPU). Run it before and after a change; the
digests must be equal.

    .venv/bin/python benchmarks/engine_digest.py --size 1000
    .venv/bin/python benchmarks/engine_digest.py --size 4000
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from dataclasses import replace
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import engine_speed as bench
from scheduler.engine import CycleResult, decide
from scheduler.engine.session import Session


def _feed(digest, result: CycleResult, *, queues: bool) -> None:
    digest.update(repr(result.decisions).encode())
    digest.update(repr(sorted(result.pending.items())).encode())
    if queues:
        digest.update(repr(sorted(result.queues.items())).encode())
        digest.update(repr(result.next_wakeup).encode())


def digest(scale: bench.Scale, seed: int = 1, placement: str = "frachub") -> str:
    """The hex sha256 of the benchmark's decisions at ``scale``."""
    base = bench._policy(placement)
    snapshot = bench.build_cycle_snapshot(scale, seed)
    nodes, queues = snapshot.nodes, snapshot.queues
    lifecycle = bench.lifecycle_of(snapshot)
    decide(lifecycle.session(nodes, queues, bench.NOW, base))  # the standing state, built
    burst = decide(lifecycle.session(nodes, queues, bench.NOW, base))
    out = hashlib.sha256()
    _feed(out, burst, queues=True)
    lifecycle.apply(burst, bench.NOW + 1)
    _feed(out, decide(lifecycle.session(nodes, queues, bench.NOW + 1, base)), queues=False)
    for gpus in (0.5, 1.0):
        probe = bench.build_probe_snapshot(scale, seed, gpus)
        *running, notebook = probe.workloads
        standing = Session(
            replace(probe, workloads=tuple(running)), bench.NOW, base.for_snapshot(probe)
        )
        decide(standing)
        _feed(out, decide(standing.fork([notebook], bench.NOW)), queues=True)
    return out.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(bench.SIZES), default="1000")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--placement", default="frachub")
    args = parser.parse_args(argv)
    print(f"{args.size}: {digest(bench.SIZES[args.size], args.seed, args.placement)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
