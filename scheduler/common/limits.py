"""The bounds on every number FracHub accepts, and the one rule for a GPU count.

Every edge (the REST API's field rules in ``scheduler/fields.py``, the ``frachub`` CLI and the
magics, the spawner's profiles) checks its input against these, so nothing reaches the
database or the engine that either cannot hold (64-bit integers, finite floats) and the same
GPU count is accepted or refused, in the same words, wherever it is typed. The OpenAPI
document (``scheduler/service/openapi.json``) states the same numbers.
"""

from __future__ import annotations

from typing import Any

MILLI = 1000
"""Capacity units per whole GPU: shares are counted in thousandths of a GPU."""

MAX_PRIORITY = 10_000
"""Priorities of workloads and of queues lie in [-MAX_PRIORITY, MAX_PRIORITY]: room for any
ordering around the defaults (50 to 125)."""
MAX_GPUS = 1024
"""Whole GPUs for one replica; no machine has more (the cluster's largest node decides
whether a request can ever start)."""
MAX_GPU_MEMORY_GIB = 1024
"""GPU memory of one share; the cluster's largest GPU decides whether it can ever start."""
MAX_CPU = 4096
"""CPU cores of one replica (counted in thousandths); no machine has more."""
MAX_MEMORY_GIB = 64 * 1024
"""Memory (RAM) of one replica, in GiB: 64 TiB, beyond any machine."""
MAX_QUOTA_GPUS = 1_000_000
"""Deserved and limit GPUs, and over-quota weights, of a queue."""
MAX_REPLICAS = 1024
"""Replicas of one gang: KAI's scale tests run gangs of 500 and 512 pods
(benchmarks/kai_scale.py), and a 4,000-GPU cluster holds 1,024 replicas of a few GPUs."""
MAX_ID = 2**63 - 1
"""Ids, offsets and counts: what a 64-bit database integer holds."""
MAX_GPU_MODELS = 16
MAX_NAME_LENGTH = 253
"""Kubernetes' own bound on a label key; GPU model names and label values stay well inside."""
MAX_IDEMPOTENCY_KEY = 200
"""Characters of an ``Idempotency-Key`` (printable ASCII): a UUID (36) or a client's own
composite key fits, and the stored column stays small."""
MAX_QUOTA_CPU = 10_000_000
"""Deserved and limit CPU cores of a queue (counted in thousandths)."""
MAX_QUOTA_MEMORY_GIB = 1_000_000_000
"""Deserved and limit memory (RAM) of a queue, in GiB (counted in MiB)."""


def shown(value: Any, limit: int = 40) -> str:
    """``repr`` for an error message, cut short: a message never echoes a megabyte back,
    and never fails on an integer too long to print."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**limit:
        return f"{'-' if value < 0 else ''}a number of more than {limit} digits"
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 5]}…{text[-4:]}"


def gpu_count_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a number of GPUs for one replica, or None when it can.

    A GPU count is a fraction in (0, 1], counted in thousandths, or a whole number up to
    ``MAX_GPUS``: a share of one GPU, or whole GPUs, never 1.5 (no GPU is shared across
    two). The API, the CLI, the magics and the spawner's profiles all ask this one rule and
    report its words as their own error.
    """
    number = not isinstance(value, bool) and isinstance(value, int | float)
    if number and value > MAX_GPUS:
        return f"must be at most {MAX_GPUS}, got {shown(value)}"
    if not (number and ((0 < value <= 1) or (value >= 1 and float(value).is_integer()))):
        return f"must be a fraction in (0, 1] or a whole number >= 1, got {shown(value)}"
    if value < 1 and round(value * MILLI) != value * MILLI:
        return f"fractions are counted in thousandths, got {value!r}"
    return None
