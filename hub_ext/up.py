"""``frachub up``: JupyterHub with FracHub on this machine, in one command.

It writes two config files into the data directory — ``jupyterhub_config.py`` (the hub, its
proxy, the FracHub spawner, the log-in) and ``frachub_config.py`` (the scheduler service:
projects, the local backend, the GPUs) — from the command line's choices, then runs the hub,
which starts the scheduler as a managed service. Both files are written again on every
start; settings of one's own go in ``jupyterhub_config_extra.py`` and
``frachub_config_extra.py`` beside them, which are loaded last and never touched.

GPUs come from NVML when the NVIDIA driver answers, else from a declared inventory
(``--gpus``, ``--gpu-memory-gib``): the scheduler then shares pretend GPUs, which is enough to
try everything but the GPU itself.

Two ways to log in (``--auth``):

* ``pam`` (the default when run as root, without ``--demo``): the machine's own accounts.
  Notebooks and jobs run as the user's system account, in that account's home; the users are
  the members named in ``--projects`` and the ``--admin`` accounts, and more can be added on
  the hub's admin page. This is the mode for a team (docs/operations.md).
* ``shared-password`` (``--demo``, or when not run as root): hub-only users with one shared
  password (generated once, kept in the data directory, printed). Servers and jobs run as
  this Unix user, each user's home under ``<data>/home``: no isolation between users, which
  is right for one person's workstation or a demo and wrong for a shared machine.

Operations: the hub's and the service's logs go to ``<data>/hub-logs/`` (rotated) as well as
the terminal; the data directory is private (0700, 0711 with system accounts so that jobs
reach their own directories) with its databases and secrets 0600. A ``frachub up`` started
on a data directory whose previous run was killed stops what that run left behind (hub,
scheduler service, proxy) before starting; notebook servers still running are adopted by the
new hub from its database.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler.common.paths import ROOT
from scheduler.common.scopes import ADMIN_GROUP, API_PATH, SERVICE_PREFIX
from scheduler.service import datalock

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
        "--stop-jobs",
        action="store_true",
        help="on Ctrl-C, cancel running and pending training jobs (each gets its grace "
        "period) before stopping; by default they keep running and the next frachub up on "
        "this data directory adopts them",
    )


def find_proxy() -> str | None:
    """configurable-http-proxy: $FRACHUB_CHP, then PATH, then the repo-local npm install
    (scripts/proxy.sh puts it in .cache/npm)."""
    explicit = os.environ.get("FRACHUB_CHP")
    if explicit:
        return explicit
    found = shutil.which("configurable-http-proxy")
    if found:
        return found
    prefix = Path(os.environ.get("FRACHUB_NPM_PREFIX", ROOT / ".cache" / "npm"))
    local = prefix / "node_modules" / ".bin" / "configurable-http-proxy"
    return str(local) if os.access(local, os.X_OK) else None


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


def _write_private(path: Path, text: str) -> None:
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
        _write_private(path, given + "\n")
        return given
    if not path.exists():
        _write_private(path, secrets.token_urlsafe(max(12, length)) + "\n")
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


def file_logging(path: Path, level: str, logger: str) -> dict[str, Any]:
    """traitlets ``logging_config`` adding a rotating file beside an application's console
    log (JupyterHub routes tornado's and the spawners' messages through its own logger)."""
    return {
        "formatters": {
            "frachub_file": {"format": "[%(levelname)1.1s %(asctime)s %(name)s] %(message)s"}
        },
        "handlers": {
            "frachub_file": {
                "class": "logging.handlers.RotatingFileHandler",
                "filename": str(path),
                "maxBytes": LOG_FILE_BYTES,
                "backupCount": LOG_FILE_BACKUPS,
                "encoding": "utf-8",
                "formatter": "frachub_file",
                "level": level,
            }
        },
        "loggers": {logger: {"handlers": ["console", "frachub_file"]}},
    }


def public_url(args: argparse.Namespace) -> str:
    host = "localhost" if args.ip in ("127.0.0.1", "0.0.0.0", "") else args.ip
    scheme = "https" if args.ssl_cert else "http"
    return f"{scheme}://{host}:{args.port}/"


def hub_config(args: argparse.Namespace, data: Path, proxy: str, team: Team) -> str:
    service_url = f"http://127.0.0.1:{args.service_port}"
    scheme = "https" if args.ssl_cert else "http"
    settings: dict[str, Any] = {
        "JupyterHub.bind_url": f"{scheme}://{args.ip}:{args.port}/",
        "JupyterHub.hub_ip": "127.0.0.1",
        "JupyterHub.hub_port": args.hub_port,
        "JupyterHub.db_url": f"sqlite:///{data / 'jupyterhub.sqlite'}",
        "JupyterHub.cookie_secret_file": str(data / "jupyterhub_cookie_secret"),
        "JupyterHub.pid_file": str(data / "jupyterhub.pid"),
        "JupyterHub.log_level": args.log_level,
        "JupyterHub.logging_config": file_logging(
            data / LOG_DIR / "jupyterhub.log", args.log_level, "JupyterHub"
        ),
        "JupyterHub.load_groups": {name: {"users": users} for name, users in team.groups.items()},
        "ConfigurableHTTPProxy.command": [proxy],
        "ConfigurableHTTPProxy.api_url": f"http://127.0.0.1:{args.proxy_api_port}",
        "ConfigurableHTTPProxy.pid_file": str(data / "jupyterhub-proxy.pid"),
        "Authenticator.admin_users": set(team.admins),
        "Spawner.default_url": "/lab",
        # a CPU server and a GPU server side by side, each with its own allocation
        "JupyterHub.allow_named_servers": True,
    }
    if args.ssl_cert:
        settings["JupyterHub.ssl_cert"] = str(Path(args.ssl_cert).resolve())
        settings["JupyterHub.ssl_key"] = str(Path(args.ssl_key).resolve())
    if team.auth == "pam":
        settings["JupyterHub.authenticator_class"] = "pam"
        # the projects' members and the admins; more are added on the admin page
        settings["Authenticator.allowed_users"] = set(team.allowed)
        settings["Authenticator.allow_existing_users"] = True
    else:
        settings["JupyterHub.authenticator_class"] = "shared-password"
        settings["FracLocalSpawner.home_dir_template"] = str(data / "home" / "{username}")
        if args.demo:
            settings["Authenticator.allowed_users"] = {*DEMO_USERS, *team.admins}
        else:
            settings["Authenticator.allow_all"] = True
    lines = [
        "# Written by `frachub up` on every start: your own settings go in",
        "# jupyterhub_config_extra.py beside this file, loaded last.",
        "import os",
        "from hub_ext.configure import configure",
        "",
        "c = get_config()  # noqa: F821",
    ]
    lines += [f"c.{key} = {value!r}" for key, value in settings.items()]
    if team.auth == "shared-password":
        # read from the 0600 files, never written here
        lines.append(
            "c.SharedPasswordAuthenticator.user_password = "
            f"open({str(data / 'password')!r}).read().strip()"
        )
        if team.admins:
            lines.append(
                "c.SharedPasswordAuthenticator.admin_password = "
                f"open({str(data / 'admin-password')!r}).read().strip()"
            )
    lines += [
        "configure(",
        "    c,",
        f"    service_config={str(data / 'frachub_config.py')!r},",
        f"    data_dir={str(data)!r},",
        f"    service_url={service_url!r},",
        f"    profile_list={PROFILES!r},",
        ")",
        f"_extra = {str(data / 'jupyterhub_config_extra.py')!r}",
        "if os.path.exists(_extra):",
        "    load_subconfig(_extra)  # noqa: F821",
    ]
    return "\n".join(lines) + "\n"


def service_config(args: argparse.Namespace, data: Path, gpus: Gpus, team: Team) -> str:
    settings: dict[str, Any] = {
        "FracHubService.queues": team.queues,
        "FracHubService.grace_period": args.grace_period,
        "FracHubService.log_level": args.log_level,
        "FracHubService.logging_config": file_logging(
            data / LOG_DIR / "frachub-service.log", args.log_level, "FracHubService"
        ),
    }
    if team.auth == "pam":
        # jobs run as the user's system account, in its home, like the user's notebooks
        settings["LocalBackend.run_as_user"] = True
    else:
        # hub-only users have no system account: jobs run as this Unix user, in the home
        # the notebooks have
        settings["LocalBackend.run_as_user"] = False
        settings["LocalBackend.home_dir_template"] = str(data / "home" / "{username}")
    if gpus.source == "declared":
        settings["LocalBackend.inventory_source"] = "declared"
        settings["LocalBackend.declared_inventory"] = [
            {"name": "local", "gpus": gpus.count, "gpu_memory_gib": gpus.memory_gib}
        ]
    else:
        settings["LocalBackend.inventory_source"] = "nvml"
    lines = [
        "# Written by `frachub up` on every start: your own settings go in",
        "# frachub_config_extra.py beside this file, loaded last.",
        "import os",
        "",
        "c = get_config()  # noqa: F821",
    ]
    lines += [f"c.{key} = {value!r}" for key, value in settings.items()]
    lines += [
        f"_extra = {str(data / 'frachub_config_extra.py')!r}",
        "if os.path.exists(_extra):",
        "    load_subconfig(_extra)  # noqa: F821",
    ]
    return "\n".join(lines) + "\n"


def banner(
    args: argparse.Namespace, team: Team, passwords: dict[str, str], gpus_said: str, data: Path
) -> str:
    url = public_url(args)
    if args.demo:
        who = f"  users: alice, bob (project vision), carol (project nlp), {ADMIN_USER} (admin)\n"
    elif team.auth == "pam":
        who = (
            "  users: system accounts (PAM): "
            + (", ".join(u for u in team.allowed) or "none yet")
            + "; add more on the admin page\n"
        )
    else:
        who = "  users: any name\n"
    if not args.demo:
        projects = ", ".join(queue["name"] for queue in team.queues)
        who += f"  projects: {projects}; users in no project get CPU notebooks only\n"
        who += (
            f"  admins: {', '.join(team.admins)}\n"
            if team.admins
            else "  admins: none (give --admin NAME to use the admin page)\n"
        )
    secrets_said = "".join(f"  {name}: {value}\n" for name, value in passwords.items())
    return (
        "\n"
        "FracHub is running.\n"
        f"  open:     {url}\n"
        f"{who}"
        f"{secrets_said}"
        f"  GPUs:     {gpus_said}\n"
        f"  Training panel: {url.rstrip('/')}{SERVICE_PREFIX}\n"
        f"  data:     {data}\n"
        f"  logs:     {data / LOG_DIR} (jobs: {data / 'logs'})\n"
        "Stop with Ctrl-C.\n"
    )


# -- what a killed run left behind ----------------------------------------------------------


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _pid_in(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _stop_process(pid: int, what: str, timeout: float = 30) -> None:
    """SIGTERM (the hub then stops what it started), SIGKILL after ``timeout``."""
    print(f"frachub up: stopping the {what} left by a previous run (pid {pid})", file=sys.stderr)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    while _alive(pid) and time.monotonic() < deadline + 10:
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped by its parent, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def stop_leftovers(data: Path) -> int:
    """Stop the hub, scheduler service and proxy of a previous run on ``data`` that was
    killed (its ``frachub up`` gone, they not). Each is recognised by the pid file or lock it
    keeps in ``data`` and by its command line, so a reused pid is never signalled. Returns
    how many were stopped."""
    stopped = 0
    hub = _pid_in(data / "jupyterhub.pid")
    if hub and _alive(hub) and str(data / "jupyterhub_config.py") in _cmdline(hub):
        _stop_process(hub, "JupyterHub")
        stopped += 1
    service = datalock.holder(str(data / datalock.SERVICE_LOCK_FILE))
    if service and _alive(service):
        _stop_process(service, "scheduler service")
        stopped += 1
    proxy = _pid_in(data / "jupyterhub-proxy.pid")
    if proxy and _alive(proxy) and "configurable-http-proxy" in _cmdline(proxy):
        _stop_process(proxy, "proxy", timeout=10)
        stopped += 1
    return stopped


# -- files ----------------------------------------------------------------------------------


def prepare_data_dir(data: Path, team: Team) -> None:
    """Private by default: 0700 (0711 with system accounts: their jobs must reach their own
    directories inside, each 0700 and theirs), databases and secrets 0600."""
    data.mkdir(parents=True, exist_ok=True)
    os.chmod(data, 0o711 if team.auth == "pam" else 0o700)
    (data / LOG_DIR).mkdir(mode=0o700, exist_ok=True)
    os.chmod(data / LOG_DIR, 0o700)
    if team.auth == "shared-password":
        (data / "home").mkdir(exist_ok=True)
    for name in ("jupyterhub.sqlite", "frachub.sqlite"):
        # created empty (SQLite takes an empty file as a new database) so that it, and its
        # -wal and -shm files, which SQLite makes with the database's mode, are born 0600
        path = data / name
        if not path.exists():
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    for name in (
        "jupyterhub.sqlite",
        "jupyterhub.sqlite-wal",
        "jupyterhub.sqlite-shm",
        "frachub.sqlite",
        "frachub.sqlite-wal",
        "frachub.sqlite-shm",
        "jupyterhub_cookie_secret",
        "frachub-service-token",
        "password",
        "admin-password",
        "jupyterhub_config_extra.py",
        "frachub_config_extra.py",
    ):
        if (data / name).exists():
            os.chmod(data / name, 0o600)


def _wait_ready(
    proc: subprocess.Popen[bytes], args: argparse.Namespace, proxy_token: str, timeout: float
) -> None:
    """Until the hub answers through the proxy and the scheduler answers behind it.

    Asked in an order that makes no noise: the hub and the service on their own ports first,
    then the proxy's API until both routes are in its table, and only then once through the
    proxy. (Asking the proxy before its routes exist made it log a red 404 and an
    ECONNREFUSED trace for every attempt.)"""
    import httpx

    scheme = "https" if args.ssl_cert else "http"
    base = f"{scheme}://127.0.0.1:{args.port}"
    checks = (
        lambda client: client.get(f"http://127.0.0.1:{args.hub_port}/hub/api/").status_code == 200,
        lambda client: (
            client.get(
                f"http://127.0.0.1:{args.service_port}{SERVICE_PREFIX}{API_PATH}"
            ).status_code
            < 500
        ),
        lambda client: _routes_ready(client, args, proxy_token),
        lambda client: (
            client.get(f"{base}/hub/api/").status_code == 200
            and client.get(f"{base}{SERVICE_PREFIX}{API_PATH}").status_code < 500
        ),
    )
    deadline = time.monotonic() + timeout
    passed = 0
    # the certificate names the public host, not 127.0.0.1: this is a liveness check
    with httpx.Client(timeout=2, verify=False) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise UpError(
                    f"JupyterHub exited with status {proc.returncode} while starting "
                    f"(its log is above and in {Path(args.data_dir).resolve() / LOG_DIR})"
                )
            try:
                while passed < len(checks) and checks[passed](client):
                    passed += 1
            except httpx.HTTPError:
                pass
            if passed == len(checks):
                return
            time.sleep(0.2)
    raise UpError(f"JupyterHub did not answer on {base} within {timeout:.0f} s")


def _routes_ready(client: Any, args: argparse.Namespace, token: str) -> bool:
    """Whether the proxy routes the hub and the service (its REST API, which logs nothing
    when asked)."""
    response = client.get(
        f"http://127.0.0.1:{args.proxy_api_port}/api/routes",
        headers={"Authorization": f"token {token}"},
    )
    if response.status_code != 200:
        return False
    routes = response.json()
    return "/" in routes and any(route.startswith(SERVICE_PREFIX.rstrip("/")) for route in routes)


# -- stopping ------------------------------------------------------------------------------


def _service_client(args: argparse.Namespace, data: Path) -> Any:
    """The service on its own port with its own (admin) token: it sees every user's jobs."""
    from hub_ext.client import FracHubClient
    from hub_ext.configure import service_token

    return FracHubClient(
        f"http://127.0.0.1:{args.service_port}{SERVICE_PREFIX}",
        service_token(data),
        timeout=5,
        token_source="the service's token",
    )


