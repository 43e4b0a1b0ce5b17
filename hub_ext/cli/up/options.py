"""``frachub up``'s choices: its flags, the GPUs it finds or is told of, the team (who logs
in, how, and the projects), each decided once from the command line."""

from __future__ import annotations

import argparse
import os
import pwd
import secrets
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler.common.paths import ROOT
from scheduler.common.scopes import ADMIN_GROUP

# httpx, yaml, NVML and the client are imported where they are used: `scripts/up.sh --help`
# runs this module's argument parser with the system's Python before anything is installed


DEMO_USERS = {"alice": "vision", "bob": "vision", "carol": "nlp"}
ADMIN_USER = "admin"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
UP_LOCK = "frachub-up.lock"
LOG_DIR = "hub-logs"
LOG_FILE_BYTES = 10 * 2**20
LOG_FILE_BACKUPS = 5

PROFILES: list[dict[str, Any]] = [
    {
        "display_name": "GPU notebook",
        "slug": "gpu",
        "description": "JupyterLab on a share of a GPU: a fraction, an amount of memory, or "
        "whole GPUs. Notebooks use your project's guaranteed quota.",
        "default": True,
        "frachub": {
            "gpu_choices": [0.25, 0.5, "12GiB", 1, 2],
            "default_gpu": 0.5,
            "idle_timeout_seconds": 3600,
        },
    },
    {
        "display_name": "CPU only",
        "slug": "cpu",
        "description": "JupyterLab without a GPU; submit training from it with %frachub.",
    },
]


class UpError(Exception):
    """Something the operator must fix; printed as one line, no traceback."""


@dataclass(frozen=True)
class Gpus:
    count: int
    memory_gib: float
    source: str  # "nvml" or "declared"
    model: str


@dataclass(frozen=True)
class Team:
    """Who may log in and how, and the projects: everything the two config files need to
    know about people."""

    auth: str  # "pam" or "shared-password"
    admins: tuple[str, ...]  # JupyterHub admins (--admin), FracHub admins too
    queues: list[dict[str, Any]]  # the service's queues (named members moved to groups)
    groups: dict[str, list[str]]  # hub groups: projects' named members, frachub-admins
    allowed: tuple[str, ...]  # pam: who may log in besides users added on the admin page


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir", default="frachub-data", help="where everything is kept (default: %(default)s)"
    )
    parser.add_argument(
        "--ip", default="127.0.0.1", help="address to serve on (default: %(default)s)"
    )
    parser.add_argument("--port", type=int, default=8000, help="public port (default: %(default)s)")
    parser.add_argument("--hub-port", type=int, default=8081, help="the hub's internal port")
    parser.add_argument("--proxy-api-port", type=int, default=8001, help="the proxy's API port")
    parser.add_argument("--service-port", type=int, default=10101, help="the scheduler's port")
    parser.add_argument(
        "--demo",
        action="store_true",
        help=f"demo users {', '.join(DEMO_USERS)} in projects vision and nlp, and "
        f"{ADMIN_USER!r}, a FracHub admin",
    )
    parser.add_argument(
        "--auth",
        choices=("auto", "pam", "shared-password"),
        default="auto",
        help="how users log in: the machine's accounts (pam: notebooks and jobs run as each "
        "user) or one shared password for hub-only users; auto: pam when run as root "
        "without --demo (default: %(default)s)",
    )
    parser.add_argument(
        "--admin",
        action="append",
        default=[],
        metavar="NAME",
        help="a JupyterHub and FracHub admin (repeatable)",
    )
    parser.add_argument(
        "--projects",
        metavar="FILE",
        help="projects, quotas and members, a YAML or JSON list in the format of "
        "FracHubService.queues (default: one project 'default' with every GPU, open to all)",
    )
    parser.add_argument(
        "--gpus",
        type=int,
        default=2,
        help="GPUs to declare when NVML finds none (default: %(default)s)",
    )
    parser.add_argument(
        "--gpu-memory-gib",
        type=float,
        default=24.0,
        help="memory of each declared GPU (default: %(default)s)",
    )
    parser.add_argument(
        "--declared",
        action="store_true",
        help="use the declared GPUs even if NVML finds real ones",
    )
    parser.add_argument(
        "--gpu-sharing",
        choices=("cooperative", "mps"),
        default="cooperative",
        help="how a GPU share is enforced: cooperative (the frameworks' own caps: PyTorch, "
        "JAX) or mps (NVIDIA MPS: the driver caps every CUDA program's memory and compute at "
        "its share; needs nvidia-cuda-mps-control; docs/gpu-sharing.md) "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--password",
        help="the shared log-in password (default: generated once, kept in <data>/password)",
    )
    parser.add_argument(
        "--grace-period",
        type=float,
        default=30.0,
        help="seconds a preempted job has to save its work (default: %(default)s)",
    )
    parser.add_argument(
        "--ssl-cert", metavar="FILE", help="serve HTTPS with this certificate (with --ssl-key)"
    )
    parser.add_argument("--ssl-key", metavar="FILE", help="the certificate's private key")
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default="INFO",
        help="of the hub and the scheduler, on the terminal and in <data>/hub-logs/ "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--write-config-only",
        action="store_true",
        help="write the config files and print how to start the hub, without starting it",
    )
    parser.add_argument(
        "--no-python-check",
        action="store_true",
        help="with --auth pam, start even where some users cannot run the hub's Python "
        "(their notebook servers will not start; jobs may use another interpreter)",
    )
    parser.add_argument(
        "--stop-jobs",
        action="store_true",
        help="on Ctrl-C, cancel running and pending training jobs (each gets its grace "
        "period) before stopping; by default they keep running and the next frachub up on "
        "this data directory adopts them",
    )


