"""The backend's view of the cluster: watch caches of Nodes, of FracHub's pods and Jobs in
its namespace and, when counted, of every other pod (``client.Informer``), so that
``inventory()``, ``adopt()`` and ``poll()`` answer without I/O.

The pod watch also keeps what the caches lose: a pod deleted with its Job leaves the cache
with its exit code and its DisruptionTarget condition, which say how the attempt ended.
And it writes the UUID a running reservation pod printed onto it (``reservation.py``), for
every reservation pod it sees, FracKubeSpawner's too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator, Mapping

from scheduler.backends.kubernetes.client import Informer, Kube, KubeError, namespaced_key
from scheduler.backends.kubernetes.labels import (
    ATTEMPT_NAME,
    COMPONENT,
    GPU_UUID,
    MANAGED_SELECTOR,
    TRACKED,
    TRAINING,
    WORKLOAD,
)
from scheduler.backends.kubernetes.pods import Obj, condition, owner_job, pod_exit_code, pod_phase
from scheduler.backends.kubernetes.reservation import is_reservation, report_uuid_when_printed


class PodsByJob(Mapping[str, list[Obj]]):
    """Job name -> its pods: a read-only view of the pod watch's index."""

    def __init__(self, index: dict[str, dict[str, Obj]]) -> None:
        self._index = index

    def __getitem__(self, name: str) -> list[Obj]:
        return list(self._index[name].values())

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)


