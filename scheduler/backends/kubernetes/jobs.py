"""The training workload's objects: an attempt's Indexed Jobs, their environment, and the
headless Service of a gang. Pure: manifests in, dicts out; the backend does the calls.

An attempt of a training workload is one **Indexed Job per group of replicas** that share a
node and the same GPUs (usually one Job), created suspended, then pinned to its node and
un-suspended in one patch (``admit_patch``, Kueue's admission). ``RANK``/``LOCAL_RANK`` come
from ``JOB_COMPLETION_INDEX`` through a short shell prelude; ``MASTER_ADDR`` is
``<job>-<index>.<service>`` of rank 0, resolved by a headless Service selecting the
attempt's pods (gangs only).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.backends.base import JobSpec
from scheduler.backends.kubernetes.gpus import (
    gpu_resources,
    hami_framework_caps,
    hami_pod_fields,
    is_fractional,
    shares_text,
)
from scheduler.backends.kubernetes.labels import (
    ATTEMPT,
    ATTEMPT_NAME,
    COMPONENT,
    GROUP,
    MANAGED,
    MANAGED_BY,
    PROJECT,
    RANKS,
    SHARES,
    TRACKED,
    TRAINING,
    USER,
    WORKLOAD,
    label_value,
)
from scheduler.backends.kubernetes.pods import (
    Obj,
    PodSettings,
    add_node_settings,
    container_resources,
    pin,
)
from scheduler.backends.kubernetes.volumes import format_template, user_fields
from scheduler.common.contract import NVIDIA_VISIBLE_DEVICES, contract_env, rendezvous
from scheduler.common.placement import Placement
from scheduler.common.share import Share


def replica_groups(placement: Placement) -> list[list[int]]:
    """Ranks grouped by node and GPUs held, in order of their first rank: one Indexed Job
    each, so every pod of a Job shares one template (one node, one device list). Replicas of
    whole GPUs group by node and count (the device plugin picks the GPUs); fractional ones by
    the exact GPU, whose UUID is in the template."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for rank, replica in enumerate(placement):
        if is_fractional(replica):
            key: tuple[Any, ...] = (
                replica.node,
                "share",
                replica.gpus[0].index,
                replica.gpus[0].milli,
            )
        else:
            key = (replica.node, "whole", len(replica.gpus))
        groups.setdefault(key, []).append(rank)
    return list(groups.values())


def labels_for(job: JobSpec, settings: PodSettings) -> dict[str, str]:
    return {
        **settings.extra_labels,
        MANAGED_BY: MANAGED,
        TRACKED: "true",
        COMPONENT: TRAINING,
        WORKLOAD: str(job.workload_id),
        ATTEMPT: str(job.restart_count),
        PROJECT: label_value(job.project),
        USER: label_value(job.user),
    }


def prelude(ranks: Sequence[int], local_ranks: Sequence[int]) -> str:
    """Shell lines setting RANK and LOCAL_RANK from JOB_COMPLETION_INDEX."""
    cases = " ".join(
        f"{index}) RANK={rank}; LOCAL_RANK={local};;"
        for index, (rank, local) in enumerate(zip(ranks, local_ranks, strict=True))
    )
    return f'case "$JOB_COMPLETION_INDEX" in {cases} esac; export RANK LOCAL_RANK; '


def container_command(command: str | Sequence[str], lead: str) -> list[str]:
    if isinstance(command, str):
        return ["/bin/sh", "-c", lead + command] if lead else ["/bin/sh", "-c", command]
    argv = [str(part) for part in command]
    if not lead:
        return argv
    return ["/bin/sh", "-c", lead + 'exec "$@"', "frachub-job", *argv]


def working_dir(job: JobSpec, settings: PodSettings) -> str:
    home = home_dir(settings)
    if not job.working_dir:
        return home
    if job.working_dir.startswith("/"):
        return job.working_dir
    return f"{home}/{job.working_dir.removeprefix('~/')}"


