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

Users log in with one shared password (generated once, kept in the data directory, printed).
Servers and jobs run as this Unix user, each user's home under ``<data>/home``: there is no
isolation between users, which is right for one person's workstation or a demo and wrong for
a shared machine (see docs/up.md for system accounts).
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from hub_ext.paths import ROOT
from hub_ext.scopes import ADMIN_GROUP, API_PATH, SERVICE_PREFIX
from scheduler.backends.inventory import NvmlUnavailable, nvml_inventory

DEMO_USERS = {"alice": "vision", "bob": "vision", "carol": "nlp"}
ADMIN_USER = "admin"

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
        "--password", help="the shared log-in password (default: generated once, kept)"
    )
    parser.add_argument(
        "--grace-period",
        type=float,
        default=30.0,
        help="seconds a preempted job has to save its work (default: %(default)s)",
    )
    parser.add_argument(
        "--write-config-only",
        action="store_true",
        help="write the config files and print how to start the hub, without starting it",
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
    """The GPUs to schedule, and a sentence saying where they came from."""
    if not args.declared:
        try:
            inventory = nvml_inventory()
            node = inventory.nodes[0]
            return (
                Gpus(node.gpus, node.gpu_memory_mib / 1024, "nvml", node.gpu_model),
                f"{node.gpus} × {node.gpu_model} found by NVML",
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


def password_for(data: Path, given: str | None) -> str:
    if given is not None:
        if len(given) < 8:
            raise UpError("--password must have at least 8 characters")
        return given
    path = data / "password"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(12))
    return path.read_text().strip()


def projects(gpus: Gpus, demo: bool) -> list[dict[str, Any]]:
    if not demo:
        return [{"name": "default", "deserved_gpus": gpus.count, "members": ["*"]}]
    half = gpus.count / 2
    return [
        {"name": "vision", "deserved_gpus": half, "over_quota_weight": 1},
        {"name": "nlp", "deserved_gpus": gpus.count - half, "over_quota_weight": 1},
    ]


def hub_config(args: argparse.Namespace, data: Path, proxy: str, password: str) -> str:
    service_url = f"http://127.0.0.1:{args.service_port}"
    groups: dict[str, Any] = {ADMIN_GROUP: {"users": [ADMIN_USER]}}
    if args.demo:
        for user, project in DEMO_USERS.items():
            groups.setdefault(project, {"users": []})["users"].append(user)
    settings = {
        "JupyterHub.bind_url": f"http://{args.ip}:{args.port}/",
        "JupyterHub.hub_ip": "127.0.0.1",
        "JupyterHub.hub_port": args.hub_port,
        "JupyterHub.db_url": f"sqlite:///{data / 'jupyterhub.sqlite'}",
        "JupyterHub.cookie_secret_file": str(data / "jupyterhub_cookie_secret"),
        "JupyterHub.pid_file": str(data / "jupyterhub.pid"),
        "JupyterHub.load_groups": groups,
        "ConfigurableHTTPProxy.command": [proxy],
        "ConfigurableHTTPProxy.api_url": f"http://127.0.0.1:{args.proxy_api_port}",
        "ConfigurableHTTPProxy.pid_file": str(data / "jupyterhub-proxy.pid"),
        "JupyterHub.authenticator_class": "shared-password",
        "SharedPasswordAuthenticator.user_password": password,
        "Spawner.default_url": "/lab",
        # a CPU server and a GPU server side by side, each with its own allocation
        "JupyterHub.allow_named_servers": True,
        "FracLocalSpawner.home_dir_template": str(data / "home" / "{username}"),
    }
    if args.demo:
        settings["Authenticator.allowed_users"] = {*DEMO_USERS, ADMIN_USER}
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


def service_config(args: argparse.Namespace, data: Path, gpus: Gpus) -> str:
    settings: dict[str, Any] = {
        "FracHubService.queues": projects(gpus, args.demo),
        "FracHubService.grace_period": args.grace_period,
        # servers and jobs run as this Unix user (hub-only users have no system account)
        "LocalBackend.run_as_user": False,
    }
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


def banner(args: argparse.Namespace, password: str, gpus_said: str, data: Path) -> str:
    host = "localhost" if args.ip in ("127.0.0.1", "0.0.0.0", "") else args.ip
    url = f"http://{host}:{args.port}/"
    if args.demo:
        who = (
            "  users: alice, bob (project vision), carol (project nlp), "
            f"{ADMIN_USER} (FracHub admin)\n"
        )
    else:
        who = f"  users: any name (project 'default'); {ADMIN_USER} is the FracHub admin\n"
    return (
        "\n"
        "FracHub is running.\n"
        f"  open:     {url}\n"
        f"{who}"
        f"  password: {password}\n"
        f"  GPUs:     {gpus_said}\n"
        f"  Training panel: {url.rstrip('/')}{SERVICE_PREFIX}\n"
        f"  data and logs:  {data}\n"
        "Stop with Ctrl-C.\n"
    )


def _wait_ready(proc: subprocess.Popen[bytes], args: argparse.Namespace, timeout: float) -> None:
    """Until the hub answers through the proxy and the scheduler answers behind it."""
    base = f"http://127.0.0.1:{args.port}"
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise UpError(
                    f"JupyterHub exited with status {proc.returncode} while starting "
                    "(its log is above)"
                )
            try:
                hub = client.get(f"{base}/hub/api/")
                service = client.get(f"{base}{SERVICE_PREFIX}{API_PATH}")
                if hub.status_code == 200 and service.status_code < 500:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
    raise UpError(f"JupyterHub did not answer on {base} within {timeout:.0f} s")


def run(args: argparse.Namespace) -> int:
    try:
        return _up(args)
    except UpError as error:
        print(f"frachub up: {error}", file=sys.stderr)
        return 2


def _up(args: argparse.Namespace) -> int:
    data = Path(args.data_dir).resolve()
    data.mkdir(parents=True, exist_ok=True)
    (data / "home").mkdir(exist_ok=True)
    proxy = find_proxy()
    if proxy is None:
        raise UpError(
            "configurable-http-proxy is not installed: run `bash scripts/up.sh` (it installs it) "
            "or `npm install -g configurable-http-proxy`"
        )
    gpus, gpus_said = detect_gpus(args)
    password = password_for(data, args.password)
    (data / "jupyterhub_config.py").write_text(hub_config(args, data, proxy, password))
    (data / "frachub_config.py").write_text(service_config(args, data, gpus))
    command = [sys.executable, "-m", "jupyterhub", "-f", str(data / "jupyterhub_config.py")]
    if args.write_config_only:
        print(f"wrote {data / 'jupyterhub_config.py'} and {data / 'frachub_config.py'}")
        print("start the hub with: " + " ".join(command))
        return 0
    env = {
        **os.environ,
        "PATH": f"{Path(proxy).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    print(f"frachub up: starting JupyterHub ({gpus_said})", file=sys.stderr, flush=True)
    proc = subprocess.Popen(command, cwd=data, env=env)
    stopping = False

    def forward(signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        _wait_ready(proc, args, timeout=120)
    except UpError:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)
        if stopping:
            return 130
        raise
    print(banner(args, password, gpus_said, data), flush=True)
    return proc.wait()
