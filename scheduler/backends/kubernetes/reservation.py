"""Reservation pods: one per shared GPU, KAI's way (see ``objects.py``).

``ensure_reservation`` is used by the backend (fractional training) and by FracKubeSpawner
(fractional notebooks): both converge on the same pod, named after node and GPU index, so
whoever comes first creates it and the other finds it (a 409 ``AlreadyExists`` is the normal
case, not an error).

The pod's program prints the UUID of the GPU it holds; it has no API access (no token, no
curl). The scheduler, whose Role grants ``pods/log`` and ``pods: patch``, reads the line and
annotates the pod with ``frachub.io/gpu-uuid``; the backend does so for every reservation
pod it sees (``report_uuid``), including those a notebook's spawner created. FracKubeSpawner
runs under z2jh's hub Role (pods: get, list, watch, create, delete): it creates or reads the
pod and waits for the annotation, and never patches. The scheduler stamps its own claims
(``frachub.io/claimed-at``) and keeps a reservation for ``reservation_linger_seconds`` after
its last use, so a notebook spawning on it is not raced.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from scheduler.backends.kubernetes.client import Kube, KubeError
from scheduler.backends.kubernetes.objects import (
    CLAIMED,
    GPU_UUID,
    RESERVATION_GRACE,
    PodSettings,
    pod_live,
    pod_phase,
    reported_uuid,
    reservation_manifest,
    reservation_name,
)


class ReservationTimeout(Exception):
    """The reservation pod did not report a GPU in time (no free GPU on the node, an image
    that cannot start, a program without API access)."""


def utc_stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def report_uuid(kube: Kube, namespace: str, pod: dict) -> str | None:
    """The UUID a running reservation pod printed, written onto it as ``frachub.io/gpu-uuid``
    (the scheduler's part: it may read logs and patch pods). None while it has printed none."""
    meta = pod.get("metadata") or {}
    uuid = (meta.get("annotations") or {}).get(GPU_UUID)
    if uuid:
        return str(uuid)
    if pod_phase(pod) != "Running":
        return None
    log = await kube.text(
        kube.core.read_namespaced_pod_log, meta["name"], namespace, container="reserve"
    )
    uuid = reported_uuid(log)
    if uuid is None:
        return None
    await kube.call(
        kube.core.patch_namespaced_pod,
        meta["name"],
        namespace,
        {"metadata": {"annotations": {GPU_UUID: uuid}}},
        _content_type="application/merge-patch+json",
    )
    return uuid


async def ensure_reservation(
    kube: Kube,
    settings: PodSettings,
    node: str,
    index: int,
    timeout: float = 120.0,
    *,
    scheduler: bool = False,
) -> str:
    """The UUID of GPU ``index`` on ``node`` as its reservation pod reports it, creating the
    pod or finding it first. ``scheduler``: the caller may patch pods and read their logs
    (the backend): it stamps its claim and reads the UUID itself; otherwise (FracKubeSpawner)
    it only reads the pod and waits for the scheduler's annotation. Raises
    ``ReservationTimeout`` after ``timeout`` seconds."""
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
                if scheduler:
                    pod = await kube.call(
                        kube.core.patch_namespaced_pod,
                        name,
                        namespace,
                        {"metadata": {"annotations": {CLAIMED: utc_stamp()}}},
                        _content_type="application/merge-patch+json",
                    )
                else:
                    pod = await kube.call(kube.core.read_namespaced_pod, name, namespace)
            except KubeError as gone:
                if gone.status == 404:
                    continue  # deleted between our create and this: create again
                raise
        while True:
            uuid = ((pod.get("metadata") or {}).get("annotations") or {}).get(GPU_UUID)
            if scheduler and not uuid:
                try:
                    uuid = await report_uuid(kube, namespace, pod)
                except KubeError as error:
                    if error.status not in (400, 404):  # 400: the container is not up yet
                        raise
            if uuid and pod_phase(pod) == "Running":
                return str(uuid)
            if not pod_live(pod) or (pod.get("metadata") or {}).get("deletionTimestamp"):
                # a dead or dying reservation: replace it
                try:
                    await kube.call(
                        kube.core.delete_namespaced_pod,
                        name,
                        namespace,
                        grace_period_seconds=RESERVATION_GRACE,
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
                    + ("" if scheduler else " (the scheduler writes the UUID: is it running?)")
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
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return f"{waiting['reason']} {waiting.get('message') or ''}".strip()
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "False" and condition.get("message"):
            return str(condition["message"])
    return ""
