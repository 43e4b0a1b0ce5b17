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
from collections.abc import Iterable

from scheduler.backends.kubernetes.client import Informer, Kube, KubeError, namespaced_key
from scheduler.backends.kubernetes.labels import (
    ATTEMPT_NAME,
    GPU_UUID,
    MANAGED_SELECTOR,
    TRACKED,
)
from scheduler.backends.kubernetes.pods import Obj, condition, owner_job, pod_exit_code, pod_phase
from scheduler.backends.kubernetes.reservation import is_reservation, report_uuid_when_printed


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

    def by_job(self) -> dict[str, list[Obj]]:
        """Job name -> its pods in the cache."""
        out: dict[str, list[Obj]] = {}
        for pod in self.pods.objects.values():
            owner = owner_job(pod)
            if owner is not None:
                out.setdefault(owner, []).append(pod)
        return out

    def attempt_jobs(self, attempt: str) -> list[Obj]:
        """The cached Jobs labelled with ``attempt`` (``frachub.io/attempt-name``): what a
        label-selected list would return, without one API call per start."""
        names = sorted(self._by_attempt.get(attempt, ()))
        return [self.jobs.objects[name] for name in names if name in self.jobs.objects]

    def _job_changed(self, kind: str, job: Obj) -> None:
        """Keep ``_by_attempt`` in step with the Jobs cache."""
        if kind == "RELISTED":
            self._by_attempt = {}
            for cached in self.jobs.objects.values():
                self._job_changed("ADDED", cached)
            return
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
                for cached in list(self.pods.objects.values()):
                    self._pod_changed("ADDED", cached)
            return
        meta = pod["metadata"]
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

    async def _report_uuid(self, pod: Obj) -> None:
        try:
            await report_uuid_when_printed(self.kube, self.namespace, pod, self.log)
        finally:
            self._reporting.discard(pod["metadata"]["name"])
