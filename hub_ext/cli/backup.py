"""``frachub backup DEST`` and ``frachub restore SRC``: a data directory's state, safely.

A backup holds both databases, copied with SQLite's online backup API (a consistent
snapshot, safe while the hub and the service write to them in WAL mode), the secrets that
make the databases usable (the service token, the hub's and the service's cookie secrets
(a restore keeps everyone logged in), the shared passwords),
the operator's ``*_extra.py`` settings and, unless ``--no-logs``, the job logs. Checkpoints
and users' homes are users' data: back them up with the machine's own tools.

``restore`` writes a backup into a data directory that is not in use (no hub or service
holds its lock) and has no databases yet (``--force`` replaces them), private as
``frachub up`` keeps it: the directory 0700, databases and secrets 0600. ``frachub up
--data-dir`` on it then starts with every user, group, token, project, workload and job log
of the backup.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import sys
import time
from pathlib import Path

from scheduler import __version__

DATABASES = ("jupyterhub.sqlite", "frachub.sqlite")
SECRETS = (
    "frachub-service-token",
    "jupyterhub_cookie_secret",
    "cookie_secret",  # the service's (handlers/pages.py COOKIE_SECRET_FILE): its logins
    "password",
    "admin-password",
    "jupyterhub_config_extra.py",
    "frachub_config_extra.py",
)
MANIFEST = "frachub-backup.json"
UP_LOCK = "frachub-up.lock"  # hub_ext.cli.up's; not imported, that would pull the hub's config in


class BackupError(Exception):
    """Printed as one line, no traceback."""


def add_backup_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dest", metavar="DEST", help="a new (or empty) directory to write")
    parser.add_argument(
        "--data-dir", default="frachub-data", help="the data directory (default: %(default)s)"
    )
    parser.add_argument("--no-logs", action="store_true", help="leave the job logs out")


def add_restore_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="SRC", help="a directory written by frachub backup")
    parser.add_argument(
        "--data-dir",
        default="frachub-data",
        help="the data directory to restore into (default: %(default)s)",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace the databases the data directory has"
    )


def _private_copy(source: Path, dest: Path) -> None:
    shutil.copyfile(source, dest)
    os.chmod(dest, 0o600)


def _copy_tree(source: Path, dest: Path) -> int:
    """Copy a directory keeping modes and, when run as root, owners (job logs belong to the
    users whose jobs wrote them). Returns the number of files."""
    count = 0
    for root, dirs, files in os.walk(source):
        here = dest / Path(root).relative_to(source)
        here.mkdir(exist_ok=True)
        _same_owner(Path(root), here)
        for name in files:
            target = here / name
            shutil.copy2(Path(root) / name, target, follow_symlinks=False)
            _same_owner(Path(root) / name, target)
            count += 1
        dirs[:] = [d for d in dirs if not (Path(root) / d).is_symlink()]
    return count


def _same_owner(source: Path, dest: Path) -> None:
    stat = source.lstat()
    shutil.copystat(source, dest, follow_symlinks=False)
    if os.geteuid() == 0:
        os.chown(dest, stat.st_uid, stat.st_gid, follow_symlinks=False)


def _online_copy(source: Path, dest: Path) -> None:
    """SQLite's backup API: reads a consistent snapshot while others write."""
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    src = sqlite3.connect(source, timeout=30)
    try:
        dst = sqlite3.connect(dest)
        try:
            src.backup(dst)
            dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        finally:
            dst.close()
    finally:
        src.close()


def backup(data: Path, dest: Path, logs: bool = True) -> dict:
    if not (data / "frachub.sqlite").exists() and not (data / "jupyterhub.sqlite").exists():
        raise BackupError(f"{data} holds no FracHub databases (is --data-dir right?)")
    if dest.exists() and any(dest.iterdir()):
        raise BackupError(f"{dest} exists and is not empty")
    dest.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(dest, 0o700)
    copied: list[str] = []
    for name in DATABASES:
        if (data / name).exists() and (data / name).stat().st_size:
            _online_copy(data / name, dest / name)
            copied.append(name)
    for name in SECRETS:
        if (data / name).exists():
            _private_copy(data / name, dest / name)
            copied.append(name)
    log_files = 0
    if logs and (data / "logs").is_dir():
        log_files = _copy_tree(data / "logs", dest / "logs")
    manifest = {
        "frachub": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "data_dir": str(data),
        "files": copied,
        "job_log_files": log_files,
    }
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def restore(source: Path, data: Path, force: bool = False) -> dict:
    try:
        manifest = json.loads((source / MANIFEST).read_text())
    except (OSError, ValueError):
        raise BackupError(f"{source} is not a frachub backup (no {MANIFEST})") from None
    from scheduler.service.persistence import datalock

    for lock in (UP_LOCK, datalock.SERVICE_LOCK_FILE):
        pid = datalock.holder(str(data / lock))
        if pid:
            raise BackupError(f"{data} is in use (process {pid}): stop frachub up first")
    present = [
        name for name in DATABASES if (data / name).exists() and (data / name).stat().st_size
    ]
    if present and not force:
        raise BackupError(
            f"{data} already has {', '.join(present)}; restore into a new data directory, or "
            "give --force to replace them"
        )
    data.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(data, 0o700)
    for name in manifest.get("files", []):
        if name not in DATABASES + SECRETS or not (source / name).exists():
            continue
        if name in DATABASES:
            for stale in (f"{name}-wal", f"{name}-shm", f"{name}-journal"):
                (data / stale).unlink(missing_ok=True)
        _private_copy(source / name, data / name)
    if (source / "logs").is_dir():
        (data / "logs").mkdir(mode=0o755, exist_ok=True)
        _copy_tree(source / "logs", data / "logs")
    return manifest


def run_backup(args: argparse.Namespace) -> int:
    data, dest = Path(args.data_dir).resolve(), Path(args.dest).resolve()
    try:
        manifest = backup(data, dest, logs=not args.no_logs)
    except (BackupError, sqlite3.Error, OSError) as error:
        print(f"frachub backup: {error}", file=sys.stderr)
        return 2
    print(
        f"backed up {data} to {dest}: {', '.join(manifest['files'])}"
        f" and {manifest['job_log_files']} job log files"
    )
    return 0


def run_restore(args: argparse.Namespace) -> int:
    source, data = Path(args.source).resolve(), Path(args.data_dir).resolve()
    try:
        manifest = restore(source, data, force=args.force)
    except (BackupError, OSError) as error:
        print(f"frachub restore: {error}", file=sys.stderr)
        return 2
    print(
        f"restored the backup of {manifest.get('data_dir')} made {manifest.get('created')} "
        f"into {data}; start it with: frachub up --data-dir {data}"
    )
    return 0
