"""``FracKubeSpawner``: KubeSpawner with notebooks on a GPU share from FracHub.

KubeSpawner's ``profile_list`` in all its forms (list, dict, callable) works unchanged: the
mixin resolves the profile, its options and their ``kubespawner_override`` dicts with
KubeSpawner's own code (``spawner.profiles.KubeProfiles``), adds FracHub's GPU choices to
the same profiles, asks the service for the share before the pod is created and shows the
wait on the spawn page. ``load_user_options`` then applies those overrides with
KubeSpawner's own ``_apply_overrides``, where KubeSpawner applies them.

Once the share is granted, ``get_pod_manifest`` places the pod on it (and otherwise leaves
KubeSpawner's pod alone):

- the pod is pinned to the allocation's node by node affinity on the Node's *name*
  (``matchFields: metadata.name``, added to each of the profile's own required terms, so they
  still hold), as the backend pins jobs: the ``kubernetes.io/hostname`` label differs from
  the name on some clusters (hostname-override, FQDN node names). ``frachub_node_label``
  pins with a ``nodeSelector`` on that label instead;
- whole GPUs: ``extra_resource_limits`` ``nvidia.com/gpu: N`` (the device plugin picks them and
  sets ``NVIDIA_VISIBLE_DEVICES``);
- a fraction, ``frachub_sharing_mode = "reservation"``: the GPU's reservation pod is created or
  found (shared with the scheduler's backend, see scheduler/backends/kubernetes/reservation.py;
  only the verbs of z2jh's hub Role: the scheduler writes the UUID onto it), and the pod gets
  ``NVIDIA_VISIBLE_DEVICES`` of that UUID and no GPU request;
- ``"hami"``: the resources of ``gpus.gpu_resources`` (a fraction: ``nvidia.com/gpu: 1``
  and ``nvidia.com/gpumem: <MiB>`` rounded down; whole GPUs: 100 % memory and cores),
  ``schedulerName`` HAMi's (``frachub_hami_scheduler_name``) and ``nvidia.com/use-gpuuuid``
  the allocation's GPUs, so HAMi places the notebook on the GPU the scheduler chose;
- ``priority_class_name`` from ``frachub_priority_class``, and FracHub's labels and the
  ``frachub.io/gpu-shares`` annotation, so the scheduler knows which reservations are in use.
"""

from __future__ import annotations

import copy
from typing import Any

from jupyterhub.spawner import SpawnException
from kubernetes_asyncio.client.models import (
    V1Affinity,
    V1NodeAffinity,
    V1NodeSelector,
    V1NodeSelectorRequirement,
    V1NodeSelectorTerm,
)
from kubespawner import KubeSpawner
from traitlets import CaselessStrEnum, Float, List, Unicode

from scheduler.backends.kubernetes.client import Kube
from scheduler.backends.kubernetes.gpus import (
    GPU,
    GPUMEM,
    HAMI_SCHEDULER,
    SHARING_MODES,
    gpu_resources,
    hami_framework_caps,
    hami_pod_fields,
    is_fractional,
    shares_text,
)
from scheduler.backends.kubernetes.labels import SHARES, TRACKED, WORKLOAD
from scheduler.backends.kubernetes.pods import PodSettings
from scheduler.backends.kubernetes.reservation import (
    RESERVATION_SCRIPT,
    ReservationTimeout,
    ensure_reservation,
)
from scheduler.common.contract import NVIDIA_VISIBLE_DEVICES
from scheduler.common.placement import ReplicaPlacement, placement_from_api
from spawner.mixin import FracSpawnerMixin, allocation_share, notebook_contract