def find_proxy() -> str | None:
    """configurable-http-proxy: $FRACHUB_CHP, then Node's (on PATH, then the repo-local npm
    install scripts/proxy.sh puts in .cache/npm), then the Python one ``frachub[hub]``
    installs beside this interpreter (no Node needed; it carries kernels' and terminals'
    WebSockets, not TLS)."""
    explicit = os.environ.get("FRACHUB_CHP")
    if explicit:
        return explicit
    scripts = Path(sysconfig.get_path("scripts"))
    path = os.pathsep.join(
        entry
        for entry in os.environ.get("PATH", "").split(os.pathsep)
        if entry and Path(entry) != scripts
    )
    found = shutil.which("configurable-http-proxy", path=path)
    if found:
        return found
    prefix = Path(os.environ.get("FRACHUB_NPM_PREFIX", ROOT / ".cache" / "npm"))
    for candidate in (
        prefix / "node_modules" / ".bin" / "configurable-http-proxy",
        scripts / "configurable-http-proxy",
    ):
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def is_python_proxy(proxy: str) -> bool:
    """Whether proxy is the Python configurable-http-proxy (a console script whose first
    line names a Python), which does no TLS."""
    try:
        with open(proxy, "rb") as script:
            first = script.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def proxy_command(proxy: str) -> list[str]:
    """The proxy's command before JupyterHub's own flags. The Python proxy gives up on a
    request after 20 s unless told otherwise (Node's never does): a spawn waiting longer in
    the queue would lose its progress stream and leave the spawn page stuck."""
    return [proxy, "--proxy-timeout", "0"] if is_python_proxy(proxy) else [proxy]


def detect_gpus(args: argparse.Namespace) -> tuple[Gpus, str]:
    """The GPUs to schedule, and a sentence saying where they came from and why."""
    from scheduler.backends.inventory import NvmlUnavailable, nvml_inventory

    if not args.declared:
        try:
            inventory = nvml_inventory()
            node = inventory.nodes[0]
            return (
                Gpus(node.gpus, node.gpu_memory_mib / 1024, "nvml", node.gpu_model),
                f"{node.gpus} × {node.gpu_model} of {node.gpu_memory_mib / 1024:g} GiB found "
                "by NVML (the NVIDIA driver answered)",
            )
        except NvmlUnavailable as error:
            why = str(error)
    else:
        why = "--declared"
    if args.gpus < 1:
        raise UpError("--gpus must be at least 1")
    if args.gpu_memory_gib <= 0:
        raise UpError("--gpu-memory-gib must be positive")
    return (
        Gpus(args.gpus, args.gpu_memory_gib, "declared", "declared"),
        f"{args.gpus} declared GPUs of {args.gpu_memory_gib:g} GiB ({why}); jobs run on the "
        "CPU with the GPU environment set",
    )


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner may read (0600, also when it existed before)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def password_for(data: Path, given: str | None, name: str = "password", length: int = 8) -> str:
    """The shared password, kept in ``<data>/<name>`` (0600): generated once, or the given
    one, which replaces it. The hub's config reads it from there."""
    path = data / name
    if given is not None:
        if len(given) < length:
            flag = "--password" if name == "password" else name
            raise UpError(f"{flag} must have at least {length} characters")
        write_private(path, given + "\n")
        return given
    if not path.exists():
        write_private(path, secrets.token_urlsafe(max(12, length)) + "\n")
    os.chmod(path, 0o600)
    return path.read_text().strip()


