"""Facts about a local job's processes the backend reads and acts on: the wrapper each
replica runs in, their state in /proc, the exit file the wrapper writes, signals to a process
group, an exit in words, a free port for a gang's rendezvous."""

from __future__ import annotations

import contextlib
import os
import signal
import socket

from scheduler.common.quantities import memory_words

# Runs the command as a child, so that it can record the child's status afterwards. It first
# waits for "go" on stdin: the service moves it into its control groups meanwhile, so that the
# command starts inside them (``confinement``); without "go" (the service died in between,
# or could not confine it) the command never runs. ``trap :``
# keeps the wrapper alive through the SIGTERM sent to the whole process group (the child does
# not inherit a trap, only an ignored signal would be), and POSIX shells run the trap only
# after the foreground child has ended. The status is written to a temporary file and renamed,
# so a reader sees either nothing or the whole number.
WRAPPER = """exitfile=$1; shift
read -r go || :
[ "$go" = go ] || exit 125
exec </dev/null
trap : TERM INT HUP
"$@"
code=$?
printf '%s\\n' "$code" > "$exitfile.tmp" 2>/dev/null && mv -f "$exitfile.tmp" "$exitfile"
exit "$code"
"""


def free_port() -> int:
    """A port for the gang's rendezvous (torchrun's own way: bind to 0, read, release)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) of a live pid; the start time tells a
    process from a later one that reuses its pid."""
    try:  # os.open/os.read: half the cost of open(), which counts with 2,000 adopted jobs
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    fields = data[data.rindex(b")") + 2 :].split()  # the name in parentheses may hold spaces
    return fields[0].decode(), int(fields[19])


def read_exit_file(path: str) -> tuple[int | None, float | None]:
    """The recorded exit code and when it was recorded (the file's mtime: the wrapper writes
    it as the command ends), or None for each when there is no readable record."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None, None
    try:
        return int(os.read(fd, 32).strip()), os.fstat(fd).st_mtime
    except ValueError:
        return None, None
    finally:
        os.close(fd)


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def describe(code: int, killed: bool) -> str:
    if code > 128 and code - 128 in signal.valid_signals():
        name = signal.Signals(code - 128).name
        if code - 128 == signal.SIGKILL and killed:
            return f"killed after the grace period ({name}, code {code})"
        return f"ended by {name} (code {code})"
    return f"exited with code {code}"


def out_of_memory(code: int | None, limit_mib: int, killed: bool) -> str:
    """An end after the kernel killed a process of the job for going past its memory limit:
    the job's own process (SIGKILL), or another of its processes, after which it ended with
    ``code``."""
    limit = memory_words(limit_mib)
    if code == 128 + signal.SIGKILL and not killed:
        return f"killed: used more than its {limit} memory (the kernel's OOM killer, SIGKILL)"
    ended = "ended" if code is None else describe(code, killed)
    return (
        f"{ended} after the kernel killed one of its processes for using more than its "
        f"{limit} memory"
    )
