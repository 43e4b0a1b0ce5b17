"""The job commands' views: a client and parsed arguments -> what to send and what to show.

Shared by the ``frachub`` CLI (``hub_ext/cli/jobs.py``) and the ``%frachub`` magics, so both
submit the same request for the same flags and show the same tables.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hub_ext.client.api import FracHubClient
from hub_ext.client.arguments import RECENT_FINISHED
from hub_ext.client.formatting import format_gpus, now_utc
from hub_ext.client.reports import (
    Table,
    jobs_table,
    state_line,
)
from hub_ext.client.session import FracHubError
from scheduler.common.scopes import ADMIN_SCOPE, lacking
from scheduler.common.states import FINAL_STATES, HOLDING_STATES, WorkloadState

# --- views: a client and parsed arguments -> what to show, shared with the magics ---------------


NOTEBOOK_MARK = "JUPYTERHUB_USER"
"""Set by JupyterHub in a single-user server, so in its kernels and terminals too."""
NOTEBOOK_VARIABLES = ("PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV")
"""What makes ``python`` (and every other command) the notebook's own."""


def notebook_environment(
    environ: Mapping[str, str], interpreter: str | None = None
) -> dict[str, str]:
    """The submitting notebook's environment, which a job gets by default: without it a job
    runs with the service's PATH, so ``python`` is the service's interpreter and the packages
    the user installed for the notebook are missing. ``interpreter`` (the kernel's own
    ``sys.executable``, for the magics) goes first on PATH; the CLI in a terminal keeps the
    terminal's PATH, whose first ``python`` is the one the user types. Empty outside a
    single-user server: a laptop's PATH means nothing where jobs run. The job runs as the
    submitting user (or, in the demo, as the one account everything runs as), so a PATH only
    ever chooses the submitter's own programs."""
    if not environ.get(NOTEBOOK_MARK):
        return {}
    env = {name: environ[name] for name in NOTEBOOK_VARIABLES if environ.get(name)}
    if interpreter:
        first = os.path.dirname(interpreter)
        rest = [d for d in env.get("PATH", "").split(os.pathsep) if d and d != first]
        env["PATH"] = os.pathsep.join([first, *rest])
    return env


def submission(
    args: argparse.Namespace,
    command: str | list[str],
    working_dir: str | None,
    notebook_env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The keyword arguments of ``FracHubClient.submit`` from submit's flags; the job's env
    is ``notebook_env`` (``notebook_environment``) unless ``--no-notebook-env``, under the
    ``--env`` variables given."""
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
        "env": {**({} if args.no_notebook_env else dict(notebook_env or {})), **dict(args.env)}
        or None,
        "working_dir": working_dir,
        **({"gpu_model": args.gpu_model} if args.gpu_model else {}),
        **({"cpu": args.cpu} if args.cpu is not None else {}),
        **({"memory_gib": args.memory} if args.memory is not None else {}),
        **(
            {"checkpoint_interval_seconds": args.checkpoint_interval}
            if args.checkpoint_interval
            else {}
        ),
        **({"time_limit": args.time} if args.time else {}),
        **({"after": args.after} if args.after is not None else {}),
        **({"after_ok": args.after_ok} if args.after_ok is not None else {}),
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
    ``--user``; the last two need the admin scope, said here in the CLI's words: what lacks
    it is the token the client sends (named by where it came from), not necessarily its
    user."""
    if args.all_users or args.user:
        me = client.user()
        if not me.get("admin"):
            flag = "--all-users" if args.all_users else "--user"
            credential = f"the token in {client.token_source}"
            if client.token_source == "--token":
                credential = "the token given with --token"
            reason = lacking(ADMIN_SCOPE, credential, admin_group=bool(me.get("in_admin_group")))
            raise FracHubError(403, f"{flag} needs the FracHub admin scope {ADMIN_SCOPE}: {reason}")
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
