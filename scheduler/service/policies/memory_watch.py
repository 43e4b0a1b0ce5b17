"""When a workload holds more GPU memory than its share: pure decisions, no I/O, no clock.

In ``cooperative`` sharing, a fraction's memory is capped only by the frameworks that read
the contract (PyTorch through FracHub's hook, JAX through its own variable); a program that
is neither (CuPy, TensorRT, custom CUDA, an allocator of its own) can take the whole GPU.
The memory watchdog closes that gap after the fact: the service samples the memory each
workload's processes hold on each GPU (``scheduler/backends/gpu_usage.py``) and ``judge``
says, each sample, what to do:

1. A workload whose processes use more than its share on any one GPU, by more than
   ``slack`` bytes, is *over* from the first sample that shows it. The slack is for what
   NVML counts and no framework's cap does: each CUDA process's context (545 MiB on an
   H200, driver 580, CUDA 13), so a PyTorch job that fills its share is not over.
2. Over for ``grace`` seconds or more, it is acted on once, as its kind's setting says:
   ``stop`` (the service stops it: it fails with the reason in words), ``warn`` (an event in
   its timeline and the service log; it goes on), ``off`` (not judged at all).
3. Back at or under its share on every GPU, it is no longer over; a warned workload gets an
   event that says so, and a later excess starts a new grace period.

The share compared is the share of one GPU (``scheduler/common/share.py``: ``share_of``):
a replica holds either one share of one GPU or whole GPUs, so using more than it on any GPU
is beyond what was granted. A workload on whole GPUs cannot be over (a GPU holds no more
than itself), and memory a job takes on a GPU it does not hold is for
``CUDA_VISIBLE_DEVICES`` and the devices controller to prevent, not for this rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

ACTIONS = ("stop", "warn", "off")
"""What a workload over its share for longer than the grace period gets."""
GIB = 1 << 30


class Verdict(str, Enum):
    STOP = "stop"
    WARN = "warn"
    CLEARED = "cleared"
    """A warned workload is back within its share."""


@dataclass(frozen=True)
class Watched:
    """One running workload as a sample saw it."""

    workload_id: int
    share_bytes: int
    """Its share of one GPU's memory."""
    used: Mapping[str, int]
    """Bytes its processes hold on each GPU, by the GPU's name in words ("GPU 0")."""
    action: str
    """``stop``, ``warn`` or ``off``: its kind's setting."""


@dataclass(frozen=True)
class Over:
    """A workload found over its share: since when, by how much at worst, and whether it was
    acted on (so it is acted on once)."""

    since: float
    acted: Verdict | None = None


@dataclass(frozen=True)
class Finding:
    workload_id: int
    verdict: Verdict
    words: str
    """What the timeline, the log and (for a stop) the failure say."""


@dataclass(frozen=True)
class Judgement:
    findings: list[Finding] = field(default_factory=list)
    over: dict[int, Over] = field(default_factory=dict)
    """The state to pass to the next ``judge``: the workloads over their share now."""


def gib_words(n_bytes: int) -> str:
    """ "52 GiB", "34.9 GiB", "0.5 GiB": one decimal, none when it is zero."""
    value = round(n_bytes / GIB, 1)
    return f"{value:g} GiB"


def excess(watched: Watched, slack: int = 0) -> tuple[str, int] | None:
    """The GPU where the workload is furthest over its share (by more than ``slack``
    bytes), and its use there; None when it is within its share everywhere."""
    worst = max(watched.used.items(), key=lambda item: item[1], default=None)
    if worst is None or worst[1] <= watched.share_bytes + slack:
        return None
    return worst


def usage_words(share_bytes: int, gpu: str, used: int) -> str:
    """ "uses 52 GiB of its 35 GiB share of GPU 0"."""
    return f"uses {gib_words(used)} of its {gib_words(share_bytes)} share of {gpu}"


def judge(
    watched: Iterable[Watched],
    over: Mapping[int, Over],
    now: float,
    grace: float,
    slack: int = 0,
) -> Judgement:
    """One sample's decisions. ``over`` is the previous judgement's; workloads missing from
    ``watched`` (ended, or no longer running) are forgotten; ``slack`` bytes over the share
    are not counted (rule 1)."""
    result = Judgement()
    for item in watched:
        if item.action not in ACTIONS:
            raise ValueError(f"unknown memory watchdog action {item.action!r}")
        if item.action == "off":
            continue
        before = over.get(item.workload_id)
        worst = excess(item, slack)
        if worst is None:
            if before is not None and before.acted is Verdict.WARN:
                used = max(item.used.values(), default=0)
                words = f"back within its share: uses {gib_words(used)} of its " + gib_words(
                    item.share_bytes
                )
                result.findings.append(Finding(item.workload_id, Verdict.CLEARED, words))
            continue
        state = before or Over(since=now)
        overdue = now - state.since >= grace
        if overdue and state.acted is None:
            verdict = Verdict.STOP if item.action == "stop" else Verdict.WARN
            words = usage_words(item.share_bytes, *worst) + f" for more than {grace:g}s"
            result.findings.append(Finding(item.workload_id, verdict, words))
            state = Over(state.since, verdict)
        result.over[item.workload_id] = state
    return result
