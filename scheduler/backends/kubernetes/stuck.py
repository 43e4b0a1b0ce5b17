"""Attempts whose pod cannot start: ended in words, rather than left waiting forever (the
service requeues them), when a pod no node takes stays unschedulable (the engine and the
cluster disagree: GPUs held by others, HAMi's memory, a claim that does not exist), or its
ReadWriteOnce volume stays attached to another node (Multi-Attach, ``volumes.py``).
"""

from __future__ import annotations

import logging
import time

from scheduler.backends.kubernetes.attempts import Attempt
from scheduler.backends.kubernetes.client import Kube
from scheduler.backends.kubernetes.pods import Obj, pod_phase
from scheduler.backends.kubernetes.volumes import read_attach_error


async def check_stuck(
    kube: Kube,
    namespace: str,
    attempt: Attempt,
    pods: list[Obj],
    *,
    unschedulable_timeout: float,
    volume_attach_timeout: float,
    log: logging.Logger,
) -> None:
    """Mark ``attempt`` failed (and ``stuck``) when one of its ``pods`` has been
    unschedulable for ``unschedulable_timeout`` seconds, or waiting for a volume attached
    elsewhere for ``volume_attach_timeout``."""
    if attempt.failure is not None or attempt.stopping:
        return
    now = time.monotonic()
    for pod in pods:
        meta = pod["metadata"]
        name = meta["name"]
        if pod_phase(pod) != "Pending" or meta.get("deletionTimestamp"):
            attempt.pending_since.pop(name, None)
            continue
        since = attempt.pending_since.setdefault(name, now)
        scheduled = next(
            (
                c
                for c in (pod.get("status") or {}).get("conditions") or []
                if c.get("type") == "PodScheduled"
            ),
            {},
        )
        node = (pod.get("spec") or {}).get("nodeName")
        if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
            if now - since >= unschedulable_timeout:
                attempt.failure = (
                    None,
                    f"Kubernetes found no node for its pod {name} for "
                    f"{unschedulable_timeout:g} s: "
                    f"{scheduled.get('message') or 'unschedulable'}; requeued",
                )
                attempt.stuck = True
                return
        elif node:
            await read_attach_error(
                kube, namespace, attempt, pod, now, volume_attach_timeout, log, since
            )
            first, words = attempt.attach_error.get(name, (now, ""))
            if words and now - first >= volume_attach_timeout:
                attempt.failure = (
                    None,
                    f"Kubernetes could not attach a volume to its pod {name} on {node} "
                    f"for {volume_attach_timeout:g} s: {words} (a ReadWriteOnce "
                    "volume is attached to one node at a time; give jobs ReadWriteMany "
                    "storage, KubernetesBackend.home_volumes); requeued",
                )
                attempt.stuck = True
                return
