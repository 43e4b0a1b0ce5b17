"""``%frachub`` and ``%%frachub``: training from a notebook.

Load with ``%load_ext hub_ext.magics``; in a FracHub notebook server the kernel loads it
already (``hub_ext/kernelspec.py``). The magics act as the notebook's user through the
server's own token (``JUPYTERHUB_API_TOKEN``) on the service at ``FRACHUB_URL``, and submit
to the notebook's project (``FRACHUB_PROJECT``) when the user has several::

    %frachub submit --gpus 0.5 -- python train.py --epochs 3
    %%frachub submit --gpus 0.5 --name resnet     # the cell is the script
    %frachub jobs | describe ID | logs ID [--follow] [--tail N] | cancel ID | quota | --help
    %frachub status          # this notebook's share, project and GPU use; your jobs
    %frachub notices off|on  # after a cell: "frachub: job 12 (train) was preempted ..."

Notices: after a cell runs, at most every 15 seconds, the magics look at your jobs and print
a line for each that was preempted and requeued, started or finished since the last look
(``hub_ext/client/status.py``, which also says why this and not a JupyterLab extension).

``%%frachub submit`` saves the cell as ``./frachub-jobs/<name>-<UTC time>.py`` under the
kernel's working directory and runs it there as ``python <script>`` with the kernel's own
Python, in a fresh process: it sees files, not the notebook's variables.

The flags and the tables are the CLI's (``hub_ext/client/``):
tables display as HTML in a notebook and as aligned text elsewhere. A bad flag is a one-line
``UsageError``; a refusal from the service is one line ``frachub: <message>``; neither shows
a traceback.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NoReturn

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.display import display

from hub_ext.client.api import FracHubClient, connect
from hub_ext.client.arguments import (
    add_cancel_arguments,
    add_id_argument,
    add_jobs_arguments,
    add_logs_arguments,
    add_submit_arguments,
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
)
from hub_ext.client.reports import describe_report, jobs_table, quota_report, state_line
from hub_ext.client.session import FracHubError
from hub_ext.client.status import NOTICE_EVERY, JobNotices, status_report
from hub_ext.workdir import working_dir_field

SCRIPT_DIR = "frachub-jobs"  # under the kernel's working directory
ALIASES = {"list": "jobs", "delete": "cancel"}  # Run:ai's words, as the CLI takes them


class FracHubMagicError(Exception):
    """A refusal or an unreachable service, shown as one line instead of a traceback:
    IPython renders an exception's ``_render_traceback_()`` in place of its traceback. The
    cell still fails, so "Run All" stops there."""

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[0;31mfrachub: {self}\x1b[0m"]


class _HelpShown(Exception):
    """argparse printed help (``--help``) and wants to exit."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports mistakes as IPython's UsageError (one line, no traceback) and
    never calls sys.exit inside the kernel."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see %frachub help)")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if status:
            raise UsageError((message or f"{self.prog}: error").strip())
        if message:
            print(message, end="")
        raise _HelpShown


DESCRIPTION = """Training from a notebook, as this notebook's user.

  %frachub submit --gpus 0.5 [--replicas N] [--name NAME] [--project P] -- COMMAND...
  %frachub submit --gpus 0.5 --sweep lr=0.1,0.01 [--sweep ...] [--parallel N] -- COMMAND...
  %%frachub submit --gpus 0.5 [--name NAME]     (the cell is the script)
  %frachub jobs [--all-states] [--project P] [--all-users | --user NAME]   (alias: list)
  %frachub describe ID
  %frachub logs ID [--follow] [--tail N] [--replica R]
  %frachub cancel ID | cancel --sweep ID                                     (alias: delete)
  %frachub quota
  %frachub status             this notebook's share, project and GPU use; your jobs
  %frachub notices on|off     a line under a cell when a job of yours is preempted, starts
                              or finishes (on by default)
  %frachub help [COMMAND]     (or %frachub --help, %frachub COMMAND --help)

--gpu-memory 20 (GiB) may replace --gpus; --cpu 4 and --memory 16G ask for CPU cores and
memory (RAM) per replica. Ctrl-C (interrupt the kernel) stops --follow; the
job goes on."""