POD_FAILURE_POLICY = {
    "rules": [
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {
            "action": "FailJob",
            "onExitCodes": {"containerName": "job", "operator": "NotIn", "values": [0]},
        },
    ]
}
"""Every training Job's ``podFailurePolicy``. A disrupted pod (eviction, drain, preemption
by kube-scheduler, node lost) fails the Job at once and says so in the Job's condition, so
the backend requeues the workload even when the pod is gone; a replacement pod (``Ignore``)
would be pinned to the node it was evicted from and wait there, unseen by the scheduler. A
program's non-zero exit fails it at once too, with the code in the condition's message."""


def job_manifests(
    job: JobSpec,
    settings: PodSettings,
    envs: Sequence[Mapping[str, str]],
    service: str | None,
    base: str,
    shares: Sequence[Share],
    uuids: Mapping[tuple[str, int], str] | None = None,
) -> list[Obj]:
    """The attempt's suspended Indexed Jobs named ``base`` (``base-g<n>`` for several groups;
    see the module docstring); ``envs[rank]`` is each rank's full environment, identical
    within a group except RANK/LOCAL_RANK, and ``shares[rank]`` its share. ``uuids``
    ((node, index) -> UUID) name the GPUs HAMi must use (HAMi mode)."""
    groups = replica_groups(job.placement)
    labels = labels_for(job, settings)
    manifests = []
    for number, ranks in enumerate(groups):
        name = job_names(job.placement, base)[number]
        replica = job.placement[ranks[0]]
        env = dict(envs[ranks[0]])
        lead = ""
        if "RANK" in env:
            local = [int(envs[rank]["LOCAL_RANK"]) for rank in ranks]
            lead = prelude(ranks, local)
            env.pop("RANK")
            env.pop("LOCAL_RANK")
        pod_labels = {**labels, GROUP: str(number), ATTEMPT_NAME: base}
        limits = gpu_resources(settings.sharing, replica, shares[ranks[0]])
        fields = user_fields(job.user)
        volumes = [format_template(v, **fields) for v in settings.volumes]
        mounts = [format_template(m, **fields) for m in settings.volume_mounts]
        container: Obj = {
            "name": "job",
            "image": settings.image,
            "command": container_command(job.command, lead),
            "workingDir": working_dir(job, settings),
            "env": [{"name": k, "value": v} for k, v in env.items()]
            + [
                {
                    "name": "FRACHUB_NODE_NAME",
                    "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                }
            ],
            "resources": container_resources(limits, job.cpu_milli, job.memory_mib),
            "volumeMounts": mounts,
        }
        pod_spec: Obj = {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": int(settings.grace_seconds),
            "containers": [container],
            "volumes": volumes,
            "enableServiceLinks": False,
        }
        if service:
            pod_spec["subdomain"] = service
        if settings.service_account:
            pod_spec["serviceAccountName"] = settings.service_account
        if settings.priority_class:
            pod_spec["priorityClassName"] = settings.priority_class
        scheduler, hami = hami_pod_fields(settings, [job.placement[r] for r in ranks], uuids or {})
        if scheduler:
            pod_spec["schedulerName"] = scheduler
        add_node_settings(pod_spec, settings)
        annotations = {
            **hami,
            USER: job.user,
            PROJECT: job.project,
            SHARES: shares_text(tuple(job.placement[r] for r in ranks)),
            "frachub.io/workload-name": job.name,
            RANKS: ",".join(str(rank) for rank in ranks),
        }
        manifests.append(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": name,
                    "labels": pod_labels,
                    "annotations": {**annotations, "frachub.io/jobs": str(len(groups))},
                },
                "spec": {
                    "suspend": True,
                    "completionMode": "Indexed",
                    "completions": len(ranks),
                    "parallelism": len(ranks),
                    "backoffLimit": 0,
                    "podFailurePolicy": POD_FAILURE_POLICY,
                    "ttlSecondsAfterFinished": int(settings.ttl_seconds_after_finished),
                    "template": {
                        "metadata": {"labels": pod_labels, "annotations": annotations},
                        "spec": pod_spec,
                    },
                },
            }
        )
    return manifests


