"""The four ways of sharing the cluster that the fleet simulation compares.

Every variant runs the same engine on the same arrivals; the baselines are expressed as
engine configuration and request transformations, not as separate schedulers:

==========  ===========================================================================
static      each project owns its quota as whole GPUs: ``limit_gpus = deserved_gpus``,
            fractions rounded up to a whole GPU, and every workload non-preemptible, so
            nothing is ever evicted (what plain Kubernetes namespaces with a GPU
            ResourceQuota give; notebooks still go ahead of their project's own queued
            training, as a PriorityClass that never preempts would do).
pool        one queue holding the whole cluster, fractions rounded up, everything
            non-preemptible and of equal priority: first come, first served (a workload
            that cannot start does not hold back smaller ones behind it).
reclaim     the projects' quotas with borrowing of idle GPUs and reclaim/preemption (the
            engine's rules 3 and 4, with the grace period), but whole GPUs only and no
            consolidation (what Kueue's cohorts with reclaimWithinCohort give).
frachub     FracHub as it ships: fractions, borrowing, fair share, reclaim, preemption
            and consolidation, with the grace period. The engine knows each job's
            checkpoint interval, chooses victims and movers by the work they would lose
            and keeps ``Policy.loss_bound``. A notebook that would wait at its project's
            quota is offered to start now as a preemptible one (``offers_preemptible``).
==========  ===========================================================================

The baselines are blind to checkpoints, as Kueue and KAI are: victims go lowest priority
first, then most recently started (``recent_first_victim_key``), with no loss bound.

``frachub-no-consolidation`` (not run unless asked for) is FracHub with
``Policy.consolidate`` off: a diagnosis of what consolidation costs in restarted work.

Why "non-preemptible" disables eviction: the engine only ever evicts preemptible work
(rule 4), so with none there are no victims, and no reclaim, preemption or
consolidation can happen, whatever the queues' shares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from scheduler.engine import Kind, Policy, Queue, Request, WorkloadRequest
from scheduler.engine.session import recent_first_victim_key
from scheduler.fleet.workload import Job
from scheduler.scenario.spec import WorkloadSpec

POOL = "pool"


@dataclass(frozen=True)
class Variant:
    name: str
    title: str
    whole_gpus: bool
    """Fractions are rounded up to one whole GPU."""
    shared_pool: bool
    """All projects submit to one queue that deserves the whole cluster."""
    hard_quotas: bool
    """A project never uses more than its deserved quota."""
    preemption: bool
    """Training is preemptible (reclaim, preemption, consolidation may evict it)."""
    consolidate: bool
    fifo: bool
    """Every workload has the same priority, so the queue serves them in submission order."""
    checkpoint_aware: bool = False
    """The engine is told each job's checkpoint interval and keeps its loss bound."""
    offers_preemptible: bool = False
    """A notebook that would wait at its project's quota is offered to start now as a
    preemptible notebook, as FracHub's spawn form offers it (``Job.takes_offer`` says who
    takes it)."""


VARIANTS = {
    variant.name: variant
    for variant in (
        Variant("static", "static quotas, whole GPUs", True, False, True, False, False, False),
        Variant("pool", "shared pool, FCFS", True, True, False, False, False, True),
        Variant("reclaim", "quotas + reclaim, whole GPUs", True, False, False, True, False, False),
        Variant(
            "frachub",
            "FracHub",
            False,
            False,
            False,
            True,
            True,
            False,
            checkpoint_aware=True,
            offers_preemptible=True,
        ),
        Variant(
            "frachub-no-consolidation",
            "FracHub, consolidation off",
            False,
            False,
            False,
            True,
            False,
            False,
            checkpoint_aware=True,
            offers_preemptible=True,
        ),
    )
}
DEFAULT_VARIANTS = ("static", "pool", "reclaim", "frachub")


def variant_queues(variant: Variant, queues: tuple[Queue, ...], capacity: int) -> tuple[Queue, ...]:
    """The engine's queues for this variant."""
    if variant.shared_pool:
        return (Queue(POOL, deserved_gpus=float(capacity)),)
    if variant.hard_quotas:
        return tuple(_hard(queue) for queue in queues)
    return queues


def _hard(queue: Queue) -> Queue:
    if queue.deserved_gpus is None:  # a department: its projects' limits bound it
        return queue
    limit = queue.deserved_gpus
    if queue.limit_gpus is not None:
        limit = min(limit, queue.limit_gpus)
    return replace(queue, limit_gpus=limit)


def variant_policy(variant: Variant, policy: Policy) -> Policy:
    """The engine's policy for this variant, from the one the scenario runner built."""
    if not variant.consolidate:
        policy = replace(policy, consolidate=False)
    if not variant.checkpoint_aware:
        policy = replace(policy, victim_key=recent_first_victim_key, loss_bound=None)
    return policy


def variant_gpus(variant: Variant, gpus: float) -> float:
    """Per-replica GPUs as this variant asks for them."""
    return float(math.ceil(gpus)) if variant.whole_gpus else gpus


def variant_spec(
    variant: Variant, job: Job, checkpointing: bool = True, *, preemptible_notebook: bool = False
) -> WorkloadSpec:
    """The engine's view of one arrival under this variant (duration set by the driver).
    ``checkpointing`` False is the run where no job saves its work; ``preemptible_notebook``
    a notebook started preemptible (its priority then the preemptible notebooks', 75)."""
    preemptible = (variant.preemption and job.kind is Kind.TRAINING) or preemptible_notebook
    return WorkloadSpec(
        name=job.name,
        ask=WorkloadRequest.of(
            job.kind,
            Request(gpus=variant_gpus(variant, job.gpus), replicas=job.replicas),
            preemptible=preemptible,
            priority=0 if variant.fifo else None,
            project=POOL if variant.shared_pool else job.project,
            min_runtime=0.0,
            checkpoint_interval=(
                job.checkpoint_seconds if checkpointing and variant.checkpoint_aware else None
            ),
        ),
        at=job.at,
        duration=job.duration,
        running=False,
        placement=None,
    )
