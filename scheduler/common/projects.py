"""Who belongs to which project: the one rule the service enforces and the spawner offers.

A user belongs to a project (a leaf queue) when they are in the JupyterHub group of the same
name or listed in the project's ``members`` (``"*"``: everybody). The service decides access
with it on its own queues; the spawner applies it to the queue tree the service reports, so
the form offers exactly the projects a request would be accepted for. Queues are anything
with a ``name`` and a ``parent``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

EVERYBODY = "*"  # in a queue's members: every user of the hub


class QueueNode(Protocol):
    """A queue as these rules see it: its name and its parent's."""

    @property
    def name(self) -> str: ...

    @property
    def parent(self) -> str | None: ...


def leaf_projects(queues: Iterable[QueueNode]) -> list[str]:
    """The queues no other queue names as its parent: the projects work is submitted to."""
    queues = list(queues)
    parents = {queue.parent for queue in queues}
    return [queue.name for queue in queues if queue.name not in parents]


def projects_of(
    user: str,
    groups: Iterable[str],
    queues: Iterable[QueueNode],
    members: Mapping[str, Iterable[str]],
) -> list[str]:
    """The projects ``user`` may submit to, in queue order. A project lists its members by
    name, or ``"*"`` for everybody (the single open project of ``frachub up``)."""
    groups = set(groups)
    return [
        name
        for name in leaf_projects(queues)
        if name in groups or {user, EVERYBODY} & set(members.get(name, ()))
    ]
