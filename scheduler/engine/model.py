"""The engine's vocabulary: frozen snapshots in, decisions out.

Everything here is plain data. GPU capacity is counted in *milli-GPUs* (1000 =
one whole GPU) so that shares such as 0.25 + 0.25 + 0.5 add up to exactly one
GPU with no floating-point drift; the edges convert to and from GPU units.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from enum import Enum

from scheduler.common.limits import MILLI
from scheduler.common.placement import Placement
from scheduler.engine.usage import Usage


class Kind(str, Enum):
    """What a workload is for; decides its default priority and preemptibility."""

    INTERACTIVE = "interactive"
    INFERENCE = "inference"
    TRAINING = "training"


DEFAULT_PRIORITY = {Kind.INFERENCE: 125, Kind.INTERACTIVE: 100, Kind.TRAINING: 50}
PREEMPTIBLE_INTERACTIVE_PRIORITY = 75
DEFAULT_PREEMPTIBLE = {Kind.INFERENCE: False, Kind.INTERACTIVE: False, Kind.TRAINING: True}


def default_priority(kind: Kind, preemptible: bool | None) -> int:
    """Rule 7's defaults; a notebook an admin made preemptible ranks below normal ones."""
    if kind is Kind.INTERACTIVE and preemptible:
        return PREEMPTIBLE_INTERACTIVE_PRIORITY
    return DEFAULT_PRIORITY[kind]


@dataclass(frozen=True)
class Node:
    """A machine with identical GPUs. ``cpu_milli``/``memory_mib`` of None mean "not tracked"."""

    name: str
    gpus: int
    gpu_memory_mib: int = 80 * 1024
    gpu_model: str = ""
    cpu_milli: int | None = None
    memory_mib: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    one_account_per_gpu: bool = False
    """Shares of one GPU may be held by one account's workloads at a time (``Workload.user``):
    NVIDIA MPS with each job running as its user serves one Linux account per GPU, and a
    second account's process waits until the first's have all ended. Whole GPUs are
    unaffected; so is work without a user."""


@dataclass(frozen=True)
class Queue:
    """A project (leaf) or department (has children); quotas in GPU units.

    A department whose ``deserved_gpus`` is None deserves what its children deserve together,
    so grouping projects under a department never silently takes their guarantees away.
    """

    name: str
    _: KW_ONLY
    parent: str | None = None
    deserved_gpus: float | None = None
    over_quota_weight: float = 1.0
    limit_gpus: float | None = None
    priority: int = 0
    deserved_cpu_milli: int | None = None
    """CPUs (milli-cores) the queue deserves; None: unlimited (KAI's default), or for a
    department its children's sum (docs/scheduling.md, rule 3b)."""
    limit_cpu_milli: int | None = None
    over_quota_weight_cpu: float | None = None
    """None: ``over_quota_weight``."""
    deserved_memory_mib: int | None = None
    limit_memory_mib: int | None = None
    over_quota_weight_memory: float | None = None

    @property
    def has_host_quota(self) -> bool:
        """Whether it sets a CPU or memory quota or limit (which makes the engine count them)."""
        return not (
            self.deserved_cpu_milli is None
            and self.limit_cpu_milli is None
            and self.deserved_memory_mib is None
            and self.limit_memory_mib is None
        )


def held_milli(placement: Placement) -> int:
    """The GPU capacity a placement holds, in milli-GPUs, over all its replicas."""
    return sum(share.milli for replica in placement for share in replica.gpus)


