"""``frachub simulate fleet``: the same arrivals under static quotas, a shared pool, quotas with
reclaim on whole GPUs, and FracHub, through the real engine over simulated days.

Wired into the ``frachub`` CLI by ``hub_ext/cli/main.py`` through :func:`add_arguments` and
:func:`run`. User mistakes (unknown preset or variant, malformed description, missing
Philly file) print one line on stderr and return 2; an engine that never settles, 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

from tqdm import tqdm

from scheduler.engine import Kind
from scheduler.fields import InvalidSpec
from scheduler.fleet.description import (
    DAY,
    HOUR,
    Description,
    load_description,
    parse_description_text,
)
from scheduler.fleet.driver import FleetRun, simulate
from scheduler.fleet.metrics import intervals_at_least, offered_load, summarize, time_average
from scheduler.fleet.presets import PRESETS
from scheduler.fleet.report import plot, tables, to_json
from scheduler.fleet.runtimes import DEFAULT_PHILLY, TraceMissing, load_runtimes
from scheduler.fleet.variants import DEFAULT_VARIANTS, VARIANTS
from scheduler.fleet.workload import Job, generate
from scheduler.progress import StepQueue, bar, report_step
from scheduler.scenario.runner import Unsettled
from scheduler.scenario.spec import WEEK, UsageSpec

DEFAULT_PRESET = "institute"


class UsageError(ValueError):
    """A command-line value is wrong; the message is printed as is."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``frachub simulate fleet``."""
    parser.description = (
        "Simulate days of a multi-tenant GPU cluster (notebooks in working hours, training "
        "with real Philly run times, gangs, a preemption grace period) and compare static "
        "per-project GPUs, a shared FCFS pool, quotas with reclaim on whole GPUs, and FracHub "
        "on the same arrivals. The format of description files is in docs/fleet.md."
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--preset",
        default=None,
        help=f"a built-in description: {', '.join(PRESETS)} (default: {DEFAULT_PRESET})",
    )
    source.add_argument("--description", metavar="FILE", help="a workload description file (YAML)")
    parser.add_argument(
        "--print-description",
        action="store_true",
        help="print the preset's description file and exit (a starting point for your own)",
    )
    parser.add_argument(
        "--days", type=int, default=None, help="simulated days (default: the description's)"
    )
    parser.add_argument("--seed", type=int, default=1, help="arrival seed (default: 1)")
    parser.add_argument(
        "--warmup-days",
        type=float,
        default=None,
        help="days left out of the averages while the empty cluster fills "
        "(default: 1, or 0 for a one-day run)",
    )
    parser.add_argument(
        "--variants",
        default=",".join(DEFAULT_VARIANTS),
        help=f"comma-separated, from {', '.join(VARIANTS)} (default: {','.join(DEFAULT_VARIANTS)})",
    )
    parser.add_argument(
        "--philly",
        default=str(DEFAULT_PHILLY),
        metavar="PATH",
        help="a run-time CSV, one column 'runtime' in seconds (default: the Philly trace's run "
        "times, shipped with FracHub; see docs/fleet.md)",
    )
    parser.add_argument(
        "--no-checkpoint-runs",
        action="store_true",
        help="skip rerunning the variants that evict with checkpointing off "
        "(the 'GPU-h lost, no checkpoints' column)",
    )
    parser.add_argument(
        "--usage-half-life",
        type=float,
        metavar="HOURS",
        help="turn usage-decayed fair share on with this half-life in simulated hours "
        "(window: 7 days; overrides the description's usage section)",
    )
    parser.add_argument(
        "--usage-k",
        type=float,
        default=1.0,
        metavar="K",
        help="usage-decayed fair share's weight, KAI's kValue (default: 1)",
    )
    parser.add_argument(
        "--take-offer",
        type=float,
        metavar="SHARE",
        help="the share of users (0 to 1) who, when their notebook would wait at its "
        "project's quota, take the offer to start it now as a preemptible notebook "
        "(FracHub's variants; overrides each project's notebooks.take_offer, default 0)",
    )
    parser.add_argument(
        "--interactive-reserve",
        type=float,
        default=0.0,
        metavar="GPUS",
        help="idle GPUs borrowing work may not take while a project has unused deserved "
        "quota, for in-quota notebooks (FracHubService.interactive_reserve_gpus; default 0: "
        "off)",
    )
    parser.add_argument("--plots", metavar="DIR", help="write PNG plots to DIR")
    parser.add_argument(
        "--jobs",
        type=int,
        default=min(4, os.cpu_count() or 1),
        help="variants simulated in parallel processes (default: up to 4, one per CPU)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object, no tables")


