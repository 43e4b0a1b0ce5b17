"""``frachub submit | jobs | describe | logs | cancel | quota``: training from a terminal.

In the style of Run:ai's CLI (``runai submit``, ``runai list``, ``runai logs``, ``runai
delete``; ``list`` and ``delete`` are aliases of ``jobs`` and ``cancel``): the command
goes after ``--``, flags name GPUs as a fraction (``--gpus 0.5``) or as memory
(``--gpu-memory 20``). Every command talks to the FracHub service as the token's owner
through :mod:`hub_ext.client`; ``--url``/``--token`` beat ``FRACHUB_URL`` and
``FRACHUB_TOKEN``/``JUPYTERHUB_API_TOKEN``, so inside a notebook server's terminal nothing
needs passing.

Each command is an ``add_arguments(parser)``/``run(args) -> int`` pair in ``SUBCOMMANDS``,
which ``hub_ext/cli.py`` wires in. The argument definitions (``add_*_arguments``) and the
views (``jobs_view``, ...) are shared with the ``%frachub`` magics, so both take the same
flags and show the same tables.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hub_ext.client import (
    FINAL_STATES,
    HOLDING_STATES,
    FracHubClient,
    FracHubError,
    NotConfigured,
    Table,
    WorkloadState,
    connect,
    describe_report,
    format_gpus,
    jobs_table,
    now_utc,
    quota_report,
    state_line,
    submitted_text,
)
from hub_ext.workdir import working_dir_field
from scheduler.common.limits import (
    MAX_GPU_MEMORY_GIB,
    MAX_ID,
    MAX_NAME_LENGTH,
    MAX_REPLICAS,
    gpu_count_problem,
)
from scheduler.common.quantities import memory_gib

RECENT_FINISHED = 10  # `jobs` shows active work plus this many of the latest finished jobs
MAX_SWEEP = 256  # a sweep's jobs in all, as the service bounds them
WATCH_SECONDS = 2.0  # `jobs --watch` redraws this often by default
MAX_WATCH_SECONDS = 3600.0
MAX_LISTED = 1_000_000  # `jobs --limit` at most


# --- argument definitions, shared with the magics -----------------------------------------------


def gpu_count(text: str) -> float:
    """GPUs per replica, by the API's own rule (``scheduler/common/limits.py``): a fraction
    in (0, 1] or a whole number, so ``--gpus 1.5`` is refused here, before anything is sent."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    problem = gpu_count_problem(int(value) if value.is_integer() else value)  # "got 0", not 0.0
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


def _whole_number(text: str, minimum: int, wording: str, maximum: int = MAX_ID) -> int:
    try:
        value = int(text) if len(text) <= 40 else None
    except ValueError:
        value = None
    if value is None:
        raise argparse.ArgumentTypeError(f"not a whole number: {text[:40]!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be {wording}, got {text}")
    if value > maximum:
        raise argparse.ArgumentTypeError(f"must be at most {maximum}, got {text}")
    return value


def watch_interval(text: str) -> float:
    """Seconds between redraws: at least 0.5 (the service is shared), at most an hour."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text[:40]!r}") from None
    if not 0.5 <= value <= MAX_WATCH_SECONDS:
        raise argparse.ArgumentTypeError(
            f"must be between 0.5 and {MAX_WATCH_SECONDS:g} seconds, got {text[:40]}"
        )
    return value


def sweep_parameter(text: str) -> tuple[str, list[str]]:
    """``lr=0.1,0.01``: a parameter and its values (checked in full by the service)."""
    name, sep, values = text.partition("=")
    if not sep or not name or not values:
        raise argparse.ArgumentTypeError(f"expected NAME=V1,V2,..., got {text[:60]!r}")
    return name, values.split(",")


def sweep_parallel(text: str) -> int:
    return _whole_number(text, 1, "at least 1", MAX_SWEEP)


def replicas(text: str) -> int:
    return _whole_number(text, 1, "at least 1", MAX_REPLICAS)


def count(text: str) -> int:
    return _whole_number(text, 0, "0 or more")


def listed(text: str) -> int:
    return _whole_number(text, 1, "at least 1", MAX_LISTED)


def gpu_memory(text: str) -> float:
    """GPU memory in GiB: ``20`` (GiB), ``20G``/``20GiB``, or ``512M``/``512MiB`` (Run:ai's
    ``--gpu-memory 5G`` works as is), read by the one size grammar
    (``scheduler/common/quantities.py``)."""
    value = memory_gib(text, bare="G")
    if value is None:
        raise argparse.ArgumentTypeError(f"not a memory size: {text!r} (for example 20 or 20G)")
    if value * 1024 < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1M, got {text}")
    if value > MAX_GPU_MEMORY_GIB:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_GPU_MEMORY_GIB}G, got {text}")
    return round(value, 6)


def gpu_model(text: str) -> str:
    """A GPU model name as the cluster's nodes report it (bounded as the API bounds it)."""
    if not 0 < len(text) <= MAX_NAME_LENGTH:
        raise argparse.ArgumentTypeError(
            f"a GPU model name is 1 to {MAX_NAME_LENGTH} characters, got {len(text)}"
        )
    return text


