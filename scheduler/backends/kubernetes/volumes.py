"""Job pods' volumes: the home volume templates, expanded per user as KubeSpawner expands
them, and what a ReadWriteOnce claim (z2jh's default home, attached to one node at a time)
means for a job: a start it would leave waiting forever is refused in words
(``check_home_claims``), and a pod left waiting for one (the Multi-Attach error) is noticed
(``read_attach_error``; ``stuck.py`` ends its attempt).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from scheduler.backends.base import BackendError, JobSpec
from scheduler.backends.kubernetes.attempts import Attempt
from scheduler.backends.kubernetes.client import Informer, Kube, KubeError
from scheduler.backends.kubernetes.pods import Obj, pod_live


def user_fields(username: str) -> dict[str, str]:
    """The ``{username}``-style fields of volume templates, expanded as KubeSpawner (>= 7)
    expands them for a user's default server, so ``claim-{username}`` names the claim z2jh
    made for ``a@b.org``: ``username`` and ``user_server`` are KubeSpawner's safe slug,
    ``escaped_username`` its legacy (< 7) escaping, ``unescaped_username`` the name itself."""
    from kubespawner.slugs import escape_slug, safe_slug

    safe = safe_slug(username, max_length=48)
    return {
        "username": safe,
        "user_server": safe,
        "safe_username": safe,
        "escaped_username": escape_slug(username),
        "unescaped_username": username,
        "servername": "",
    }


def format_template(value: Any, **names: str) -> Any:
    """``{username}``-style fields in every string of a JSON-like template."""
    if isinstance(value, str):
        return value.format(**names)
    if isinstance(value, list):
        return [format_template(v, **names) for v in value]
    if isinstance(value, dict):
        return {k: format_template(v, **names) for k, v in value.items()}
    return value


async def check_home_claims(
    kube: Kube,
    namespace: str,
    job: JobSpec,
    home_volumes: list[Obj],
    attempts: Iterable[Attempt],
    mine: Iterable[Obj],
    foreign: Informer | None,
    log: logging.Logger,
) -> frozenset[str]:
    """A ReadWriteOnce claim (z2jh's default home) attaches to one node: a gang across
    nodes, or a job on another node than a pod already using the claim (or a live attempt
    of ours that mounts it, whose pods the watch may not have shown yet), would wait in
    ContainerCreating (Multi-Attach) forever. Refuse those starts with words instead.
    Returns the single-node claims the job mounts. ``mine`` are FracHub's pods (the
    cache), ``foreign`` the cache of the others when they are watched."""
    nodes = sorted({replica.node for replica in job.placement})
    users: list[Obj] | None = None
    single: set[str] = set()
    for volume in format_template(list(home_volumes), **user_fields(job.user)):
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if not claim:
            continue
        try:
            pvc = await kube.call(
                kube.core.read_namespaced_persistent_volume_claim, claim, namespace
            )
        except KubeError as error:
            if error.status in (403, 404):  # not ours to read, or not made yet
                continue
            raise
        modes = set((pvc.get("spec") or {}).get("accessModes") or [])
        if modes & {"ReadWriteMany", "ReadOnlyMany"}:
            continue
        single.add(claim)
        if users is None:
            users = await namespace_pods(kube, namespace, mine, foreign, log)
        held = sorted(
            {
                pod["spec"]["nodeName"]
                for pod in users
                if pod.get("spec", {}).get("nodeName")
                and pod_live(pod)
                and any(
                    (v.get("persistentVolumeClaim") or {}).get("claimName") == claim
                    for v in pod["spec"].get("volumes") or []
                )
            }
            | {
                node
                for attempt in attempts
                if claim in attempt.claims and not attempt.stopping
                for node, _, _ in attempt.shares
            }
        )
        where = set(nodes) | set(held)
        if len(where) > 1:
            raise BackendError(
                f"the home volume claim {claim} is {'/'.join(sorted(modes)) or 'ReadWriteOnce'}"
                f": it cannot be mounted on {', '.join(sorted(where))} at once"
                + (f" (pods on {', '.join(held)} use it)" if held else "")
                + "; give jobs ReadWriteMany storage (KubernetesBackend.home_volumes, "
                "docs/kubernetes.md)"
            )
    return frozenset(single)


async def namespace_pods(
    kube: Kube,
    namespace: str,
    mine: Iterable[Obj],
    foreign: Informer | None,
    log: logging.Logger,
) -> list[Obj]:
    """Every pod of the namespace, FracHub's or not (a notebook from another spawner, a
    user's own pod may hold a ReadWriteOnce claim): the caches, or one list when pods
    FracHub did not create are not watched."""
    mine = list(mine)
    if foreign is not None:
        return mine + [
            pod for pod in foreign.objects.values() if pod["metadata"].get("namespace") == namespace
        ]
    try:
        body = await kube.call(kube.core.list_namespaced_pod, namespace)
    except KubeError as error:
        log.warning("listing the pods of %s failed: %s", namespace, error)
        return mine
    return list(body.get("items") or [])


async def read_attach_error(
    kube: Kube,
    namespace: str,
    attempt: Attempt,
    pod: Obj,
    now: float,
    attach_timeout: float,
    log: logging.Logger,
    since: float | None = None,
) -> None:
    """Note in ``attempt.attach_error`` the attach/detach controller's Multi-Attach error
    about ``pod`` (from its events, read at most every few seconds), or forget it. The
    first read waits as long after ``since`` (when the pod was first seen Pending): a pod
    that starts before then never has its events listed (a list of the namespace's events
    per start was the API server's work in a 4,000-job fill, benchmarks/kai_scale.py),
    and an attach error is noted at most that much later."""
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    first_read = -1e9 if since is None else since
    if now - attempt.attach_checked.get(name, first_read) < min(5.0, attach_timeout / 2):
        return
    attempt.attach_checked[name] = now
    try:
        body = await kube.call(
            kube.core.list_namespaced_event,
            namespace,
            field_selector=f"involvedObject.uid={uid},reason=FailedAttachVolume",
        )
    except KubeError as error:
        log.warning("reading the events of pod %s failed: %s", name, error)
        return
    for event in body.get("items") or []:
        if "Multi-Attach" in (event.get("message") or ""):
            first = attempt.attach_error.get(name, (now, ""))[0]
            attempt.attach_error[name] = (first, str(event["message"]))
            return
    attempt.attach_error.pop(name, None)
