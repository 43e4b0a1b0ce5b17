"""What FracHub writes on the objects it creates, and how it names them.

Everything FracHub creates carries ``app.kubernetes.io/managed-by: frachub`` and an
``app.kubernetes.io/component`` (``training``, ``gpu-reservation``, ``notebook``); training
objects also carry the workload id, attempt, project and user (labels, sanitised) with the
exact user and project and the GPU shares in annotations. That is all a restarted scheduler
needs to rebuild its state from the cluster, so every key it reads back is named here.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

MANAGED_BY = "app.kubernetes.io/managed-by"
COMPONENT = "app.kubernetes.io/component"
WORKLOAD = "frachub.io/workload-id"
ATTEMPT = "frachub.io/attempt"
PROJECT = "frachub.io/project"
USER = "frachub.io/user"
GROUP = "frachub.io/group"
ATTEMPT_NAME = "frachub.io/attempt-name"
NODE = "frachub.io/node"
GPU_INDEX = "frachub.io/gpu-index"
SHARES = "frachub.io/gpu-shares"
GPU_UUID = "frachub.io/gpu-uuid"
CLAIMED = "frachub.io/claimed-at"
STOPPED = "frachub.io/stop-requested"
RANKS = "frachub.io/ranks"
"""On a Job's pods: the gang rank of each completion index, in index order."""
MANAGED = "frachub"
TRAINING, RESERVATION = "training", "gpu-reservation"
HOSTNAME = "kubernetes.io/hostname"
TRACKED = "frachub.io/managed"
"""On every pod FracHub creates or places (KubeSpawner owns managed-by on notebook pods)."""
MANAGED_SELECTOR = f"{TRACKED}=true"


def label_value(text: str) -> str:
    """A valid label value (63 characters of ``[A-Za-z0-9._-]``, alphanumeric at the ends)."""
    value = re.sub(r"[^A-Za-z0-9._-]", "-", text)[:63]
    return value.strip("-_.") or "x"


def dns_name(text: str, limit: int = 63) -> str:
    """A DNS-1123 label made of ``text``."""
    value = re.sub(r"[^a-z0-9-]", "-", text.lower())[:limit]
    return value.strip("-") or "x"


def attempt_name(workload_id: int, restart_count: int) -> str:
    return f"frachub-{workload_id}-{restart_count}"


def reservation_name(node: str, index: int) -> str:
    return f"frachub-gpu-{dns_name(node, 40)}-{index}"


STAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
"""How FracHub writes a time into an annotation (``frachub.io/claimed-at``,
``frachub.io/stop-requested``): UTC, microseconds."""


def utc_stamp() -> str:
    """Now, as FracHub writes it into an annotation."""
    return datetime.now(UTC).strftime(STAMP_FORMAT)


def parse_stamp(text: str) -> float | None:
    """The POSIX time of a ``utc_stamp``, or None when ``text`` is not one."""
    try:
        return datetime.strptime(text, STAMP_FORMAT).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None
