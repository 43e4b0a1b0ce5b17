"""Whether every account the team mode runs as can execute the hub's Python.

With system accounts, each user's notebook server is ``jupyterhub-singleuser`` from the hub's
virtualenv, run as that user, and its interpreter is wherever the virtualenv's Python points
(symlinks followed). An interpreter under a directory the user cannot enter (Python installed
in root's own 0700 home is the usual case) makes every spawn fail with an HTTP 500 whose cause
only the hub's log names, so ``frachub up`` checks it before starting, from the modes of every
directory on each path, as the kernel would for that user's uid and groups."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path

PROBE_ACCOUNT = "nobody"
"""The stand-in for users not named yet (added later on the admin page, or a project open to
everybody): an account with no group of ours, so only the "other" bits let it in."""

_MAX_LINKS = 40  # as the kernel's ELOOP


@dataclass(frozen=True)
class Blocked:
    """Why an account cannot execute ``path``: ``where`` (a directory it cannot enter, or the
    file itself), its mode, and ``through``, what the path resolved to as far as it went (the
    symlinks followed), which names the file that lives there."""

    path: str
    where: str
    mode: int
    is_directory: bool
    through: str


def _allowed(st: os.stat_result, uid: int, gids: set[int], bit: int) -> bool:
    """The kernel's rule for a non-root uid: the owner's bits, else the group's, else the
    others' (ACLs aside). ``bit`` is one of 4 (read), 1 (execute/search)."""
    if uid == 0:
        return True
    if st.st_uid == uid:
        return bool(st.st_mode & (bit << 6))
    if st.st_gid in gids:
        return bool(st.st_mode & (bit << 3))
    return bool(st.st_mode & bit)


def blocked(path: str, uid: int, gids: set[int]) -> Blocked | None:
    """Where ``uid`` (with ``gids``) is stopped executing ``path``: the first directory on the
    way, symlinks followed, without the search bit for it, or the file without the execute
    bit (and read, for a ``#!`` script); None if it may run it."""
    pending = deque(Path(os.path.abspath(path)).parts[1:])
    current = "/"
    links = 0
    while pending:
        st = os.stat(current)
        if not _allowed(st, uid, gids, 1):
            through = os.path.join(current, *pending)
            return Blocked(path, current, stat.S_IMODE(st.st_mode), True, through)
        name = pending.popleft()
        if name in ("", "."):
            continue
        if name == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, name)
        if os.path.islink(candidate):
            links += 1
            if links > _MAX_LINKS:
                raise OSError(f"too many symbolic links resolving {path}")
            target = os.readlink(candidate)
            if os.path.isabs(target):
                current = "/"
            pending.extendleft(reversed(Path(target).parts[1 if os.path.isabs(target) else 0 :]))
            continue
        current = candidate
    st = os.stat(current)
    script = False
    try:
        with open(current, "rb") as handle:
            script = handle.read(2) == b"#!"
    except OSError:
        pass
    if not _allowed(st, uid, gids, 1) or (script and not _allowed(st, uid, gids, 4)):
        return Blocked(path, current, stat.S_IMODE(st.st_mode), False, current)
    return None


def hub_python() -> list[str]:
    """What each user's server executes: ``jupyterhub-singleuser`` as the spawner starts it,
    the interpreter its ``#!`` line names, and the hub's own interpreter."""
    from spawner.local import server_command

    command = server_command()[0]
    found = command if os.path.isabs(command) else shutil.which(command)
    paths = [found] if found else []
    if found:
        with open(found, "rb") as handle:
            first = handle.readline().decode(errors="replace")
        if first.startswith("#!"):
            interpreter = first[2:].split()
            if interpreter and os.path.isabs(interpreter[0]):
                paths.append(interpreter[0])
    paths.append(sys.executable)
    return list(dict.fromkeys(paths))


def refusal(problem: Blocked, user: str) -> str:
    """The operator's message: what cannot be run, by whom, and the exact fix."""
    name = os.path.basename(problem.through)
    shown = (
        problem.path if problem.through == problem.path else f"{problem.path} -> {problem.through}"
    )
    if problem.is_directory:
        return (
            f"{name} lives under {problem.where} (mode {problem.mode:04o}): user {user} cannot "
            f"run it ({shown}); install Python where every user can read it (e.g. "
            "/usr/local or /opt) and re-run scripts/up.sh (or re-create the virtualenv with "
            f"that Python), or chmod o+x {problem.where}"
        )
    return (
        f"{problem.where} (mode {problem.mode:04o}) is not executable by user {user}, so "
        f"{name} cannot run ({shown}): chmod o+rx {problem.where}"
    )


def check_accounts(users: list[str], paths: list[str]) -> str | None:
    """The refusal for the first of ``users`` (system account names) that cannot execute one
    of ``paths``; None when every one can. Root may run anything and is not checked."""
    for user in users:
        try:
            account = pwd.getpwnam(user)
        except KeyError:
            continue  # no such account yet: it cannot log in either (said elsewhere)
        if account.pw_uid == 0:
            continue
        gids = set(os.getgrouplist(user, account.pw_gid))
        for path in paths:
            problem = blocked(path, account.pw_uid, gids)
            if problem is not None:
                return refusal(problem, user)
    return None


def accounts_to_check(named: list[str], open_to_all: bool) -> tuple[list[str], str]:
    """The accounts the team mode will run as: the named ones (admins and projects' members)
    that exist and are not root, plus :data:`PROBE_ACCOUNT` standing in for users not known
    yet when a project is open to everybody or no such account is named; and a note saying
    when the probe stands in (empty otherwise)."""
    known = []
    for user in dict.fromkeys(named):
        try:
            if pwd.getpwnam(user).pw_uid != 0:
                known.append(user)
        except KeyError:
            pass
    if known and not open_to_all:
        return known, ""
    try:
        pwd.getpwnam(PROBE_ACCOUNT)
    except KeyError:
        return known, ""
    why = "a project is open to everybody" if open_to_all else "no other account is named"
    return [*known, PROBE_ACCOUNT], (
        f"{why}: checked that {PROBE_ACCOUNT!r} can run the hub's Python, standing in for "
        "users added later"
    )
