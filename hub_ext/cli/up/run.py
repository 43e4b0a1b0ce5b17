"""Running ``frachub up``: start the hub (which starts the scheduler service), wait until it
answers, and on Ctrl-C stop it, saying which jobs are left running (or stopping them)."""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hub_ext.cli.up.configs import banner, hub_config, service_config, sharing_said
from hub_ext.cli.up.datadir import prepare_data_dir, stop_leftovers
from hub_ext.cli.up.options import (
    LOG_DIR,
    UP_LOCK,
    Team,
    UpError,
    add_arguments,
    detect_gpus,
    find_proxy,
    is_python_proxy,
    password_for,
    team_for,
    write_private,
)
from hub_ext.cli.up.reach import accounts_to_check, check_accounts, hub_python
from scheduler.common.scopes import API_PATH, SERVICE_PREFIX

# httpx, yaml, NVML and the client are imported where they are used, and so is the
# service's data-directory lock: `frachub --help` loads this module


def _wait_ready(
    proc: subprocess.Popen[bytes], args: argparse.Namespace, proxy_token: str, timeout: float
) -> None:
    """Until the hub answers through the proxy and the scheduler answers behind it.

    Asked in an order that makes no noise: the hub and the service on their own ports first,
    then the proxy's API until both routes are in its table, and only then once through the
    proxy. (Asking the proxy before its routes exist made it log a red 404 and an
    ECONNREFUSED trace for every attempt.) The service is asked its health, which needs no
    token: its API's root answered 403 without one, and logged a warning each time."""
    import httpx

    scheme = "https" if args.ssl_cert else "http"
    base = f"{scheme}://127.0.0.1:{args.port}"
    health = f"{SERVICE_PREFIX}{API_PATH}health"
    checks = (
        lambda client: client.get(f"http://127.0.0.1:{args.hub_port}/hub/api/").status_code == 200,
        lambda client: (
            client.get(f"http://127.0.0.1:{args.service_port}{health}").status_code == 200
        ),
        lambda client: _routes_ready(client, args, proxy_token),
        lambda client: (
            client.get(f"{base}/hub/api/").status_code == 200
            and client.get(f"{base}{health}").status_code == 200
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
    from hub_ext.client.api import FracHubClient
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
    from hub_ext.client.session import FracHubError

    try:
        with _service_client(args, data) as client:
            return client.list_workloads(active=True, kinds=["training", "inference"])
    except FracHubError:
        return None


def stop_jobs(args: argparse.Namespace, data: Path, interrupted: Any) -> None:
    """``--stop-jobs``: cancel every job and wait for them to end (their grace period and a
    little), unless Ctrl-C comes again."""
    from hub_ext.client.session import FracHubError

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
    from hub_ext.client.formatting import format_placement
    from scheduler.common.states import HOLDING_STATES

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


def _check_reach(args: argparse.Namespace, team: Team) -> None:
    """Refuse to start a team whose accounts cannot run the hub's Python (every spawn would
    fail with an HTTP 500); with --write-config-only (the hub starts later) or
    --no-python-check (the admin knows: a lab that runs only jobs), only warn."""
    open_to_all = any("*" in queue.get("members", []) for queue in team.queues)
    users, note = accounts_to_check(list(team.allowed), open_to_all)
    if note:
        print(f"frachub up: {note}", file=sys.stderr, flush=True)
    refusal = check_accounts(users, hub_python())
    if refusal is None:
        return
    if args.write_config_only or args.no_python_check:
        print(f"frachub up: warning: {refusal}", file=sys.stderr, flush=True)
        return
    raise UpError(refusal)


def _up(args: argparse.Namespace) -> int:
    from scheduler.service.persistence import datalock

    data = Path(args.data_dir).resolve()
    _check_tls(args)
    proxy = find_proxy()
    if proxy is None:
        raise UpError(
            "configurable-http-proxy is not installed: `pip install 'frachub[hub]'` brings a "
            "Python one; or install Node's: `npm install -g configurable-http-proxy` (in a "
            "checkout, `bash scripts/up.sh` installs it)"
        )
    if args.ssl_cert and is_python_proxy(proxy):
        raise UpError(
            f"--ssl-cert needs Node's configurable-http-proxy ({proxy} is the Python one, "
            "which does no TLS): `npm install -g configurable-http-proxy`, or set FRACHUB_CHP "
            "to it"
        )
    gpus, gpus_said = detect_gpus(args)
    if args.gpu_sharing == "mps":
        from scheduler.backends.mps import MpsUnavailable, find_control

        try:
            find_control()
        except MpsUnavailable as error:
            raise UpError(str(error)) from None
    team = team_for(args, gpus)
    if team.auth == "pam":
        _check_reach(args, team)
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
    write_private(hub_file, hub_config(args, data, proxy, team))
    write_private(service_file, service_config(args, data, gpus, team))
    command = [sys.executable, "-m", "jupyterhub", "-f", str(hub_file)]
    print(f"frachub up: GPUs: {gpus_said}", file=sys.stderr, flush=True)
    print(f"frachub up: GPU sharing: {sharing_said(args.gpu_sharing)}", file=sys.stderr, flush=True)
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
    """``python -m hub_ext.cli.up --help``: the options, before anything is installed
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
