"""Quantities as people write and read them, one way for every part of FracHub.

The engine's pending reasons, the service's events, the spawner's progress messages and its
form, the CLI and magics tables and the fleet report all count GPUs, say how long something
took and read sizes of GPU memory; they use these functions so that the same thing reads the
same everywhere. Pure functions, no I/O.

- ``plural`` / ``gpus`` / ``milli_gpus``: a count with its noun agreeing (``1 time``,
  ``2 times``, ``0 GPUs``, ``0.5 GPU``, ``4 GPUs``), the one rule every message, table and
  page uses for that (``milli_gpus`` for the engine, which counts thousandths of a GPU).
- ``format_duration``: two units at most, like kubectl's AGE (``45s``, ``3m12s``, ``2h05m``,
  ``3d04h``).
- ``memory_gib``: a memory size (``20G``, ``20GiB``, ``512MiB``) in GiB.
- ``cores`` / ``memory_words``: CPUs and memory (RAM) in words ("1.5 CPUs", "16 GiB").
- ``kube_quantity`` / ``kube_cpu`` / ``kube_memory``: Kubernetes' own quantities (a node's
  allocatable ``7910m``, ``32986620Ki``; a pod's requests) read and written.
- ``byte_spec_mib``: KubeSpawner's ``mem_guarantee``/``mem_limit`` (``"16G"``: 16 GiB;
  a number: bytes) in MiB.
- ``time_limit_seconds`` / ``time_limit_words``: a job's time limit in Slurm's formats
  (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``) and back in words
  (``2 h``, ``1 d 4 h``, ``90 s``).
"""

from __future__ import annotations

import re

from scheduler.common.limits import MILLI


def plural(count: float, noun: str, nouns: str | None = None) -> str:
    """``count`` with ``noun`` agreeing: one, or a fraction of one, is singular ("1 time",
    "0.5 GPU"); zero and more than one are plural ("0 GPUs", "2 times"). ``nouns`` is the
    plural when adding "s" is wrong. The one rule for every word FracHub counts with."""
    value = round(float(count), 3)
    text = f"{value:g}"
    return f"{text} {noun}" if 0 < abs(value) <= 1 else f"{text} {nouns or noun + 's'}"


def gpus(count: float) -> str:
    """A number of GPUs in words: "1 GPU", "0.5 GPU", "2.5 GPUs", "0 GPUs"."""
    return plural(count, "GPU")


def milli_gpus(milli: float) -> str:
    """Thousandths of a GPU, as the engine counts them, in words: 1000 -> "1 GPU",
    2500 -> "2.5 GPUs", 250 -> "0.25 GPU", 0 -> "0 GPUs"."""
    return gpus(milli / MILLI)


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


_KUBE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")
_KUBE_FACTORS = {
    "": 1,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
}


def kube_quantity(text: str) -> float | None:
    """A Kubernetes quantity (``7910m``, ``2``, ``32Gi``, ``32986620Ki``, ``1e9``) as a plain
    number (cores, bytes); None when it is not one."""
    match = _KUBE.match(str(text))
    if not match or match.group(2) not in _KUBE_FACTORS:
        return None
    return float(match.group(1)) * _KUBE_FACTORS[match.group(2)]


def kube_cpu(milli: int) -> str:
    """Thousandths of a core as a Kubernetes CPU quantity: 1500 -> "1500m", 2000 -> "2"."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def kube_memory(mib: int) -> str:
    """MiB as a Kubernetes memory quantity: 16384 -> "16Gi", 1536 -> "1536Mi"."""
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


_BYTES = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def byte_spec_mib(value: object) -> int | None:
    """KubeSpawner's memory (``mem_guarantee``, ``mem_limit``: JupyterHub's
    ``ByteSpecification``) in MiB: a number is bytes, a string ends in K, M, G or T, powers
    of 1024 (``"16G"`` is 16 GiB). None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return round(value / 2**20) if value >= 0 else None
    if not isinstance(value, str) or len(value) < 2 or value[-1] not in _BYTES:
        return None
    try:
        number = float(value[:-1])
    except ValueError:
        return None
    return round(number * _BYTES[value[-1]] / 2**20) if number >= 0 else None


def cores(milli: int) -> str:
    """Thousandths of a core in words: 1500 -> "1.5 CPUs", 1000 -> "1 CPU"."""
    return plural(milli / 1000, "CPU")


def memory_words(mib: int) -> str:
    """MiB in words: 16384 -> "16 GiB", 512 -> "512 MiB"."""
    return f"{mib / 1024:g} GiB" if mib >= 1024 else f"{mib} MiB"


_TIME_LIMIT = re.compile(r"^(?:(\d{1,5})-)?(\d{1,7})(?::(\d{1,2}))?(?::(\d{1,2}))?$")


def time_limit_seconds(text: str) -> int | None:
    """A time limit as Slurm's ``--time`` writes it, in seconds: ``MM``, ``MM:SS``,
    ``HH:MM:SS``, ``D-HH``, ``D-HH:MM`` or ``D-HH:MM:SS`` (``30`` is 30 minutes, ``2:00:00``
    two hours, ``1-12`` a day and a half). None when ``text`` is none of these (the caller
    says why in its words); a zero limit is None too, as a job with no time cannot run."""
    match = _TIME_LIMIT.match(text.strip()) if len(text) <= 40 else None
    if match is None:
        return None
    days, first, second, third = match.groups()
    numbers = [int(first), *(int(part) for part in (second, third) if part is not None)]
    if days is not None:  # D-HH, D-HH:MM, D-HH:MM:SS
        hours, minutes, seconds = [*numbers, 0, 0][:3]
        total = int(days) * 86400 + hours * 3600 + minutes * 60 + seconds
    elif len(numbers) == 1:  # MM
        total = numbers[0] * 60
    elif len(numbers) == 2:  # MM:SS
        total = numbers[0] * 60 + numbers[1]
    else:  # HH:MM:SS
        total = numbers[0] * 3600 + numbers[1] * 60 + numbers[2]
    return total or None


def slurm_time(seconds: float) -> str:
    """A time limit as Slurm shows one: ``02:00:00``, ``1-12:00:00`` (read back by
    ``time_limit_seconds``), for fields that take what they give."""
    total = max(0, round(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def time_limit_words(seconds: float) -> str:
    """A time limit in words, exact and short: ``2 h``, ``1 d 4 h``, ``45 min``, ``45 s``,
    ``1 h 30 min 5 s`` (the timeline's "reached its 2 h time limit")."""
    total = max(0, round(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        f"{value} {unit}"
        for value, unit in ((days, "d"), (hours, "h"), (minutes, "min"), (secs, "s"))
        if value
    ]
    return " ".join(parts) or "0 s"
