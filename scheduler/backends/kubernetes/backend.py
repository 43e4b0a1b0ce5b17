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

This module holds the settings and that life; each part it leans on has its own module
(the package docstring lists them).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from traitlets import Bool, CaselessStrEnum, Dict, Float, Integer, List, Unicode, default, validate
from traitlets.config import LoggingConfigurable

from scheduler.backends.base import BackendError, Exit, Handle, Inventory, JobSpec
from scheduler.backends.kubernetes import credentials, logs, sharing, stopping, usage, volumes
from scheduler.backends.kubernetes.attempts import Attempt, AttemptBook, job_dead, outcome
from scheduler.backends.kubernetes.caches import Caches
from scheduler.backends.kubernetes.client import (
    CALLS_AT_ONCE,
    Kube,
    KubeError,
    load_configuration,
    own_namespace,
)
from scheduler.backends.kubernetes.gpus import (
    HAMI_SCHEDULER,
    SHARING_MODES,
    parse_shares,
    shares_text,
)
from scheduler.backends.kubernetes.inventory import (
    foreign_gpus,
    foreign_requests,
    inventory_from,
)
from scheduler.backends.kubernetes.jobs import (
    admit_patch,
    job_environment,
    job_manifests,
    job_names,
    replica_groups,
    service_manifest,
)
from scheduler.backends.kubernetes.labels import (
    ATTEMPT_NAME,
    MANAGED_SELECTOR,
    STOPPED,
    WORKLOAD,
    attempt_name,
    utc_stamp,
)
from scheduler.backends.kubernetes.leader import LeaseElector
from scheduler.backends.kubernetes.pods import (
    PodSettings,
    pod_live,
)
from scheduler.backends.kubernetes.reservation import (
    RESERVATION_SCRIPT,
    reserved_uuids,
)
from scheduler.backends.kubernetes.stuck import check_stuck
from scheduler.common.concurrency import side_by_side


