"""``frachub submit | jobs | describe | logs | cancel | quota``: training from a terminal.

In the style of Run:ai's CLI (``runai submit``, ``runai list``, ``runai logs``, ``runai
delete``; ``list`` and ``delete`` are aliases of ``jobs`` and ``cancel``): the command
goes after ``--``, flags name GPUs as a fraction (``--gpus 0.5``) or as memory
(``--gpu-memory 20``). Every command talks to the FracHub service as the token's owner
through :mod:`hub_ext.client`; ``--url``/``--token`` beat ``FRACHUB_URL`` and
``FRACHUB_TOKEN``/``JUPYTERHUB_API_TOKEN``, so inside a notebook server's terminal nothing
needs passing.

Each command is an ``add_arguments(parser)``/``run(args) -> int`` pair in ``SUBCOMMANDS``,
which ``hub_ext/cli/main.py`` wires in. The argument definitions
(``hub_ext/client/arguments.py``) and the views (``hub_ext/client/jobs.py``) are shared with
the ``%frachub`` magics, so both take the same flags and show the same tables.

Errors: one line ``frachub: <the service's message>`` on stderr and exit status 1 for a
refusal or an unreachable service, 2 for a usage error or missing configuration; never a
traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hub_ext.client.api import FracHubClient, connect
from hub_ext.client.arguments import (
    RECENT_FINISHED,
    add_cancel_arguments,
    add_connection_arguments,
    add_id_argument,
    add_jobs_arguments,
    add_json_argument,
    add_logs_arguments,
    add_submit_arguments,
    add_watch_argument,
)
from hub_ext.client.formatting import now_utc
from hub_ext.client.jobs import (
    cancelled_text,
    command_from,
    follow_job,
    jobs_listing,
    jobs_view,
    notebook_environment,
    submission,
    submit_job,
    sweep_text,
    whose_jobs,
)
from hub_ext.client.reports import (
    describe_report,
    quota_report,
    state_line,
    submitted_text,
)
from hub_ext.client.session import FracHubError, NotConfigured
from hub_ext.workdir import working_dir_field

# --- the commands -------------------------------------------------------------------------------


def _client(args: argparse.Namespace) -> FracHubClient:
    return connect(args.url, args.token)


def _reporting(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """One line on stderr for whatever the service or the configuration refuses."""

    def wrapped(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except NotConfigured as error:
            print(f"frachub: {error} (or pass {error.flag})", file=sys.stderr)
            return 2
        except FracHubError as error:
            print(f"frachub: {error}", file=sys.stderr)
            return 1

    wrapped.__doc__ = run.__doc__
    return wrapped


@_reporting
def run_submit(args: argparse.Namespace) -> int:
    if not args.command:
        print("frachub submit: give the command after --, e.g. -- python train.py", file=sys.stderr)
        return 2
    if args.parallel is not None and not args.sweep:
        print("frachub submit: --parallel goes with --sweep", file=sys.stderr)
        return 2
    working_dir = working_dir_field(args.working_dir, os.getcwd())
    with _client(args) as client:
        body = submission(
            args, command_from(args.command), working_dir, notebook_environment(os.environ)
        )
        workload = submit_job(client, **body)
    print(sweep_text(workload, args.sweep) if args.sweep else submitted_text(workload))
    return 0


def print_json(document: Any) -> None:
    print(json.dumps(document, indent=2, sort_keys=True))


@_reporting
def run_jobs(args: argparse.Namespace) -> int:
    with _client(args) as client:
        if args.json:
            users = whose_jobs(client, args)
            items, _note = jobs_listing(
                client,
                all_states=args.all_states,
                projects=args.project,
                users=users,
                limit=args.limit,
            )
            print_json(items)
            return 0
        if not args.watch:
            print(jobs_view(client, args))
            return 0
        return _watch(lambda: str(jobs_view(client, args)), args.watch)


def _watch(draw: Callable[[], str], seconds: float) -> int:
    """Redraw ``draw()`` every ``seconds`` until Ctrl-C, as ``watch(1)`` does: on a terminal
    the screen is cleared first; piped, each view follows the last."""
    clear = "\x1b[H\x1b[2J" if sys.stdout.isatty() else ""
    try:
        while True:
            view = draw()
            stamp = now_utc().astimezone().strftime("%H:%M:%S")
            sys.stdout.write(f"{clear}Every {seconds:g}s, {stamp} (Ctrl-C stops)\n{view}\n")
            sys.stdout.flush()
            time.sleep(seconds)
    except KeyboardInterrupt:
        return 0


@_reporting
def run_describe(args: argparse.Namespace) -> int:
    with _client(args) as client:
        workload = client.get(args.id)
    if args.json:
        print_json(workload)
    else:
        print(describe_report(workload, now_utc()))
    return 0


@_reporting
def run_logs(args: argparse.Namespace) -> int:
    with _client(args) as client:
        if not args.follow:
            text = client.logs(args.id, tail=args.tail, replica=args.replica)
            if text:
                sys.stdout.write(text if text.endswith("\n") else text + "\n")
            else:
                workload = client.get(args.id)
                print(f"frachub: no output yet; {state_line(workload)}", file=sys.stderr)
            return 0

        def report(line: str) -> None:
            print(f"frachub: {line}", file=sys.stderr, flush=True)

        if not follow_job(client, args, report):
            print(
                f"\nfrachub: stopped following job {args.id}; it goes on "
                f"(frachub cancel {args.id} stops it)",
                file=sys.stderr,
            )
            return 130
    return 0


@_reporting
def run_cancel(args: argparse.Namespace) -> int:
    with _client(args) as client:
        if args.sweep:
            sweep = client.cancel_sweep(args.id)
            for member in sweep["workloads"]:
                print(
                    cancelled_text(member)
                    if member["state"] in ("cancelling", "cancelled")
                    else f"job {member['id']} ({member['name']}) is {member['state']}"
                )
            return 0
        print(cancelled_text(client.cancel(args.id)))
    return 0


@_reporting
def run_quota(args: argparse.Namespace) -> int:
    with _client(args) as client:
        quota = client.quota()
    if args.json:
        print_json(dataclasses.asdict(quota))
    else:
        print(quota_report(quota))
    return 0


@dataclass(frozen=True)
class Subcommand:
    """One ``frachub NAME`` command: its help, its flags and what it does."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str = ""
    aliases: tuple[str, ...] = ()
    """Other names, for Run:ai's and Slurm's users (``list``, ``delete``)."""


