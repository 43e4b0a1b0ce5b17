"""``KubernetesBackend``: training as ``batch/v1`` Jobs, GPUs from Nodes (see docs/kubernetes.md).

It meets ``scheduler.backends.base.Backend``, plus one coroutine the service awaits before
anything else: ``connect()`` loads the credentials, waits for the leader Lease (when
``leader_election`` is on), lists Nodes, FracHub's Pods and Jobs, and starts watching them.
``inventory()`` and ``adopt()`` then answer from those caches without I/O.

An attempt's life:

- ``start``: reservation pods for its shared GPUs (reservation mode; idle ones on GPUs it takes
  whole are deleted, as they hold the device), its Indexed Jobs created
  *suspended* with the environment contract, the headless Service of a gang, then each Job
  pinned to its node and resumed in one patch (Kueue's admission). A start that fails half way
  deletes what it created. A start that finds this attempt's Jobs already there (the service
  died between creating and recording them) takes them over instead of doubling them.
- ``stop``: the Jobs are suspended again (stamped ``frachub.io/stop-requested``): their pods get
  SIGTERM and ``terminationGracePeriodSeconds``; a shorter grace deletes the pods with it.
- ``poll``: an attempt ends when its Jobs complete (0), one fails (its pod's exit code; the
  rest of a gang is stopped first), its stop has left no pod running, or its Jobs vanish
  (``None``: lost). Each end is reported once; a stopped attempt's Jobs are deleted then.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import signal
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from traitlets import Bool, CaselessStrEnum, Dict, Float, Integer, List, Unicode, default, validate
from traitlets.config import LoggingConfigurable

from scheduler.backends.base import BackendError, Exit, Handle, Inventory, JobSpec
from scheduler.backends.kubernetes import credentials
from scheduler.backends.kubernetes import objects as o
from scheduler.backends.kubernetes.client import (
    Informer,
    Kube,
    KubeError,
    load_configuration,
    namespaced_key,
)
from scheduler.backends.kubernetes.leader import LeaseElector
from scheduler.backends.kubernetes.reservation import (
    ReservationTimeout,
    ensure_reservation,
    report_uuid,
    utc_stamp,
)
from scheduler.common.contract import NVIDIA_VISIBLE_DEVICES, contract_env, rendezvous

HANDLE_KIND = "kubernetes"
FAILED = ("FailureTarget", "Failed")
COMPLETE = ("SuccessCriteriaMet", "Complete")
"""A Job has failed or succeeded once it has the interim condition: Kubernetes 1.31+ adds
the terminal one (Failed, Complete) only after every pod of it has terminated."""

POLICY_MATCH = re.compile(
    r"(?:failed with exit code (?P<code>\d+)|has condition (?P<condition>\w+)) matching FailJob"
)
"""The Job controller's words for the podFailurePolicy rule a pod matched."""


@dataclass
class _Attempt:
    workload_id: int
    name: str
    jobs: list[str]
    service: str | None
    shares: list[tuple[str, int, int]] = field(default_factory=list)
    stopping: bool = False
    seen: set[str] = field(default_factory=set)
    failure: tuple[int | None, str] | None = None
    last_codes: dict[str, int] = field(default_factory=dict)
    stuck: bool = False  # ended because a pod could not start (its Jobs are deleted)
    pending_since: dict[str, float] = field(default_factory=dict)  # pod -> first seen Pending
    attach_checked: dict[str, float] = field(default_factory=dict)  # pod -> events last read
    # pod -> (when its Multi-Attach error was first seen, the error's words)
    attach_error: dict[str, tuple[float, str]] = field(default_factory=dict)
    # the home claims its pods mount: before the pods reach the watch cache, these say
    # where a ReadWriteOnce claim is already wanted (attempts started moments ago)
    claims: frozenset[str] = frozenset()


