"""The API's JSON in words: pure functions from a workload's fields to the short texts the
tables and reports show (``format_gpus``, ``format_state``, times and durations). Tested
without a service in ``tests/unit/test_client_format.py``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone, tzinfo
from typing import Any

from scheduler.common.placement import describe_placement, placement_from_api
from scheduler.common.quantities import gpus as gpus_in_words
from scheduler.common.quantities import plural
from scheduler.common.states import (
    FINAL_STATES,
    HOLDING_STATES,
    RELEASING_STATES,
    WorkloadState,
)

# --- formatting: pure functions from the API's JSON to text -------------------------------------


def parse_time(value: str | None) -> datetime | None:
    """The API's ISO 8601 UTC timestamps (``2026-11-22T14:05:00.000Z``), None for null."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def format_time(value: str | None, tz: tzinfo | None = None) -> str:
    """A timestamp in the reader's time zone (``tz``; default: local), to the second."""
    moment = parse_time(value)
    if moment is None:
        return "-"
    return moment.astimezone(tz).strftime("%Y-%m-%d %H:%M:%S")


def format_number(value: float | None) -> str:
    """GPU counts as people write them: 1, 0.5, 0.125, 2.5 (thousandths at most)."""
    if value is None:
        return "-"
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def format_gpus(workload: Mapping[str, Any], *, words: bool = False) -> str:
    """What a workload asked for: ``0.5``, ``20GiB`` (memory), ``2x1`` for a gang; in
    ``words``: ``0.5 GPU``, ``20 GiB of one GPU``, ``1 GPU x 2 replicas (a gang)``."""
    gpus, memory = workload.get("gpus"), workload.get("gpu_memory_gib")
    if gpus is not None:
        each = gpus_in_words(gpus) if words else format_number(gpus)
    elif memory is not None:
        each = f"{format_number(memory)}" + (" GiB of one GPU" if words else "GiB")
    else:
        each = "-"
    replicas = workload.get("replicas") or 1
    if replicas == 1:
        return each
    return f"{each} x {replicas} replicas (a gang)" if words else f"{replicas}x{each}"


def asks_resources(workload: Mapping[str, Any]) -> bool:
    """Whether a workload asked for CPU or memory (a service from before sends neither)."""
    return bool(workload.get("cpu") or workload.get("memory_gib"))


def format_resources(workload: Mapping[str, Any], *, words: bool = False) -> str:
    """The CPU and memory (RAM) each replica asked for: ``1.5/16G`` (``-`` for none), in
    ``words``: ``1.5 CPUs and 16 GiB of memory per replica`` (``none asked``)."""
    cpu, memory = workload.get("cpu") or 0, workload.get("memory_gib") or 0
    if not words:
        if not cpu and not memory:
            return "-"
        return f"{format_number(cpu) if cpu else '-'}/{_size(memory) if memory else '-'}"
    parts = []
    if cpu:
        parts.append(plural(cpu, "CPU"))
    if memory:
        parts.append(f"{_size(memory, ' ')}B of memory")
    if not parts:
        return "none asked (not counted, not limited)"
    return " and ".join(parts) + " per replica"


def _size(gib: float, space: str = "") -> str:
    """GiB as ``16G`` or ``512M`` (``16 Gi``/``512 Mi`` with a ``space``, then + "B")."""
    if gib >= 1:
        return f"{format_number(gib)}{space}G" + ("i" if space else "")
    return f"{round(gib * 1024)}{space}M" + ("i" if space else "")


def format_state(workload: Mapping[str, Any]) -> str:
    """The state with what matters most about it: the queue position while pending, the
    exit code of a failed job."""
    state = workload["state"]
    if state == WorkloadState.PENDING and workload.get("queue_position"):
        return f"{state} #{workload['queue_position']}"
    if state == WorkloadState.FAILED and workload.get("exit_code") is not None:
        return f"{state} ({workload['exit_code']})"
    return state


def held_gpus(workload: Mapping[str, Any]) -> float:
    """The GPUs a workload holds now: the sum of its placed shares."""
    if workload["state"] not in HOLDING_STATES:
        return 0.0
    return sum(gpu["share"] for replica in workload["placement"] for gpu in replica["gpus"])


