"""``frachub simulate openb``: replay the openb trace with one or all placement policies.

Wired into the ``frachub`` CLI by ``hub_ext/cli/main.py`` through
:func:`add_arguments` and :func:`run`. User mistakes (missing or malformed
file, unknown policy, bad ``--seeds``) print one line on stderr and return 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from scheduler.openb.policies import POLICIES
from scheduler.openb.replay import BUCKETS, replay, summarize
from scheduler.openb.trace import TraceError, load_nodes, load_pods
from scheduler.progress import bar

TRACE_ENV = "FRACHUB_OPENB_DIR"
TRACE_DIR = Path(os.environ.get(TRACE_ENV, "openb"))
"""The openb trace's folder (Alibaba's cluster-trace-gpu-v2023, not shipped with FracHub; see
docs/benchmarks.md): ``$FRACHUB_OPENB_DIR``, else ``./openb``."""
DEFAULT_NODES = TRACE_DIR / "openb_node_list_gpu_node.csv"
DEFAULT_PODS = TRACE_DIR / "openb_pod_list_default.csv"
DEFAULT_POLICY = "frachub"


class UsageError(ValueError):
    """A command-line value is wrong; the message is printed as is."""


def parse_seeds(text: str) -> list[int]:
    """``42``, ``42-51`` (inclusive) or ``42,45,50`` into a list of seeds."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        try:
            first = int(lo)
            last = int(hi) if sep else first
        except ValueError:
            raise UsageError(
                f"--seeds: {text!r} is not a seed list (try 42, 42-51 or 42,43)"
            ) from None
        if first < 0 or last < first:
            raise UsageError(f"--seeds: range {part.strip()!r} is empty or negative")
        seeds.extend(range(first, last + 1))
    return seeds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``frachub simulate openb``."""
    parser.description = (
        "Replay Alibaba's openb GPU-sharing trace the way the FGD paper (ATC'23) measures "
        "placement quality: pods arrive in a seeded order up to 130% of the cluster, each is "
        "placed at once or fails, and the allocated share of GPU capacity is reported at "
        "arrived = 50..130%."
    )
    parser.add_argument(
        "--nodes",
        default=None,
        help=f"node list CSV (default: {DEFAULT_NODES} when present)",
    )
    parser.add_argument(
        "--pods",
        default=None,
        help=f"pod list CSV (default: {DEFAULT_PODS} when present)",
    )
    parser.add_argument(
        "--policy",
        default=DEFAULT_POLICY,
        help=f"one of {', '.join(POLICIES)}, or 'all' (default: {DEFAULT_POLICY})",
    )
    parser.add_argument(
        "--seeds",
        default="42-51",
        help="seeds, e.g. 42-51 (the paper's ten), 42, or 42,43 (default: 42-51)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object instead of a table (with --policy all: "
        '{"policy": "all", "results": [...one object per policy...]})',
    )


def _trace_path(value: str | None, default: Path, flag: str) -> Path:
    if value is not None:
        return Path(value)
    if default.exists():
        return default
    raise UsageError(
        f"{flag} is required: no default trace at {default} (set {TRACE_ENV} to the folder "
        "of Alibaba's openb trace, cluster-trace-gpu-v2023; see docs/benchmarks.md)"
    )


def _steps(progress: tqdm) -> Callable[[int, int], None]:
    """The replay's ``(done, total)`` callback as a fraction of one step of the bar."""
    last = 0.0

    def show(done: int, total: int) -> None:
        nonlocal last
        progress.update(done / total - last)
        last = done / total

    return show


def _table(summaries: list[dict]) -> str:
    head = "policy      " + "".join(f"{b:>8}" for b in BUCKETS) + "   p50 µs   p99 µs"
    lines = ["unallocated GPU % at arrived % (mean over seeds)", head]
    for s in summaries:
        cells = "".join(
            f"{'-' if v is None else format(v, '.2f'):>8}" for v in s["unallocated_pct"].values()
        )
        us = s["decision_us"]
        lines.append(f"{s['policy']:<12}{cells}{us['p50']:>9.0f}{us['p99']:>9.0f}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Replay, then print a table or JSON; 2 on bad input, 0 otherwise."""
    try:
        seeds = parse_seeds(args.seeds)
        if args.policy != "all" and args.policy not in POLICIES:
            raise UsageError(
                f"--policy: unknown policy {args.policy!r} (choose from {', '.join(POLICIES)}, all)"
            )
        nodes = load_nodes(_trace_path(args.nodes, DEFAULT_NODES, "--nodes"))
        pods = load_pods(_trace_path(args.pods, DEFAULT_PODS, "--pods"))
    except (UsageError, TraceError) as exc:
        print(f"frachub simulate openb: {exc}", file=sys.stderr)
        return 2
    names = list(POLICIES) if args.policy == "all" else [args.policy]
    summaries = []
    # one step per (policy, seed) run; a run's arrival order has its own length, so each
    # advances the bar by its fraction done
    with bar(len(names) * len(seeds), "replay", enabled=not args.json) as progress:
        for name in names:
            results = []
            for seed in seeds:
                progress.set_description(f"{name} seed {seed}")
                results.append(replay(nodes, pods, name, seed, progress=_steps(progress)))
            summaries.append(summarize(results))
    if args.json:
        out = summaries[0] if len(summaries) == 1 else {"policy": "all", "results": summaries}
        print(json.dumps(out))
    else:
        print(_table(summaries))
    return 0
