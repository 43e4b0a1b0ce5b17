"""GPU faults under NVIDIA MPS: which lines of the daemons' logs report one, and which of the
clients that ended together was the faulting one and which were its victims.

Under MPS a client that faults (an illegal address) ends the other clients of its GPU too
(measured on an H200; without MPS they survive). The local backend holds a failing MPS
client's end a few seconds (``LocalBackend.mps_fault_window_seconds``) and asks ``blame``.
NVIDIA documents no wording for a fault in its logs, and on an H200 (driver 580) the server
logged none of its own: the patterns below are the place to adjust when a real fault's log
says more (``benchmarks/gpu_sharing.py --keep DIR`` keeps the logs it captured).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

FAULT_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"fatal (gpu )?exception", re.IGNORECASE),
    re.compile(r"\bxid\b", re.IGNORECASE),
    re.compile(r"illegal (memory )?(access|address|instruction)", re.IGNORECASE),
    re.compile(r"\b(gpu|device|mmu) fault\b", re.IGNORECASE),
    re.compile(r"\bfault(ed|ing)? client\b", re.IGNORECASE),
)
"""A line of control.log or server.log that reports a GPU fault. NVIDIA documents no wording;
these follow logs seen in the wild ("Server encountered a fatal exception. Shutting down").
Adjust them here when a real fault's log says otherwise (``benchmarks/gpu_sharing.py`` keeps
the logs it captured)."""

FAULT_PID = re.compile(r"\b(?:client\s*\{?\s*)?pid\s*[:=]?\s*(?P<pid>\d+)", re.IGNORECASE)
"""Where a fault line names the faulting client (``Client {PID: 4267, ...}``)."""

SERVER_EXIT = re.compile(r"server (?P<pid>\d+) exited with status (?P<status>-?\d+)", re.I)
"""The control daemon's line when an MPS server ends; after a fault, with a non-zero status."""

OUTPUT_FAULT_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"illegal (memory )?(access|address|instruction)", re.IGNORECASE),
    re.compile(r"\bxid\b", re.IGNORECASE),
    re.compile(r"misaligned address|unspecified launch failure|hardware stack error", re.I),
)
"""What a faulting program's own output says (CUDA's error strings), to tell it from the
clients it took down when the daemon's log does not name it."""

FAULT_WINDOW_SECONDS = 5.0
"""Clients of one GPU that end this close to a fault on it ended because of it."""


@dataclass(frozen=True)
class MpsFault:
    """A GPU fault an MPS daemon's log reported: on GPU ``gpu``, seen at ``at`` (Unix time),
    naming client ``pid`` where the line does."""

    gpu: int
    at: float
    line: str
    pid: int | None = None


def fault_in(line: str, gpu: int, at: float) -> MpsFault | None:
    """The fault ``line`` reports, or None: a fault pattern, or a server that exited with a
    non-zero status."""
    exited = SERVER_EXIT.search(line)
    faulted = any(pattern.search(line) for pattern in FAULT_PATTERNS)
    if not faulted and not (exited and exited.group("status") != "0"):
        return None
    named = FAULT_PID.search(line) if faulted else None
    return MpsFault(gpu, at, line.strip(), int(named.group("pid")) if named else None)


@dataclass(frozen=True)
class EndedClient:
    """A workload's replica on an MPS GPU that ended: when, with what, and its last output."""

    workload_id: int
    gpu: int
    ended_at: float
    exit_code: int | None
    pids: frozenset[int] = frozenset()
    output: str = ""


def blame(
    faults: Sequence[MpsFault], ended: Sequence[EndedClient], window: float = FAULT_WINDOW_SECONDS
) -> dict[int, int | None]:
    """Which ended workloads were taken down by a GPU fault, and by whose.

    Returns ``{victim workload: faulting workload}``; the faulting one is not in it (it
    failed on its own). Among the workloads of one GPU that ended with a non-zero code within
    ``window`` of a fault on it, the faulting one is the one whose pid the fault's line names,
    else the one whose output names a fault (an illegal address, an Xid), else the first to
    end. A single such workload is no victim of anybody.
    """
    victims: dict[int, int | None] = {}
    for fault in faults:
        near = [
            client
            for client in ended
            if client.gpu == fault.gpu
            and client.exit_code != 0
            and abs(client.ended_at - fault.at) <= window
        ]
        if len(near) < 2:
            continue
        culprit = next((c for c in near if fault.pid is not None and fault.pid in c.pids), None)
        if culprit is None:
            culprit = min(
                (c for c in near if any(p.search(c.output) for p in OUTPUT_FAULT_PATTERNS)),
                key=lambda c: c.ended_at,
                default=None,
            )
        if culprit is None:
            culprit = min(near, key=lambda c: c.ended_at)
        for client in near:
            if client.workload_id != culprit.workload_id:
                victims.setdefault(client.workload_id, culprit.workload_id)
    return victims


def victim_message(faulting: int | None, gpu: int) -> str:
    """The event a fault's victim gets, in words: a sentence of its own, which the timeline
    shows as is (``scheduler.common.messages.event_line``)."""
    return f"Stopped by a GPU fault of workload {faulting} sharing GPU {gpu}; requeued in its place"