def admit_patch(node: str, settings: PodSettings) -> Obj:
    """Kueue's admission: pin the (never started) suspended Job to its node and resume it."""
    return {"spec": {"suspend": False, "template": {"spec": pin(node, settings.node_label)}}}


def job_names(placement: Placement, base: str) -> list[str]:
    count = len(replica_groups(placement))
    return [base] if count == 1 else [f"{base}-g{n}" for n in range(count)]


def master_address(placement: Placement, base: str, service: str) -> str:
    """``<job of rank 0>-0.<service>``: rank 0 is index 0 of the first group."""
    return f"{job_names(placement, base)[0]}-0.{service}"


def service_manifest(job: JobSpec, settings: PodSettings, base: str) -> Obj:
    """The headless Service that gives a gang's pods their DNS names."""
    labels = labels_for(job, settings)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": base, "labels": {**labels, ATTEMPT_NAME: base}},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {ATTEMPT_NAME: base, MANAGED_BY: MANAGED},
            "ports": [{"name": "rendezvous", "port": settings.rendezvous_port}],
        },
    }


def job_environment(
    job: JobSpec,
    rank: int,
    share: Share,
    settings: PodSettings,
    uuids: Mapping[tuple[str, int], str],
    base: str,
    service: str | None,
    checkpoint_dir_template: str,
) -> dict[str, str]:
    """Rank ``rank``'s environment (holding ``share``): settings' < the job's variables <
    HOME/USER < the contract. NVIDIA_VISIBLE_DEVICES is set only where FracHub picks the GPU
    (a reserved share); otherwise the device plugin (whole GPUs) or HAMi (hami mode) sets it.
    FRACHUB_GPU_UUIDS is set where the pod's GPU is known: a reserved share, a HAMi share
    (``nvidia.com/use-gpuuuid``).

    Gangs: every pod is its own torchrun "node". The device plugin and HAMi show a pod only
    the GPUs it was given, so two replicas on one node each see theirs as ``cuda:0``:
    ``LOCAL_RANK=0`` and ``LOCAL_WORLD_SIZE=1`` in every pod (``set_device(LOCAL_RANK)``
    is the pod's own GPU), with the gang's ``RANK``, ``WORLD_SIZE`` and ``MASTER_ADDR``, as
    Kubeflow's PyTorchJob sets them. Reserved shares are shown alone too, so a pod never
    sees a GPU that is not its own. NCCL tells the pods apart by hostname (they are
    different hosts to it), so no "duplicate GPU" error; replicas wanting NVLink between
    their GPUs ask for one replica with several GPUs and run torchrun inside it."""
    replica = job.placement[rank]
    home = home_dir(settings)
    master = master_address(job.placement, base, service) if service else ""
    reserved = is_fractional(replica) and settings.sharing == "reservation"
    hami = is_fractional(replica) and settings.sharing == "hami"
    place = rendezvous(job.placement, rank, master, settings.rendezvous_port) if service else None
    if place is not None:
        place = dataclasses.replace(place, local_rank=0, local_world_size=1)
    contract = contract_env(
        workload_id=job.workload_id,
        replica=replica,
        share=share,
        restart_count=job.restart_count,
        checkpoint_dir=checkpoint_dir_template.format(home=home, workload_id=job.workload_id),
        uuid_of=lambda node, index: uuids.get((node, index), ""),
        device_variable=NVIDIA_VISIBLE_DEVICES,
        rendezvous=place,
    )
    if not reserved:
        contract.pop(NVIDIA_VISIBLE_DEVICES, None)
    if not (reserved or hami):
        contract.pop("FRACHUB_GPU_UUIDS", None)
    if hami:
        hami_framework_caps(contract)
    env = dict(settings.environment)
    env.update(job.env)
    env.update(HOME=home, USER=job.user, FRACHUB_PROJECT=job.project)
    env.update(contract)
    return env


def home_dir(settings: PodSettings) -> str:
    """The job's HOME: the home mount without a trailing slash."""
    return settings.home_mount_path.rstrip("/") or "/"