def build_parser(cell: bool = False) -> _Parser:
    """The magics' command line: the CLI's flags without --url/--token (the notebook server
    provides both)."""
    parser = _Parser(
        prog="%frachub",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
    )
    # `%frachub --help` as every command line takes it (`help` is the magics' own word)
    parser.add_argument("-h", "--help", action="help", help="this help")
    commands = parser.add_subparsers(dest="action", metavar="COMMAND", parser_class=_Parser)
    prog = "%%frachub" if cell else "%frachub"
    submit = commands.add_parser("submit", help="submit a training job", prog=f"{prog} submit")
    add_submit_arguments(submit, cell=cell)
    add_jobs_arguments(
        commands.add_parser("jobs", aliases=["list"], help="list your jobs", prog=f"{prog} jobs")
    )
    add_id_argument(commands.add_parser("describe", help="one job", prog=f"{prog} describe"))
    add_logs_arguments(commands.add_parser("logs", help="a job's output", prog=f"{prog} logs"))
    add_cancel_arguments(
        commands.add_parser(
            "cancel", aliases=["delete"], help="cancel a job or a sweep", prog=f"{prog} cancel"
        )
    )
    commands.add_parser("quota", help="your projects and quotas", prog=f"{prog} quota")
    commands.add_parser(
        "status", help="this notebook's share, project and GPU use", prog=f"{prog} status"
    )
    notices = commands.add_parser(
        "notices", help="notices of your jobs' events after cells", prog=f"{prog} notices"
    )
    notices.add_argument("switch", choices=["on", "off"])
    helper = commands.add_parser("help", help="this help", prog=f"{prog} help")
    helper.add_argument("topic", nargs="?", metavar="COMMAND")
    return parser


def script_path(directory: Path, name: str | None, now: datetime) -> Path:
    """A new file name for a cell's script: ``<name>-<UTC time>.py``, never an existing one."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "-", name or "cell").strip(".-") or "cell"
    stamp = now.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = directory / f"{stem}-{stamp}.py"
    serial = 1
    while path.exists():
        serial += 1
        path = directory / f"{stem}-{stamp}-{serial}.py"
    return path


def write_cell_script(cell: str, cwd: Path, name: str | None) -> Path:
    """Save the cell where the job (and the user) can find it again."""
    directory = cwd / SCRIPT_DIR
    directory.mkdir(exist_ok=True)
    path = script_path(directory, name, datetime.now(timezone.utc))
    path.write_text(cell if cell.endswith("\n") else cell + "\n")
    return path


@magics_class
class FracHubMagics(Magics):
    """``%frachub`` / ``%%frachub``: see the module's docstring."""

    @line_cell_magic
    def frachub(self, line: str, cell: str | None = None) -> None:
        """Submit, watch and cancel FracHub training jobs. ``%frachub help`` for more."""
        try:
            words = shlex.split(line)
        except ValueError as error:
            raise UsageError(f"%frachub: {error}") from None
        parser = build_parser(cell=cell is not None)
        try:
            args = parser.parse_args(words)
        except _HelpShown:
            return
        action = ALIASES.get(args.action, args.action) or "help"
        if cell is not None and action != "submit":
            raise UsageError("%%frachub: only %%frachub submit takes a cell (the script)")
        if action == "help":
            self._help(parser, args.topic if args.action else None)
            return
        try:
            with connect() as client:
                getattr(self, f"_{action}")(client, args, cell)
        except FracHubError as error:
            raise FracHubMagicError(str(error)) from None

    # -- the commands -----------------------------------------------------------------------

    def _help(self, parser: _Parser, topic: str | None) -> None:
        if topic is None:
            print(parser.format_help())
            return
        try:
            parser.parse_args([topic, "--help"])
        except _HelpShown:
            return

    def _submit(self, client: FracHubClient, args: argparse.Namespace, cell: str | None) -> None:
        cwd = Path(os.getcwd())
        working_dir = working_dir_field(args.working_dir, str(cwd))
        script = None
        if cell is None:
            if not args.command:
                raise UsageError(
                    "%frachub submit: give the command after --, or use %%frachub submit "
                    "with the script as the cell"
                )
            command: str | list[str] = command_from(args.command)
        else:
            if not cell.strip():
                raise UsageError("%%frachub submit: the cell is empty; write the script in it")
            script = write_cell_script(cell, cwd, args.name)
            command = [sys.executable, str(script), *args.command]
        try:
            notebook_env = notebook_environment(os.environ, sys.executable)
            workload = submit_job(client, **submission(args, command, working_dir, notebook_env))
        except FracHubError:
            if script is not None:
                script.unlink(missing_ok=True)  # nothing will run it
            raise
        notes = []
        if script is not None:
            notes.append(f"script: {os.path.relpath(script, cwd)}")
        if args.sweep:  # the service answered with the sweep and its jobs
            headline, _cancel = sweep_text(workload, args.sweep).split("\n")
            notes.append(f"cancel them all with %frachub cancel --sweep {workload['id']}")
            display(
                jobs_table(workload["workloads"], now_utc(), title=headline, note="; ".join(notes))
            )
            return
        notes.append(f"follow it with %frachub logs {workload['id']} --follow")
        display(
            jobs_table(
                [workload],
                now_utc(),
                title=f"Submitted job {workload['id']} to project {workload['project']}",
                note="; ".join(notes),
            )
        )

    def _jobs(self, client: FracHubClient, args: argparse.Namespace, cell: Any) -> None:
        display(jobs_view(client, args))

    def _describe(self, client: FracHubClient, args: argparse.Namespace, cell: Any) -> None:
        display(describe_report(client.get(args.id), now_utc()))

    def _logs(self, client: FracHubClient, args: argparse.Namespace, cell: Any) -> None:
        if not args.follow:
            text = client.logs(args.id, tail=args.tail, replica=args.replica)
            if text:
                print(text, end="" if text.endswith("\n") else "\n")
            else:
                print(f"no output yet; {state_line(client.get(args.id))}")
            return

        if not follow_job(client, args, lambda line: print(f"frachub: {line}", flush=True)):
            print(
                f"\nStopped following job {args.id}; it goes on. "
                f"Stop it with %frachub cancel {args.id}",
                flush=True,
            )

    def _cancel(self, client: FracHubClient, args: argparse.Namespace, cell: Any) -> None:
        if args.sweep:
            for member in client.cancel_sweep(args.id)["workloads"]:
                print(cancelled_text(member))
            return
        print(cancelled_text(client.cancel(args.id)))

    def _quota(self, client: FracHubClient, args: argparse.Namespace, cell: Any) -> None:
        display(quota_report(client.quota()))

    def _status(self, client: FracHubClient, args: argparse.Namespace, cell: Any) -> None:
        allocation = os.environ.get("FRACHUB_WORKLOAD_ID")
        notebook = client.get(int(allocation)) if allocation and allocation.isdigit() else None
        display(status_report(notebook, own_jobs(client)))

    def _notices(self, client: FracHubClient, args: argparse.Namespace, cell: Any) -> None:
        NOTICES.enabled = args.switch == "on"
        print(f"frachub: notices of your jobs' events {args.switch}")