MAX_CHECKPOINT_INTERVAL = 10 * 365 * 24 * 3600
"""As the API bounds ``checkpoint_interval_seconds`` (ten years)."""
_UNITS = {"s": 1, "m": 60, "h": 3600}


def checkpoint_interval(text: str) -> float:
    """Seconds between the job's checkpoints: ``600``, ``600s``, ``10m`` or ``1.5h``."""
    number, unit = (text[:-1], text[-1].lower()) if text[-1:].lower() in _UNITS else (text, "s")
    try:
        value = float(number) * _UNITS[unit] if len(text) <= 40 else None
    except ValueError:
        value = None
    if value is None or value != value:
        raise argparse.ArgumentTypeError(
            f"not a duration: {text[:40]!r} (seconds, or with s, m or h: 600, 10m, 1.5h)"
        )
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    if value > MAX_CHECKPOINT_INTERVAL:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_CHECKPOINT_INTERVAL} seconds (ten years), got {text}"
        )
    return value


def env_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def workload_id(text: str) -> int:
    try:
        value = int(text) if len(text) <= 19 else -1
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_ID:
        raise argparse.ArgumentTypeError(f"a job id is a number, got {text[:40]!r}")
    return value


def add_submit_arguments(parser: argparse.ArgumentParser, *, cell: bool = False) -> None:
    """Submit's flags. ``cell``: the magics' ``%%frachub submit``, where the cell is the
    script and what follows ``--`` are its arguments."""
    after = "[-- ARG ...]" if cell else "-- COMMAND [ARG ...]"
    parser.usage = f"%(prog)s (--gpus N | --gpu-memory SIZE) [options] {after}"
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument(
        "-g",
        "--gpus",
        type=gpu_count,
        metavar="N",
        help="GPUs per replica: a fraction (0.25, 0.5) or a whole number",
    )
    size.add_argument(
        "--gpu-memory",
        type=gpu_memory,
        metavar="SIZE",
        help="instead of --gpus: GPU memory per replica, in GiB (20, 20G, 512M)",
    )
    parser.add_argument(
        "--replicas",
        type=replicas,
        metavar="N",
        help="replicas started together as a gang (default 1)",
    )
    parser.add_argument(
        "--gpu-model",
        type=gpu_model,
        action="append",
        metavar="MODEL",
        help="run only on GPUs of this model (as the cluster's nodes name it, e.g. "
        "NVIDIA-A100-SXM4-80GB); repeat to allow several (default: any model)",
    )
    parser.add_argument(
        "--checkpoint-interval",
        type=checkpoint_interval,
        metavar="DURATION",
        help="how often the job saves its work (600, 10m, 1.5h): the scheduler then prefers "
        "to evict jobs that lose the least (default: not declared)",
    )
    parser.add_argument("--name", help="a name for the job (default job-<id>)")
    parser.add_argument(
        "-p",
        "--project",
        help="the project to charge (default: your only project, or the notebook's, "
        "$FRACHUB_PROJECT)",
    )
    parser.add_argument(
        "-e",
        "--env",
        type=env_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for the job (repeatable)",
    )
    parser.add_argument(
        "--sweep",
        type=sweep_parameter,
        action="append",
        default=[],
        metavar="NAME=V1,V2,...",
        help="a sweep: one job per combination of the values (repeatable; each job finds "
        "its value in $FRACHUB_SWEEP_NAME and its number in $FRACHUB_SWEEP_INDEX)",
    )
    parser.add_argument(
        "--parallel",
        type=sweep_parallel,
        metavar="N",
        help=f"with --sweep: at most N of its jobs run at once (default all; 1-{MAX_SWEEP})",
    )
    parser.add_argument(
        "--working-dir",
        metavar="DIR",
        help="the directory to run in; relative to your home where jobs run (default: the "
        "current directory)",
    )
    if cell:
        parser.add_argument(
            "command", nargs="*", metavar="ARG", help="after --: arguments for the cell's script"
        )
    else:
        parser.add_argument(
            "command",
            nargs="*",
            metavar="COMMAND",
            help="after --: the program and its arguments (one quoted argument runs with "
            "/bin/sh -c)",
        )