@dataclass(frozen=True)
class Request:
    """What one replica needs. Exactly one of ``gpus`` and ``gpu_memory_mib`` describes the GPU
    part: ``gpus`` is a fraction in (0, 1] or a whole number; ``gpu_memory_mib`` is memory on
    one GPU, turned into a share of whichever GPU it lands on.
    """

    gpus: float = 0.0
    gpu_memory_mib: int | None = None
    replicas: int = 1
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_models: frozenset[str] = frozenset()
    """GPU models the replicas may run on (any of them); empty means any model."""

    def allows(self, gpu_model: str) -> bool:
        """May a replica use a GPU of this model?"""
        return not self.gpu_models or gpu_model in self.gpu_models

    @property
    def whole_gpus(self) -> int:
        """GPUs per replica for a whole-GPU request, else 0."""
        if self.gpu_memory_mib is None and self.gpus >= 1:
            return int(self.gpus)
        return 0

    @property
    def is_fraction(self) -> bool:
        return self.gpu_memory_mib is not None or 0 < self.gpus < 1

    def milli_on(self, gpu_memory_mib: int) -> int:
        """The share of one GPU of this memory size that a fractional replica takes."""
        if self.gpu_memory_mib is not None:
            return -(-self.gpu_memory_mib * MILLI // gpu_memory_mib)
        return round(self.gpus * MILLI)


class State(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    RELEASING = "releasing"
    """Evicted, still holding its GPUs for the grace period; neither placeable nor a victim."""


@dataclass(frozen=True)
class Workload:
    """A unit of scheduling: a notebook, an inference server or a (gang of) training replica(s).

    ``seq`` is the submission order (ties on ``submitted_at`` go to the earlier one) and
    ``start_seq`` the order of the latest start, which victim selection needs ("most recently
    started first") even when several starts share one instant.
    """

    name: str
    queue: str
    kind: Kind
    request: Request
    priority: int
    preemptible: bool
    submitted_at: float
    seq: int
    min_runtime: float = 0.0
    user: str | None = None
    state: State = State.PENDING
    placement: Placement = ()
    started_at: float | None = None
    start_seq: int = 0
    checkpointed_at: float | None = None
    """When the job last reported a checkpoint (None: never, or not known)."""
    checkpoint_interval: float | None = None
    """Seconds between the job's checkpoints, as its submission declared them: the engine
    counts a save every interval after the latest known one (start or reported checkpoint)."""
    claimant: str | None = None
    """The workload its eviction made room for. While it releases: that workload alone may be
    placed on the capacity it still holds; everyone else sees it as taken. Once requeued and
    while that workload still waits: it yields to it, trying only after it in each cycle, so
    it does not take back the capacity it was evicted from (a reclaim ping-pong)."""

    def saved_at(self, now: float) -> float:
        """The last instant up to which this running work is saved: its start, its latest
        reported checkpoint, or the last declared interval after either."""
        base = self.started_at if self.started_at is not None else now
        if self.checkpointed_at is not None and base < self.checkpointed_at <= now:
            base = self.checkpointed_at
        interval = self.checkpoint_interval
        if interval is not None and interval > 0 and now > base:
            base += (now - base) // interval * interval
        return base

    def work_at_risk(self, now: float) -> float:
        """GPU-seconds an eviction now would destroy: its GPUs times the time since its last
        save. (Placed GPUs, so a memory request counts the share it holds.)"""
        return held_milli(self.placement) / MILLI * (now - self.saved_at(now))


@dataclass(frozen=True)
class WorkloadRequest:
    """What was asked for, once parsed: the one model of a request that every edge builds
    (the REST API for jobs and notebooks' allocations, scenario files, the fleet simulator)
    and the store maps to its columns. The engine's ``Workload`` is made from it by
    ``workload`` alone, so a field added here reaches the engine in one place.

    ``project`` and ``user`` may be None while the edge has not resolved them yet (a job
    submitted without a project goes to its submitter's only one); ``min_runtime`` None
    means the deployment's default.
    """

    kind: Kind
    request: Request
    """What each replica needs, and how many replicas."""
    priority: int
    preemptible: bool
    project: str | None = None
    user: str | None = None
    min_runtime: float | None = None
    """Seconds a start is protected from eviction (None: the deployment's default)."""
    max_runtime: float | None = None
    """Seconds after which the work is stopped (None: never)."""
    checkpoint_interval: float | None = None
    """Seconds between the job's checkpoints, as declared (None: not declared)."""

    @classmethod
    def of(
        cls,
        kind: Kind,
        request: Request,
        *,
        preemptible: bool | None = None,
        priority: int | None = None,
        project: str | None = None,
        user: str | None = None,
        min_runtime: float | None = None,
        max_runtime: float | None = None,
        checkpoint_interval: float | None = None,
    ) -> WorkloadRequest:
        """A request with rule 7's defaults for what was not asked: preemptible by kind,
        then the priority that goes with kind and preemptibility."""
        if preemptible is None:
            preemptible = DEFAULT_PREEMPTIBLE[kind]
        if priority is None:
            priority = default_priority(kind, preemptible)
        return cls(
            kind,
            request,
            priority,
            preemptible,
            project=project,
            user=user,
            min_runtime=min_runtime,
            max_runtime=max_runtime,
            checkpoint_interval=checkpoint_interval,
        )

    def workload(self, name: str, seq: int, submitted_at: float) -> Workload:
        """The engine's view of it, pending, as submitted at ``submitted_at`` in order ``seq``."""
        assert self.project is not None, "a workload goes to a project"
        return Workload(
            name=name,
            queue=self.project,
            kind=self.kind,
            request=self.request,
            priority=self.priority,
            preemptible=self.preemptible,
            submitted_at=submitted_at,
            seq=seq,
            min_runtime=0.0 if self.min_runtime is None else self.min_runtime,
            user=self.user,
            checkpoint_interval=self.checkpoint_interval,
        )


@dataclass(frozen=True)
class Snapshot:
    """Everything the engine knows at one instant. Order of ``nodes`` and ``queues`` matters:
    ties go to the one listed first."""

    nodes: tuple[Node, ...]
    queues: tuple[Queue, ...]
    workloads: tuple[Workload, ...]
    usage: Usage | None = None
    """The queues' decayed past use (usage-decayed fair share); None: fair share of the
    present alone."""


# --- decisions -------------------------------------------------------------------------------


class EvictReason(str, Enum):
    RECLAIM = "reclaim"
    PREEMPT = "preempt"
    CONSOLIDATE = "consolidate"
    NODE_LOST = "node-lost"


@dataclass(frozen=True)
class Start:
    """Start ``workload`` at ``placement`` (one entry per replica)."""

    workload: str
    placement: Placement


@dataclass(frozen=True)
class Evict:
    """Stop ``workload`` and requeue it; ``claimant`` is what the eviction makes room for.

    ``lost_seconds`` is the time since the workload's last save (``Workload.saved_at``) and
    ``lost_gpu_seconds`` that time its GPUs: the work the eviction destroys, for the event
    ("preempted for nlp/notebook-carol; 12 min of work lost")."""

    workload: str
    reason: EvictReason
    claimant: str | None = None
    lost_seconds: float = 0.0
    lost_gpu_seconds: float = 0.0


@dataclass(frozen=True)
class Move:
    """Consolidation: restart ``workload`` elsewhere so that ``claimant`` fits. A restart
    loses what an eviction would (``lost_seconds``, ``lost_gpu_seconds`` as in ``Evict``)."""

    workload: str
    placement: Placement
    claimant: str
    lost_seconds: float = 0.0
    lost_gpu_seconds: float = 0.0


Decision = Start | Evict | Move


@dataclass(frozen=True)
class Pending:
    """Why a workload is still waiting, in words a researcher understands, and where it stands."""

    reason: str
    position: int
    """1-based place among its queue's pending workloads, in the order they will be served."""


@dataclass(frozen=True)
class ResourceStatus:
    """A queue's standing in one host resource (milli-cores or MiB); ``deserved`` and
    ``limit`` None: unlimited."""

    allocated: int
    fair_share: float
    deserved: float | None
    limit: int | None


@dataclass(frozen=True)
class QueueStatus:
    allocated_gpus: float
    fair_share_gpus: float
    deserved_gpus: float
    running: int
    pending: int
    usage: float | None = None
    """Its decayed past use as a fraction of the cluster (None: usage-decayed fair share off)."""
    fair_share_without_usage_gpus: float | None = None
    """The fair share its weight alone would give (None: usage-decayed fair share off)."""
    resources: Mapping[str, ResourceStatus] = field(default_factory=dict)
    """``"cpu"``/``"memory"`` -> its standing, for the resources some queue has a quota for."""


@dataclass(frozen=True)
class CycleResult:
    decisions: tuple[Decision, ...]
    pending: Mapping[str, Pending]
    queues: Mapping[str, QueueStatus]
    next_wakeup: float | None
    """The earliest instant a min_runtime protection ends; the driver should run a cycle then."""
    borrowed: Mapping[str, str] = field(default_factory=dict)
    """Running work beyond its project's quota -> who may take its GPUs back, in words
    (``scheduler.engine.borrowing``); filled only when ``decide`` is asked to report it."""
