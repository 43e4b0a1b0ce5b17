"""Which running work borrows GPUs beyond its project's quota, and who may take them back.

A project using more than its deserved quota runs on GPUs another project may reclaim. The
work that borrows is its running preemptible work started last (reclaim takes the latest
started first): walking it in start order, each workload from the one that takes the
project past its quota on. The cycle reports it with its result (``CycleResult.borrowed``)
so that drivers show and note it without re-deriving the engine's accounting.
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.common.limits import MILLI
from scheduler.common.quantities import milli_gpus
from scheduler.engine import resources
from scheduler.engine.model import QueueStatus, Workload
from scheduler.engine.resources import UNLIMITED
from scheduler.engine.session import Session

EPSILON = 1e-9
"""GPUs: how far above a quota counts as above it (float sums of fractions)."""


def borrowed(session: Session, queues: Mapping[str, QueueStatus]) -> dict[str, str]:
    """Running preemptible work beyond its project's quota, in the order it started, each
    with who may take the GPUs back, in words. ``queues``: the cycle's queue status."""
    projects = [name for name in session.queues if name not in session.departments]
    over = {
        name
        for name in projects
        if (status := queues.get(name)) is not None
        and status.allocated_gpus > status.deserved_gpus + EPSILON
    }
    if not over:
        return _host_borrowed(session, projects) if session.host else {}
    runs: dict[str, list[Workload]] = {}
    for workload in session.running.values():
        if workload.queue in over and workload.preemptible:
            runs.setdefault(workload.queue, []).append(workload)
    found: dict[str, str] = {}
    for project in sorted(over):
        status = queues[project]
        running = sorted(runs.get(project, ()), key=lambda workload: workload.start_seq)
        sizes = [session.size(workload) / MILLI for workload in running]
        held = status.allocated_gpus - sum(sizes)
        lenders = [
            name
            for name in projects
            if name != project
            and (other := queues.get(name)) is not None
            and other.deserved_gpus > other.allocated_gpus + EPSILON
        ]
        words = _words(session, project, lenders)
        for workload, size in zip(running, sizes, strict=True):
            held += size
            if held > status.deserved_gpus + EPSILON:
                found[workload.name] = words
    if session.host:
        return {**_host_borrowed(session, projects), **found}  # GPUs' words first
    return found


def _host_borrowed(session: Session, projects: list[str]) -> dict[str, str]:
    """The same walk for the CPUs and memory counted by quota (rule 3b): running preemptible
    work from the one that takes its project past its deserved CPUs (or memory) on."""
    found: dict[str, str] = {}
    for resource in session.host:
        over = [
            name
            for name in projects
            if resource.allocated[name] > resource.deserved[name] + EPSILON
        ]
        for project in over:
            running = sorted(
                (w for w in session.running.values() if w.queue == project and w.preemptible),
                key=lambda workload: workload.start_seq,
            )
            amounts = [resource.amount(workload.request) for workload in running]
            held = resource.allocated[project] - sum(amounts)
            lenders = [
                name
                for name in projects
                if name != project
                and resource.deserved[name] != UNLIMITED
                and resource.deserved[name] > resource.allocated[name] + EPSILON
            ]
            who = " or ".join(lenders) or "another project"
            words = (
                f"{project} is using {resources.words(resource.key, resource.allocated[project])}"
                f", beyond its {resources.words(resource.key, resource.deserved[project])} "
                f"quota; may be preempted when {who} "
                f"{'needs its' if len(lenders) < 2 else 'need their'} quota"
            )
            for workload, amount in zip(running, amounts, strict=True):
                held += amount
                if held > resource.deserved[project] + EPSILON:
                    found.setdefault(workload.name, words)
    return found


def _words(session: Session, project: str, lenders: list[str]) -> str:
    if lenders:
        who = " or ".join(lenders)
        needs = "needs its" if len(lenders) == 1 else "need their"
        when = f"may be preempted when {who} {needs} GPUs"
    else:
        when = "may be preempted when another project needs its quota"
    using = milli_gpus(session.use.allocated[project])
    quota = milli_gpus(session.deserved[project])
    return f"{project} is using {using}, beyond its {quota} quota; {when}"