def active_jobs(args: argparse.Namespace, data: Path) -> list[dict[str, Any]] | None:
    """Training and inference jobs not yet ended, as the service has them; None if it did not
    answer."""
    from hub_ext.client import FracHubError

    try:
        with _service_client(args, data) as client:
            return client.list_workloads(active=True, kinds=["training", "inference"])
    except FracHubError:
        return None


def stop_jobs(args: argparse.Namespace, data: Path, interrupted: Any) -> None:
    """``--stop-jobs``: cancel every job and wait for them to end (their grace period and a
    little), unless Ctrl-C comes again."""
    from hub_ext.client import FracHubError

    try:
        with _service_client(args, data) as client:
            jobs = client.list_workloads(active=True, kinds=["training", "inference"])
            if not jobs:
                return
            print(
                f"frachub up: cancelling {_count(len(jobs), 'job')} (--stop-jobs; grace period "
                f"{args.grace_period:g}s; Ctrl-C again stops at once)",
                file=sys.stderr,
                flush=True,
            )
            for job in jobs:
                with contextlib.suppress(FracHubError):  # it may have ended meanwhile
                    client.cancel(job["id"])
            deadline = time.monotonic() + args.grace_period + 15
            while time.monotonic() < deadline and not interrupted():
                if not client.list_workloads(active=True, kinds=["training", "inference"]):
                    return
                time.sleep(0.5)
    except FracHubError as error:
        print(f"frachub up: could not cancel the jobs: {error}", file=sys.stderr, flush=True)


