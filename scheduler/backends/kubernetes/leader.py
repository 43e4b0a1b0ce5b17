"""Leader election on a ``coordination.k8s.io/v1`` Lease: one active scheduler at a time.

``LeaseElector.acquire()`` returns once this process holds the lease; ``keep()`` then renews
it every ``renew_seconds`` and calls ``on_lost`` when a renewal has not succeeded for
``lease_seconds`` (another replica may take over from then on, so the loser must stop acting
at once; the service exits and Kubernetes restarts it as a follower).

As client-go does, expiry is judged by *when this process last saw the lease change*, not by
the timestamps written in it, so clocks that disagree between nodes do not matter. Every
write carries the ``resourceVersion`` read before it, so two candidates racing for an
expired lease cannot both win: the second gets 409 Conflict.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from scheduler.backends.kubernetes.client import Kube, KubeError


def micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_seconds: float = 15.0,
        renew_seconds: float = 5.0,
        retry_seconds: float = 2.0,
        on_lost: Callable[[], None] | None = None,
        log: logging.Logger | None = None,
    ) -> None:
        if not 0 < renew_seconds < lease_seconds:
            raise ValueError("renew_seconds must be positive and shorter than lease_seconds")
        self.kube = kube
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_seconds, self.renew_seconds = lease_seconds, renew_seconds
        self.retry_seconds = retry_seconds
        self.on_lost = on_lost
        self.log = log or logging.getLogger("frachub.kubernetes")
        self.is_leader = False
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._renewed_at = 0.0
        self._task: asyncio.Task | None = None

    async def acquire(self) -> None:
        """Wait until this process holds the lease."""
        announced = False
        while not await self.try_acquire_or_renew():
            if not announced:
                self.log.info(
                    "waiting for the lease %s/%s (another scheduler is active)",
                    self.namespace,
                    self.name,
                )
                announced = True
            await asyncio.sleep(self.retry_seconds)
        self.log.info("holding the lease %s/%s as %s", self.namespace, self.name, self.identity)

    def keep(self) -> None:
        """Renew in the background until ``release`` (or the lease is lost)."""
        self._task = asyncio.get_running_loop().create_task(self._renew_forever())

    async def release(self) -> None:
        """Stop renewing and hand the lease back, so a follower takes over at once."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if not self.is_leader:
            return
        self.is_leader = False
        with contextlib.suppress(KubeError):
            lease = await self._read()
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                lease["spec"]["leaseDurationSeconds"] = 1
                await self.kube.call(
                    self.kube.coordination.replace_namespaced_lease,
                    self.name,
                    self.namespace,
                    lease,
                )

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self.renew_seconds)
            try:
                ok = await self.try_acquire_or_renew()
            except KubeError as error:
                self.log.warning("renewing the lease failed: %s", error)
                ok = False
            if not ok and time.monotonic() - self._renewed_at >= self.lease_seconds:
                self.is_leader = False
                self.log.critical("lost the lease %s/%s", self.namespace, self.name)
                if self.on_lost is not None:
                    self.on_lost()
                return

    async def _read(self) -> dict[str, Any] | None:
        try:
            return await self.kube.call(
                self.kube.coordination.read_namespaced_lease, self.name, self.namespace
            )
        except KubeError as error:
            if error.status == 404:
                return None
            raise

    async def try_acquire_or_renew(self) -> bool:
        now = micro_time()
        lease = await self._read()
        if lease is None:
            body = {
                "metadata": {
                    "name": self.name,
                    "labels": {"app.kubernetes.io/managed-by": "frachub"},
                },
                "spec": {
                    "holderIdentity": self.identity,
                    "leaseDurationSeconds": int(self.lease_seconds),
                    "acquireTime": now,
                    "renewTime": now,
                    "leaseTransitions": 0,
                },
            }
            try:
                await self.kube.call(
                    self.kube.coordination.create_namespaced_lease, self.namespace, body
                )
            except KubeError as error:
                if error.status == 409:
                    return False
                raise
            return self._won()
        spec = lease.setdefault("spec", {})
        holder = spec.get("holderIdentity")
        observed = (holder, spec.get("renewTime"), lease["metadata"].get("resourceVersion"))
        if observed != self._observed:
            self._observed, self._observed_at = observed, time.monotonic()
        duration = float(spec.get("leaseDurationSeconds") or self.lease_seconds)
        if holder and holder != self.identity and time.monotonic() - self._observed_at < duration:
            self.is_leader = False
            return False
        if holder != self.identity:
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            spec["acquireTime"] = now
            self.log.info("taking over the lease %s/%s from %s", self.namespace, self.name, holder)
        spec["holderIdentity"] = self.identity
        spec["leaseDurationSeconds"] = int(self.lease_seconds)
        spec["renewTime"] = now
        try:
            await self.kube.call(
                self.kube.coordination.replace_namespaced_lease, self.name, self.namespace, lease
            )
        except KubeError as error:
            if error.status == 409:
                return False
            raise
        return self._won()

    def _won(self) -> bool:
        self.is_leader = True
        self._renewed_at = time.monotonic()
        return True
