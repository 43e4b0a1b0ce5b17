"""Pending reasons in words a researcher understands.

Every refusal in the engine goes through one of these functions, so the wording
stays consistent and names the numbers that matter (the quota, the use, the
largest free spot) rather than an internal code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler.common.limits import MILLI
from scheduler.common.quantities import milli_gpus as gpus  # the engine counts in milli
from scheduler.engine import resources
from scheduler.engine.model import Evict, EvictReason, Kind, Move, Workload

if TYPE_CHECKING:
    from scheduler.engine.session import Session

_NOUNS = {
    Kind.INTERACTIVE: "notebooks",
    Kind.INFERENCE: "inference servers",
    Kind.TRAINING: "non-preemptible jobs",
}


def _queue_label(session: Session, name: str) -> str:
    return f"department {name}" if name in session.departments else name


def at_limit(session: Session, name: str, used: float, size: int) -> str:
    limit = (session.queues[name].limit_gpus or 0) * MILLI
    return (
        f"{_queue_label(session, name)} is limited to {gpus(limit)} and uses {gpus(used)}; "
        f"this needs {gpus(size)} more"
    )


def beyond_deserved(session: Session, name: str, workload: Workload, used: float, size: int) -> str:
    noun = _NOUNS[workload.kind]
    label = _queue_label(session, name)
    deserved = session.deserved[name]
    if used >= deserved:
        return (
            f"{label}'s {noun} already use its deserved {gpus(deserved)}; "
            "non-preemptible work cannot borrow beyond the quota"
        )
    return (
        f"{label}'s {noun} use {gpus(used)} of its deserved {gpus(deserved)}; "
        f"{gpus(size)} more would go beyond it"
    )


def at_host_limit(
    session: Session, key: str, name: str, used: float, amount: int, limit: float
) -> str:
    """A CPU or memory limit: "needs 8 CPUs; vision uses 30 of its 32-CPU limit"."""
    return (
        f"needs {resources.words(key, amount)}; {_queue_label(session, name)} uses "
        f"{resources.bare(key, used)} of its {resources.bare(key, limit)}-"
        f"{resources.label(key)} limit"
    )


def beyond_host_deserved(
    session: Session,
    key: str,
    name: str,
    workload: Workload,
    used: float,
    amount: int,
    deserved: float,
) -> str:
    """Non-preemptible work beyond a CPU or memory quota (rule 3b)."""
    return (
        f"needs {resources.words(key, amount)}; {_queue_label(session, name)}'s "
        f"{_NOUNS[workload.kind]} use {resources.bare(key, used)} of its deserved "
        f"{resources.words(key, deserved)}; non-preemptible work cannot borrow beyond the quota"
    )


def over_host_fair_share(session: Session, workload: Workload) -> str | None:
    """Why no reclaim: with it, its queue would be over its fair share of a CPU or memory
    (None when it would not)."""
    name = workload.queue
    for resource in session.host:
        amount = resource.amount(workload.request)
        used = resource.allocated[name]
        fair = resource.fair.get(name, 0.0)
        if used + amount > fair + 1e-6:
            words = resources.words
            return (
                f"; with it {name} would use {words(resource.key, used + amount)}, above its "
                f"fair share of {words(resource.key, fair)}, so nothing is reclaimed for it"
            )
    return None


def no_room(session: Session, workload: Workload) -> str:
    """Nothing fits now; says whether it ever could on this cluster."""
    request = workload.request
    if request.gpu_models:
        return _no_room_on_models(session, workload)
    ledger = session.ledger
    if request.gpu_memory_mib is not None:
        need = f"{request.gpu_memory_mib / 1024:g} GiB on one GPU"
        largest = max((memory for gpus, memory in ledger.shapes if gpus), default=0)
        if largest < request.gpu_memory_mib:
            return (
                f"needs {need}; the largest GPU has {largest / 1024:g} GiB, so it can never start"
            )
        free = ledger.most_free_on_one_gpu()
        where = f"the most free on any GPU is {free / MILLI:g} of a GPU"
        gpus_free = False  # its share depends on the GPU: the GPUs' words say enough
    elif request.whole_gpus:
        need = f"{request.whole_gpus} GPUs on one node" if request.whole_gpus > 1 else "1 GPU"
        largest = max((gpus for gpus, _memory in ledger.shapes), default=0)
        if largest < request.whole_gpus:
            return f"needs {need}; the largest node has {largest} GPUs, so it can never start"
        most = ledger.most_whole_free()
        where = (
            f"the most wholly free on any node is {most}"
            if most
            else "no node has a wholly free GPU"
        )
        gpus_free = most >= request.whole_gpus
    elif request.is_fraction:
        need = f"{request.gpus:g} of a GPU"
        if not any(gpus for gpus, _memory in ledger.shapes):
            return f"needs {need}; the cluster has no GPUs"
        most_free = ledger.most_free_on_one_gpu()
        where = f"the most free on any GPU is {most_free / MILLI:g} of a GPU"
        gpus_free = most_free >= round(request.gpus * MILLI)
    else:
        return _no_host_room(session, workload)
    one_account = _one_account(session, workload) if request.is_fraction else ""
    if one_account:
        where = one_account
    elif gpus_free and request.replicas == 1 and (request.cpu_milli or request.memory_mib):
        # the GPUs are there: what is missing is the CPUs or memory beside them
        host_need, host_most = _host_words(session, request)
        need = f"{need} with {host_need}"
        where = f"GPUs are free, but not beside {host_need}{host_most}"
    if request.replicas > 1:
        need = f"{request.replicas} replicas × {need}, all at once"
    return f"needs {need}; {where}"


def _one_account(session: Session, workload: Workload) -> str:
    """Where a share would fit but for another account's work on that GPU, on a node that
    serves one account per GPU (MPS with jobs run as their users); empty otherwise."""
    ledger = session.ledger
    if ledger.accounts is None or workload.user is None:
        return ""
    for (n, g), holders in sorted(ledger.accounts.items()):
        node = ledger.nodes[n]
        others = sorted(holder for holder in holders if holder != workload.user)
        if others and ledger.free[n][g] >= workload.request.milli_on(node.gpu_memory_mib):
            return (
                f"GPU {g} of node {node.name} runs MPS for {' and '.join(others)}'s "
                "workloads; MPS serves one account at a time"
            )
    return ""


def _host_words(session: Session, request) -> tuple[str, str]:
    """What a request asks of a node's CPUs and memory, and the most any node has free of
    each ("; the most free on any node is 2 CPUs"; empty when a node does not say)."""
    ledger = session.ledger
    need, most = [], []
    for key, amount, free in (
        (resources.CPU, request.cpu_milli, ledger.cpu_free),
        (resources.MEMORY, request.memory_mib, ledger.mem_free),
    ):
        if amount:
            need.append(resources.words(key, amount))
            known = [value for value in free if value is not None]
            if known and len(known) == len(free):
                most.append(resources.words(key, max(known)))
    suffix = f"; the most free on any node is {' and '.join(most)}" if most else ""
    return " and ".join(need), suffix


def _no_host_room(session: Session, workload: Workload) -> str:
    """A CPU-only request (no GPU) that no node has room for, in CPUs and memory."""
    request = workload.request
    if not (request.cpu_milli or request.memory_mib):
        return "needs CPU or memory that no node has free"
    never = host_never(session, request)
    if never is not None:
        return never
    need, most = _host_words(session, request)
    if request.replicas > 1:
        need = f"{request.replicas} replicas × {need}, all at once"
    return f"needs {need}{most or '; no node has it free'}"


def host_never(session: Session, request) -> str | None:
    """ "needs 40 CPUs; the largest node has 32 CPUs, so it can never start", when no node
    has as many CPUs (or as much memory) as one replica asks for; None otherwise."""
    ledger = session.ledger
    for key, amount, whole in (
        (resources.CPU, request.cpu_milli, "cpu_milli"),
        (resources.MEMORY, request.memory_mib, "memory_mib"),
    ):
        sizes = [getattr(node, whole) for node in ledger.nodes]
        if amount and sizes and None not in sizes and max(sizes) < amount:
            need, _most = _host_words(session, request)
            if request.whole_gpus or request.is_fraction:
                need = "GPUs with " + need
            largest = resources.words(key, max(sizes))
            return f"needs {need}; the largest node has {largest}, so it can never start"
    return None


def reserved() -> str:
    return "starting as soon as the workloads evicted for it release their GPUs"


def over_fair_share(session: Session, workload: Workload) -> str:
    name = workload.queue
    used = session.use.allocated[name]
    fair = session.fair.get(name, 0.0)
    share = f"its fair share of {gpus(fair)}{lowered_by_usage(session, name)}"
    if used >= fair:
        return f"; {name} already uses {share}, so nothing is reclaimed for it"
    after = used + session.request_size(workload)
    return (
        f"; with it {name} would use {gpus(after)}, above {share}, so nothing is reclaimed for it"
    )


def lowered_by_usage(session: Session, name: str) -> str:
    """ " (lowered from 4 GPUs by its recent use)" when usage-decayed fair share moved the
    queue's share down by a tenth of a GPU or more; else nothing."""
    if session.usage is None:
        return ""
    plain = session.fair_without_usage.get(name, 0.0)
    if plain - session.fair.get(name, 0.0) < 100:  # milli-GPUs
        return ""
    return f" (lowered from {gpus(plain)} by its recent use)"


