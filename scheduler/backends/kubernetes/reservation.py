"""Reservation pods: one per shared GPU, KAI's way (see ``objects.py``).

``ensure_reservation`` is used by the backend (fractional training) and by FracKubeSpawner
(fractional notebooks): both converge on the same pod, named after node and GPU index, so
whoever comes first creates it and the other claims it (a 409 ``AlreadyExists`` is the normal
case, not an error). Each claim stamps ``frachub.io/claimed-at``; the backend deletes a
reservation that no live FracHub pod uses and nobody claimed for a while.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from scheduler.backends.kubernetes.client import Kube, KubeError
from scheduler.backends.kubernetes.objects import (
    CLAIMED,
    GPU_UUID,
    PodSettings,
    pod_live,
    pod_phase,
    reservation_manifest,
    reservation_name,
)


class ReservationTimeout(Exception):
    """The reservation pod did not report a GPU in time (no free GPU on the node, an image
    that cannot start, a program without API access)."""


def utc_stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def ensure_reservation(
    kube: Kube, settings: PodSettings, node: str, index: int, timeout: float = 120.0
) -> str:
    """The UUID of GPU ``index`` on ``node`` as its reservation pod reports it, creating or
    claiming the pod first. Raises ``ReservationTimeout`` after ``timeout`` seconds."""
    name = reservation_name(node, index)
    namespace = settings.namespace
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        try:
            pod = await kube.call(
                kube.core.create_namespaced_pod,
                namespace,
                reservation_manifest(node, index, settings, utc_stamp()),
            )
        except KubeError as error:
            if error.status != 409:
                raise
            try:
                pod = await kube.call(
                    kube.core.patch_namespaced_pod,
                    name,
                    namespace,
                    {"metadata": {"annotations": {CLAIMED: utc_stamp()}}},
                    _content_type="application/merge-patch+json",
                )
            except KubeError as gone:
                if gone.status == 404:
                    continue  # deleted between our create and patch: create again
                raise
        while True:
            uuid = ((pod.get("metadata") or {}).get("annotations") or {}).get(GPU_UUID)
            if uuid and pod_phase(pod) == "Running":
                return str(uuid)
            if not pod_live(pod) or (pod.get("metadata") or {}).get("deletionTimestamp"):
                # a dead or dying reservation: replace it
                try:
                    await kube.call(
                        kube.core.delete_namespaced_pod, name, namespace, grace_period_seconds=0
                    )
                except KubeError as error:
                    if error.status != 404:
                        raise
                break
            if time.monotonic() > deadline:
                reason = _pending_reason(pod)
                raise ReservationTimeout(
                    f"the reservation pod {name} for GPU {index} on {node} did not report a GPU "
                    f"within {timeout:g}s{': ' + reason if reason else ''}"
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
            try:
                pod = await kube.call(kube.core.read_namespaced_pod, name, namespace)
            except KubeError as error:
                if error.status != 404:
                    raise
                break  # deleted meanwhile: create again


def _pending_reason(pod: dict) -> str:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "False" and condition.get("message"):
            return str(condition["message"])
    return ""
