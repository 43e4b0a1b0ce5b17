"""Where and as whom a local job runs: its command, its working and data directories and its
log file, each checked as the job's own user before anything starts, so a refusal says the
same whatever another user's files hold."""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import shutil
import subprocess
from collections.abc import Sequence

from scheduler.backends.base import BackendError
from scheduler.common.files import open_own_file

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
"""A job's PATH when neither it nor the notebook it came from gives one."""


def command_argv(command: str | Sequence[str]) -> list[str]:
    if isinstance(command, str):
        if not command.strip():
            raise BackendError("the command is empty")
        return ["/bin/sh", "-c", command]
    argv = [str(part) for part in command]
    if not argv or not argv[0]:
        raise BackendError("the command is empty")
    return argv


# Run as the job's user by ``_check_start``: exit 3 when the working directory cannot be
# entered, 4 when a command given by path cannot be run, 5 when none is found on PATH.

CHECK_AS_USER = """cd -- "$1" 2>/dev/null || exit 3
case $2 in
*/*) [ -f "$2" ] && [ -x "$2" ] || exit 4; exit 0 ;;
esac
set -f; IFS=:
for dir in $3; do
    [ -f "${dir:-.}/$2" ] && [ -x "${dir:-.}/$2" ] && exit 0
done
exit 5
"""


def check_start(argv: list[str], path: str, cwd: str, account: pwd.struct_passwd | None) -> None:
    """Refuse a job whose working directory or command cannot be used, while nothing has
    started yet (the shell would only say so in the log, with code 127).

    For a job run as another account, the checks run as that account (a short ``/bin/sh``
    with its uid and groups): checked as root, "does not exist" against a start would tell
    anyone whether a path exists under another user's private directory. A missing
    directory and one the user may not enter get the same answer."""
    if account is None:
        if not os.path.isdir(cwd) or not os.access(cwd, os.X_OK):
            raise BackendError(no_working_dir(cwd))
        check_command(argv, path, cwd)
        return
    try:
        code = subprocess.run(
            ["/bin/sh", "-c", CHECK_AS_USER, "frachub-check", cwd, argv[0], path],
            env={"PATH": DEFAULT_PATH},
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            user=account.pw_uid,
            group=account.pw_gid,
            extra_groups=os.getgrouplist(account.pw_name, account.pw_gid),
            timeout=30,
        ).returncode
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BackendError(
            f"cannot check the job's working directory as {account.pw_name}: {e}"
        ) from e
    if code == 3:
        raise BackendError(no_working_dir(cwd))
    if code == 4:
        raise BackendError(f"command not found or not executable: {argv[0]}")
    if code != 0:
        raise BackendError(f"command not found: {argv[0]} (PATH={path})")


def no_working_dir(path: str) -> str:
    """One answer for missing and not the user's, so that it tells nothing about others'
    files."""
    return f"working directory {path} does not exist or is not yours to enter"


def open_log(path: str) -> int:
    """The replica's log, opened to append. Its directory is the user's, who must not be able
    to point the service (perhaps root, which also gives the file to the user) at another
    file: never through a symlink, and a hard link or special file is replaced by a new
    file."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    try:
        try:
            return open_own_file(path, flags)
        except OSError as e:
            if e.errno != errno.EMLINK:
                raise
        os.unlink(path)  # only the name in the user's directory: the file itself is untouched
        return open_own_file(path, flags | os.O_EXCL)
    except OSError as e:
        raise BackendError(f"cannot open the log file {path}: {e.strerror}") from e


def check_command(argv: list[str], path: str, cwd: str) -> None:
    """Refuse a command that cannot run (the service's own user runs the job)."""
    if "/" in argv[0]:
        if not os.access(os.path.join(cwd, argv[0]), os.X_OK):
            raise BackendError(f"command not found or not executable: {argv[0]}")
    elif shutil.which(argv[0], path=path) is None:
        raise BackendError(f"command not found: {argv[0]} (PATH={path})")


def check_dir_name(what: str, name: str) -> None:
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise BackendError(f"{what} {name!r} cannot be used as a directory name")


def make_dir(path: str, account: pwd.struct_passwd | None) -> None:
    """Create ``path`` (parents are the service's, 0755); the leaf is the job user's, 0700."""
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    if account is not None:
        os.chown(path, account.pw_uid, account.pw_gid, follow_symlinks=False)


def own_name() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def account(user: str, run_as_user: bool) -> pwd.struct_passwd | None:
    """The system account to run ``user``'s job as, or None to run it as the service's own
    user (``run_as_user`` off, or the service is not root)."""
    if not run_as_user or os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(user)
    except KeyError:
        # Running a hub user's command as root because no account matches would hand root
        # to anyone who can log in to the hub; the admin must choose that explicitly.
        raise BackendError(
            f"there is no system account {user!r} to run this job as; create it, or set "
            "LocalBackend.run_as_user = False to run jobs as the service's own user"
        ) from None


def working_dir(asked: str | None, default: str) -> str:
    """The directory the job asked for, else its home. Relative paths, and ``~`` or
    ``~/...``, are taken from the job's home (never the service's: ``expanduser`` here would
    name the service account's home). Checked as the job's user before it starts."""
    if not asked:
        return default
    if asked == "~" or asked.startswith("~/"):
        asked = asked[1:].lstrip("/")
    return os.path.normpath(os.path.join(default, asked))