def _with_connection(
    *adds: Callable[[argparse.ArgumentParser], None],
) -> Callable[[argparse.ArgumentParser], None]:
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        for add in adds:
            add(parser)
        add_connection_arguments(parser)

    return add_arguments


SUBCOMMANDS = (
    Subcommand(
        "submit",
        "submit a training job",
        _with_connection(add_submit_arguments),
        run_submit,
        "Submit a training job to a project's queue: frachub submit --gpus 0.5 -- python "
        "train.py. It starts when the scheduler finds the GPUs, may borrow idle GPUs beyond "
        "the project's quota, and may then be preempted and requeued.",
    ),
    Subcommand(
        "jobs",
        "list your jobs",
        _with_connection(add_jobs_arguments, add_json_argument, add_watch_argument),
        run_jobs,
        f"Your jobs, newest first: active ones and the {RECENT_FINISHED} latest finished "
        "(--all-states: all). Admins see other users' with --all-users or --user NAME. "
        "--watch redraws until Ctrl-C; --json prints the service's records.",
        aliases=("list",),
    ),
    Subcommand(
        "describe",
        "show one job: placement, pending reason, events",
        _with_connection(add_id_argument, add_json_argument),
        run_describe,
        "One job in full: what it asked for, its state and why (the pending reason), where "
        "it runs, and its events (started, preempted, requeued, finished).",
    ),
    Subcommand(
        "logs",
        "print a job's output (--follow to stream it)",
        _with_connection(add_logs_arguments),
        run_logs,
        "A job's output (replica 0 of a gang unless --replica). --follow streams it until "
        "the job ends, saying meanwhile where it waits in the queue; Ctrl-C stops following, "
        "not the job.",
    ),
    Subcommand(
        "cancel",
        "cancel a pending or running job, or a sweep",
        _with_connection(add_cancel_arguments),
        run_cancel,
        "Cancel a job: a pending one leaves the queue at once; a running one gets SIGTERM, "
        "then SIGKILL after the grace period, and shows 'cancelling' until it has stopped.",
        aliases=("delete",),
    ),
    Subcommand(
        "quota",
        "your projects: quotas, use and fair share",
        _with_connection(add_json_argument),
        run_quota,
        "Your projects: the GPUs each deserves (safe from preemption), its hard limit, what "
        "it and you use now, its fair share of idle GPUs, and its running and pending jobs.",
    ),
)