def protected(session: Session, until: float) -> str:
    return (
        f"; the work that could make room is protected by min_runtime until "
        f"{session.policy.format_time(until)}"
    )


def over_loss_bound(bound: float, waited: bool = False) -> str:
    """``waited``: the bound is what an in-quota job has earned by waiting (its GPUs times
    the time since it was submitted), not the policy's."""
    if waited:
        return (
            f"; the work that could make room has more than {gpu_hours(bound)} of unsaved work, "
            "what this job inside its deserved quota has waited for so far (its GPUs times "
            "its wait); it may cost more as it waits longer"
        )
    return (
        f"; the work that could make room has more than {gpu_hours(bound)} of unsaved work, "
        "which only a notebook or work inside its deserved quota may cost"
    )


def gpu_hours(gpu_seconds: float) -> str:
    """3600 -> "1 GPU-hour", 5400 -> "1.5 GPU-hours"."""
    value = round(gpu_seconds / 3600, 2)
    if value == 0 and gpu_seconds > 0:
        return "under 0.01 GPU-hours"
    return f"{value:g} GPU-hour" if value == 1 else f"{value:g} GPU-hours"


def span(seconds: float) -> str:
    """45 -> "45 s", 720 -> "12 min", 9000 -> "2.5 h", 259200 -> "3 days"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h".replace(".0 h", " h")
    return f"{seconds / 86400:.1f} days".replace(".0 days", " days")


_EVICTED = {
    EvictReason.RECLAIM: "preempted for {claimant} (borrowed GPUs reclaimed)",
    EvictReason.PREEMPT: "preempted for {claimant} (higher priority)",
    EvictReason.CONSOLIDATE: "moved to make room for {claimant}",
    EvictReason.NODE_LOST: "its node was lost",
}


def evicted(decision: Evict | Move, claimant: str | None = None) -> str:
    """An eviction or move in words, with the work it destroyed: "preempted for
    nlp/notebook-carol; 12 min of work lost (0.2 GPU-hours)". ``claimant``
    names the claimant in words (the decision has only its engine name)."""
    reason = decision.reason if isinstance(decision, Evict) else EvictReason.CONSOLIDATE
    who = claimant or decision.claimant or "another workload"
    text = _EVICTED[reason].format(claimant=who)
    if decision.lost_seconds <= 0:
        return f"{text}; no work lost"
    return (
        f"{text}; {span(decision.lost_seconds)} of work lost "
        f"({gpu_hours(decision.lost_gpu_seconds)})"
    )


def _no_room_on_models(session: Session, workload: Workload) -> str:
    """Held for its GPU model: the numbers are those of the GPUs it may use, and it says so."""
    request = workload.request
    ledger = session.ledger
    models = " or ".join(sorted(request.gpu_models))
    held = f"waits for a GPU of model {models} (its gpu_model)"
    mine = [n for n, node in enumerate(ledger.nodes) if node.gpu_model in request.gpu_models]
    if not any(ledger.nodes[n].gpus for n in mine):
        have = ", ".join(sorted(ledger.models)) or "no GPUs"
        return (
            f"needs a GPU of model {models} (its gpu_model); this cluster has only {have}, "
            "so it can never start"
        )
    if request.whole_gpus:
        need = f"{request.whole_gpus} GPUs on one node" if request.whole_gpus > 1 else "1 GPU"
        most = max(ledger.whole_free[n] for n in mine)
        where = f"the most wholly free on any {models} node is {most}"
    elif request.is_fraction:
        need = (
            f"{request.gpu_memory_mib / 1024:g} GiB on one GPU"
            if request.gpu_memory_mib is not None
            else f"{request.gpus:g} of a GPU"
        )
        most = max(max(ledger.free[n], default=0) for n in mine)
        where = f"the most free on any {models} GPU is {most / MILLI:g} of a GPU"
    else:
        return f"{held}: no {models} node has the CPU or memory free"
    if request.replicas > 1:
        need = f"{request.replicas} replicas × {need}, all at once"
    elsewhere = "; other models do not count" if ledger.models - request.gpu_models else ""
    return f"{held}: needs {need}; {where}{elsewhere}"
