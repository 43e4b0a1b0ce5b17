"""Reservation pods: one per shared GPU, KAI's way, holding the whole GPU for the fractional
pods on it.

A reservation pod requests ``nvidia.com/gpu: 1``; the program in it reports the UUID it was
given, which FracHub writes onto it as the annotation ``frachub.io/gpu-uuid``. Fractional
pods on that GPU then get ``NVIDIA_VISIBLE_DEVICES`` of that UUID and request no GPU.

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
its last use, so a notebook spawning on it is not raced (``sharing.py`` releases it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from scheduler.backends.kubernetes.client import Kube, KubeError
from scheduler.backends.kubernetes.gpus import GPU
from scheduler.backends.kubernetes.labels import (
    CLAIMED,
    COMPONENT,
    GPU_INDEX,
    GPU_UUID,
    MANAGED,
    MANAGED_BY,
    NODE,
    RESERVATION,
    TRACKED,
    label_value,
    reservation_name,
    utc_stamp,
)
from scheduler.backends.kubernetes.pods import (
    Obj,
    PodSettings,
    add_node_settings,
    pin,
    pod_live,
    pod_phase,
)

RESERVATION_GRACE = 1
"""Reservation pods are deleted gracefully, never forced (grace 0): a forced delete frees the
GPU in the API while the container still holds it on the node, and the next whole-GPU pod
there is refused by the kubelet (UnexpectedAdmissionError)."""


def reservation_manifest(node: str, index: int, settings: PodSettings, claimed_at: str) -> Obj:
    """A pod holding one whole GPU for fractional pods; its program reports the UUID."""
    container: Obj = {
        "name": "reserve",
        "image": settings.reservation_image or settings.image,
        "resources": {"limits": {GPU: "1"}},
    }
    if settings.reservation_command:
        container["command"] = list(settings.reservation_command)
    spec: Obj = {
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": RESERVATION_GRACE,
        **pin(node, settings.node_label),
        "containers": [container],
        # the program only prints the UUID; the scheduler reads it through pods/log
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
    }
    add_node_settings(spec, settings)
    if settings.reservation_priority_class or settings.priority_class:
        spec["priorityClassName"] = settings.reservation_priority_class or settings.priority_class
    if settings.scheduler_name and settings.sharing != "hami":
        spec["schedulerName"] = settings.scheduler_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": reservation_name(node, index),
            "labels": {
                **settings.extra_labels,
                MANAGED_BY: MANAGED,
                TRACKED: "true",
                COMPONENT: RESERVATION,
                NODE: label_value(node),
                GPU_INDEX: str(index),
            },
            "annotations": {NODE: node, GPU_INDEX: str(index), CLAIMED: claimed_at},
        },
        "spec": spec,
    }


# The reservation pod's program needs no API access, no curl and no Python: it prints the
# UUID of the GPU it holds and sleeps; the scheduler reads the line through ``pods/log`` and
# annotates the pod (``frachub.io/gpu-uuid``), where FracKubeSpawner, whose z2jh hub Role
# reads pods but not their logs, finds it. nvidia-smi is mounted by the NVIDIA container
# runtime into every GPU container; without it, the device plugin's NVIDIA_VISIBLE_DEVICES
# (its default "envvar" strategy) names the device.
UUID_LINE = "frachub.io/gpu-uuid="
RESERVATION_SCRIPT = r"""
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader 2>/dev/null | head -n1)
case "$uuid" in GPU-*) ;; *) uuid=${NVIDIA_VISIBLE_DEVICES%%,*} ;; esac
case "$uuid" in
  GPU-*) echo "frachub.io/gpu-uuid=$uuid" ;;
  *) echo "no GPU UUID from nvidia-smi or NVIDIA_VISIBLE_DEVICES" >&2; exit 1 ;;
esac
exec sleep infinity
"""


def reported_uuid(log: str) -> str | None:
    """The UUID a reservation pod's program printed (its last ``frachub.io/gpu-uuid=`` line)."""
    found = None
    for line in log.splitlines():
        line = line.strip()
        if line.startswith(UUID_LINE) and line[len(UUID_LINE) :].startswith("GPU-"):
            found = line[len(UUID_LINE) :]
    return found


class ReservationTimeout(Exception):
    """The reservation pod did not report a GPU in time (no free GPU on the node, an image
    that cannot start, a program without API access)."""


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


async def report_uuid_when_printed(
    kube: Kube, namespace: str, pod: Obj, log: logging.Logger
) -> None:
    """``report_uuid`` for a reservation pod that has just started running: its program
    prints the line a moment after, so the log is read again a few times, backing off."""
    name = pod["metadata"]["name"]
    try:
        for attempt in range(20):  # the line may come a moment after Running
            if await report_uuid(kube, namespace, pod):
                return
            await asyncio.sleep(min(0.1 * 2**attempt, 2.0))
        log.warning("reservation pod %s printed no GPU UUID", name)
    except KubeError as error:
        if error.status != 404:
            log.warning("reading the GPU UUID of %s failed: %s", name, error)


def is_reservation(pod: Obj) -> bool:
    return (pod["metadata"].get("labels") or {}).get(COMPONENT) == RESERVATION


def reservation_key(pod: Obj) -> tuple[str, int]:
    """(node, GPU index) a reservation pod holds, from its annotations."""
    annotations = pod["metadata"].get("annotations") or {}
    return (annotations.get(NODE, ""), int(annotations.get(GPU_INDEX, -1)))


def reserved_uuids(pods: Iterable[Obj]) -> dict[tuple[str, int], str]:
    """(node, GPU index) -> UUID of every GPU a running reservation pod holds and reported."""
    out = {}
    for pod in pods:
        meta = pod["metadata"]
        annotations = meta.get("annotations") or {}
        if (
            is_reservation(pod)
            and annotations.get(GPU_UUID)
            and pod_phase(pod) == "Running"
            and not meta.get("deletionTimestamp")
        ):
            out[reservation_key(pod)] = annotations[GPU_UUID]
    return out


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
                await delete_reservation(kube, namespace, name)
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


async def delete_reservation(kube: Kube, namespace: str, name: str) -> None:
    """Delete the reservation pod ``name`` gracefully (``RESERVATION_GRACE``); one already
    gone is fine."""
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


def _pending_reason(pod: dict) -> str:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return f"{waiting['reason']} {waiting.get('message') or ''}".strip()
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "False" and condition.get("message"):
            return str(condition["message"])
    return ""
