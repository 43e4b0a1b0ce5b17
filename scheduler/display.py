"""Quantities as people write and read them, one way for every part of FracHub.

The service's events, the spawner's progress messages, the CLI and magics tables and the
fleet report all say where a workload runs, how long something took and how much GPU memory
was asked for; they use these functions so that the same thing reads the same everywhere.
Pure functions, no I/O.

- ``describe_placement``: ``"node-0 GPU 1 (0.5)"``, ``"node-0 GPUs 0, 1"``, replicas joined
  by ``"; "``; ``placement_of`` reads the API's JSON placement into the engine's.
- ``format_duration``: two units at most, like kubectl's AGE (``45s``, ``3m12s``, ``2h05m``,
  ``3d04h``).
- ``memory_gib``: a memory size (``20G``, ``20GiB``, ``512MiB``) in GiB.
- ``plural`` / ``gpus``: a count with its noun agreeing (``1 time``, ``2 times``, ``0 GPUs``,
  ``0.5 GPU``, ``4 GPUs``), the one helper every message, table and page uses for that.

The rule for plurals is the engine's (``scheduler.engine.reasons.plural``: its pending
reasons count GPUs too, and the engine depends on nothing outside it); this module is where
everything else gets it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from scheduler.engine.model import MILLI, GpuShare, Placement, ReplicaPlacement
from scheduler.engine.reasons import plural

__all__ = [
    "describe_placement",
    "event_line",
    "format_duration",
    "gpus",
    "memory_gib",
    "pending_headline",
    "placement_of",
    "plural",
]


def gpus(count: float) -> str:
    """A number of GPUs in words: "1 GPU", "0.5 GPU", "2.5 GPUs", "0 GPUs"."""
    return plural(count, "GPU")


def describe_placement(placement: Placement) -> str:
    """Where a workload runs, for events, messages and tables; ``""`` when nowhere."""
    parts = []
    for replica in placement:
        shares = replica.gpus
        if len(shares) == 1 and shares[0].milli < MILLI:
            parts.append(f"{replica.node} GPU {shares[0].index} ({shares[0].milli / MILLI:g})")
        else:
            label = "GPU" if len(shares) == 1 else "GPUs"
            parts.append(f"{replica.node} {label} {', '.join(str(s.index) for s in shares)}")
    return "; ".join(parts)


def placement_of(replicas: Iterable[Mapping[str, Any]] | None) -> Placement:
    """The API's ``placement`` (``[{"node", "gpus": [{"index", "share", ...}]}]``) as the
    engine's, shares back in thousandths."""
    return tuple(
        ReplicaPlacement(
            node=replica["node"],
            gpus=tuple(
                GpuShare(int(gpu["index"]), round(float(gpu["share"]) * MILLI))
                for gpu in replica["gpus"]
            ),
        )
        for replica in replicas or ()
    )


def format_duration(seconds: float | None) -> str:
    """Two units at most, like kubectl's AGE: 45s, 3m12s, 2h05m, 3d04h; ``-`` for None."""
    if seconds is None:
        return "-"
    total = max(0, int(seconds))
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


_MEMORY = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(g|gb|gi|gib|m|mb|mi|mib)?\s*$", re.IGNORECASE)


def memory_gib(text: str, *, bare: str | None = None) -> float | None:
    """A memory size in GiB: ``20G``, ``20GB``, ``20Gi``, ``20GiB``, ``512M``, ``512MiB``, in
    binary units, as GPU memory is (Run:ai's ``--gpu-memory 5G`` means 5 GiB). A bare number
    is in ``bare`` (``"G"`` or ``"M"``), or no size at all when ``bare`` is None (in a profile,
    ``2`` is two GPUs). None when ``text`` is not a size; the caller says why in its words."""
    match = _MEMORY.match(text)
    if not match or (match.group(2) is None and bare is None):
        return None
    unit = (match.group(2) or bare or "g").lower()
    value = float(match.group(1))
    return value / 1024 if unit.startswith("m") else value


_EVENT_WORDS = {
    "preempting": "preempted",
    "cancelling": "stopping",
    "stopping": "stopping",
    "lost": "lost its process",
}


def event_line(type_: str, message: str) -> str:
    """One line of a workload's timeline, the same in the panel, the CLI, the magics and the
    job's log: "preempted for nlp/notebook-carol (…); grace period 30s", "restarted: attempt 2
    on ws GPU 0". A ``lost`` event whose message is a sentence of its own (a capital first)
    is that sentence: the backend says what happened instead of "lost its process"."""
    what = _EVENT_WORDS.get(type_, type_)
    if not message:
        return what
    if type_ == "lost" and message[:1].isupper():
        # a backend that knows why the attempt ended says so in a sentence of its own
        # ("Kubernetes found no node for its pod ...; requeued"): no process was lost
        return message
    if message.startswith(what):  # "preempted for nlp/...": the message already says it
        return message
    if message.startswith(("for ", "on ", "to ")):
        return f"{what} {message}"
    return f"{what}: {message}"


def pending_headline(
    reason: str, project: str, allocated: float | None, deserved: float | None
) -> str:
    """Why a workload waits, in one short phrase a researcher understands first; the engine's
    ``reason`` (which names every number) is the detail behind it.

    ``allocated`` and ``deserved`` are its project's GPUs in use and quota, when known.
    """
    if "can never start" in reason:
        return "can never start: " + reason.split("; ")[-1].replace(", so it can never start", "")
    if reason.startswith("starting as soon as"):
        return "starting soon: the work preempted for it is stopping"
    if "is limited to" in reason:
        return "waiting: " + reason.split("; ")[0]
    if allocated is not None and deserved is not None and allocated >= deserved - 1e-9:
        quota = f"{plural(deserved, 'GPU').replace(' ', '-')}" if deserved else "no GPU"
        return (
            f"waiting: {project} is using its {quota} quota; borrowed GPUs are all taken"
            if deserved
            else f"waiting: {project} has no GPU quota; borrowed GPUs are all taken"
        )
    if reason.startswith("needs "):
        return "waiting for room: " + "; ".join(reason.split("; ")[1:2] or [reason])
    return "waiting: " + reason.split("; ")[0]
