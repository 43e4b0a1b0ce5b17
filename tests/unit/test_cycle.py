"""``run_cycle`` used directly, as the service will: decisions are data, nothing is applied."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.common.placement import GpuShare, ReplicaPlacement
from scheduler.engine import (
    Evict,
    EvictReason,
    Kind,
    Move,
    Node,
    Policy,
    Queue,
    Request,
    Snapshot,
    Start,
    State,
    Workload,
    reasons,
    run_cycle,
    scorer_named,
)

pytestmark = pytest.mark.unit

PACK = Policy(scorer=scorer_named("pack"))


def workload(
    name: str,
    queue: str = "lab",
    *,
    kind: Kind = Kind.TRAINING,
    gpus: float = 1,
    memory_gib: float | None = None,
    seq: int = 0,
    **fields,
) -> Workload:
    request = Request(
        gpus=0 if memory_gib else gpus,
        gpu_memory_mib=round(memory_gib * 1024) if memory_gib else None,
        replicas=fields.pop("replicas", 1),
    )
    preemptible = fields.pop("preemptible", kind is Kind.TRAINING)
    priority = fields.pop(
        "priority", {Kind.TRAINING: 50, Kind.INTERACTIVE: 100, Kind.INFERENCE: 125}[kind]
    )
    return Workload(
        name=name,
        queue=queue,
        kind=kind,
        request=request,
        priority=priority,
        preemptible=preemptible,
        submitted_at=fields.pop("submitted_at", 0.0),
        seq=seq,
        **fields,
    )


def running(name: str, node: str, gpu_shares: list[tuple[int, int]], **fields) -> Workload:
    placement = (ReplicaPlacement(node, tuple(GpuShare(i, m) for i, m in gpu_shares)),)
    gpus = gpu_shares[0][1] / 1000 if gpu_shares[0][1] < 1000 else len(gpu_shares)
    return workload(
        name,
        gpus=gpus,
        state=State.RUNNING,
        placement=placement,
        started_at=0.0,
        start_seq=fields.pop("start_seq", 1),
        **fields,
    )


def test_decisions_are_data_and_the_snapshot_is_untouched() -> None:
    snapshot = Snapshot(
        (Node("ws", 2),),
        (Queue("lab", deserved_gpus=2),),
        (workload("a", gpus=0.5), workload("b", gpus=2, seq=1)),
    )
    result = run_cycle(snapshot, 0.0, PACK)
    assert result.decisions == (Start("a", (ReplicaPlacement("ws", (GpuShare(0, 500),)),)),)
    assert snapshot.workloads[0].state is State.PENDING
    assert result.pending["b"].position == 1
    assert "needs 2 GPUs on one node" in result.pending["b"].reason


def test_memory_request_becomes_a_share_of_the_gpu_it_lands_on() -> None:
    snapshot = Snapshot(
        (Node("ws", 1, gpu_memory_mib=40 * 1024),),
        (Queue("lab", deserved_gpus=1),),
        (workload("m", memory_gib=10),),
    )
    (start,) = run_cycle(snapshot, 0.0, PACK).decisions
    assert start.placement[0].gpus == (GpuShare(0, 250),)


def test_memory_request_larger_than_any_gpu_can_never_start() -> None:
    snapshot = Snapshot(
        (Node("ws", 1, gpu_memory_mib=40 * 1024),),
        (Queue("lab", deserved_gpus=1),),
        (workload("m", memory_gib=48),),
    )
    result = run_cycle(snapshot, 0.0, PACK)
    assert result.decisions == ()
    assert "the largest GPU has 40 GiB, so it can never start" in result.pending["m"].reason


def test_running_work_on_a_vanished_node_is_evicted_as_node_lost() -> None:
    gone = running("g", "old", [(0, 1000)])
    snapshot = Snapshot((Node("ws", 1),), (Queue("lab", deserved_gpus=1),), (gone,))
    result = run_cycle(snapshot, 5.0, PACK)
    # started at 0, never saved: 5 s of one GPU lost
    assert result.decisions[0] == Evict(
        "g", EvictReason.NODE_LOST, lost_seconds=5.0, lost_gpu_seconds=5.0
    )
    assert isinstance(result.decisions[1], Start) and result.decisions[1].workload == "g"


def test_consolidation_is_a_move_decision_naming_its_claimant() -> None:
    snapshot = Snapshot(
        (Node("n0", 2), Node("n1", 2)),
        (Queue("lab", deserved_gpus=4),),
        (
            running("f1", "n0", [(0, 500)]),
            running("f2", "n1", [(0, 500)], kind=Kind.INTERACTIVE, start_seq=2),
            running("t1", "n1", [(1, 1000)], start_seq=3),
            workload("big", gpus=2, seq=9, submitted_at=5.0),
        ),
    )
    result = run_cycle(snapshot, 5.0, PACK)
    assert result.decisions == (
        Move(
            "f1",
            (ReplicaPlacement("n1", (GpuShare(0, 500),)),),
            claimant="big",
            lost_seconds=5.0,
            lost_gpu_seconds=2.5,
        ),
        Start("big", (ReplicaPlacement("n0", (GpuShare(0, 1000), GpuShare(1, 1000))),)),
    )


def test_without_consolidation_the_claim_waits() -> None:
    snapshot = Snapshot(
        (Node("n0", 2), Node("n1", 2)),
        (Queue("lab", deserved_gpus=4),),
        (
            running("f1", "n0", [(0, 500)]),
            running("f2", "n1", [(0, 500)], start_seq=2),
            running("t1", "n1", [(1, 1000)], start_seq=3),
            workload("big", gpus=2, seq=9),
        ),
    )
    policy = Policy(scorer=scorer_named("pack"), consolidate=False)
    result = run_cycle(snapshot, 5.0, policy)
    assert not any(isinstance(d, Move) for d in result.decisions)


def test_with_a_grace_period_the_claimant_is_reserved_not_started() -> None:
    snapshot = Snapshot(
        (Node("ws", 1),),
        (Queue("owner", deserved_gpus=1), Queue("borrower")),
        (
            running("b", "ws", [(0, 1000)], queue="borrower"),
            workload("nb", "owner", kind=Kind.INTERACTIVE, seq=2),
        ),
    )
    policy = Policy(scorer=scorer_named("pack"), immediate_evictions=False)
    result = run_cycle(snapshot, 1.0, policy)
    assert result.decisions == (
        Evict("b", EvictReason.RECLAIM, claimant="nb", lost_seconds=1.0, lost_gpu_seconds=1.0),
    )
    assert "as soon as" in result.pending["nb"].reason

    releasing = Snapshot(
        snapshot.nodes,
        snapshot.queues,
        (
            snapshot.workloads[0].__class__(
                **{**snapshot.workloads[0].__dict__, "state": State.RELEASING}
            ),
            snapshot.workloads[1],
        ),
    )
    again = run_cycle(releasing, 2.0, policy)
    assert again.decisions == (), "no second victim while the first is still leaving"
    assert "as soon as" in again.pending["nb"].reason


def test_next_wakeup_is_the_earliest_protection_end() -> None:
    snapshot = Snapshot(
        (Node("ws", 2),),
        (Queue("lab", deserved_gpus=2),),
        (
            running("a", "ws", [(0, 1000)], min_runtime=30),
            running("b", "ws", [(1, 1000)], min_runtime=90, start_seq=2),
        ),
    )
    assert run_cycle(snapshot, 10.0, PACK).next_wakeup == 30.0
    assert run_cycle(snapshot, 40.0, PACK).next_wakeup == 90.0
    assert run_cycle(snapshot, 95.0, PACK).next_wakeup is None


def test_spread_uses_the_quietest_gpu() -> None:
    snapshot = Snapshot(
        (Node("ws", 2),),
        (Queue("lab", deserved_gpus=2),),
        (running("a", "ws", [(0, 500)]), workload("b", gpus=0.25, seq=2)),
    )
    spread = run_cycle(snapshot, 0.0, Policy(scorer=scorer_named("spread"))).decisions
    pack = run_cycle(snapshot, 0.0, PACK).decisions
    assert spread[0].placement[0].gpus[0].index == 1
    assert pack[0].placement[0].gpus[0].index == 0


def test_unknown_scorer_lists_the_choices() -> None:
    with pytest.raises(ValueError, match="choose one of: frachub, pack, spread"):
        scorer_named("best")


def _busy_cluster() -> Snapshot:
    nodes = tuple(Node(f"n{i}", 4) for i in range(3))
    queues = (Queue("owner", deserved_gpus=4), Queue("borrower", deserved_gpus=2))
    work = []
    for i in range(12):
        node, gpu = f"n{i // 4}", i % 4
        work.append(running(f"b{i}", node, [(gpu, 1000)], queue="borrower", start_seq=i + 1, seq=i))
    return Snapshot(nodes, queues, tuple(work))


def test_a_fork_decides_like_a_fresh_session() -> None:

    from scheduler.engine import Session, decide

    standing_snapshot = _busy_cluster()
    standing = Session(standing_snapshot, 10.0, PACK)
    assert decide(standing).decisions == ()
    free_before = [list(gpus) for gpus in standing.ledger.free]
    arrival = workload("nb", "owner", kind=Kind.INTERACTIVE, gpus=1, seq=99, submitted_at=10.0)
    forked = decide(standing.fork([arrival], 10.0))
    fresh = run_cycle(
        replace(standing_snapshot, workloads=(*standing_snapshot.workloads, arrival)), 10.0, PACK
    )
    assert forked.decisions == fresh.decisions
    assert any(isinstance(d, Evict) for d in forked.decisions)
    assert forked.queues == fresh.queues
    assert [list(gpus) for gpus in standing.ledger.free] == free_before, "the fork is separate"


def test_forks_chain_through_their_own_decisions() -> None:

    from scheduler.engine import Session, decide

    snapshot = _busy_cluster()
    first = workload("nb1", "owner", kind=Kind.INTERACTIVE, gpus=1, seq=98, submitted_at=10.0)
    second = workload("nb2", "owner", kind=Kind.INTERACTIVE, gpus=1, seq=99, submitted_at=11.0)
    standing = Session(snapshot, 10.0, PACK)
    decide(standing)
    after_first = standing.fork([first], 10.0)
    decide(after_first)
    chained = decide(after_first.fork([second], 11.0))

    # the same history applied by a driver, then a fresh cycle
    once = run_cycle(replace(snapshot, workloads=(*snapshot.workloads, first)), 10.0, PACK)
    evicted = {d.workload for d in once.decisions if isinstance(d, Evict)}
    started = {d.workload: d.placement for d in once.decisions if isinstance(d, Start)}
    applied = []
    for w in (*snapshot.workloads, first):
        if w.name in evicted:
            applied.append(replace(w, state=State.PENDING, placement=(), started_at=None))
        elif w.name in started:
            applied.append(
                replace(
                    w,
                    state=State.RUNNING,
                    placement=started[w.name],
                    started_at=10.0,
                    start_seq=100,
                )
            )
        else:
            applied.append(w)
    fresh = run_cycle(replace(snapshot, workloads=(*applied, second)), 11.0, PACK)
    assert chained.decisions == fresh.decisions


def test_frachub_keeps_whole_nodes_whole_for_the_multi_gpu_work_it_expects() -> None:
    """0.75 of a GPU: on the half-used node it strands 0.5 GPU that quarter notebooks can
    still use; on the empty node it would break up two GPUs that 2-GPU jobs need."""
    snapshot = Snapshot(
        (Node("a", 2), Node("b", 2)),
        (Queue("lab", deserved_gpus=4),),
        (running("q", "a", [(0, 750)]), workload("new", gpus=0.75, seq=2)),
    )
    (start,) = run_cycle(snapshot, 0.0, Policy(scorer=scorer_named("frachub"))).decisions
    assert start.placement[0].node == "a"
    assert start.placement[0].gpus == (GpuShare(1, 750),)


def test_frag_counts_what_the_expected_shapes_cannot_use() -> None:
    from scheduler.engine.fragmentation import TaskShape, node_fragmentation

    quarter = TaskShape(cpu_milli=0, gpu_milli=250, num_gpu=1, probability=0.5)
    pair = TaskShape(cpu_milli=0, gpu_milli=1000, num_gpu=2, probability=0.5)
    assert node_fragmentation([1000, 1000], 0, 0, "", [quarter, pair]) == 0
    assert node_fragmentation([1000, 200], 0, 0, "", [quarter, pair]) == 0.5 * 200 + 0.5 * 1200


def test_work_at_risk_counts_from_the_latest_save() -> None:
    base = running("t", "ws", [(0, 1000), (1, 1000)])  # 2 GPUs, started at 0
    assert base.saved_at(100.0) == 0.0 and base.work_at_risk(100.0) == 200.0
    reported = replace(base, checkpointed_at=70.0)
    assert reported.saved_at(100.0) == 70.0 and reported.work_at_risk(100.0) == 60.0
    # a declared interval counts a save every interval after the latest known one
    assert replace(base, checkpoint_interval=30.0).saved_at(100.0) == 90.0
    assert replace(reported, checkpoint_interval=20.0).saved_at(100.0) == 90.0
    # a checkpoint from before this run (it was requeued since) saves nothing of it
    assert replace(base, started_at=50.0, checkpointed_at=40.0).saved_at(100.0) == 50.0


def test_eviction_in_words_names_claimant_and_lost_work() -> None:
    evict = Evict("t", EvictReason.PREEMPT, "nlp/notebook-carol", 720.0, 1440.0)
    assert reasons.evicted(evict) == (
        "preempted for nlp/notebook-carol (higher priority); 12 min of work lost (0.4 GPU-hours)"
    )
    move = Move("t", (), "big", 0.0, 0.0)
    assert reasons.evicted(move) == "moved to make room for big; no work lost"
    lost = Evict("t", EvictReason.NODE_LOST, None, 9000.0, 9000.0)
    assert reasons.evicted(lost) == "its node was lost; 2.5 h of work lost (2.5 GPU-hours)"


def test_a_borrower_does_not_evict_work_over_the_loss_bound_but_a_notebook_does() -> None:
    nodes = (Node("ws", 1),)
    queues = (Queue("owner", deserved_gpus=1), Queue("borrower"), Queue("third"))
    halves = (
        running("b1", "ws", [(0, 500)], queue="borrower"),
        running("b2", "ws", [(0, 500)], queue="borrower", start_seq=2),
    )
    # "third" deserves nothing: its claim is beyond quota (within its fair share of half the
    # GPU), so the bound applies to its victims
    claim = workload("t", "third", gpus=0.5, seq=3)
    policy = Policy(scorer=scorer_named("pack"), loss_bound=3600.0)
    early = run_cycle(Snapshot(nodes, queues, (*halves, claim)), 1800.0, policy)
    assert [type(d) for d in early.decisions] == [Evict, Start]
    assert early.decisions[0].lost_gpu_seconds == 900.0
    late = run_cycle(Snapshot(nodes, queues, (*halves, claim)), 10000.0, policy)
    assert late.decisions == () and "1 GPU-hour of unsaved work" in late.pending["t"].reason
    notebook = workload("nb", "owner", kind=Kind.INTERACTIVE, gpus=0.5, seq=4)
    owed = run_cycle(Snapshot(nodes, queues, (*halves, notebook)), 10000.0, policy)
    assert [type(d) for d in owed.decisions] == [Evict, Start]
    assert owed.decisions[0].lost_gpu_seconds == 5000.0


def test_the_result_names_the_work_beyond_its_projects_quota_latest_started_first() -> None:
    snapshot = Snapshot(
        (Node("ws", 4),),
        (Queue("a", deserved_gpus=1), Queue("b", deserved_gpus=2), Queue("c", deserved_gpus=1)),
        (
            running("early", "ws", [(0, 1000)], queue="a", start_seq=1),
            running("late", "ws", [(1, 1000)], queue="a", start_seq=3),
            running("kept", "ws", [(2, 1000)], queue="a", start_seq=2, preemptible=False),
            running("mine", "ws", [(3, 1000)], queue="b", start_seq=4),
        ),
    )
    result = run_cycle(snapshot, 0.0, PACK, report_borrowed=True)
    # a holds 3 GPUs on a 1-GPU quota; its non-preemptible work is never reclaimed, so of its
    # preemptible work, everything from the start that passes the quota on borrows
    words = (
        "a is using 3 GPUs, beyond its 1 GPU quota; may be preempted when b or c need their GPUs"
    )
    assert result.borrowed == {"early": words, "late": words}
    # a driver that does not show it does not pay for the walk
    assert run_cycle(snapshot, 0.0, PACK).borrowed == {}


def test_nothing_borrows_within_quota_and_a_lone_project_borrows_from_nobody_named() -> None:
    within = Snapshot(
        (Node("ws", 2),),
        (Queue("a", deserved_gpus=1), Queue("b", deserved_gpus=1)),
        (running("one", "ws", [(0, 1000)], queue="a"),),
    )
    assert run_cycle(within, 0.0, PACK, report_borrowed=True).borrowed == {}
    alone = Snapshot(
        (Node("ws", 2),),
        (Queue("a", deserved_gpus=1), Queue("b", deserved_gpus=0)),
        (
            running("one", "ws", [(0, 1000)], queue="a", start_seq=1),
            running("two", "ws", [(1, 1000)], queue="a", start_seq=2),
        ),
    )
    assert run_cycle(alone, 0.0, PACK, report_borrowed=True).borrowed == {
        "two": "a is using 2 GPUs, beyond its 1 GPU quota; "
        "may be preempted when another project needs its quota"
    }


def test_work_beyond_its_projects_cpu_quota_borrows_and_says_so() -> None:
    """Rule 3b: within its GPU quota but beyond its deserved CPUs, a project's latest
    preemptible work borrows CPUs, and the words say so in CPUs."""
    cpu = Request(gpus=1, cpu_milli=16_000)
    snapshot = Snapshot(
        (Node("ws", 4, cpu_milli=64_000),),
        (Queue("a", deserved_gpus=2, deserved_cpu_milli=16_000), Queue("b", deserved_gpus=2)),
        (
            replace(running("first", "ws", [(0, 1000)], queue="a", start_seq=1), request=cpu),
            replace(running("second", "ws", [(1, 1000)], queue="a", start_seq=2), request=cpu),
        ),
    )
    result = run_cycle(snapshot, 0.0, PACK, report_borrowed=True)
    assert result.borrowed == {
        "second": "a is using 32 CPUs, beyond its 16 CPUs quota; "
        "may be preempted when another project needs its quota"
    }
    standing = result.queues["a"].resources["cpu"]
    assert (standing.allocated, standing.deserved, standing.limit) == (32_000, 16_000, None)
    assert result.queues["b"].resources["cpu"].deserved is None  # no CPU quota: unlimited
