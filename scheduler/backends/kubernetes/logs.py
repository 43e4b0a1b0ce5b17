"""Training logs: they stay with the pods (finished Jobs keep theirs for
``ttl_seconds_after_finished``), streamed through ``pods/log``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable
from typing import Any

from scheduler.backends.kubernetes.client import Kube
from scheduler.backends.kubernetes.labels import ATTEMPT, COMPONENT, TRAINING, WORKLOAD
from scheduler.backends.kubernetes.pods import Obj, pod_rank


def replica_pod(pods: Iterable[Obj], workload_id: int, replica: int) -> Obj | None:
    """The pod of replica ``replica`` of the workload's latest attempt that has been bound
    to a node (it may have printed something), or None."""
    candidates = [
        pod
        for pod in pods
        if (pod["metadata"].get("labels") or {}).get(WORKLOAD) == str(workload_id)
        and (pod["metadata"].get("labels") or {}).get(COMPONENT) == TRAINING
        and pod_rank(pod) == replica
        and (pod.get("spec") or {}).get("nodeName")
    ]
    if not candidates:
        return None
    return max(
        candidates,
        key=lambda p: (
            int((p["metadata"].get("labels") or {}).get(ATTEMPT, 0)),
            p["metadata"].get("creationTimestamp", ""),
        ),
    )


async def read_log(
    kube: Kube,
    namespace: str,
    pod: Obj,
    *,
    tail: int,
    follow: bool,
    request_timeout: float,
    log: logging.Logger,
) -> AsyncIterator[bytes]:
    """What ``pod``'s job container printed: the last ``tail`` lines (all when negative),
    then, with ``follow``, what it prints until it ends. Nothing when the API cannot say."""
    options: dict[str, Any] = {"container": "job", "follow": follow}
    if tail >= 0:
        options["tail_lines"] = tail
    try:
        response = await kube.core.read_namespaced_pod_log(
            pod["metadata"]["name"],
            namespace,
            _preload_content=False,
            _request_timeout=None if follow else request_timeout,
            **options,
        )
    except Exception as error:  # ApiException, connection errors: no log to show
        log.warning("reading the log of %s failed: %s", pod["metadata"]["name"], error)
        return
    async with response:
        if response.status >= 300:
            return
        async for chunk in response.content.iter_any():
            yield chunk
