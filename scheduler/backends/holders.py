"""Which workload holds a process of this machine: the answer NVML's pids need.

A local job's replica and a local notebook server each live in a control group of their own
when confinement is on (``confinement.py``), and no process can leave its group, so the
group a pid is in names its workload: ``w<id>-<attempt>-r<rank>`` for a job's replica,
``s-<hash of user/server>`` for a notebook server (``confinement.server_group_name``). In
``session`` mode there are no groups; then a pid belongs to the job whose replica's wrapper
is one of its ancestors (the process tree), else to the attempt or server named by the
``FRACHUB_ATTEMPT`` in its environment (what the session mode's sweep finds them by too:
``setsid`` daemons, and kernels, whose parent is the server).

``holder_of`` tries those in that order. Reading another account's ``/proc/<pid>/environ``
needs root; its cgroup and its parent do not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.backends import confinement as cg

MAX_DEPTH = 64
"""How far up the process tree a pid's ancestors are followed."""


@dataclass(frozen=True)
class Holders:
    """What tells the workloads' processes apart, by workload id."""

    groups: Mapping[str, int] = field(default_factory=dict)
    """Control group name (its last path component) -> workload."""
    roots: Mapping[int, int] = field(default_factory=dict)
    """Pid of a replica's wrapper (the root of its process tree) -> workload."""
    tokens: Mapping[str, int] = field(default_factory=dict)
    """``FRACHUB_ATTEMPT`` value -> workload."""

    @staticmethod
    def of_notebooks(notebooks: Mapping[int, tuple[str, str]]) -> Holders:
        """The servers of notebook allocations (id -> (user, server name; '' for the default
        server)): their group names, which are also their ``FRACHUB_ATTEMPT``."""
        names = {
            cg.server_group_name(user, server): wid for wid, (user, server) in notebooks.items()
        }
        return Holders(groups=names, tokens=dict(names))

    def merged(self, other: Holders) -> Holders:
        return Holders(
            {**self.groups, **other.groups},
            {**self.roots, **other.roots},
            {**self.tokens, **other.tokens},
        )


def attempt_holders(attempts: Iterable[Any]) -> Holders:
    """The holders of a local backend's running attempts (each with ``workload_id``,
    ``token`` and ``replicas``, each replica with its ``group`` and wrapper ``pid``)."""
    groups: dict[str, int] = {}
    roots: dict[int, int] = {}
    tokens: dict[str, int] = {}
    for attempt in attempts:
        tokens[attempt.token] = attempt.workload_id
        for replica in attempt.replicas:
            groups[replica.group] = roots[replica.pid] = attempt.workload_id
    return Holders(groups, roots, tokens)


def holder_of(pid: int, holders: Holders, proc: str = "/proc") -> int | None:
    """The workload whose process ``pid`` is, or None (not FracHub's, gone, or unreadable)."""
    for group in _groups(pid, proc):
        if group in holders.groups:
            return holders.groups[group]
    current = pid
    for _ in range(MAX_DEPTH):
        if current in holders.roots:
            return holders.roots[current]
        parent = _parent(current, proc)
        if parent is None or parent <= 1:
            break
        current = parent
    token = _attempt(pid, proc)
    if token is not None:
        return holders.tokens.get(token)
    return None


def _groups(pid: int, proc: str) -> list[str]:
    """The last component of each control group path of ``pid`` (v2 and every v1 line)."""
    try:
        with open(f"{proc}/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    return [line.rsplit("/", 1)[-1] for line in lines if "/" in line]


def _parent(pid: int, proc: str) -> int | None:
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()  # the name in parentheses may hold spaces
    return int(fields[1])


def _attempt(pid: int, proc: str) -> str | None:
    try:
        with open(f"{proc}/{pid}/environ", "rb") as f:
            environ = f.read()
    except OSError:
        return None
    prefix = f"{cg.ATTEMPT_VARIABLE}=".encode()
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode(errors="replace")
    return None