class FracKubeSpawner(FracSpawnerMixin, KubeSpawner):
    frachub_sharing_mode = CaselessStrEnum(
        list(SHARING_MODES),
        default_value="reservation",
        config=True,
        help="""How a notebook holds a fraction of a GPU; must match the scheduler's
        KubernetesBackend.sharing_mode ("reservation" or "hami", see docs/kubernetes.md).""",
    )
    frachub_node_label = Unicode(
        "",
        config=True,
        help="""Empty (default): the pod is pinned to its node by node affinity on the Node's
        name (matchFields metadata.name), as KubernetesBackend pins jobs. A label (e.g.
        kubernetes.io/hostname, where it equals the node name): a nodeSelector on it.""",
    )
    frachub_hami_scheduler_name = Unicode(
        HAMI_SCHEDULER,
        config=True,
        help="""hami mode: HAMi's schedulerName (as KubernetesBackend.hami_scheduler_name),
        set on notebook pods with a GPU.""",
    )
    frachub_priority_class = Unicode(
        "", config=True, help="priorityClassName of notebook pods (e.g. frachub-interactive)."
    )
    frachub_reservation_image = Unicode(
        "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
        config=True,
        help="Image of reservation pods (as KubernetesBackend.reservation_image).",
    )
    frachub_reservation_command = List(
        Unicode(),
        default_value=["/bin/sh", "-c", RESERVATION_SCRIPT],
        config=True,
        help="Command of reservation pods (as KubernetesBackend.reservation_command).",
    )
    frachub_reservation_timeout = Float(
        120.0, config=True, help="Seconds to wait for a reservation pod to report its GPU."
    )

    _frachub_reserved_uuid: str | None = None

    async def load_user_options(self) -> None:
        """KubeSpawner's overrides for what ``start()`` resolved: the same profile list (a
        callable is not called a second time), the profile FracHub chose (the default open
        to the user's groups when none is named), applied by KubeSpawner's own method."""
        selection = self.frachub_selected or await self.frachub_resolve()
        if selection.profile is not None:
            self.log.debug("Applying KubeSpawner override for profile %r", selection.profile.slug)
        for overrides in selection.overrides:
            self._apply_overrides(copy.deepcopy(dict(overrides)))
        self._frachub_default_resources()

    def _frachub_default_resources(self) -> None:
        """Where neither the profile nor this spawner's config sets the server's CPU or
        memory but its allocation was given some (the service's default for notebooks), the
        pod requests it (memory also as its limit, as a job's pod): what the scheduler
        counted is what the pod asks the cluster for. What is set stays as KubeSpawner's."""
        allocation = self.allocation or {}
        if allocation.get("cpu") and self.cpu_guarantee is None and self.cpu_limit is None:
            self.cpu_guarantee = float(allocation["cpu"])
        if allocation.get("memory_gib") and self.mem_guarantee is None and self.mem_limit is None:
            memory = round(allocation["memory_gib"] * 2**30)
            self.mem_guarantee = self.mem_limit = memory

    def _frachub_replica(self) -> ReplicaPlacement | None:
        if (
            self.allocation_id is None
            or not self.allocation
            or not self.allocation.get("placement")
        ):
            return None
        replica = placement_from_api(self.allocation["placement"][:1])[0]
        return replica if replica.gpus else None

    def frachub_env(self) -> dict[str, str]:
        env = super().frachub_env()
        replica = self._frachub_replica()
        if replica is None:
            env.pop("CUDA_VISIBLE_DEVICES", None)
            env[NVIDIA_VISIBLE_DEVICES] = "none"
            return env
        # containers name their GPUs by UUID for the NVIDIA runtime
        for key in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
            env.pop(key, None)
        assert self.allocation is not None
        env.update(
            notebook_contract(self.allocation, self.frachub_checkpoint_dir, NVIDIA_VISIBLE_DEVICES)
        )
        if is_fractional(replica) and self.frachub_sharing_mode == "reservation":
            uuid = self._frachub_reserved_uuid or ""
            env[NVIDIA_VISIBLE_DEVICES] = env["FRACHUB_GPU_UUIDS"] = uuid or "none"
            return env
        # the device plugin (whole GPUs) or HAMi sets the devices
        env.pop(NVIDIA_VISIBLE_DEVICES, None)
        if is_fractional(replica) and self.frachub_sharing_mode == "hami":
            # the GPU nvidia.com/use-gpuuuid names; the share is all the GPU JAX sees
            hami_framework_caps(env)
        else:
            env.pop("FRACHUB_GPU_UUIDS", None)
        return env

    def frachub_placement(self, replica: ReplicaPlacement | None) -> None:
        """Node selector, GPU resources, priority class and labels for this allocation."""
        limits = {k: v for k, v in self.extra_resource_limits.items() if k not in (GPU, GPUMEM)}
        selector = dict(self.node_selector)
        if self.frachub_node_label:
            selector.pop(self.frachub_node_label, None)
        if replica is not None:
            assert self.allocation is not None
            share = allocation_share(self.allocation)
            limits.update(gpu_resources(self.frachub_sharing_mode, replica, share))
            if self.frachub_node_label:
                selector[self.frachub_node_label] = replica.node
            self.extra_labels = {
                **self.extra_labels,
                TRACKED: "true",
                WORKLOAD: str(self.allocation_id),
            }
            self.extra_annotations = {
                **self.extra_annotations,
                SHARES: shares_text((replica,)),
            }
            if self.frachub_priority_class:
                self.priority_class_name = self.frachub_priority_class
        self.extra_resource_limits = limits
        self.node_selector = selector

    async def frachub_reserve(self, replica: ReplicaPlacement) -> str:
        settings = PodSettings(
            namespace=self.namespace,
            image=self.frachub_reservation_image,
            node_label=self.frachub_node_label,
            reservation_image=self.frachub_reservation_image,
            reservation_command=tuple(self.frachub_reservation_command),
            priority_class=self.frachub_priority_class,
            # the notebook's own: a GPU node tainted for notebooks is tainted for its GPU
            tolerations=tuple(self._sorted_dict_values(self.tolerations) or ()),
        )
        kube = Kube(api_client=self.api.api_client, log=self.log)
        self._frachub_note(f"Reserving GPU {replica.gpus[0].index} on {replica.node}", 45)
        try:
            return await ensure_reservation(
                kube,
                settings,
                replica.node,
                replica.gpus[0].index,
                self.frachub_reservation_timeout,
            )
        except ReservationTimeout as error:
            raise SpawnException(
                str(error), reason="frachub-reservation", status_code=503
            ) from error

    async def get_pod_manifest(self) -> Any:
        replica = self._frachub_replica()
        self._frachub_reserved_uuid = None
        if (
            replica is not None
            and is_fractional(replica)
            and self.frachub_sharing_mode == "reservation"
        ):
            self._frachub_reserved_uuid = await self.frachub_reserve(replica)
        self.frachub_placement(replica)
        pod = await super().get_pod_manifest()
        if replica is not None:
            if not self.frachub_node_label:
                pin_by_name(pod, replica.node)
            if self.frachub_sharing_mode == "hami":
                self._frachub_hami(pod, replica)
        return pod

    def _frachub_hami(self, pod: Any, replica: ReplicaPlacement) -> None:
        """HAMi's scheduler and the allocation's GPUs (``gpus.hami_pod_fields``)."""
        assert self.allocation is not None
        uuids = {
            (replica.node, gpu["index"]): gpu.get("uuid") or ""
            for gpu in self.allocation["placement"][0]["gpus"]
        }
        settings = PodSettings(
            namespace=self.namespace,
            image="",
            sharing="hami",
            hami_scheduler_name=self.frachub_hami_scheduler_name,
        )
        try:
            scheduler, annotations = hami_pod_fields(settings, [replica], uuids)
        except ValueError as error:
            raise SpawnException(str(error), reason="frachub-hami", status_code=503) from error
        pod.spec.scheduler_name = scheduler
        pod.metadata.annotations = {**(pod.metadata.annotations or {}), **annotations}


def pin_by_name(pod: Any, node: str) -> None:
    """Require ``node`` by name (``matchFields: metadata.name``) in a KubeSpawner V1Pod: a
    term of its own, or added to each required term the profile has (terms are ORed, a
    term's requirements ANDed, so every way onto a node still leads only to this one)."""
    field = V1NodeSelectorRequirement(key="metadata.name", operator="In", values=[node])
    spec = pod.spec
    spec.affinity = spec.affinity or V1Affinity()
    affinity = spec.affinity.node_affinity = spec.affinity.node_affinity or V1NodeAffinity()
    required = affinity.required_during_scheduling_ignored_during_execution
    if required is None or not required.node_selector_terms:
        required = V1NodeSelector(node_selector_terms=[V1NodeSelectorTerm()])
        affinity.required_during_scheduling_ignored_during_execution = required
    for term in required.node_selector_terms:
        term.match_fields = [*(term.match_fields or []), field]