class Caches:
    """The watch caches of one backend; ``start`` lists and starts watching."""

    def __init__(
        self, kube: Kube, namespace: str, *, watch_timeout: int, log: logging.Logger
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.watch_timeout = watch_timeout
        self.log = log
        self.nodes = Informer(kube, kube.core.list_node, watch_timeout=watch_timeout)
        self.pods = Informer(
            kube,
            kube.core.list_namespaced_pod,
            namespace,
            label_selector=MANAGED_SELECTOR,
            watch_timeout=watch_timeout,
            on_change=self._pod_changed,
        )
        self.jobs = Informer(
            kube,
            kube.batch.list_namespaced_job,
            namespace,
            label_selector=MANAGED_SELECTOR,
            watch_timeout=watch_timeout,
            on_change=self._job_changed,
        )
        self._by_attempt: dict[str, set[str]] = {}
        """Attempt name -> the names of its Jobs in the cache (``attempt_jobs``)."""
        self._pods_of: dict[str, dict[str, Obj]] = {}
        """Job name -> its pods in the cache, by name (``by_job``)."""
        self._reservations: dict[str, Obj] = {}
        """The reservation pods in the cache, by name (``reservation_pods``)."""
        self.reservations_generation = 0
        """Counts the changes to ``reservation_pods`` (the inventory's UUIDs come from them)."""
        self._changed: set[str] = set()
        self._all_changed = True
        """Job names whose Job or pods changed since ``take_changed``; or all of them."""
        self.foreign: Informer | None = None
        self.exit_codes: dict[str, dict[str, int]] = {}  # Job name -> pod -> exit code
        self.disrupted: dict[str, Obj] = {}  # Job name -> a pod's DisruptionTarget condition
        self._reporting: set[str] = set()
        self._tasks: set[asyncio.Task] = set()

    async def start(self, count_foreign_pods: bool) -> None:
        """The first lists, then the watches. ``count_foreign_pods``: watch the pods of
        every namespace FracHub did not create too, when the grant allows it."""
        for informer in (self.nodes, self.pods, self.jobs):
            await informer.start()
        self._job_changed("RELISTED", {})
        if count_foreign_pods:
            foreign = Informer(
                self.kube,
                self.kube.core.list_pod_for_all_namespaces,
                label_selector=f"!{TRACKED}",
                field_selector="status.phase!=Succeeded,status.phase!=Failed",
                watch_timeout=self.watch_timeout,
                key=namespaced_key,
            )
            try:
                await foreign.start()
                self.foreign = foreign
            except KubeError as error:
                if error.status != 403:
                    raise
                self.log.warning(
                    "cannot list pods in every namespace (%s): GPUs held by pods FracHub did "
                    "not create are not subtracted from the inventory",
                    error.message,
                )
        self._pod_changed("RELISTED", {})  # reservation pods still to report their UUID

    async def stop(self) -> None:
        """Stop the UUID reports under way and every watch."""
        for task in list(self._tasks):
            task.cancel()
        for informer in (self.nodes, self.pods, self.jobs, self.foreign):
            if informer is not None:
                await informer.stop()

    def by_job(self) -> PodsByJob:
        """Job name -> its pods in the cache (kept by the pod watch, not rebuilt per call:
        a poll reads it for every attempt, 4,000 of them in benchmarks/kai_scale.py)."""
        return PodsByJob(self._pods_of)

    def training_jobs(self) -> dict[int, list[str]]:
        """Workload id -> the names of its training Jobs in the cache."""
        out: dict[int, list[str]] = {}
        for name, job in sorted(self.jobs.objects.items()):
            labels = job["metadata"].get("labels") or {}
            if labels.get(COMPONENT) == TRAINING:
                out.setdefault(int(labels[WORKLOAD]), []).append(name)
        return out

    def reservation_pods(self) -> list[Obj]:
        """The reservation pods in the cache (reservation.py), without a scan of every pod."""
        return list(self._reservations.values())

    def take_changed(self) -> tuple[set[str], bool]:
        """(names of the Jobs whose object or pods changed since the last call, whether
        every Job must be looked at: a relist), and start counting afresh."""
        changed, everything = self._changed, self._all_changed
        self._changed, self._all_changed = set(), False
        return changed, everything

    def mark_all_changed(self) -> None:
        """The next ``take_changed`` says every Job (a poll that failed half way)."""
        self._all_changed = True

    def attempt_jobs(self, attempt: str) -> list[Obj]:
        """The cached Jobs labelled with ``attempt`` (``frachub.io/attempt-name``): what a
        label-selected list would return, without one API call per start."""
        names = sorted(self._by_attempt.get(attempt, ()))
        return [self.jobs.objects[name] for name in names if name in self.jobs.objects]

    def _job_changed(self, kind: str, job: Obj) -> None:
        """Keep ``_by_attempt`` in step with the Jobs cache."""
        if kind == "RELISTED":
            self._by_attempt = {}
            self._all_changed = True
            for cached in self.jobs.objects.values():
                self._job_changed("ADDED", cached)
            return
        self._changed.add(job["metadata"]["name"])
        attempt = (job["metadata"].get("labels") or {}).get(ATTEMPT_NAME)
        if not attempt:
            return
        names = self._by_attempt.setdefault(attempt, set())
        if kind == "DELETED":
            names.discard(job["metadata"]["name"])
            if not names:
                del self._by_attempt[attempt]
        else:
            names.add(job["metadata"]["name"])

    def forget(self, jobs: Iterable[str]) -> None:
        """Drop what was kept of these Jobs' pods (their attempt has ended)."""
        for name in jobs:
            self.exit_codes.pop(name, None)
            self.disrupted.pop(name, None)

    def _pod_changed(self, kind: str, pod: Obj) -> None:
        """Keep exit codes of job pods (a deleted pod leaves the cache with its code), and
        write the UUID a running reservation pod printed onto it (see reservation.py)."""
        if not pod:
            if kind == "RELISTED":
                self._pods_of, self._reservations, self._all_changed = {}, {}, True
                self.reservations_generation += 1
                for cached in list(self.pods.objects.values()):
                    self._pod_changed("ADDED", cached)
            return
        meta = pod["metadata"]
        self._index_pod(kind, pod)
        if (
            kind != "DELETED"
            and is_reservation(pod)
            and pod_phase(pod) == "Running"
            and not (meta.get("annotations") or {}).get(GPU_UUID)
            and meta["name"] not in self._reporting
        ):
            self._reporting.add(meta["name"])
            task = asyncio.get_running_loop().create_task(self._report_uuid(pod))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        owner, code = owner_job(pod), pod_exit_code(pod)
        disruption = condition(pod, "DisruptionTarget")
        if owner is not None and disruption is not None:
            self.disrupted[owner] = disruption
        if owner is not None and code is not None:
            self.exit_codes.setdefault(owner, {})[pod["metadata"]["name"]] = code

    def _index_pod(self, kind: str, pod: Obj) -> None:
        """Keep ``_pods_of``, ``_reservations`` and ``_changed`` in step with the pod cache."""
        name, owner = pod["metadata"]["name"], owner_job(pod)
        if owner is not None:
            self._changed.add(owner)
            pods = self._pods_of.setdefault(owner, {})
            if kind == "DELETED":
                pods.pop(name, None)
                if not pods:
                    del self._pods_of[owner]
            else:
                pods[name] = pod
        if kind == "DELETED":
            if self._reservations.pop(name, None) is not None:
                self.reservations_generation += 1
        elif is_reservation(pod):
            self._reservations[name] = pod
            self.reservations_generation += 1

    async def _report_uuid(self, pod: Obj) -> None:
        try:
            await report_uuid_when_printed(self.kube, self.namespace, pod, self.log)
        finally:
            self._reporting.discard(pod["metadata"]["name"])