class KubernetesBackend(usage.PrometheusUsage, LoggingConfigurable):
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
        return own_namespace()

    lease_namespace = Unicode(
        help="""Namespace of the leader Lease: where the scheduler's Role grants ``leases``
        (the chart's: the release namespace, which differs from ``namespace`` when jobs run
        elsewhere). Default: the pod's own namespace in a cluster ($POD_NAMESPACE or its
        service account's), else ``namespace``.""",
    ).tag(config=True)

    @default("lease_namespace")
    def _default_lease_namespace(self) -> str:
        return os.environ.get("POD_NAMESPACE") or own_namespace(self.namespace)

    sharing_mode = CaselessStrEnum(
        list(SHARING_MODES),
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
        default_value=["/bin/sh", "-c", RESERVATION_SCRIPT],
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
        HAMI_SCHEDULER,
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

    prometheus_url = Unicode(
        "",
        help="""A Prometheus that scrapes NVIDIA's DCGM exporter (with its pod mapping), e.g.
        http://prometheus-server.monitoring.svc: the memory watchdog reads each pod's GPU
        memory there (DCGM_FI_DEV_FB_USED). Empty: no watchdog on this backend.""",
    ).tag(config=True)

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
        self.caches: Caches | None = None
        self.elector: LeaseElector | None = None
        self.leadership_lost = asyncio.Event()
        self._book = AttemptBook()
        self._attempts: dict[str, Attempt] = self._book.attempts
        self._inventory: tuple[tuple, Inventory] | None = None
        """The last whole inventory, with what it was made from (``inventory``)."""
        self._reservations = sharing.ReservationCollector()
        self._pod_memory: usage.PodMemoryReader | None = None

    # --- connecting ---------------------------------------------------------------------------

    @property
    def settings(self) -> PodSettings:
        return PodSettings(
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
        self.caches = Caches(
            self.kube, self.namespace, watch_timeout=self.watch_timeout, log=self.log
        )
        await self.caches.start(self.count_foreign_pods)

    def _lost_lease(self) -> None:
        self.leadership_lost.set()
        if self.exit_on_leadership_lost:
            self.log.critical("another scheduler holds the lease now: shutting down")
            os.kill(os.getpid(), signal.SIGTERM)

    def _require(self) -> tuple[Kube, Caches]:
        if self.kube is None or self.caches is None:
            raise RuntimeError("KubernetesBackend.connect() has not been awaited")
        return self.kube, self.caches

    # --- Backend protocol ---------------------------------------------------------------------

    def inventory(self, only: Iterable[str] | None = None) -> Inventory:
        """Ready GPU nodes from the Node cache; UUIDs of reserved GPUs from their pods.
        ``only``: of these nodes alone (a start sizes its shares from its own nodes')."""
        _, caches = self._require()
        # made again only when what it is made from changed: every cycle asks for it, and
        # 500 nodes took ~1 ms each time (benchmarks/kai_scale.py)
        made_from = (
            id(caches),
            caches.nodes.generation,
            caches.reservations_generation,
            caches.foreign.generation if caches.foreign else None,
            tuple(sorted(self.node_selector.items())),
            self.default_gpu_memory_mib,
            self.sharing_mode,
        )
        if only is None and self._inventory is not None and self._inventory[0] == made_from:
            return self._inventory[1]
        foreign = list(caches.foreign.objects.values()) if caches.foreign else None
        nodes = caches.nodes.objects
        made = inventory_from(
            list(nodes.values()) if only is None else [nodes[n] for n in only if n in nodes],
            reserved_uuids(caches.reservation_pods()),
            node_selector=self.node_selector,
            default_memory_mib=self.default_gpu_memory_mib,
            held=foreign_gpus(foreign) if foreign is not None else None,
            sharing=self.sharing_mode,
            requested=foreign_requests(foreign) if foreign is not None else None,
        )
        if only is None:
            self._inventory = (made_from, made)
        return made

    async def start(self, job: JobSpec) -> Handle:
        _, caches = self._require()
        if len(job.placement) != job.replicas or not job.placement:
            raise BackendError(
                f"the placement has {len(job.placement)} replica(s) but the job asks for "
                f"{job.replicas}"
            )
        if (isinstance(job.command, str) and not job.command.strip()) or not job.command:
            raise BackendError("the command is empty")
        base = attempt_name(job.workload_id, job.restart_count)
        try:
            return await self._start(job, base, caches.attempt_jobs(base), listed=False)
        except _NameTaken:
            # a Job of that name that cannot be taken over (stopped or ended), which the
            # cache, behind the API, did not show so: as for one it shows, the attempt's
            # Jobs (as the API lists them) go and it takes a fresh name
            return await self._start(job, base, await self._existing(base), listed=True)

    async def _start(self, job: JobSpec, base: str, existing: list[dict], listed: bool) -> Handle:
        """``start`` with the attempt's Jobs already there (``existing``: from the cache, or
        ``listed`` through the API after a ``_NameTaken``). A name taken by a Job that cannot
        be taken over raises ``_NameTaken`` (after cleaning up) when ``existing`` came from
        the cache."""
        kube, caches = self._require()
        settings = self.settings
        if listed or (existing and any(job_dead(j) for j in existing)):
            await self._delete_attempt(base, [j["metadata"]["name"] for j in existing], base)
            base = f"{base}-{int(time.time() * 1000) % 100000}"
            existing = []
        claims = await volumes.check_home_claims(
            kube,
            self.namespace,
            job,
            list(self.home_volumes),
            self._attempts.values(),
            caches.pods.objects.values(),
            caches.foreign,
            self.log,
        )
        names = job_names(job.placement, base)
        gang = len(job.placement) > 1
        service = base if gang else None
        placed = {replica.node for replica in job.placement}
        uuids = await sharing.gpu_uuids(
            kube, settings, job, lambda: self.inventory(placed), self.reservation_timeout
        )
        await sharing.unreserve_whole(
            kube,
            settings,
            job,
            self._attempts.values(),
            caches.pods.objects.values(),
            caches.reservation_pods(),
            self.log,
        )
        shares = sharing.job_shares(job, self.inventory(placed), self.sharing_mode)
        checkpoints = self.checkpoint_dir_template
        envs = [
            job_environment(job, rank, shares[rank], settings, uuids, base, service, checkpoints)
            for rank in range(job.replicas)
        ]
        try:
            manifests = job_manifests(job, settings, envs, service, base, shares, uuids)
        except ValueError as error:
            raise BackendError(str(error)) from error
        secret = credentials.secret_name(base) if job.credentials else None
        if secret:
            credentials.reference(manifests, secret, sorted(job.credentials))
        owners: list[dict] = []  # the Jobs as the API has them, for the Secret's owners
        admitted: set[str] = set()  # taken-over Jobs that run already: their template stays

        async def create(manifest: dict) -> dict:
            name = manifest["metadata"]["name"]
            try:
                return await kube.call(kube.batch.create_namespaced_job, self.namespace, manifest)
            except KubeError as error:
                found = await self._same_attempt(name, job) if error.status == 409 else None
                if found is None:
                    if error.status == 409 and not listed:
                        raise _NameTaken(error.status, error.reason, error.message) from error
                    raise
                self.log.info("job %s exists already (a retried start): taking it over", name)
                if not found["spec"].get("suspend"):
                    # a started Job's pod template is immutable on a real server
                    admitted.add(name)
                return found

        try:
            owners.extend(await side_by_side(create, manifests, CALLS_AT_ONCE))
            if secret:
                await credentials.put_secret(kube, self.namespace, secret, job, base, owners)
            if service:
                try:
                    await kube.call(
                        kube.core.create_namespaced_service,
                        self.namespace,
                        service_manifest(job, settings, base),
                    )
                except KubeError as error:
                    if error.status != 409:
                        raise

            async def admit(name_ranks: tuple[str, list[int]]) -> dict:
                name, ranks = name_ranks
                return await kube.call(
                    kube.batch.patch_namespaced_job,
                    name,
                    self.namespace,
                    admit_patch(job.placement[ranks[0]].node, settings),
                    _content_type="application/merge-patch+json",
                )

            groups = zip(names, replica_groups(job.placement), strict=True)
            await side_by_side(admit, [g for g in groups if g[0] not in admitted], CALLS_AT_ONCE)
        except (KubeError, asyncio.CancelledError) as error:
            with contextlib.suppress(KubeError):
                await self._delete_attempt(base, names, service)
            if isinstance(error, asyncio.CancelledError | _NameTaken):
                raise
            raise BackendError(f"the cluster refused the job: {error.message}") from error
        attempt = Attempt(
            job.workload_id,
            base,
            names,
            service,
            shares=parse_shares(shares_text(job.placement)),
            claims=claims,
        )
        self._book.track(base, attempt)
        return attempt.handle(self.namespace)

    async def stop(self, workload_id: int, handle: Handle, grace_seconds: float) -> None:
        """Suspend the attempt's Jobs; a grace shorter than the pods' deletes them with it."""
        kube, caches = self._require()
        attempt = self._attempts.get(str(handle.get("attempt"))) or Attempt.from_handle(
            workload_id, handle
        )
        if attempt is None:
            self.log.error("Cannot stop workload %s: malformed handle %r", workload_id, handle)
            return
        attempt.stopping = True
        self._book.look_again(attempt.name)
        patch = {"metadata": {"annotations": {STOPPED: utc_stamp()}}, "spec": {"suspend": True}}
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
            by_job = caches.by_job()
            for pod in [pod for name in attempt.jobs for pod in by_job.get(name, [])]:
                if pod_live(pod):
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
        _, caches = self._require()
        jobs = caches.jobs
        token = str(handle.get("attempt"))
        if token in self._attempts:
            return True
        attempt = Attempt.from_handle(workload_id, handle)
        if attempt is None:
            self.log.error("Cannot adopt workload %s: malformed handle %r", workload_id, handle)
            return False
        present = [name for name in attempt.jobs if name in jobs.objects]
        if not present:
            self.log.warning("Workload %s: its jobs %s are gone", workload_id, attempt.jobs)
            return False
        attempt.seen = set(attempt.jobs)  # a job missing now is lost, not "not yet seen"
        attempt.stopping = any(
            STOPPED in (jobs.objects[n]["metadata"].get("annotations") or {}) for n in present
        )
        self._book.track(token, attempt)
        return True

    async def poll(self) -> list[Exit]:
        """Attempts that ended since the last call, each reported once (from the caches)."""
        kube, caches = self._require()
        exits: list[Exit] = []
        by_job = caches.by_job()
        changed, everything = caches.take_changed()
        try:
            await self._poll_attempts(kube, caches, by_job, changed, everything, exits)
        except BaseException:
            caches.mark_all_changed()  # what was taken is looked at again next time
            raise
        await self._reservations.collect(
            kube,
            self.namespace,
            self._attempts.values(),
            caches.pods.objects.values(),
            self.reservation_linger_seconds,
            self.log,
        )
        return exits

    async def _poll_attempts(
        self,
        kube: Kube,
        caches: Caches,
        by_job: Mapping[str, list[dict]],
        changed: set[str],
        everything: bool,
        exits: list[Exit],
    ) -> None:
        """``poll`` for the attempts whose Jobs or pods changed (``everything``: all), and
        those a timer or a stop keeps under watch (a pending pod, a stop, a failure, Jobs
        not seen yet): the others cannot have ended since the last poll."""
        confirm: list[tuple[str, Attempt, int | None, str]] = []
        ended_now: list[tuple[str, Attempt, int | None, str]] = []
        for token, attempt in self._book.to_look_at(changed, everything):
            await check_stuck(
                kube,
                self.namespace,
                attempt,
                [p for n in attempt.jobs for p in by_job.get(n, [])],
                unschedulable_timeout=self.unschedulable_timeout,
                volume_attach_timeout=self.volume_attach_timeout,
                log=self.log,
            )
            ended = outcome(
                attempt, caches.jobs.objects, by_job, caches.exit_codes, caches.disrupted
            )
            self._book.looked_at(token, attempt)
            if ended is None:
                continue
            code, message, needs_stop = ended
            if needs_stop:
                self.log.info("Workload %s: %s; stopping the rest", attempt.workload_id, message)
                with contextlib.suppress(KubeError):
                    await self.stop(attempt.workload_id, attempt.handle(self.namespace), 0)
            elif attempt.stopping:
                confirm.append((token, attempt, code, message))
            else:
                ended_now.append((token, attempt, code, message))
        # a stopped attempt ends when no pod of it is left, read through the API (stopping.py)
        live = await stopping.live_attempts(
            kube, self.namespace, [attempt.name for _, attempt, _, _ in confirm], self.log
        )
        ended_now += [item for item in confirm if item[1].name not in live]
        deletions: list[tuple[list[str], str | None]] = []
        for token, attempt, code, message in ended_now:
            self._book.untrack(token)
            caches.forget(attempt.jobs)
            exits.append(Exit(attempt.workload_id, code, message))
            if attempt.stopping and (attempt.failure is None or attempt.stuck):
                deletions.append((attempt.jobs, attempt.service))
            elif attempt.service:
                deletions.append(([], attempt.service))
        await stopping.delete_attempts(kube, self.namespace, deletions)

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
        kube, caches = self._require()
        pod = logs.replica_pod(caches.pods.objects.values(), workload_id, replica)
        if pod is None:
            return
        async for chunk in logs.read_log(
            kube,
            self.namespace,
            pod,
            tail=tail,
            follow=follow,
            request_timeout=self.request_timeout,
            log=self.log,
        ):
            yield chunk

    async def close(self) -> None:
        """Stop watching and give the Lease back; running jobs go on."""
        self._inventory = None
        if self.caches is not None:
            await self.caches.stop()
        if self.elector is not None:
            await self.elector.release()
        if self.kube is not None:
            await self.kube.close()
        self._book.clear()

    # --- helpers ------------------------------------------------------------------------------

    def attempts_in_cluster(self) -> dict[int, list[str]]:
        """Workload id -> names of its Jobs, from the cache (for operators and tests)."""
        return self._require()[1].training_jobs()

    async def _existing(self, base: str) -> list[dict]:
        """The Jobs of attempt ``base`` as the API lists them (not the cache)."""
        kube, _ = self._require()
        body = await kube.call(
            kube.batch.list_namespaced_job,
            self.namespace,
            label_selector=f"{MANAGED_SELECTOR},{ATTEMPT_NAME}={base}",
        )
        return list(body.get("items", []))

    async def _same_attempt(self, name: str, job: JobSpec) -> dict | None:
        """The existing Job ``name`` when it is a live Job of this workload, else None."""
        kube, _ = self._require()
        found = await kube.call(kube.batch.read_namespaced_job, name, self.namespace)
        labels = found["metadata"].get("labels") or {}
        if labels.get(WORKLOAD) == str(job.workload_id) and not job_dead(found):
            return found
        return None

    async def _delete_attempt(self, base: str, names: list[str], service: str | None) -> None:
        await stopping.delete_attempt(self._require()[0], self.namespace, names, service)


class _NameTaken(KubeError):
    """A Job name of the attempt is taken by one the cache did not show (see ``start``)."""
