"""``frachub scenario run FILE``: replay a scenario and print the outcome as JSON."""

from __future__ import annotations

import argparse
import json
import sys

from scheduler.scenario.runner import Unsettled, run_scenario
from scheduler.scenario.spec import InvalidSpec, load_scenario


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Replay a scenario (cluster, queues, a timeline of workloads) through the real "
        "scheduling engine in simulated time and print the outcome as one JSON document."
    )
    parser.add_argument("file", metavar="FILE", help="scenario file (YAML, see docs/scheduling.md)")
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
    json.dump(outcome.to_json(), sys.stdout, indent=args.indent or None)
    sys.stdout.write("\n")
    return 0
