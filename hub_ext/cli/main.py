# PYTHON_ARGCOMPLETE_OK
"""The ``frachub`` command.

Each subcommand lives next to the code it drives and contributes two functions,
``add_arguments(parser)`` and ``run(args) -> int``; this module only wires them
into one argparse tree. User mistakes are reported as one line on stderr with
exit status 2, never a traceback.

The commands that drive the scheduler (scenarios, simulations, the service) are imported
only when chosen, so ``frachub --help`` and a user's job commands never load the engine.

    frachub up [--demo]                              JupyterHub + FracHub here (hub_ext/cli/up/)
    frachub backup DEST | restore SRC                a data directory, safely (cli/backup.py)
    frachub submit|jobs|describe|logs|cancel|quota   training, as a user (hub_ext/cli/jobs.py;
                                                     list and delete are jobs and cancel)
    frachub scenario run FILE                        scheduling scenarios (scheduler/scenario)
    frachub simulate openb ...                       trace replay (scheduler/openb)
    frachub simulate fleet ...                       days of a shared cluster (scheduler/fleet)
    frachub service ...                              the scheduler service (its own options)
    frachub helm-values [--check]                    the Helm values, from helm/frachub.yaml
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from hub_ext.cli import backup as backup_command
from hub_ext.cli import jobs as jobs_command
from hub_ext.cli import up as up_command
from hub_ext.cli.up import options as up_options
from hub_ext.cli.up import run as up_run
from scheduler import __version__

SCENARIO_COMMAND = "scheduler.scenario.command"
OPENB_COMMAND = "scheduler.openb.command"
FLEET_COMMAND = "scheduler.fleet.command"


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole ``frachub`` tree. The scheduler's own commands get their flags only when
    ``argv`` chooses them (or always when ``argv`` is None, or the shell asks to complete):
    their modules import the engine, which the other commands never need."""
    chosen = _chooser(argv)
    parser = argparse.ArgumentParser(
        prog="frachub",
        description="GPU fractions, quotas, fair share and preemption for JupyterHub.",
    )
    parser.add_argument("--version", action="version", version=f"frachub {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    _add_command(
        commands,
        "up",
        "run JupyterHub with FracHub on this machine (--demo: demo users and projects)",
        up_options.add_arguments,
        up_run.run,
        description=_first_paragraph(up_command.__doc__),
    )
    _add_command(
        commands,
        "backup",
        "copy the databases, secrets and job logs of a data directory (safe while running)",
        backup_command.add_backup_arguments,
        backup_command.run_backup,
        description=_first_paragraph(backup_command.__doc__),
    )
    _add_command(
        commands,
        "restore",
        "write a backup into a data directory that is not running",
        backup_command.add_restore_arguments,
        backup_command.run_restore,
    )
    for job_command in jobs_command.SUBCOMMANDS:
        _add_command(
            commands,
            job_command.name,
            job_command.help,
            job_command.add_arguments,
            job_command.run,
            description=job_command.description or None,
            aliases=job_command.aliases,
        )

    scenario = commands.add_parser("scenario", help="replay scheduling scenarios")
    scenario_sub = scenario.add_subparsers(dest="scenario_command", metavar="ACTION", required=True)
    _add_lazy_command(
        scenario_sub,
        "run",
        "replay a scenario file through the engine",
        SCENARIO_COMMAND,
        chosen(("scenario", "run")),
    )

    simulate = commands.add_parser("simulate", help="replay public cluster traces")
    simulate_sub = simulate.add_subparsers(dest="simulate_command", metavar="TRACE", required=True)
    _add_lazy_command(
        simulate_sub,
        "openb",
        "the Alibaba openb GPU-sharing trace (FGD paper)",
        OPENB_COMMAND,
        chosen(("simulate", "openb")),
    )
    _add_lazy_command(
        simulate_sub,
        "fleet",
        "simulated days of a multi-tenant cluster: FracHub against static quotas",
        FLEET_COMMAND,
        chosen(("simulate", "fleet")),
    )
    commands.add_parser(
        "service",
        help="run the scheduler service (--help-all lists its settings)",
        add_help=False,
    )
    commands.add_parser(
        "helm-values",
        help="write (or --check) the frachub chart's and the z2jh hub's values from "
        "helm/frachub.yaml",
        add_help=False,
    )
    return parser


def _first_paragraph(doc: str | None) -> str | None:
    return doc.split("\n\n")[0] if doc else None


def _add_command(
    commands: argparse._SubParsersAction,
    name: str,
    help: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
    *,
    description: str | None = None,
    aliases: Sequence[str] = (),
) -> None:
    """One subcommand: its parser, its arguments and the function that runs it."""
    sub = commands.add_parser(name, aliases=list(aliases), help=help, description=description)
    add_arguments(sub)
    sub.set_defaults(run=run, command_parser=sub)


def _chooser(argv: Sequence[str] | None) -> Callable[[tuple[str, ...]], bool]:
    """Whether ``argv`` runs the command at a path such as ``("simulate", "fleet")``."""
    if argv is None or "_ARGCOMPLETE" in os.environ:  # the whole tree: completion, docs
        return lambda path: True
    words = [word for word in argv if not word.startswith("-")]
    return lambda path: tuple(words[: len(path)]) == path


def _add_lazy_command(
    commands: argparse._SubParsersAction, name: str, help: str, module: str, load: bool
) -> None:
    """A subcommand whose module (``add_arguments``, ``run``) is imported only when ``load``:
    until then it is a name and a help line."""
    if load:
        command = importlib.import_module(module)
        _add_command(commands, name, help, command.add_arguments, command.run)
    else:
        commands.add_parser(name, help=help)


def _run_service(argv: Sequence[str]) -> int:
    """The service is a traitlets Application with its own command line."""
    try:
        from scheduler.service.app import FracHubService
    except ImportError as error:  # a client-only install (no `service` extra)
        print(
            f"frachub service: {error.name or error} is not installed; the scheduler service "
            "needs pip install 'frachub[service]'",
            file=sys.stderr,
        )
        return 2

    FracHubService.launch_instance(list(argv))
    return 0


def _complete(parser: argparse.ArgumentParser) -> None:
    """Tab completion when argcomplete is installed (``pip install 'frachub[completion]'``,
    then ``eval "$(register-python-argcomplete frachub)"``); it answers and exits only when
    the shell asks."""
    try:
        import argcomplete
    except ImportError:
        return
    argcomplete.autocomplete(parser)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["service"]:
        return _run_service(argv[1:])
    if argv[:1] == ["helm-values"]:  # its own argparse, like the service's traitlets
        from hub_ext.cli.helm_values import main as helm_values

        return helm_values(argv[1:])
    parser = build_parser(argv)
    _complete(parser)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # argparse would show the top-level usage for a mistyped subcommand flag
        # the top level takes no option with a value: its first word is the command's name
        named = next(i for i, word in enumerate(argv) if not word.startswith("-"))
        wrong = args.command_parser if argv.index(unknown[0]) > named else parser
        wrong.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return args.run(args)
    except BrokenPipeError:
        # the reader went away (`frachub ... | head`): stop quietly, as other Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print("frachub: interrupted", file=sys.stderr)
        return 130