def left_running(jobs: list[dict[str, Any]] | None) -> str:
    """What Ctrl-C left behind, and how to stop it."""
    if jobs is None:
        return (
            "frachub up: stopped. Jobs that were running may still run (the service did not "
            "answer to list them); the next frachub up on this data directory adopts them.\n"
        )
    if not jobs:
        return "frachub up: stopped; no training jobs were running or waiting.\n"
    from hub_ext.client import HOLDING_STATES, format_placement

    running = [job for job in jobs if job["state"] in HOLDING_STATES]
    waiting = [job for job in jobs if job["state"] not in HOLDING_STATES]
    lines = ["frachub up: stopped."]
    if running:
        verb = "keeps" if len(running) == 1 else "keep"
        lines.append(f"  {_count(len(running), 'job')} {verb} running without FracHub:")
        lines += [
            f"    job {job['id']} ({job['name']}) of {job['user']}, {job['state']} on "
            f"{format_placement(job)}"
            for job in running
        ]
    if waiting:
        lines.append(
            f"  {_count(len(waiting), 'job')} {'stays' if len(waiting) == 1 else 'stay'} queued: "
            + ", ".join(str(job["id"]) for job in waiting)
        )
    lines.append(
        "  The next frachub up on this data directory adopts them. To stop them: start it "
        "again and run frachub cancel ID, or start with --stop-jobs and Ctrl-C cancels them "
        "before stopping."
    )
    return "\n".join(lines) + "\n"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def run(args: argparse.Namespace) -> int:
    try:
        return _up(args)
    except UpError as error:
        print(f"frachub up: {error}", file=sys.stderr)
        return 2


