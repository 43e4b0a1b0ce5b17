"""The data directory ``frachub up`` runs in: made private, and cleared of what a killed run
left behind (hub, scheduler service, proxy) before a new start."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from hub_ext.cli.up.options import LOG_DIR, Team


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
    from scheduler.service.persistence import datalock

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
