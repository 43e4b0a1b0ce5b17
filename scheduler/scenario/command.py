"""``frachub scenario run FILE``: replay a scenario and print the outcome, as one JSON
document (the default, for scripts and tests) or as tables for people (``--format table``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.common.placement import describe_placement, placement_from_api
from scheduler.scenario.runner import Unsettled, run_scenario
from scheduler.scenario.spec import InvalidSpec, load_scenario


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Replay a scenario (cluster, queues, a timeline of workloads) through the real "
        "scheduling engine in simulated time and print the outcome: one JSON document, or "
        "tables with --format table."
    )
    parser.add_argument(
        "file", metavar="FILE", help="scenario file (YAML; docs/scheduling.md, 'Scenario files')"
    )
    parser.add_argument(
        "--format",
        choices=("json", "table"),
        default="json",
        help="json (default) or table: the workloads, queues and events for people",
    )
    parser.add_argument(
        "--indent", type=int, default=2, help="JSON indentation (0 for one line; default 2)"
    )


def run(args: argparse.Namespace) -> int:
    try:
        scenario = load_scenario(args.file)
    except InvalidSpec as error:
        print(f"frachub scenario run: {error}", file=sys.stderr)
        return 2
    try:
        outcome = run_scenario(scenario)
    except Unsettled as error:
        print(f"frachub scenario run: {args.file}: {error}", file=sys.stderr)
        return 1
    if args.format == "table":
        sys.stdout.write(tables(outcome.to_json()))
        return 0
    json.dump(outcome.to_json(), sys.stdout, indent=args.indent or None)
    sys.stdout.write("\n")
    return 0


def tables(outcome: Mapping[str, Any]) -> str:
    """The outcome's JSON as three aligned tables: workloads, queues, events."""
    workloads = [
        (
            name,
            entry["queue"],
            entry["state"]
            + (f" #{entry['queue_position']}" if entry.get("queue_position") else ""),
            describe_placement(placement_from_api(entry["placement"])) or "-",
            str(entry["preemptions"]),
            entry.get("pending_reason") or "",
        )
        for name, entry in outcome["workloads"].items()
    ]
    queues = [
        (
            name,
            _number(status["allocated_gpus"]),
            _number(status["fair_share_gpus"]),
            str(status["running"]),
            str(status["pending"]),
        )
        for name, status in outcome["queues"].items()
    ]
    events = [
        (
            f"{event['time']:g}",
            event["type"],
            event.get("workload", ""),
            ", ".join(
                f"{key} {value}"
                for key, value in event.items()
                if key not in ("time", "type", "workload") and value is not None
            ),
        )
        for event in outcome["events"]
    ]
    parts = [
        f"At t={outcome['time']:g}s",
        _table(("WORKLOAD", "QUEUE", "STATE", "PLACEMENT", "PREEMPTED", "REASON"), workloads),
        _table(("QUEUE", "ALLOCATED", "FAIR SHARE", "RUNNING", "PENDING"), queues),
        _table(("TIME", "EVENT", "WORKLOAD", "DETAIL"), events),
    ]
    return "\n\n".join(part for part in parts if part) + "\n"


def _number(value: float) -> str:
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return text or "0"


def _table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    if not rows:
        return ""
    widths = [max(len(column), *(len(row[i]) for row in rows)) for i, column in enumerate(columns)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (columns, *rows)
    )