def _check_tls(args: argparse.Namespace) -> None:
    if bool(args.ssl_cert) != bool(args.ssl_key):
        raise UpError("--ssl-cert and --ssl-key go together")
    for flag, path in (("--ssl-cert", args.ssl_cert), ("--ssl-key", args.ssl_key)):
        if path and not os.access(path, os.R_OK):
            raise UpError(f"{flag} {path}: not a readable file")


def _up(args: argparse.Namespace) -> int:
    data = Path(args.data_dir).resolve()
    _check_tls(args)
    proxy = find_proxy()
    if proxy is None:
        raise UpError(
            "configurable-http-proxy is not installed: run `bash scripts/up.sh` (it installs it) "
            "or `npm install -g configurable-http-proxy`"
        )
    gpus, gpus_said = detect_gpus(args)
    team = team_for(args, gpus)
    prepare_data_dir(data, team)
    try:
        lock = datalock.hold(str(data / UP_LOCK))
    except datalock.Held as held:
        raise UpError(
            f"another frachub up (pid {held.pid}) is running on {data}; stop it first"
        ) from None
    passwords: dict[str, str] = {}
    if team.auth == "shared-password":
        passwords["password"] = password_for(data, args.password)
        if team.admins:
            # SharedPasswordAuthenticator: admins log in with their own, longer password
            passwords["admin password"] = password_for(data, None, "admin-password", 32)
    hub_file, service_file = data / "jupyterhub_config.py", data / "frachub_config.py"
    _write_private(hub_file, hub_config(args, data, proxy, team))
    _write_private(service_file, service_config(args, data, gpus, team))
    command = [sys.executable, "-m", "jupyterhub", "-f", str(hub_file)]
    print(f"frachub up: GPUs: {gpus_said}", file=sys.stderr, flush=True)
    if args.write_config_only:
        os.close(lock)
        print(f"wrote {hub_file} and {service_file}")
        print("start the hub with: " + " ".join(command))
        return 0
    stop_leftovers(data)
    env = {
        **os.environ,
        "PATH": f"{Path(proxy).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        # the proxy's API token (JupyterHub reads it from here): _wait_ready asks the proxy's
        # routes with it
        "CONFIGPROXY_AUTH_TOKEN": os.environ.get("CONFIGPROXY_AUTH_TOKEN") or secrets.token_hex(32),
    }
    print(
        f"frachub up: starting JupyterHub (logs also in {data / LOG_DIR})",
        file=sys.stderr,
        flush=True,
    )
    # its own process group: Ctrl-C reaches `frachub up` alone, which can still ask the
    # service what runs before it stops the hub (which stops the proxy and the service)
    proc = subprocess.Popen(command, cwd=data, env=env, start_new_session=True)
    stopping = 0
    ready = False

    def forward(signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping += 1
        if (not ready or stopping > 1) and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        _wait_ready(proc, args, env["CONFIGPROXY_AUTH_TOKEN"], timeout=120)
    except UpError:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)
        if stopping:
            return 130
        raise
    ready = True
    print(banner(args, team, passwords, gpus_said, data), flush=True)
    while proc.poll() is None and not stopping:
        time.sleep(0.2)
    if proc.poll() is not None:  # the hub ended by itself
        return proc.returncode
    print("\nfrachub up: stopping", file=sys.stderr, flush=True)
    if args.stop_jobs:
        stop_jobs(args, data, lambda: stopping > 1)
    jobs = active_jobs(args, data)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    status = proc.wait()
    sys.stderr.write(left_running(jobs))
    return status


def main(argv: list[str] | None = None) -> int:
    """``python -m hub_ext.up --help``: the options, before anything is installed
    (``scripts/up.sh --help``); running goes through ``frachub up``."""
    parser = argparse.ArgumentParser(
        prog="bash scripts/up.sh",
        description="Install FracHub's one-machine setup once (a virtualenv in .venv, "
        "configurable-http-proxy from npm), then run `frachub up` with these options: "
        "JupyterHub with FracHub on this machine, in one command.",
    )
    add_arguments(parser)
    parser.parse_args(argv)
    print("run it with: bash scripts/up.sh [OPTIONS] (or frachub up once installed)")
    return 2


if __name__ == "__main__":
    sys.exit(main())