def read_projects(path: str) -> list[dict[str, Any]]:
    """``--projects FILE``: the service's queue format, in YAML (or JSON, which is YAML)."""
    import yaml

    try:
        text = Path(path).read_text()
    except OSError as error:
        raise UpError(f"--projects {path}: {error.strerror}") from None
    try:
        entries = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise UpError(f"--projects {path}: not YAML or JSON ({error})".replace("\n", " ")) from None
    try:
        # imported here: a client-only install has `frachub` without the service's packages
        from scheduler.service.app import check_queues

        return check_queues(entries, f"--projects {path}")
    except ValueError as error:
        raise UpError(str(error)) from None


def default_projects(gpus: Gpus, demo: bool) -> list[dict[str, Any]]:
    if not demo:
        return [{"name": "default", "deserved_gpus": gpus.count, "members": ["*"]}]
    half = gpus.count / 2
    return [
        {"name": "vision", "deserved_gpus": half, "over_quota_weight": 1},
        {"name": "nlp", "deserved_gpus": gpus.count - half, "over_quota_weight": 1},
    ]


def team_for(args: argparse.Namespace, gpus: Gpus) -> Team:
    """The log-in mode, the admins, the projects and their members.

    Named members of a project become members of the hub group of the same name, which the
    service reads as project membership and admins edit on the hub's admin page; ``"*"``
    (everybody) stays in the service's queue, where only a group could not say it.
    """
    auth = args.auth
    if auth == "auto":
        auth = "pam" if os.geteuid() == 0 and not args.demo else "shared-password"
    if auth == "pam" and os.geteuid() != 0:
        raise UpError("--auth pam needs root: notebooks and jobs run as each user's system account")
    if auth == "pam" and args.demo:
        raise UpError("--demo's users are not system accounts: use it without --auth pam")
    if args.password is not None and auth == "pam":
        raise UpError("--password is for --auth shared-password; with pam users have their own")
    entries = read_projects(args.projects) if args.projects else default_projects(gpus, args.demo)
    admins = list(dict.fromkeys(args.admin))
    # --demo's "admin" is a FracHub admin only: a hub admin could not use the shared password
    groups: dict[str, list[str]] = {
        ADMIN_GROUP: [*admins, ADMIN_USER] if args.demo else list(admins)
    }
    queues = []
    for entry in entries:
        named = [m for m in entry.get("members", []) if m != "*"]
        everybody = ["*"] if "*" in entry.get("members", []) else []
        queue = {k: v for k, v in entry.items() if k != "members"}
        if everybody:
            queue["members"] = everybody
        queues.append(queue)
        if named:
            groups.setdefault(entry["name"], []).extend(named)
    if args.demo:
        for user, project in DEMO_USERS.items():
            groups.setdefault(project, []).append(user)
    members = tuple(dict.fromkeys(user for users in groups.values() for user in users))
    if auth == "pam" and not members:
        raise UpError(
            "with system accounts, name who may log in: --admin NAME (who can then add users "
            "on the admin page), or members in --projects"
        )
    if auth == "pam":
        for name in members:
            try:
                pwd.getpwnam(name)
            except KeyError:
                print(
                    f"frachub up: warning: there is no system account {name!r}: they cannot "
                    "log in until it is created",
                    file=sys.stderr,
                )
    return Team(auth, tuple(admins), queues, groups, members)