class KubernetesBackend(LoggingConfigurable):
    """Runs training as Jobs in one namespace; see the module docstring and docs/kubernetes.md."""

    kubeconfig = Unicode(
        "",
        help="""Path of a kubeconfig file. Empty: the pod's service account when running in a
        cluster (KUBERNETES_SERVICE_HOST is set), else $KUBECONFIG or ~/.kube/config.""",
    ).tag(config=True)

    namespace = Unicode(
        help="""Namespace of the jobs, reservation pods, Lease and notebook pods. Default: the
        pod's own namespace in a cluster, else "default".""",
    ).tag(config=True)

    @default("namespace")
    def _default_namespace(self) -> str:
        return _own_namespace()

    lease_namespace = Unicode(
        help="""Namespace of the leader Lease: where the scheduler's Role grants ``leases``
        (the chart's: the release namespace, which differs from ``namespace`` when jobs run
        elsewhere). Default: the pod's own namespace in a cluster ($POD_NAMESPACE or its
        service account's), else ``namespace``.""",
    ).tag(config=True)

    @default("lease_namespace")
    def _default_lease_namespace(self) -> str:
        return os.environ.get("POD_NAMESPACE") or _own_namespace(self.namespace)

    sharing_mode = CaselessStrEnum(
        list(o.SHARING_MODES),
        default_value="reservation",
        help="""How a fraction of a GPU is given to a pod. "reservation" (default, needs only the
        NVIDIA device plugin): a reservation pod holds the whole GPU and reports its UUID, and
        fractional pods get NVIDIA_VISIBLE_DEVICES of it with no GPU request; memory caps are
        cooperative. "hami": pods request nvidia.com/gpu: 1 and nvidia.com/gpumem (MiB) and
        HAMi enforces the memory. Whole GPUs are nvidia.com/gpu: N in both modes.""",
    ).tag(config=True)

    image = Unicode(
        "quay.io/jupyter/pytorch-notebook:latest",
        help="Container image of training jobs (usually the notebook image, so code that runs "
        "in the notebook runs in the job).",
    ).tag(config=True)

    reservation_image = Unicode(
        "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
        help="""Image of reservation pods: any image with /bin/sh, sleep and head (the default
        reservation_command asks nvidia-smi, which the NVIDIA runtime mounts, else reads the
        device plugin's NVIDIA_VISIBLE_DEVICES). It gets no API access.""",
    ).tag(config=True)

    reservation_command = List(
        Unicode(),
        default_value=["/bin/sh", "-c", o.RESERVATION_SCRIPT],
        help="""Command of reservation pods: it must print the line
        ``frachub.io/gpu-uuid=<UUID of the GPU it holds>`` and keep running; the scheduler
        reads it through pods/log and annotates the pod.""",
    ).tag(config=True)

    reservation_timeout = Float(
        120.0, help="Seconds to wait for a reservation pod to report its GPU before a start fails."
    ).tag(config=True)

    reservation_linger_seconds = Float(
        60.0,
        help="""A reservation pod nobody uses is deleted once this many seconds have passed
        since its last claim (so a notebook spawning on it is not raced).""",
    ).tag(config=True)

    service_account = Unicode(
        "",
        help="Service account of job pods (empty: the namespace default). Reservation pods "
        "run without one (no API access).",
    ).tag(config=True)

    tolerations = List(
        Dict(),
        help="""Tolerations of job and reservation pods, e.g. [{"key": "nvidia.com/gpu",
        "operator": "Exists", "effect": "NoSchedule"}] for tainted GPU nodes. Fractional pods
        in reservation mode request no nvidia.com/gpu, so the ExtendedResourceToleration
        admission plugin does not add one for them: set it here (and in KubeSpawner's
        ``tolerations`` for notebooks).""",
    ).tag(config=True)

    runtime_class_name = Unicode(
        "",
        help="""runtimeClassName of job and reservation pods (e.g. "nvidia" where the NVIDIA
        runtime is not the node's default, as KAI sets it); empty: the node's default.""",
    ).tag(config=True)

    priority_class = Unicode(
        "", help="PriorityClass of training pods (e.g. frachub-training); empty: none."
    ).tag(config=True)

    reservation_priority_class = Unicode(
        "",
        help="PriorityClass of reservation pods (e.g. frachub-reservation); empty: priority_class.",
    ).tag(config=True)

    scheduler_name = Unicode(
        "",
        help="""schedulerName of FracHub's pods; empty: the default. In hami mode pods with a
        GPU use ``hami_scheduler_name`` instead (HAMi's device plugin serves only pods its
        scheduler placed).""",
    ).tag(config=True)

    hami_scheduler_name = Unicode(
        o.HAMI_SCHEDULER,
        help="""hami mode: the schedulerName of HAMi's scheduler (HAMi's chart value
        ``schedulerName``), set on every pod with a GPU so HAMi's webhook and scheduler
        extender take it, whatever ``forceOverwriteDefaultScheduler`` says.""",
    ).tag(config=True)

    node_label = Unicode(
        "",
        help="""Empty (default): pods are pinned to the engine's node by node affinity on the
        Node's name (matchFields metadata.name), which holds where the kubernetes.io/hostname
        label differs from the name. Set a label (e.g. kubernetes.io/hostname) to pin with a
        nodeSelector on it instead.""",
    ).tag(config=True)

    node_selector = Dict(
        value_trait=Unicode(),
        help="""Only nodes with these labels are scheduled onto, e.g.
        {"frachub.io/pool": "gpu"}. Empty: every Ready node with GPUs.""",
    ).tag(config=True)

    count_foreign_pods = Bool(
        True,
        help="""Watch pods in every namespace and leave the GPUs of those FracHub did not
        create out of the inventory (the chart's ClusterRole grants pods list/watch). Off, or
        without the grant (a warning says so), FracHub assumes it has the GPU nodes to itself:
        dedicate them with taints or ``node_selector``.""",
    ).tag(config=True)

    default_gpu_memory_mib = Integer(
        0, help="GPU memory (MiB) of nodes without the nvidia.com/gpu.memory label."
    ).tag(config=True)

    home_volumes = List(
        Dict(),
        default_value=[
            {"name": "home", "persistentVolumeClaim": {"claimName": "claim-{username}"}}
        ],
        help="""Volumes of job pods, with {username} replaced; the default is Zero to
        JupyterHub's per-user home claim, so scripts written in the notebook are there.""",
    ).tag(config=True)

    home_volume_mounts = List(
        Dict(),
        default_value=[{"name": "home", "mountPath": "/home/jovyan"}],
        help="volumeMounts of the job container, with {username} replaced.",
    ).tag(config=True)

    home_mount_path = Unicode(
        "/home/jovyan",
        help="The job's HOME and default working directory; relative working directories "
        "start here.",
    ).tag(config=True)

    checkpoint_dir_template = Unicode(
        "{home}/.frachub/checkpoints/{workload_id}",
        help="FRACHUB_CHECKPOINT_DIR of jobs ({home}, {workload_id}); on the home volume, so "
        "it survives restarts.",
    ).tag(config=True)

    environment = Dict(
        value_trait=Unicode(),
        help="Extra variables for every job; the job's own override them, the contract both.",
    ).tag(config=True)

    extra_labels = Dict(
        value_trait=Unicode(), help="Extra labels on every object FracHub creates."
    ).tag(config=True)

    termination_grace_seconds = Integer(
        help="terminationGracePeriodSeconds of job pods. Default: the service's grace_period."
    ).tag(config=True)

    @default("termination_grace_seconds")
    def _default_grace(self) -> int:
        return int(getattr(self.parent, "grace_period", 30) or 30)

    ttl_seconds_after_finished = Integer(
        86400,
        help="""Finished Jobs (and their pods' logs) are kept this long. A scheduler down for
        longer loses the exit codes of jobs that ended meanwhile (they are requeued).""",
    ).tag(config=True)

    rendezvous_port = Integer(29500, help="MASTER_PORT of gangs.").tag(config=True)

    unschedulable_timeout = Float(
        300.0,
        help="""Seconds a job's pod may stay unschedulable on the node FracHub chose (GPUs held
        by pods it cannot see, HAMi's memory accounting, a missing claim) before the attempt
        ends with the scheduler's words and the workload is requeued.""",
    ).tag(config=True)

    volume_attach_timeout = Float(
        60.0,
        help="""Seconds a job's pod may wait for a ReadWriteOnce volume attached to another
        node (the Multi-Attach error: e.g. the user's notebook elsewhere holds the home
        claim) before the attempt ends with those words and the workload is requeued.""",
    ).tag(config=True)

    request_timeout = Float(30.0, help="Seconds for one API request.").tag(config=True)
    watch_timeout = Integer(300, help="Seconds a watch runs before it is renewed.").tag(config=True)

    leader_election = Bool(
        True,
        help="""Hold a coordination.k8s.io Lease while scheduling, so only one replica acts;
        connect() waits for it. Turn off only for a single replica.""",
    ).tag(config=True)

    lease_name = Unicode("frachub-scheduler", help="Name of the leader Lease.").tag(config=True)
    lease_seconds = Float(15.0, help="Lease duration (seconds).").tag(config=True)
    lease_renew_seconds = Float(5.0, help="Seconds between renewals.").tag(config=True)
    lease_retry_seconds = Float(2.0, help="Seconds between tries of a follower.").tag(config=True)

    identity = Unicode(help="This replica's name in the Lease. Default: hostname-pid.").tag(
        config=True
    )

    @default("identity")
    def _default_identity(self) -> str:
        return f"{socket.gethostname()}-{os.getpid()}"

    exit_on_leadership_lost = Bool(
        True,
        help="""On losing the Lease, send this process SIGTERM (the service shuts down and is
        restarted as a follower). Tests turn it off and watch ``leadership_lost``.""",
    ).tag(config=True)

    data_dir = Unicode("", help="Unused (the service passes it to every backend).").tag(config=True)

    @validate("namespace", "image", "lease_name")
    def _not_empty(self, proposal: Any) -> str:
        if not proposal.value:
            raise ValueError(f"KubernetesBackend.{proposal.trait.name} cannot be empty")
        return proposal.value

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kube: Kube | None = None
        self.nodes: Informer | None = None
        self.pods: Informer | None = None
        self.jobs: Informer | None = None
        self.foreign: Informer | None = None
        self.elector: LeaseElector | None = None
        self.leadership_lost = asyncio.Event()
        self._attempts: dict[str, _Attempt] = {}
        self._last_gc = 0.0
        self._exit_codes: dict[str, dict[str, int]] = {}
        self._reporting: set[str] = set()
        self._disrupted: dict[str, dict] = {}  # Job name -> a pod's DisruptionTarget condition
        self._tasks: set[asyncio.Task] = set()
        self._last_used: dict[tuple[str, int], float] = {}

    # --- connecting ---------------------------------------------------------------------------

    @property
    def settings(self) -> o.PodSettings:
        return o.PodSettings(
            namespace=self.namespace,
            image=self.image,
            sharing=self.sharing_mode,
            grace_seconds=self.termination_grace_seconds,
            service_account=self.service_account,
            priority_class=self.priority_class,
            scheduler_name=self.scheduler_name,
            home_mount_path=self.home_mount_path,
            volumes=tuple(self.home_volumes),
            volume_mounts=tuple(self.home_volume_mounts),
            node_label=self.node_label,
            extra_labels=dict(self.extra_labels),
            environment=dict(self.environment),
            ttl_seconds_after_finished=self.ttl_seconds_after_finished,
            rendezvous_port=self.rendezvous_port,
            reservation_image=self.reservation_image,
            reservation_command=tuple(self.reservation_command),
            reservation_priority_class=self.reservation_priority_class,
            tolerations=tuple(self.tolerations),
            runtime_class_name=self.runtime_class_name,
            hami_scheduler_name=self.hami_scheduler_name,
        )

    async def connect(self) -> None:
        """Credentials, the leader Lease (waits), then the first lists and the watches."""
        configuration = await load_configuration(self.kubeconfig)
        self.kube = Kube(configuration, request_timeout=self.request_timeout, log=self.log)
        if self.leader_election:
            self.elector = LeaseElector(
                self.kube,
                self.lease_namespace,
                self.lease_name,
                self.identity,
                lease_seconds=self.lease_seconds,
                renew_seconds=self.lease_renew_seconds,
                retry_seconds=self.lease_retry_seconds,
                on_lost=self._lost_lease,
                log=self.log,
            )
            await self.elector.acquire()
            self.elector.keep()
        kube = self.kube
        self.nodes = Informer(kube, kube.core.list_node, watch_timeout=self.watch_timeout)
        self.pods = Informer(
            kube,
            kube.core.list_namespaced_pod,
            self.namespace,
            label_selector=o.MANAGED_SELECTOR,
            watch_timeout=self.watch_timeout,
            on_change=self._pod_changed,
        )
        self.jobs = Informer(
            kube,
            kube.batch.list_namespaced_job,
            self.namespace,
            label_selector=o.MANAGED_SELECTOR,
            watch_timeout=self.watch_timeout,
        )
        for informer in (self.nodes, self.pods, self.jobs):
            await informer.start()
        if self.count_foreign_pods:
            foreign = Informer(
                kube,
                kube.core.list_pod_for_all_namespaces,
                label_selector=f"!{o.TRACKED}",
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

    def _pod_changed(self, kind: str, pod: dict) -> None:
        """Keep exit codes of job pods (a deleted pod leaves the cache with its code), and
        write the UUID a running reservation pod printed onto it (see reservation.py)."""
        if not pod:
            if kind == "RELISTED" and self.pods is not None:
                for cached in list(self.pods.objects.values()):
                    self._pod_changed("ADDED", cached)
            return
        meta = pod["metadata"]
        if (
            kind != "DELETED"
            and (meta.get("labels") or {}).get(o.COMPONENT) == o.RESERVATION
            and o.pod_phase(pod) == "Running"
            and not (meta.get("annotations") or {}).get(o.GPU_UUID)
            and meta["name"] not in self._reporting
        ):
            self._reporting.add(meta["name"])
            task = asyncio.get_running_loop().create_task(self._report_uuid(pod))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        owner, code = o.owner_job(pod), o.pod_exit_code(pod)
        disruption = o.pod_condition(pod, "DisruptionTarget")
        if owner is not None and disruption is not None:
            self._disrupted[owner] = disruption
        if owner is not None and code is not None:
            self._exit_codes.setdefault(owner, {})[pod["metadata"]["name"]] = code

    async def _report_uuid(self, pod: dict) -> None:
        name = pod["metadata"]["name"]
        try:
            for attempt in range(20):  # the line may come a moment after Running
                if self.kube is None or await report_uuid(self.kube, self.namespace, pod):
                    return
                await asyncio.sleep(min(0.1 * 2**attempt, 2.0))
            self.log.warning("reservation pod %s printed no GPU UUID", name)
        except KubeError as error:
            if error.status != 404:
                self.log.warning("reading the GPU UUID of %s failed: %s", name, error)
        finally:
            self._reporting.discard(name)

    def _lost_lease(self) -> None:
        self.leadership_lost.set()
        if self.exit_on_leadership_lost:
            self.log.critical("another scheduler holds the lease now: shutting down")
            os.kill(os.getpid(), signal.SIGTERM)

    def _require(self) -> tuple[Kube, Informer, Informer, Informer]:
        if self.kube is None or self.nodes is None or self.pods is None or self.jobs is None:
            raise RuntimeError("KubernetesBackend.connect() has not been awaited")
        return self.kube, self.nodes, self.pods, self.jobs

    # --- Backend protocol ---------------------------------------------------------------------

    def inventory(self) -> Inventory:
        """Ready GPU nodes from the Node cache; UUIDs of reserved GPUs from their pods."""
        _, nodes, _, _ = self._require()
        return o.inventory_from(
            list(nodes.objects.values()),
            self.reserved_uuids(),
            node_selector=self.node_selector,
            default_memory_mib=self.default_gpu_memory_mib,
            held=o.foreign_gpus(list(self.foreign.objects.values())) if self.foreign else None,
            sharing=self.sharing_mode,
        )

    def reserved_uuids(self) -> dict[tuple[str, int], str]:
        _, _, pods, _ = self._require()
        out = {}
        for pod in pods.objects.values():
            meta = pod["metadata"]
            annotations = meta.get("annotations") or {}
            labels = meta.get("labels") or {}
            if (
                labels.get(o.COMPONENT) == o.RESERVATION
                and annotations.get(o.GPU_UUID)
                and o.pod_phase(pod) == "Running"
                and not meta.get("deletionTimestamp")
            ):
                key = (annotations[o.NODE], int(annotations[o.GPU_INDEX]))
                out[key] = annotations[o.GPU_UUID]
        return out

    async def start(self, job: JobSpec) -> Handle:
        kube, _, _, _ = self._require()
        if len(job.placement) != job.replicas or not job.placement:
            raise BackendError(
                f"the placement has {len(job.placement)} replica(s) but the job asks for "
                f"{job.replicas}"
            )
        if (isinstance(job.command, str) and not job.command.strip()) or not job.command:
            raise BackendError("the command is empty")
        settings = self.settings
        base = o.attempt_name(job.workload_id, job.restart_count)
        existing = await self._existing(base)
        if existing and any(self._dead(j) for j in existing):
            await self._delete_attempt(base, [j["metadata"]["name"] for j in existing], base)
            base = f"{base}-{int(time.time() * 1000) % 100000}"
            existing = []
        claims = await self._check_home_claims(job)
        names = o.job_names(job.placement, base)
        gang = len(job.placement) > 1
        service = base if gang else None
        uuids = await self._reserve(job)
        await self._unreserve_whole(job)
        job = self._hami_share(job)
        envs = [self._environment(job, rank, uuids, base, service) for rank in range(job.replicas)]
        try:
            manifests = o.job_manifests(job, settings, envs, service, base, uuids)
        except ValueError as error:
            raise BackendError(str(error)) from error
        secret = credentials.secret_name(base) if job.credentials else None
        if secret:
            credentials.reference(manifests, secret, sorted(job.credentials))
        created: list[str] = []
        owners: list[dict] = []  # the Jobs as the API has them, for the Secret's owners
        admitted: set[str] = set()  # taken-over Jobs that run already: their template stays
        try:
            for manifest in manifests:
                name = manifest["metadata"]["name"]
                try:
                    owners.append(
                        await kube.call(kube.batch.create_namespaced_job, self.namespace, manifest)
                    )
                    created.append(name)
                except KubeError as error:
                    found = await self._same_attempt(name, job) if error.status == 409 else None
                    if found is None:
                        raise
                    self.log.info("job %s exists already (a retried start): taking it over", name)
                    owners.append(found)
                    if not found["spec"].get("suspend"):
                        # a started Job's pod template is immutable on a real server
                        admitted.add(name)
            if secret:
                await self._put_credentials(secret, job, base, owners)
            if service:
                try:
                    await kube.call(
                        kube.core.create_namespaced_service,
                        self.namespace,
                        o.service_manifest(job, settings, base),
                    )
                except KubeError as error:
                    if error.status != 409:
                        raise
            for name, ranks in zip(names, o.replica_groups(job.placement), strict=True):
                if name in admitted:
                    continue
                await kube.call(
                    kube.batch.patch_namespaced_job,
                    name,
                    self.namespace,
                    o.admit_patch(job.placement[ranks[0]].node, settings),
                    _content_type="application/merge-patch+json",
                )
        except (KubeError, asyncio.CancelledError) as error:
            with contextlib.suppress(KubeError):
                await self._delete_attempt(base, names, service)
            if isinstance(error, asyncio.CancelledError):
                raise
            raise BackendError(f"the cluster refused the job: {error.message}") from error
        attempt = _Attempt(
            job.workload_id,
            base,
            names,
            service,
            shares=o.parse_shares(o.shares_text(job.placement)),
            claims=claims,
        )
        self._attempts[base] = attempt
        return self._handle(attempt)

    async def stop(self, workload_id: int, handle: Handle, grace_seconds: float) -> None:
        """Suspend the attempt's Jobs; a grace shorter than the pods' deletes them with it."""
        kube, _, pods, _ = self._require()
        attempt = self._attempts.get(str(handle.get("attempt"))) or self._from_handle(
            workload_id, handle
        )
        if attempt is None:
            self.log.error("Cannot stop workload %s: malformed handle %r", workload_id, handle)
            return
        attempt.stopping = True
        patch = {"metadata": {"annotations": {o.STOPPED: utc_stamp()}}, "spec": {"suspend": True}}
        for name in attempt.jobs:
            try:
                await kube.call(
                    kube.batch.patch_namespaced_job,
                    name,
                    self.namespace,
                    patch,
                    _content_type="application/merge-patch+json",
                )
            except KubeError as error:
                if error.status not in (404, 422):
                    raise
        if grace_seconds < self.termination_grace_seconds:
            for pod in list(pods.objects.values()):
                if o.owner_job(pod) in attempt.jobs and o.pod_live(pod):
                    with contextlib.suppress(KubeError):
                        await kube.call(
                            kube.core.delete_namespaced_pod,
                            pod["metadata"]["name"],
                            self.namespace,
                            grace_period_seconds=max(int(grace_seconds), 0),
                        )

    def adopt(self, workload_id: int, handle: Handle) -> bool:
        """Watch an attempt a previous incarnation started; False when none of its Jobs is
        left (their end, if any, was not seen: the service requeues it)."""
        _, _, _, jobs = self._require()
        token = str(handle.get("attempt"))
        if token in self._attempts:
            return True
        attempt = self._from_handle(workload_id, handle)
        if attempt is None:
            self.log.error("Cannot adopt workload %s: malformed handle %r", workload_id, handle)
            return False
        present = [name for name in attempt.jobs if name in jobs.objects]
        if not present:
            self.log.warning("Workload %s: its jobs %s are gone", workload_id, attempt.jobs)
            return False
        attempt.seen = set(attempt.jobs)  # a job missing now is lost, not "not yet seen"
        attempt.stopping = any(
            o.STOPPED in (jobs.objects[n]["metadata"].get("annotations") or {}) for n in present
        )
        self._attempts[token] = attempt
        return True

    async def poll(self) -> list[Exit]:
        """Attempts that ended since the last call, each reported once (from the caches)."""
        _, _, pods, jobs = self._require()
        exits: list[Exit] = []
        by_job: dict[str, list[dict]] = {}
        for pod in pods.objects.values():
            owner = o.owner_job(pod)
            if owner is not None:
                by_job.setdefault(owner, []).append(pod)
        for token, attempt in list(self._attempts.items()):
            await self._check_stuck(attempt, [p for n in attempt.jobs for p in by_job.get(n, [])])
            outcome = self._outcome(attempt, jobs.objects, by_job)
            if outcome is None:
                continue
            code, message, needs_stop = outcome
            if attempt.stopping and not needs_stop and await self._pods_still_live(attempt):
                continue
            if needs_stop:
                self.log.info("Workload %s: %s; stopping the rest", attempt.workload_id, message)
                with contextlib.suppress(KubeError):
                    await self.stop(attempt.workload_id, self._handle(attempt), 0)
                continue
            del self._attempts[token]
            for name in attempt.jobs:
                self._exit_codes.pop(name, None)
                self._disrupted.pop(name, None)
            exits.append(Exit(attempt.workload_id, code, message))
            if attempt.stopping and (attempt.failure is None or attempt.stuck):
                with contextlib.suppress(KubeError):
                    await self._delete_attempt(token, attempt.jobs, attempt.service)
            elif attempt.service:
                with contextlib.suppress(KubeError):
                    await self._delete_attempt(token, [], attempt.service)
        await self._collect_reservations()
        return exits

    async def _pods_still_live(self, attempt: _Attempt) -> bool:
        """Whether a pod of the stopped ``attempt`` still runs, read through the API: the
        caches may not show its pods yet (a loaded watch, a stop right after the start), and
        a stop reported while they run would give their GPUs to the next job. One list per
        stopped attempt; when the API cannot answer, the caches' word stands."""
        kube, _, _, _ = self._require()
        try:
            body = await kube.call(
                kube.core.list_namespaced_pod,
                self.namespace,
                label_selector=f"{o.MANAGED_SELECTOR},{o.ATTEMPT_NAME}={attempt.name}",
            )
        except KubeError as error:
            self.log.warning("listing the pods of %s failed: %s", attempt.name, error)
            return False
        return any(o.pod_live(pod) for pod in body.get("items") or [])

    def log_path(self, workload_id: int, replica: int = 0) -> str | None:
        """Logs stay with the pods: ``read_log`` streams them through pods/log."""
        return None

    async def read_log(
        self, workload_id: int, replica: int = 0, *, tail: int = -1, follow: bool = False
    ) -> AsyncIterator[bytes]:
        """What replica ``replica`` of the workload's latest attempt printed, from its pod
        (pods/log): the last ``tail`` lines (all when negative), then, with ``follow``, what
        it prints until it ends. Nothing when no pod of it is left (finished Jobs keep
        theirs for ``ttl_seconds_after_finished``)."""
        kube, _, pods, _ = self._require()
        candidates = [
            pod
            for pod in pods.objects.values()
            if (pod["metadata"].get("labels") or {}).get(o.WORKLOAD) == str(workload_id)
            and (pod["metadata"].get("labels") or {}).get(o.COMPONENT) == o.TRAINING
            and o.pod_rank(pod) == replica
            and (pod.get("spec") or {}).get("nodeName")
        ]
        if not candidates:
            return
        pod = max(
            candidates,
            key=lambda p: (
                int((p["metadata"].get("labels") or {}).get(o.ATTEMPT, 0)),
                p["metadata"].get("creationTimestamp", ""),
            ),
        )
        options: dict[str, Any] = {"container": "job", "follow": follow}
        if tail >= 0:
            options["tail_lines"] = tail
        try:
            response = await kube.core.read_namespaced_pod_log(
                pod["metadata"]["name"],
                self.namespace,
                _preload_content=False,
                _request_timeout=None if follow else self.request_timeout,
                **options,
            )
        except Exception as error:  # ApiException, connection errors: no log to show
            self.log.warning("reading the log of %s failed: %s", pod["metadata"]["name"], error)
            return
        async with response:
            if response.status >= 300:
                return
            async for chunk in response.content.iter_any():
                yield chunk

    async def close(self) -> None:
        """Stop watching and give the Lease back; running jobs go on."""
        for task in list(self._tasks):
            task.cancel()
        for informer in (self.nodes, self.pods, self.jobs, self.foreign):
            if informer is not None:
                await informer.stop()
        if self.elector is not None:
            await self.elector.release()
        if self.kube is not None:
            await self.kube.close()
        self._attempts.clear()

    # --- helpers ------------------------------------------------------------------------------

    def attempts_in_cluster(self) -> dict[int, list[str]]:
        """Workload id -> names of its Jobs, from the cache (for operators and tests)."""
        _, _, _, jobs = self._require()
        out: dict[int, list[str]] = {}
        for name, job in sorted(jobs.objects.items()):
            labels = job["metadata"].get("labels") or {}
            if labels.get(o.COMPONENT) == o.TRAINING:
                out.setdefault(int(labels[o.WORKLOAD]), []).append(name)
        return out

    async def _existing(self, base: str) -> list[dict]:
        kube, _, _, _ = self._require()
        body = await kube.call(
            kube.batch.list_namespaced_job,
            self.namespace,
            label_selector=f"{o.MANAGED_SELECTOR},{o.ATTEMPT_NAME}={base}",
        )
        return list(body.get("items", []))

    @staticmethod
    def _dead(job: dict) -> bool:
        annotations = job["metadata"].get("annotations") or {}
        return (
            _condition(job, *COMPLETE, *FAILED) is not None
            or o.STOPPED in annotations
            or bool(job["metadata"].get("deletionTimestamp"))
        )

    async def _same_attempt(self, name: str, job: JobSpec) -> dict | None:
        """The existing Job ``name`` when it is a live Job of this workload, else None."""
        kube, _, _, _ = self._require()
        found = await kube.call(kube.batch.read_namespaced_job, name, self.namespace)
        labels = found["metadata"].get("labels") or {}
        if labels.get(o.WORKLOAD) == str(job.workload_id) and not self._dead(found):
            return found
        return None

    async def _put_credentials(
        self, name: str, job: JobSpec, base: str, owners: list[dict]
    ) -> None:
        """The attempt's Secret (``credentials.py``), before any of its pods exists; a retried
        start replaces the one its first try made (that try's token was never recorded)."""
        kube, _, _, _ = self._require()
        manifest = credentials.secret_manifest(name, job.workload_id, base, job.credentials, owners)
        try:
            await kube.call(kube.core.create_namespaced_secret, self.namespace, manifest)
        except KubeError as error:
            if error.status != 409:
                raise
            patch = {"metadata": {"ownerReferences": manifest["metadata"]["ownerReferences"]}}
            await kube.call(
                kube.core.patch_namespaced_secret,
                name,
                self.namespace,
                {**patch, "data": manifest["data"]},
                _content_type="application/merge-patch+json",
            )

    async def _delete_attempt(self, base: str, names: list[str], service: str | None) -> None:
        kube, _, _, _ = self._require()
        for name in names:
            try:
                await kube.call(
                    kube.batch.delete_namespaced_job,
                    name,
                    self.namespace,
                    propagation_policy="Background",
                )
            except KubeError as error:
                if error.status != 404:
                    raise
        if service:
            try:
                await kube.call(kube.core.delete_namespaced_service, service, self.namespace)
            except KubeError as error:
                if error.status != 404:
                    raise

    async def _check_home_claims(self, job: JobSpec) -> frozenset[str]:
        """A ReadWriteOnce claim (z2jh's default home) attaches to one node: a gang across
        nodes, or a job on another node than a pod already using the claim (or a live attempt
        of ours that mounts it, whose pods the watch may not have shown yet), would wait in
        ContainerCreating (Multi-Attach) forever. Refuse those starts with words instead.
        Returns the single-node claims the job mounts."""
        kube, _, _, _ = self._require()
        nodes = sorted({replica.node for replica in job.placement})
        users: list[dict] | None = None
        single: set[str] = set()
        for volume in o.format_template(list(self.home_volumes), **o.user_fields(job.user)):
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if not claim:
                continue
            try:
                pvc = await kube.call(
                    kube.core.read_namespaced_persistent_volume_claim, claim, self.namespace
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
                users = await self._namespace_pods()
            held = sorted(
                {
                    pod["spec"]["nodeName"]
                    for pod in users
                    if pod.get("spec", {}).get("nodeName")
                    and o.pod_live(pod)
                    and any(
                        (v.get("persistentVolumeClaim") or {}).get("claimName") == claim
                        for v in pod["spec"].get("volumes") or []
                    )
                }
                | {
                    node
                    for attempt in self._attempts.values()
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

    async def _namespace_pods(self) -> list[dict]:
        """Every pod of the namespace, FracHub's or not (a notebook from another spawner, a
        user's own pod may hold a ReadWriteOnce claim): the caches, or one list when pods
        FracHub did not create are not watched."""
        kube, _, pods, _ = self._require()
        mine = list(pods.objects.values())
        if self.foreign is not None:
            return mine + [
                pod
                for pod in self.foreign.objects.values()
                if pod["metadata"].get("namespace") == self.namespace
            ]
        try:
            body = await kube.call(kube.core.list_namespaced_pod, self.namespace)
        except KubeError as error:
            self.log.warning("listing the pods of %s failed: %s", self.namespace, error)
            return mine
        return list(body.get("items") or [])

    async def _reserve(self, job: JobSpec) -> dict[tuple[str, int], str]:
        """Reservation mode: the UUID of every GPU the job shares (reservation pods). HAMi
        mode: of every GPU it holds, as HAMi registered them (its pods name them)."""
        if self.sharing_mode == "hami":
            registered = {(gpu.node, gpu.index): gpu.uuid for gpu in self.inventory().gpus}
            wanted = {
                (replica.node, share.index) for replica in job.placement for share in replica.gpus
            }
            return {key: registered[key] for key in wanted if key in registered}
        kube, _, _, _ = self._require()
        wanted = sorted({(r.node, r.gpus[0].index) for r in job.placement if o.is_fractional(r)})
        uuids = {}
        for node, index in wanted:
            try:
                uuids[(node, index)] = await ensure_reservation(
                    kube, self.settings, node, index, self.reservation_timeout, scheduler=True
                )
            except ReservationTimeout as error:
                raise BackendError(str(error)) from error
            except KubeError as error:
                raise BackendError(f"cannot reserve GPU {index} on {node}: {error}") from error
        return uuids

    def _hami_share(self, job: JobSpec) -> JobSpec:
        """HAMi mode: a fraction's memory (``nvidia.com/gpumem`` and FRACHUB_GPU_MEMORY_MIB)
        from the memory HAMi registered for the node, rounded down: rounded to the nearest
        MiB, two halves of a GPU could ask one MiB more than HAMi has and the second would
        never be placed."""
        first = job.placement[0] if job.placement else None
        if self.sharing_mode != "hami" or first is None or not o.is_fractional(first):
            return job
        memory = {node.name: node.gpu_memory_mib for node in self.inventory().nodes}
        if first.node not in memory:
            return job
        share = o.share_memory_mib(first.gpus[0].milli, memory[first.node])
        return dataclasses.replace(job, gpu_memory_mib=share)

    async def _unreserve_whole(self, job: JobSpec) -> None:
        """Reservation mode: a lingering reservation pod (kept for a notebook that might
        spawn on it) still holds its device, so a GPU the engine now gives *whole* to this
        job would leave its pod waiting for a device until the linger ended. Delete the
        reservations of those GPUs that no live pod or attempt shares."""
        if self.sharing_mode != "reservation":
            return
        kube, _, pods, _ = self._require()
        whole = {
            (replica.node, share.index)
            for replica in job.placement
            if not o.is_fractional(replica)
            for share in replica.gpus
        }
        used = self._shares_in_use()
        for pod in list(pods.objects.values()):
            meta = pod["metadata"]
            labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
            key = (annotations.get(o.NODE, ""), int(annotations.get(o.GPU_INDEX, -1)))
            if (
                labels.get(o.COMPONENT) != o.RESERVATION
                or key not in whole
                or key in used
                or meta.get("deletionTimestamp")
            ):
                continue
            self.log.info(
                "workload %s takes GPU %s on %s whole: releasing its reservation %s",
                job.workload_id,
                key[1],
                key[0],
                meta["name"],
            )
            with contextlib.suppress(KubeError):
                await kube.call(
                    kube.core.delete_namespaced_pod,
                    meta["name"],
                    self.namespace,
                    grace_period_seconds=o.RESERVATION_GRACE,
                )

    def _shares_in_use(self) -> set[tuple[str, int]]:
        """(node, GPU index) of every share held by a running attempt or a live pod."""
        _, _, pods, _ = self._require()
        used: set[tuple[str, int]] = set()
        for attempt in self._attempts.values():
            used.update((node, index) for node, index, milli in attempt.shares if milli < 1000)
        for pod in pods.objects.values():
            meta = pod["metadata"]
            labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
            if (
                labels.get(o.COMPONENT) != o.RESERVATION
                and o.pod_live(pod)
                and not meta.get("deletionTimestamp")
            ):
                used.update(
                    (node, index)
                    for node, index, milli in o.parse_shares(annotations.get(o.SHARES, ""))
                    if milli < 1000
                )
        return used

    def _environment(
        self,
        job: JobSpec,
        rank: int,
        uuids: dict[tuple[str, int], str],
        base: str,
        service: str | None,
    ) -> dict[str, str]:
        """Settings' < the job's variables < HOME/USER < the contract. NVIDIA_VISIBLE_DEVICES
        is set only where FracHub picks the GPU (a reserved share); otherwise the device
        plugin (whole GPUs) or HAMi (hami mode) sets it. FRACHUB_GPU_UUIDS is set where the
        pod's GPU is known: a reserved share, a HAMi share (``nvidia.com/use-gpuuuid``).

        Gangs: every pod is its own torchrun "node". The device plugin and HAMi show a pod only
        the GPUs it was given, so two replicas on one node each see theirs as ``cuda:0``:
        ``LOCAL_RANK=0`` and ``LOCAL_WORLD_SIZE=1`` in every pod (``set_device(LOCAL_RANK)``
        is the pod's own GPU), with the gang's ``RANK``, ``WORLD_SIZE`` and ``MASTER_ADDR``, as
        Kubeflow's PyTorchJob sets them. Reserved shares are shown alone too, so a pod never
        sees a GPU that is not its own. NCCL tells the pods apart by hostname (they are
        different hosts to it), so no "duplicate GPU" error; replicas wanting NVLink between
        their GPUs ask for one replica with several GPUs and run torchrun inside it."""
        replica = job.placement[rank]
        home = self.home_mount_path.rstrip("/") or "/"
        master = o.master_address(job.placement, base, service) if service else ""
        reserved = o.is_fractional(replica) and self.sharing_mode == "reservation"
        known = reserved or (o.is_fractional(replica) and self.sharing_mode == "hami")
        place = rendezvous(job.placement, rank, master, self.rendezvous_port) if service else None
        if place is not None:
            place = dataclasses.replace(place, local_rank=0, local_world_size=1)
        contract = contract_env(
            workload_id=job.workload_id,
            replica=replica,
            gpu_fraction=job.gpu_fraction,
            gpu_memory_mib=job.gpu_memory_mib,
            restart_count=job.restart_count,
            checkpoint_dir=self.checkpoint_dir_template.format(
                home=home, workload_id=job.workload_id
            ),
            uuid_of=lambda node, index: uuids.get((node, index), ""),
            device_variable=NVIDIA_VISIBLE_DEVICES,
            rendezvous=place,
        )
        if not reserved:
            contract.pop(NVIDIA_VISIBLE_DEVICES, None)
        if not known:
            contract.pop("FRACHUB_GPU_UUIDS", None)
        env = dict(self.environment)
        env.update(job.env)
        env.update(HOME=home, USER=job.user, FRACHUB_PROJECT=job.project)
        env.update(contract)
        return env

    def _outcome(
        self, attempt: _Attempt, jobs: dict[str, dict], by_job: dict[str, list[dict]]
    ) -> tuple[int | None, str, bool] | None:
        """None while the attempt runs; else (code, message, needs_stop)."""
        pods = [pod for name in attempt.jobs for pod in by_job.get(name, [])]
        live = [pod for pod in pods if o.pod_live(pod)]
        for pod in pods:
            code = o.pod_exit_code(pod)
            if code is not None:
                attempt.last_codes[pod["metadata"]["name"]] = code
        for name in attempt.jobs:
            attempt.last_codes.update(self._exit_codes.get(name, {}))
        missing = []
        for name in attempt.jobs:
            if name in jobs:
                attempt.seen.add(name)
            elif name in attempt.seen:
                missing.append(name)
        if attempt.failure is None and not attempt.stopping:
            # a Job FracHub is stopping may fail because of the pods it deleted itself (the
            # Job controller counts them): that is the stop, not the workload's failure
            for name in attempt.jobs:
                job = jobs.get(name)
                failed = _condition(job, *FAILED) if job is not None else None
                if failed is not None:
                    attempt.failure = self._failure(attempt, name, by_job.get(name, []), failed)
                    break
        if attempt.failure is not None:
            if live:  # stop the rest, then wait for them to go
                return None if attempt.stopping else (None, attempt.failure[1], True)
            return (attempt.failure[0], attempt.failure[1], False)
        if attempt.stopping:
            suspended = all(
                name not in jobs or jobs[name]["spec"].get("suspend") or self._dead(jobs[name])
                for name in attempt.jobs
            )
            if live or not suspended:
                return None
            code = max(attempt.last_codes.values()) if attempt.last_codes else None
            if all(name in jobs and _condition(jobs[name], *COMPLETE) for name in attempt.jobs):
                return (0, "exited with code 0 before it was stopped", False)
            return (code, "stopped" + (f" (code {code})" if code is not None else ""), False)
        if missing:
            return (None, f"its job {missing[0]} was deleted", False)
        if all(name in jobs and _condition(jobs[name], *COMPLETE) for name in attempt.jobs):
            return (0, "exited with code 0", False)
        return None

    async def _check_stuck(self, attempt: _Attempt, pods: list[dict]) -> None:
        """End an attempt whose pod cannot start, in words, rather than let it wait forever
        (the service requeues it): a pod no node takes for ``unschedulable_timeout`` (the
        engine and the cluster disagree: GPUs held by others, HAMi's memory, a claim that
        does not exist), or one whose ReadWriteOnce volume stays attached to another node
        (Multi-Attach) for ``volume_attach_timeout``."""
        if attempt.failure is not None or attempt.stopping:
            return
        now = time.monotonic()
        for pod in pods:
            meta = pod["metadata"]
            name = meta["name"]
            if o.pod_phase(pod) != "Pending" or meta.get("deletionTimestamp"):
                attempt.pending_since.pop(name, None)
                continue
            since = attempt.pending_since.setdefault(name, now)
            scheduled = next(
                (
                    c
                    for c in (pod.get("status") or {}).get("conditions") or []
                    if c.get("type") == "PodScheduled"
                ),
                {},
            )
            node = (pod.get("spec") or {}).get("nodeName")
            if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
                if now - since >= self.unschedulable_timeout:
                    attempt.failure = (
                        None,
                        f"Kubernetes found no node for its pod {name} for "
                        f"{self.unschedulable_timeout:g} s: "
                        f"{scheduled.get('message') or 'unschedulable'}; requeued",
                    )
                    attempt.stuck = True
                    return
            elif node:
                await self._read_attach_error(attempt, pod, now)
                first, words = attempt.attach_error.get(name, (now, ""))
                if words and now - first >= self.volume_attach_timeout:
                    attempt.failure = (
                        None,
                        f"Kubernetes could not attach a volume to its pod {name} on {node} "
                        f"for {self.volume_attach_timeout:g} s: {words} (a ReadWriteOnce "
                        "volume is attached to one node at a time; give jobs ReadWriteMany "
                        "storage, KubernetesBackend.home_volumes); requeued",
                    )
                    attempt.stuck = True
                    return

    async def _read_attach_error(self, attempt: _Attempt, pod: dict, now: float) -> None:
        """Note in ``attempt.attach_error`` the attach/detach controller's Multi-Attach error
        about ``pod`` (from its events, read at most every few seconds), or forget it."""
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        if now - attempt.attach_checked.get(name, -1e9) < min(5.0, self.volume_attach_timeout / 2):
            return
        attempt.attach_checked[name] = now
        kube, _, _, _ = self._require()
        try:
            body = await kube.call(
                kube.core.list_namespaced_event,
                self.namespace,
                field_selector=f"involvedObject.uid={uid},reason=FailedAttachVolume",
            )
        except KubeError as error:
            self.log.warning("reading the events of pod %s failed: %s", name, error)
            return
        for event in body.get("items") or []:
            if "Multi-Attach" in (event.get("message") or ""):
                first = attempt.attach_error.get(name, (now, ""))[0]
                attempt.attach_error[name] = (first, str(event["message"]))
                return
        attempt.attach_error.pop(name, None)

    def _failure(
        self, attempt: _Attempt, job_name: str, pods: list[dict], condition: dict
    ) -> tuple[int | None, str]:
        """(exit code, words) of a failed Job: from its pods while they are there, else from
        the condition its podFailurePolicy gave it (a scheduler restarted after the pods
        went keeps the exit code; a disruption stays a disruption)."""
        failed = [
            pod
            for pod in pods
            if o.pod_phase(pod) == "Failed" and not pod["metadata"].get("deletionTimestamp")
        ]
        failed.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""))
        disruptions = [o.pod_condition(pod, "DisruptionTarget") for pod in pods]
        disruptions.append(self._disrupted.get(job_name))
        matched = POLICY_MATCH.search(condition.get("message") or "")
        if condition.get("reason") == "PodFailurePolicy" and matched and matched["condition"]:
            disruptions.append({"reason": matched["condition"], "message": ""})  # pod gone
        for disruption in disruptions:
            if disruption is not None:
                # evicted, drained, preempted by kube-scheduler, node gone: not the program's
                # failure; None makes the service requeue the workload in its place
                why = disruption.get("reason") or "DisruptionTarget"
                detail = disruption.get("message") or ""
                return None, f"its pod was disrupted ({why}{': ' + detail if detail else ''})"
        for pod in failed:
            code = o.pod_exit_code(pod)
            if code is not None:
                index = (pod["metadata"].get("labels") or {}).get(
                    "batch.kubernetes.io/job-completion-index", "0"
                )
                prefix = (
                    f"replica of {job_name} index {index} "
                    if len(attempt.jobs) > 1 or (attempt.service)
                    else ""
                )
                return code, f"{prefix}exited with code {code}"
        if condition.get("reason") == "PodFailurePolicy" and matched and matched["code"]:
            code = int(matched["code"])
            return code, f"exited with code {code}"
        return None, f"job {job_name} failed without an exit code (evicted or deleted)"

    async def _collect_reservations(self) -> None:
        """Delete reservation pods that no live FracHub pod or running attempt shares and
        that nobody claimed for ``reservation_linger_seconds``."""
        now = time.monotonic()
        if now - self._last_gc < min(5.0, self.reservation_linger_seconds / 4):
            return
        self._last_gc = now
        kube, _, pods, _ = self._require()
        used = self._shares_in_use()
        reservations = [
            pod
            for pod in pods.objects.values()
            if (pod["metadata"].get("labels") or {}).get(o.COMPONENT) == o.RESERVATION
        ]
        wall = time.time()
        for key in used:
            self._last_used[key] = wall
        for pod in reservations:
            annotations = pod["metadata"].get("annotations") or {}
            key = (annotations.get(o.NODE, ""), int(annotations.get(o.GPU_INDEX, -1)))
            if key in used:
                continue
            # a spawner finds a reservation without stamping it (z2jh's hub Role cannot
            # patch pods): keep it for the linger after its last use as well as its claim
            claimed = max(
                _parse_time(annotations.get(o.CLAIMED, "")) or 0.0, self._last_used.get(key, 0.0)
            )
            if wall - claimed < self.reservation_linger_seconds:
                continue
            self.log.info("releasing the unused reservation %s", pod["metadata"]["name"])
            with contextlib.suppress(KubeError):
                await kube.call(
                    kube.core.delete_namespaced_pod,
                    pod["metadata"]["name"],
                    self.namespace,
                    grace_period_seconds=o.RESERVATION_GRACE,
                )

    def _handle(self, attempt: _Attempt) -> Handle:
        return {
            "backend": HANDLE_KIND,
            "namespace": self.namespace,
            "workload_id": attempt.workload_id,
            "attempt": attempt.name,
            "jobs": list(attempt.jobs),
            "service": attempt.service,
            "shares": o.shares_text_raw(attempt.shares),
        }

    def _from_handle(self, workload_id: int, handle: Handle) -> _Attempt | None:
        try:
            if handle.get("backend") != HANDLE_KIND:
                return None
            jobs = [str(name) for name in handle["jobs"]]
            name = str(handle["attempt"])
            service = handle.get("service")
            shares = o.parse_shares(str(handle.get("shares") or ""))
        except (AttributeError, KeyError, TypeError, ValueError):
            return None
        if not jobs:
            return None
        return _Attempt(workload_id, name, jobs, str(service) if service else None, shares)


def _condition(job: dict, *kinds: str) -> dict | None:
    """The Job's first True condition of ``kinds``, or None."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in kinds and condition.get("status") == "True":
            return condition
    return None


def _own_namespace(fallback: str = "default") -> str:
    """The pod's namespace in a cluster (its service account's), else ``fallback``."""
    path = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    if os.path.exists(path):
        with open(path) as f:
            return f.read().strip() or fallback
    return fallback


def _parse_time(text: str) -> float | None:
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None