def own_jobs(client: FracHubClient) -> list[dict[str, Any]]:
    """The notebook user's active jobs and latest finished ones."""
    user = os.environ.get("JUPYTERHUB_USER")
    items, _note = jobs_listing(client, users=[user] if user else [])
    return items


class _Notices:
    """The kernel's ``post_run_cell`` hook: the notices of ``JobNotices``, printed under the
    cell that just ran. Quiet when FracHub cannot be reached (a notice is no reason to fail a
    cell); on unless ``%frachub notices off``."""

    def __init__(self) -> None:
        self.enabled = True
        self.notices: JobNotices | None = None

    def listing(self) -> list[dict[str, Any]]:
        with connect(timeout=3.0) as client:
            return own_jobs(client)

    def __call__(self, result: Any = None) -> None:
        if not self.enabled or not os.environ.get("FRACHUB_URL"):
            return
        if self.notices is None:
            every = os.environ.get("FRACHUB_NOTICE_SECONDS", "")
            seconds = float(every) if every.replace(".", "", 1).isdigit() else NOTICE_EVERY
            self.notices = JobNotices(self.listing, every=seconds)
        try:
            lines = self.notices.check()
        except Exception:  # unreachable, refused, not configured: no notice this time
            return
        for line in lines:
            print(f"frachub: {line}", flush=True)


NOTICES = _Notices()


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext hub_ext.magics`` (or ``--ext=hub_ext.magics`` on the kernel's command
    line)."""
    ipython.register_magics(FracHubMagics)
    if NOTICES not in ipython.events.callbacks["post_run_cell"]:
        ipython.events.register("post_run_cell", NOTICES)
