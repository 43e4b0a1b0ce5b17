"""Can a request ever start here? Decided once, for jobs and notebooks alike, on the idle
cluster: the same nodes and quotas with no other work.

An edge that accepts work (the REST API; the spawn form's dry run) asks before storing it: a
request no amount of waiting can satisfy should be refused at once with the numbers, not sit
"pending" until someone gives up. Two rules, both the engine's own:

- a shape no GPU or node here can hold (the engine's "can never start" wording);
- for a job, the engine's own decision on the idle cluster: what does not start there never
  starts (a gang wider than the cluster, a GPU limit below the job, a non-preemptible job
  beyond its deserved quota); for a notebook, the rule notebooks live by: a non-preemptible
  one runs only inside the deserved quota of its project and of every department above it
  (docs/scheduling.md), while a preemptible one may borrow.

A cluster with no nodes (yet: a Kubernetes backend before its first node list) refuses
nothing; a cluster that may grow (an admin's setting) refuses no shape, and no job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from scheduler.common.quantities import milli_gpus
from scheduler.engine import reasons, resources
from scheduler.engine.cycle import decide
from scheduler.engine.model import (
    Kind,
    Node,
    Queue,
    Snapshot,
    Start,
    Workload,
    WorkloadRequest,
)
from scheduler.engine.placement import fits_somewhere_ever, scorer_named
from scheduler.engine.session import Policy, Session

_EPS = 1e-6


def never_starts(
    ask: WorkloadRequest,
    queues: Sequence[Queue],
    nodes: Sequence[Node],
    *,
    cluster_may_grow: bool = False,
) -> str | None:
    """Why ``ask`` (its project resolved) can never start on these nodes with these quotas,
    in the engine's words, or None. Depends only on ``shape(ask)``."""
    if not nodes:
        return None
    notebook = ask.kind is Kind.INTERACTIVE
    if cluster_may_grow and not notebook:
        return None
    workload = ask.workload("new", seq=0, submitted_at=0.0)
    session = _idle_cluster(queues, nodes)
    shapes = session.ledger.shapes_for(workload.request)
    if not cluster_may_grow and not fits_somewhere_ever(shapes, workload.request):
        what = "a notebook" if notebook else "a job"
        return f"{what} that {reasons.no_room(session, workload)}"
    if not cluster_may_grow and (never := reasons.host_never(session, workload.request)):
        return f"{'a notebook' if notebook else 'a job'} that {never}"
    if notebook:
        if ask.preemptible:
            return None
        return _beyond_deserved(session, workload) or _beyond_host_deserved(session, workload)
    result = decide(session.fork([workload], 0.0))
    if any(isinstance(d, Start) and d.workload == workload.name for d in result.decisions):
        return None
    pending = result.pending.get(workload.name)
    why = pending.reason if pending else "the scheduler does not start it"
    return f"a job that can never start here: even on the idle cluster it {_as_verb(why)}"


def shape(ask: WorkloadRequest) -> WorkloadRequest:
    """All that ``never_starts`` reads of a request, so that callers may remember its answers
    by it: who asked and the run-time limits do not change whether it can start."""
    return replace(ask, user=None, min_runtime=None, max_runtime=None, checkpoint_interval=None)


def _idle_cluster(queues: Sequence[Queue], nodes: Sequence[Node]) -> Session:
    snapshot = Snapshot(tuple(nodes), tuple(queues), ())
    return Session(snapshot, 0.0, Policy(scorer=scorer_named("pack")))


def _beyond_deserved(session: Session, workload: Workload) -> str | None:
    """A non-preemptible notebook larger than the smallest deserved quota above it."""
    project = workload.queue
    size = session.request_size(workload)
    cap, name = min((session.deserved[name], name) for name in session.ancestry[project])
    if size <= cap + _EPS:
        return None
    has = f"deserves {milli_gpus(cap)}" if cap > 0 else "deserves no GPUs"
    if name == project:
        return (
            f"{project} {has}; a notebook of {milli_gpus(size)} can never start: notebooks "
            "run only inside the project's deserved quota"
        )
    return (
        f"department {name} (above {project}) {has}; a notebook of {milli_gpus(size)} can "
        "never start: notebooks run only inside the deserved quota of their project and of "
        "every department above it"
    )


def _beyond_host_deserved(session: Session, workload: Workload) -> str | None:
    """A non-preemptible notebook asking for more CPUs (or memory) than the smallest deserved
    quota of them above it (rule 3b)."""
    project = workload.queue
    for resource in session.host:
        amount = resource.amount(workload.request)
        chain = session.ancestry[project]  # the nearest first, on a tie
        cap, _, name = min((resource.deserved[name], i, name) for i, name in enumerate(chain))
        if amount <= cap + _EPS:
            continue
        has = f"deserves {resources.words(resource.key, cap)}"
        what = f"a notebook of {resources.words(resource.key, amount)} can never start"
        if name == project:
            return (
                f"{project} {has}; {what}: notebooks run only inside the project's deserved quota"
            )
        return (
            f"department {name} (above {project}) {has}; {what}: notebooks run only inside "
            "the deserved quota of their project and of every department above it"
        )
    return None


def _as_verb(reason: str) -> str:
    """The engine's reasons start with a verb ("needs ...") or a subject ("vision is limited
    to ..."); after "it", the latter reads as a clause of its own."""
    return reason if reason.startswith("needs") else f"would wait: {reason}"
