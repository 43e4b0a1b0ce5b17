"""The flags of the job commands, one definition for the ``frachub`` CLI and the ``%frachub``
magics, so both take the same flags and refuse the same input in the same words.

In the style of Run:ai's CLI: the command goes after ``--``, flags name GPUs as a fraction
(``--gpus 0.5``, checked by the API's own rule) or as memory (``--gpu-memory 20``). Each
``add_*_arguments(parser)`` adds one command's flags; the type functions (``gpu_count``,
``gpu_memory``, ``checkpoint_interval``, ...) turn a flag's text into the API's field or
raise ``argparse.ArgumentTypeError`` naming what is wrong.
"""

from __future__ import annotations

import argparse

from scheduler.common.limits import (
    MAX_CPU,
    MAX_GPU_MEMORY_GIB,
    MAX_ID,
    MAX_MEMORY_GIB,
    MAX_NAME_LENGTH,
    MAX_REPLICAS,
    gpu_count_problem,
)
from scheduler.common.quantities import memory_gib, time_limit_seconds

RECENT_FINISHED = 10  # `jobs` shows active work plus this many of the latest finished jobs
MAX_SWEEP = 256  # a sweep's jobs in all, as the service bounds them
WATCH_SECONDS = 2.0  # `jobs --watch` redraws this often by default
MAX_WATCH_SECONDS = 3600.0
MAX_LISTED = 1_000_000  # `jobs --limit` at most


# --- argument definitions, shared with the magics -----------------------------------------------


def gpu_count(text: str) -> float:
    """GPUs per replica, by the API's own rule (``scheduler/common/limits.py``): a fraction
    in (0, 1] or a whole number, so ``--gpus 1.5`` is refused here, before anything is sent;
    0 is a CPU-only job (the service refuses it without CPU or memory)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value == 0:
        return 0.0  # a CPU-only job, with --cpu or --memory (the service checks)
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
    return _memory_size(text, MAX_GPU_MEMORY_GIB, "20 or 20G")


def cpu_cores(text: str) -> float:
    """CPU cores per replica, as Run:ai's ``--cpu``: ``2``, ``0.5`` (thousandths at most),
    or Kubernetes' ``500m``."""
    milli = text.endswith("m")
    try:
        value = float(text[:-1] if milli else text) / (1000 if milli else 1)
    except ValueError:
        value = float("nan")
    if value != value or len(text) > 40:
        raise argparse.ArgumentTypeError(f"not a number of cores: {text[:40]!r} (2, 0.5, 500m)")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    if value > MAX_CPU:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_CPU} cores, got {text}")
    if abs(value * 1000 - round(value * 1000)) > 1e-6:
        raise argparse.ArgumentTypeError(f"cores are counted in thousandths, got {text}")
    return round(value, 3)


def memory_size(text: str) -> float:
    """Memory (RAM) per replica in GiB, as Run:ai's ``--memory``: ``16G``, ``16GiB``,
    ``512M``, or a bare number of GiB, read by the one size grammar."""
    return _memory_size(text, MAX_MEMORY_GIB, "16G or 512M")


def _memory_size(text: str, maximum: int, example: str) -> float:
    """A size in GiB by the one size grammar (a bare number is GiB), 1 MiB to ``maximum``."""
    value = memory_gib(text, bare="G")
    if value is None:
        raise argparse.ArgumentTypeError(f"not a memory size: {text!r} (for example {example})")
    if value * 1024 < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1M, got {text}")
    if value > maximum:
        raise argparse.ArgumentTypeError(f"must be at most {maximum}G, got {text}")
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


def time_limit(text: str) -> str:
    """A time limit as Slurm's ``--time`` writes it (``30``, ``2:00:00``, ``1-12``), checked
    by the one grammar (``scheduler/common/quantities.py``) and sent as written."""
    if time_limit_seconds(text) is None:
        raise argparse.ArgumentTypeError(
            f"not a time limit: {text[:40]!r} (minutes, or MM:SS, HH:MM:SS, D-HH, D-HH:MM, "
            "D-HH:MM:SS, above 0: 30, 2:00:00, 1-12)"
        )
    return text


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
        help="GPUs per replica: a fraction (0.25, 0.5) or a whole number; 0 with --cpu or "
        "--memory: a CPU-only job",
    )
    size.add_argument(
        "--gpu-memory",
        type=gpu_memory,
        metavar="SIZE",
        help="instead of --gpus: GPU memory per replica, in GiB (20, 20G, 512M)",
    )
    parser.add_argument(
        "--cpu",
        type=cpu_cores,
        metavar="CORES",
        help="CPU cores per replica (2, 0.5, 500m): counted on its node and, where jobs run "
        "locally, its limit (default: the service's default for training)",
    )
    parser.add_argument(
        "--memory",
        type=memory_size,
        metavar="SIZE",
        help="memory (RAM) per replica (16G, 512M; a bare number is GiB): counted on its node, "
        "and its hard limit: a job that uses more is killed (default: the service's default)",
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
    parser.add_argument(
        "-t",
        "--time",
        type=time_limit,
        metavar="LIMIT",
        help="stop the job (SIGTERM, then the grace period) once it has run this long: "
        "minutes, or MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS as Slurm writes them "
        "(default: the project's, or none)",
    )
    after = parser.add_mutually_exclusive_group()
    after.add_argument(
        "--after",
        type=workload_id,
        metavar="ID",
        help="start only after job ID has ended, whatever its outcome",
    )
    after.add_argument(
        "--after-ok",
        type=workload_id,
        metavar="ID",
        help="start only once job ID has succeeded; cancelled if it fails or is cancelled",
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
        "--no-notebook-env",
        action="store_true",
        help="in a notebook server: do not give the job the notebook's PATH, VIRTUAL_ENV and "
        "CONDA_PREFIX (it then runs with the service's PATH)",
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


def add_cancel_arguments(parser: argparse.ArgumentParser) -> None:
    add_id_argument(parser)
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="ID is a sweep's: cancel every job of it not yet ended",
    )