def _load(args: argparse.Namespace) -> tuple[str, Description, str]:
    if args.description is not None:
        return args.description, load_description(args.description), ""
    name = args.preset or DEFAULT_PRESET
    if name not in PRESETS:
        raise UsageError(f"--preset: unknown preset {name!r} (choose from {', '.join(PRESETS)})")
    return f"preset {name}", parse_description_text(PRESETS[name]), PRESETS[name]


def _with_usage(description: Description, args: argparse.Namespace) -> Description:
    """The description with ``--usage-half-life``'s usage-decayed fair share, if given."""
    if args.usage_half_life is None:
        return description
    if args.usage_half_life <= 0:
        raise UsageError(f"--usage-half-life: must be > 0 hours, got {args.usage_half_life:g}")
    if args.usage_k < 0:
        raise UsageError(f"--usage-k: must be >= 0, got {args.usage_k:g}")
    half_life = args.usage_half_life * HOUR
    spec = UsageSpec(half_life, WEEK, args.usage_k, min(half_life / 10, WEEK / 20))
    return replace(description, usage=spec)


def _with_reserve(description: Description, gpus: float) -> Description:
    """The description with the interactive reserve at ``gpus`` (0: off)."""
    if not 0 <= gpus < float("inf"):
        raise UsageError(f"--interactive-reserve: must be a number of GPUs >= 0, got {gpus:g}")
    return replace(description, interactive_reserve_gpus=gpus)


def _with_offer(description: Description, share: float | None) -> Description:
    """The description with every project's users taking the offer at ``share``, if given."""
    if share is None:
        return description
    if not 0 <= share <= 1:
        raise UsageError(f"--take-offer: must be a share from 0 to 1, got {share:g}")
    projects = tuple(
        replace(p, notebooks=replace(p.notebooks, take_offer=share)) if p.notebooks else p
        for p in description.projects
    )
    return replace(description, projects=projects)