def add_jobs_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-A",
        "--all-states",
        action="store_true",
        help=f"every job, not only active ones and the {RECENT_FINISHED} latest finished",
    )
    parser.add_argument(
        "-p", "--project", action="append", default=[], help="only this project (repeatable)"
    )
    who = parser.add_mutually_exclusive_group()
    who.add_argument(
        "--all-users",
        action="store_true",
        help="admins: every user's jobs (default: your own)",
    )
    who.add_argument(
        "-u",
        "--user",
        action="append",
        default=[],
        metavar="NAME",
        help="admins: this user's jobs (repeatable), as squeue -u",
    )
    parser.add_argument(
        "-n",
        "--limit",
        type=listed,
        metavar="N",
        help="at most N jobs, the newest (default: all that match, page after page)",
    )


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="print the service's JSON instead of a table"
    )


def add_watch_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-w",
        "--watch",
        nargs="?",
        type=watch_interval,
        const=WATCH_SECONDS,
        metavar="SECONDS",
        help=f"redraw every SECONDS (default {WATCH_SECONDS:g}) until Ctrl-C, as watch(1)",
    )


def add_id_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", type=workload_id, metavar="ID", help="the job's id")


def add_logs_arguments(parser: argparse.ArgumentParser) -> None:
    add_id_argument(parser)
    parser.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="stream the output until the job ends (Ctrl-C stops following; the job goes on)",
    )
    parser.add_argument("--tail", type=count, metavar="N", help="only the last N lines")
    parser.add_argument(
        "--replica", type=count, default=0, metavar="R", help="which replica of a gang (default 0)"
    )


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("connection")
    group.add_argument(
        "--url",
        help="the FracHub service's URL, e.g. https://hub.example.org/services/frachub/ "
        "(default: $FRACHUB_URL)",
    )
    group.add_argument(
        "--token",
        help="a JupyterHub API token (default: $FRACHUB_TOKEN, else $JUPYTERHUB_API_TOKEN; "
        "prefer the variable: flags show in the process list)",
    )


# --- views: a client and parsed arguments -> what to show, shared with the magics ---------------


def submission(
    args: argparse.Namespace, command: str | list[str], working_dir: str | None
) -> dict[str, Any]:
    """The keyword arguments of ``FracHubClient.submit`` from submit's flags."""
    if args.parallel is not None and not args.sweep:
        raise FracHubError(0, "--parallel goes with --sweep")
    sweep = None
    if args.sweep:
        sweep = {"parameters": dict(args.sweep)}
        if args.parallel is not None:
            sweep["parallel"] = args.parallel
    return {
        **({"sweep": sweep} if sweep else {}),
        "command": command,
        "gpus": args.gpus,
        "gpu_memory_gib": args.gpu_memory,
        "replicas": args.replicas,
        "name": args.name,
        "project": args.project,
        "env": dict(args.env) or None,
        "working_dir": working_dir,
        **({"gpu_model": args.gpu_model} if args.gpu_model else {}),
        **(
            {"checkpoint_interval_seconds": args.checkpoint_interval}
            if args.checkpoint_interval
            else {}
        ),
    }


def follow_job(
    client: FracHubClient, args: argparse.Namespace, report: Callable[[str], None]
) -> bool:
    """Stream a job's output to stdout until it ends, telling ``report`` of each change (its
    place in the queue, the start, the end) in one line; False when the user stopped
    following with Ctrl-C (the job goes on)."""

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    def progress(workload: dict[str, Any]) -> None:
        sys.stdout.flush()
        report(state_line(workload))

    try:
        client.follow_logs(args.id, write, tail=args.tail, replica=args.replica, on_state=progress)
    except KeyboardInterrupt:
        return False
    return True


def command_from(words: Sequence[str]) -> str | list[str]:
    """One word is a shell command line (``"python a.py > out.txt"``), several an argv list
    run as is, as with docker's two forms of CMD."""
    return words[0] if len(words) == 1 else list(words)


def submit_job(client: FracHubClient, **kwargs: Any) -> dict[str, Any]:
    """``client.submit`` with a hint where the service wants a project chosen, and a refusal
    of what can never start (409) saying plainly that nothing was submitted."""
    try:
        return client.submit(**kwargs)
    except FracHubError as error:
        if error.status == 400 and error.message.startswith("project:"):
            error.message += "; choose one with --project"
        if error.status == 409:
            error.message = f"not submitted: {error.message}"
        raise


