"""The backend's side of GPU sharing: the UUIDs of the GPUs a job shares (its reservation
pods, or HAMi's registration), each replica's share, which shares are in use,
and releasing reservation pods nobody uses any more. The reservation pods themselves, shared
with FracKubeSpawner, are ``reservation.py``'s.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable

from scheduler.backends.base import BackendError, Inventory, JobSpec
from scheduler.backends.kubernetes.attempts import Attempt
from scheduler.backends.kubernetes.client import Kube, KubeError
from scheduler.backends.kubernetes.gpus import HAMI_REGISTER, is_fractional, parse_shares
from scheduler.backends.kubernetes.labels import CLAIMED, SHARES, parse_stamp
from scheduler.backends.kubernetes.pods import Obj, PodSettings, pod_live
from scheduler.backends.kubernetes.reservation import (
    ReservationTimeout,
    delete_reservation,
    ensure_reservation,
    is_reservation,
    reservation_key,
)
from scheduler.common.share import Share


async def gpu_uuids(
    kube: Kube,
    settings: PodSettings,
    job: JobSpec,
    inventory: Callable[[], Inventory],
    reservation_timeout: float,
) -> dict[tuple[str, int], str]:
    """Reservation mode: the UUID of every GPU the job shares (reservation pods). HAMi
    mode: of every GPU it holds, as HAMi registered them (its pods name them)."""
    if settings.sharing == "hami":
        registered = {(gpu.node, gpu.index): gpu.uuid for gpu in inventory().gpus}
        wanted = {
            (replica.node, share.index) for replica in job.placement for share in replica.gpus
        }
        return {key: registered[key] for key in wanted if key in registered}
    fractions = sorted({(r.node, r.gpus[0].index) for r in job.placement if is_fractional(r)})
    uuids = {}
    for node, index in fractions:
        try:
            uuids[(node, index)] = await ensure_reservation(
                kube, settings, node, index, reservation_timeout, scheduler=True
            )
        except ReservationTimeout as error:
            raise BackendError(str(error)) from error
        except KubeError as error:
            raise BackendError(f"cannot reserve GPU {index} on {node}: {error}") from error
    return uuids


def job_shares(job: JobSpec, inventory: Inventory, sharing: str) -> list[Share]:
    """Each replica's share (``nvidia.com/gpumem`` and FRACHUB_GPU_MEMORY_MIB), sized by the
    GPU memory the inventory has: the node's label, or in HAMi mode the memory HAMi
    registered, which HAMi counts each ``nvidia.com/gpumem`` against."""
    shares = []
    for replica in job.placement:
        try:
            shares.append(inventory.share(replica))
        except KeyError as error:
            where = f"GPU {replica.gpus[0].index} on {replica.node}"
            raise BackendError(
                f"HAMi has not registered {where} ({HAMI_REGISTER} on the Node)"
                if sharing == "hami"
                else f"{where} is not on a ready GPU node of the cluster"
            ) from error
    return shares


def shares_in_use(attempts: Iterable[Attempt], pods: Iterable[Obj]) -> set[tuple[str, int]]:
    """(node, GPU index) of every share held by a running attempt or a live pod."""
    used: set[tuple[str, int]] = set()
    for attempt in attempts:
        used.update((node, index) for node, index, milli in attempt.shares if milli < 1000)
    for pod in pods:
        meta = pod["metadata"]
        annotations = meta.get("annotations") or {}
        if not is_reservation(pod) and pod_live(pod) and not meta.get("deletionTimestamp"):
            used.update(
                (node, index)
                for node, index, milli in parse_shares(annotations.get(SHARES, ""))
                if milli < 1000
            )
    return used


async def unreserve_whole(
    kube: Kube,
    settings: PodSettings,
    job: JobSpec,
    attempts: Iterable[Attempt],
    pods: Iterable[Obj],
    reservations: Iterable[Obj],
    log: logging.Logger,
) -> None:
    """Reservation mode: a lingering reservation pod (kept for a notebook that might
    spawn on it) still holds its device, so a GPU the engine now gives *whole* to this
    job would leave its pod waiting for a device until the linger ended. Delete the
    reservations of those GPUs that no live pod or attempt shares. ``reservations``: the
    reservation pods among ``pods``; what is in use is worked out only when one of them
    holds a GPU the job takes whole (a scan of every pod per start costs a full cluster
    seconds)."""
    if settings.sharing != "reservation":
        return
    whole = {
        (replica.node, share.index)
        for replica in job.placement
        if not is_fractional(replica)
        for share in replica.gpus
    }
    candidates = [
        pod
        for pod in reservations
        if is_reservation(pod)
        and reservation_key(pod) in whole
        and not pod["metadata"].get("deletionTimestamp")
    ]
    if not candidates:
        return
    used = shares_in_use(attempts, pods)
    for pod in candidates:
        meta = pod["metadata"]
        key = reservation_key(pod)
        if key in used:
            continue
        log.info(
            "workload %s takes GPU %s on %s whole: releasing its reservation %s",
            job.workload_id,
            key[1],
            key[0],
            meta["name"],
        )
        await release(kube, settings.namespace, meta["name"])


class ReservationCollector:
    """Deletes reservation pods that no live FracHub pod or running attempt shares and that
    nobody claimed for ``linger_seconds``, looking at most every few seconds."""

    def __init__(self) -> None:
        self.last_gc = 0.0
        self.last_used: dict[tuple[str, int], float] = {}

    async def collect(
        self,
        kube: Kube,
        namespace: str,
        attempts: Iterable[Attempt],
        pods: Iterable[Obj],
        linger_seconds: float,
        log: logging.Logger,
    ) -> None:
        now = time.monotonic()
        if now - self.last_gc < min(5.0, linger_seconds / 4):
            return
        self.last_gc = now
        pods = list(pods)
        used = shares_in_use(attempts, pods)
        reservations = [pod for pod in pods if is_reservation(pod)]
        wall = time.time()
        for key in used:
            self.last_used[key] = wall
        for pod in reservations:
            annotations = pod["metadata"].get("annotations") or {}
            key = reservation_key(pod)
            if key in used:
                continue
            # a spawner finds a reservation without stamping it (z2jh's hub Role cannot
            # patch pods): keep it for the linger after its last use as well as its claim
            claimed = max(
                parse_stamp(annotations.get(CLAIMED, "")) or 0.0, self.last_used.get(key, 0.0)
            )
            if wall - claimed < linger_seconds:
                continue
            log.info("releasing the unused reservation %s", pod["metadata"]["name"])
            await release(kube, namespace, pod["metadata"]["name"])


async def release(kube: Kube, namespace: str, name: str) -> None:
    """Delete the reservation pod ``name``; a failure is left for the next collection."""
    with contextlib.suppress(KubeError):
        await delete_reservation(kube, namespace, name)