def _variants(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    for name in names:
        if name not in VARIANTS:
            raise UsageError(
                f"--variants: unknown variant {name!r} (choose from {', '.join(VARIANTS)})"
            )
    if not names:
        raise UsageError("--variants: name at least one variant")
    return list(dict.fromkeys(names))


def _one(
    task: tuple[Description, tuple[Job, ...], str, int, bool],
    step: Callable[[int], None] = report_step,
) -> FleetRun:
    """One variant's run; each simulated day is one ``step`` of the progress bar (in a pool
    worker, sent to the parent's bar)."""
    description, jobs, variant, days, checkpointing = task
    return simulate(
        description,
        jobs,
        VARIANTS[variant],
        days,
        checkpointing=checkpointing,
        progress=lambda _day, _of: step(1),
    )


def run(args: argparse.Namespace) -> int:
    """Simulate, then print tables or JSON (and write plots); 2 on bad input, 0 otherwise."""
    try:
        source, description, text = _load(args)
        if args.print_description:
            if not text:
                raise UsageError("--print-description prints a preset; use it with --preset")
            sys.stdout.write(text)
            return 0
        variants = _variants(args.variants)
        days = description.days if args.days is None else args.days
        if days < 1:
            raise UsageError(f"--days: must be at least 1, got {days}")
        warmup = (1.0 if days > 1 else 0.0) if args.warmup_days is None else args.warmup_days
        if not 0 <= warmup < days:
            raise UsageError(f"--warmup-days: must be in [0, {days}), got {warmup:g}")
        if args.jobs < 1:
            raise UsageError(f"--jobs: must be at least 1, got {args.jobs}")
        if args.plots:
            _need_matplotlib()
        runtimes = load_runtimes(Path(args.philly))
        description = _with_usage(description, args)
        description = _with_reserve(description, args.interactive_reserve)
        description = _with_offer(description, args.take_offer)
    except (UsageError, InvalidSpec, TraceMissing) as error:
        print(f"frachub simulate fleet: {error}", file=sys.stderr)
        return 2

    began = time.monotonic()
    jobs = generate(description, days, args.seed, runtimes)
    checkpoints = any(
        p.training is not None and p.training.checkpoint_minutes for p in description.projects
    )
    # the variants that may evict run again with checkpointing off, in the same batch
    again = [name for name in variants if VARIANTS[name].preemption and checkpoints]
    if args.no_checkpoint_runs:
        again = []
    tasks = [(description, jobs, name, days, True) for name in variants]
    tasks += [(description, jobs, name, days, False) for name in again]
    try:
        with bar(len(tasks) * days, "simulated days", enabled=not args.json) as progress:
            results = _map(tasks, args.jobs, progress)
    except Unsettled as error:  # an engine bug (rule 8), reported like `scenario run` does
        print(f"frachub simulate fleet: {error}", file=sys.stderr)
        return 1
    runs = results[: len(variants)]
    no_checkpoint = {run.variant: run for run in results[len(variants) :]}
    for fleet_run in runs:
        if not checkpoints or not any(record.evictions for record in fleet_run.records):
            no_checkpoint[fleet_run.variant] = fleet_run  # checkpoints change nothing there
    seconds = time.monotonic() - began

    end = days * DAY
    offered = offered_load(jobs, end)
    busy = intervals_at_least(*offered, description.capacity, warmup * DAY, end)
    summaries = [summarize(r, warmup * DAY, no_checkpoint.get(r.variant), busy) for r in runs]
    if args.plots:
        for path in plot(runs, description.grace_seconds, Path(args.plots)):
            print(f"fleet: wrote {path}", file=sys.stderr)
    meta = {
        "description": source,
        "name": description.name,
        "gpus": description.capacity,
        "days": days,
        "warmup_days": warmup,
        "seed": args.seed,
        "take_offer": {p.name: p.notebooks.take_offer for p in description.projects if p.notebooks},
        "grace_seconds": description.grace_seconds,
        "notebooks": sum(job.kind is Kind.INTERACTIVE for job in jobs),
        "training_jobs": sum(job.kind is Kind.TRAINING for job in jobs),
        "offered_load": time_average(*offered, end, [(warmup * DAY, end)]) / description.capacity,
        "busy_share": sum(hi - lo for lo, hi in busy) / (end - warmup * DAY),
        "seconds": round(seconds, 1),
    }
    if description.interactive_reserve_gpus:
        meta["interactive_reserve_gpus"] = description.interactive_reserve_gpus
    if args.json:
        print(json.dumps(to_json(summaries, meta)))
        return 0
    print(
        f"{description.name}: {description.capacity} GPUs, {days} simulated days "
        f"(averages from day {warmup:g}), seed {args.seed}, grace period "
        f"{description.grace_seconds:g}s; {meta['notebooks']} notebooks, "
        f"{meta['training_jobs']} training jobs; {seconds:.0f}s"
    )
    print(
        f"offered load {meta['offered_load']:.0%} of the cluster on average; busy hours "
        f"(offered load >= the cluster) {meta['busy_share']:.0%} of the time"
    )
    print()
    print(tables(summaries))
    return 0


def _need_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("--plots needs matplotlib: pip install 'frachub[plots]'") from None


def _map(tasks: list, jobs: int, progress: tqdm) -> list[FleetRun]:
    if jobs == 1 or len(tasks) <= 1:
        return [_one(task, progress.update) for task in tasks]
    steps = StepQueue()
    with ProcessPoolExecutor(
        max_workers=min(jobs, len(tasks)), initializer=steps.initializer, initargs=steps.initargs
    ) as pool:
        futures = [pool.submit(_one, task) for task in tasks]
        steps.drain(futures, progress)
        return [future.result() for future in futures]