def format_placement(workload: Mapping[str, Any]) -> str:
    """Where it runs, worded as the service's events word it (``ws GPU 0 (0.5)``,
    ``ws GPUs 0, 1``); ``-`` if nowhere."""
    return describe_placement(placement_from_api(workload.get("placement"))) or "-"


def runtime_seconds(workload: Mapping[str, Any], now: datetime) -> float | None:
    """How long it has run (or ran): from its last start to its end or now."""
    started = parse_time(workload.get("started_at"))
    if started is None:
        return None
    ended = parse_time(workload.get("finished_at")) or now
    return (ended - started).total_seconds()


def age_seconds(workload: Mapping[str, Any], now: datetime) -> float | None:
    submitted = parse_time(workload.get("submitted_at"))
    return None if submitted is None else (now - submitted).total_seconds()


def format_command(command: str | Sequence[str] | None) -> str:
    """A command as a shell would show it: a string as is, a list quoted where needed."""
    if command is None:
        return "-"
    if isinstance(command, str):
        return command
    import shlex

    return shlex.join(command)


def info_text(workload: Mapping[str, Any]) -> str:
    """One short line of what a reader wants to know next: why it waits (the plain headline;
    ``describe`` has the engine's detail), that it runs on borrowed GPUs, why it ended."""
    state = workload["state"]
    if state == WorkloadState.PENDING:
        return workload.get("pending_headline") or workload.get("pending_reason") or ""
    if state == WorkloadState.RUNNING and workload.get("borrowed"):
        return "borrowed: may be preempted"
    if state in FINAL_STATES or state in RELEASING_STATES:
        return workload.get("message") or ""
    return ""


def now_utc() -> datetime:
    """The one place the formatting layer asks for the time (the builders take ``now``)."""
    return datetime.now(timezone.utc)


GIB = 1 << 30
WHOLE_GPU_MARK = "*"
WHOLE_GPU_NOTE = (
    "* GPU%: the whole GPU's utilization (NVML gives no per-process figure; neighbours count)"
)


def format_gpu_percent(workload: Mapping[str, Any]) -> str:
    """``GPU%`` as nvidia-smi's GPU-Util reads: ``37%`` (its own processes'), ``37%*`` (the
    whole GPU's: see ``WHOLE_GPU_NOTE``), ``-`` when not running or not sampled."""
    use = workload.get("gpu_usage")
    if not use or use.get("utilization_percent") is None:
        return "-"
    mark = WHOLE_GPU_MARK if use.get("utilization_of") == "gpu" else ""
    return f"{use['utilization_percent']:.0f}%{mark}"


def format_gpu_memory(workload: Mapping[str, Any]) -> str:
    """``MEM``: the memory its processes hold of what its share grants, as nvidia-smi's
    Memory-Usage reads (``12.3/40GiB``); ``-`` when not running or not sampled."""
    use = workload.get("gpu_usage")
    if not use:
        return "-"
    used = use["memory_bytes"] / GIB
    share = use["share_memory_bytes"] / GIB
    return f"{used:.1f}/{format_number(round(share, 1))}GiB"


def gpu_use_words(workload: Mapping[str, Any]) -> str | None:
    """``describe``'s "GPU use" line: "37% busy (its own processes), 12.3 GiB of its 40 GiB
    share in use, at 14:05:03 UTC"; None when not sampled."""
    use = workload.get("gpu_usage")
    if not use:
        return None
    whose = {
        "processes": "its own processes",
        "gpu": "the whole GPU's: NVML gives no per-process figure",
    }.get(use.get("utilization_of") or "")
    busy = (
        f"{use['utilization_percent']:.0f}% busy ({whose})"
        if use.get("utilization_percent") is not None and whose
        else "utilization unknown"
    )
    moment = parse_time(use.get("at"))
    stamp = f", at {moment.strftime('%H:%M:%S')} UTC" if moment else ""
    used = use["memory_bytes"] / GIB
    share = format_number(round(use["share_memory_bytes"] / GIB, 1))
    return f"{busy}, {used:.1f} GiB of its {share} GiB share in use{stamp}"
