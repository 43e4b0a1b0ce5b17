"""The end of stopped attempts: confirming through the API that no pod of theirs runs, and
deleting their Jobs, for many attempts at once.

A stop is reported only when no pod of the attempt is left running, read through the API and
not from the watch caches alone: a loaded watch, or a stop right after the start, may not
show a pod yet, and a stop reported while it runs would give its GPUs to the next job. A
reclaim for a 500-replica gang stops 500 attempts; one list and one delete per attempt, one
after another, cost 1,000 round trips in the poll. Here the attempts a poll confirms are
listed together (``live_attempts``: one list per ``ATTEMPTS_PER_LIST`` attempts, by a
set-based label selector) and their Jobs deleted side by side (``delete_attempts``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

from scheduler.backends.kubernetes.client import CALLS_AT_ONCE, Kube, KubeError
from scheduler.backends.kubernetes.labels import ATTEMPT_NAME, MANAGED_SELECTOR
from scheduler.backends.kubernetes.pods import pod_live
from scheduler.common.concurrency import side_by_side

ATTEMPTS_PER_LIST = 50
"""Attempts named in one pod list's ``attempt-name in (...)`` selector: about 2 KB of
query, far under what an API server or a proxy accepts in a URL."""


async def live_attempts(
    kube: Kube, namespace: str, names: Sequence[str], log: logging.Logger
) -> set[str]:
    """The attempts among ``names`` with a pod still live, read through the API (lists
    side by side, ``CALLS_AT_ONCE`` at a time). A list the API does not answer leaves its
    attempts to the caches' word (not live), as a stop must end even when the API is down."""
    chunks = [names[i : i + ATTEMPTS_PER_LIST] for i in range(0, len(names), ATTEMPTS_PER_LIST)]

    async def listed(chunk: Sequence[str]) -> set[str]:
        selector = f"{MANAGED_SELECTOR},{ATTEMPT_NAME} in ({','.join(chunk)})"
        try:
            body = await kube.call(
                kube.core.list_namespaced_pod, namespace, label_selector=selector
            )
        except KubeError as error:
            log.warning("listing the pods of %d stopped attempts failed: %s", len(chunk), error)
            return set()
        return {
            (pod["metadata"].get("labels") or {}).get(ATTEMPT_NAME, "")
            for pod in body.get("items") or []
            if pod_live(pod)
        }

    live: set[str] = set()
    for found in await side_by_side(listed, chunks, CALLS_AT_ONCE):
        live |= found
    return live


async def delete_attempt(
    kube: Kube, namespace: str, jobs: Sequence[str], service: str | None
) -> None:
    """Delete an attempt's Jobs (their pods with them) and its headless Service; what is
    already gone is no error."""
    for name in jobs:
        try:
            await kube.call(
                kube.batch.delete_namespaced_job, name, namespace, propagation_policy="Background"
            )
        except KubeError as error:
            if error.status != 404:
                raise
    if service:
        try:
            await kube.call(kube.core.delete_namespaced_service, service, namespace)
        except KubeError as error:
            if error.status != 404:
                raise


async def delete_attempts(
    kube: Kube, namespace: str, attempts: Sequence[tuple[Sequence[str], str | None]]
) -> None:
    """``delete_attempt`` for each (Jobs, Service), side by side; what the API refuses
    (after the client's retries) is left behind, as the poll has always left it."""

    async def one(attempt: tuple[Sequence[str], str | None]) -> None:
        with contextlib.suppress(KubeError):
            await delete_attempt(kube, namespace, *attempt)

    await side_by_side(one, attempts, CALLS_AT_ONCE)
