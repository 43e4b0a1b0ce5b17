"""One process per data directory: an advisory lock file that names its holder.

The scheduler service holds ``<data>/frachub-service.lock`` while it runs and ``frachub up``
holds ``<data>/frachub-up.lock``. The kernel drops a ``flock`` when its holder dies however it
dies (SIGKILL included), so a lock that can be taken means the previous holder is gone, and
one that cannot names a live process: the next ``frachub up`` stops an orphaned service by
the pid written in its lock instead of failing on "Address already in use".
"""

from __future__ import annotations

import contextlib
import fcntl
import os

SERVICE_LOCK_FILE = "frachub-service.lock"
"""The lock a running service holds in its data directory; ``frachub up`` and ``frachub backup``
look for it without importing the service (a client-only install has none of its packages)."""


class Held(Exception):
    """Another live process holds the lock."""

    def __init__(self, path: str, pid: int | None) -> None:
        super().__init__(f"{path} is held by process {pid if pid else '(unknown)'}")
        self.path = path
        self.pid = pid


def hold(path: str) -> int:
    """Take the lock for the life of this process (the file descriptor is returned so the
    caller keeps it open); raise ``Held`` when a live process has it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _read_pid(fd)
        os.close(fd)
        raise Held(path, pid) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def holder(path: str) -> int | None:
    """The pid of the live process holding the lock, or None when nobody does."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_pid(fd) or None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(os.pread(fd, 32, 0).strip())
    return None