def whose_jobs(client: FracHubClient, args: argparse.Namespace) -> list[str]:
    """The ``user`` filter of ``jobs``: the caller's own jobs by default (an admin's token
    would otherwise list everyone's), every user's with ``--all-users``, named users with
    ``--user``; the last two need the admin right, said here in the CLI's words."""
    if args.all_users or args.user:
        me = client.user()
        if not me.get("admin"):
            flag = "--all-users" if args.all_users else "--user"
            raise FracHubError(403, f"{flag} needs the FracHub admin right ({me['name']} has not)")
        return list(args.user)
    return [client.user()["name"]]


def jobs_listing(
    client: FracHubClient,
    *,
    all_states: bool = False,
    projects: Sequence[str] = (),
    users: Sequence[str] = (),
    limit: int | None = None,
) -> tuple[list[dict[str, Any]], str]:
    """Active work and the latest finished jobs, newest first, or everything; at most the
    newest ``limit``; with the note saying which when some were left out."""
    # one more than shown tells whether some were left out
    most = None if limit is None else limit + 1
    if all_states:
        items = client.list_workloads(projects=projects, users=users, limit=most)
        recent: list[dict[str, Any]] = []
    else:
        active = client.list_workloads(active=True, projects=projects, users=users, limit=most)
        recent = client.list_workloads(
            states=FINAL_STATES, projects=projects, users=users, limit=RECENT_FINISHED
        )
        items = sorted({w["id"]: w for w in active + recent}.values(), key=lambda w: -w["id"])
    note = ""
    if limit is not None and len(items) > limit:
        items, note = items[:limit], f"(the newest {limit}; --limit for more)"
    elif len(recent) >= RECENT_FINISHED:
        note = f"(active jobs and the {RECENT_FINISHED} latest finished; --all-states for all)"
    return items, note


def jobs_view(client: FracHubClient, args: argparse.Namespace) -> Table:
    """``jobs``'s table from its flags (``add_jobs_arguments``)."""
    items, note = jobs_listing(
        client,
        all_states=args.all_states,
        projects=args.project,
        users=whose_jobs(client, args),
        limit=args.limit,
    )
    note = "\n".join(part for part in (sweeps_note(items), note) if part)
    return jobs_table(items, now_utc(), note=note, empty="no jobs")


def sweep_text(sweep: dict[str, Any], parameters: Sequence[tuple[str, list[str]]] = ()) -> str:
    """The lines that confirm a sweep: how many jobs (of how many values of each of the
    ``parameters`` given), which ids, how to cancel them all."""
    members = sweep["workloads"]
    first = members[0]
    sizes = " x ".join(str(len(values)) for _name, values in parameters)
    return (
        f"Submitted sweep {sweep['id']} to project {first['project']}: {len(members)} jobs"
        + (f" ({sizes})" if sizes and "x" in sizes else "")
        + f" of {format_gpus(first, words=True)}, at most {sweep['parallel']} at once: "
        f"jobs {members[0]['id']}-{members[-1]['id']}\n"
        f"Cancel them all with: frachub cancel --sweep {sweep['id']}"
    )


def sweeps_note(items: Sequence[dict[str, Any]]) -> str:
    """One line per sweep in a listing: its jobs and its limit."""
    sweeps: dict[int, list[dict[str, Any]]] = {}
    for item in items:
        if item.get("sweep_id") is not None:
            sweeps.setdefault(item["sweep_id"], []).append(item)
    lines = []
    for sweep_id, members in sorted(sweeps.items()):
        running = sum(1 for m in members if m["state"] in HOLDING_STATES)
        ids = sorted(m["id"] for m in members)
        lines.append(
            f"sweep {sweep_id}: jobs {ids[0]}-{ids[-1]} shown, {running} running, at most "
            f"{members[0].get('sweep_parallel')} at once (frachub cancel --sweep {sweep_id})"
        )
    return "\n".join(lines)


def cancelled_text(workload: dict[str, Any]) -> str:
    head = f"job {workload['id']} ({workload['name']})"
    if workload["state"] == WorkloadState.CANCELLING:
        return (
            f"Cancelling {head}: it was asked to stop (SIGTERM, then SIGKILL after the grace "
            "period)"
        )
    return f"Cancelled {head}"


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
        workload = submit_job(client, **submission(args, command_from(args.command), working_dir))
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


def add_cancel_arguments(parser: argparse.ArgumentParser) -> None:
    add_id_argument(parser)
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="ID is a sweep's: cancel every job of it not yet ended",
    )


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
