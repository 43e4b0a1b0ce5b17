"""The workload lifecycle on its own: each transition, its effects, and refusals that change
nothing (h11's "illegal transitions raise an error and nothing happens")."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from scheduler.common.placement import GpuShare, ReplicaPlacement
from scheduler.common.states import ACTIVE_STATES, FINAL_STATES, WorkloadState
from scheduler.engine import (
    CycleResult,
    Evict,
    EvictReason,
    Kind,
    Move,
    Node,
    Queue,
    Request,
    Start,
    State,
    Workload,
)
from scheduler.engine.lifecycle import (
    ALLOWED,
    Ended,
    Evicted,
    Freed,
    Launch,
    Life,
    Lifecycle,
    LifecycleError,
    Milestone,
    Note,
    Started,
    Stop,
    vocabulary,
)

pytestmark = pytest.mark.unit

S = WorkloadState
NODES = (Node("n", gpus=2),)
QUEUES = (Queue("a", deserved_gpus=1), Queue("b", deserved_gpus=1))
ONE = (ReplicaPlacement("n", (GpuShare(0, 1000),)),)
OTHER = (ReplicaPlacement("n", (GpuShare(1, 1000),)),)


def life(name: str, seq: int, *, queue: str = "a", **extra) -> Life:
    ask = Workload(
        name=name,
        queue=queue,
        kind=Kind.TRAINING,
        request=Request(gpus=1),
        priority=0,
        preemptible=True,
        submitted_at=float(seq),
        seq=seq,
    )
    return Life(ask, title=f"job-{name}", **extra)


def cycle(*decisions) -> CycleResult:
    return CycleResult(tuple(decisions), {}, {}, None)


@pytest.fixture
def lives() -> Lifecycle:
    lifecycle = Lifecycle(grace_seconds=30)
    lifecycle.submit(life("1", 1), 0)
    lifecycle.submit(life("2", 2, queue="b"), 0)
    lifecycle.submit(life("nb", 3, allocation=True), 0)
    return lifecycle


def state(lifecycle: Lifecycle) -> dict:
    return {name: copy.copy(vars(life)) for name, life in lifecycle.lives.items()}


def test_submit_says_where_and_start_launches_jobs_but_not_allocations() -> None:
    lifecycle = Lifecycle(grace_seconds=30)
    assert lifecycle.submit(life("1", 1), 0) == [Note("1", Milestone.SUBMITTED, "to project a")]
    assert lifecycle.submit(life("nb", 2, allocation=True), 0)
    effects = lifecycle.apply(cycle(Start("1", ONE), Start("nb", OTHER)), 5)
    assert effects == [Started("1", ONE), Launch("1"), Started("nb", OTHER)]
    one = lifecycle["1"]
    assert (one.state, one.placement, one.started_at, one.start_seq) == (S.RUNNING, ONE, 5, 1)
    assert lifecycle["nb"].start_seq == 2


def test_evicted_job_holds_its_gpus_for_the_grace_period_then_requeues_in_its_place(
    lives: Lifecycle,
) -> None:
    lives.apply(cycle(Start("1", ONE)), 0)
    effects = lives.apply(cycle(Evict("1", EvictReason.RECLAIM, "2", 600.0, 600.0)), 10)
    words = "preempted for b/job-2 (borrowed GPUs reclaimed); 10 min of work lost (0.17 GPU-hours)"
    assert effects == [
        Evicted("1", EvictReason.RECLAIM, "2", words),
        Note("1", S.PREEMPTING, f"{words}; grace period 30s"),
        Stop("1", 30),
    ]
    one = lives["1"]
    assert (one.state, one.claimant, one.stop_reason, one.preemptions) == (
        S.PREEMPTING,
        "2",
        "reclaim",
        1,
    )
    seen = {w.name: w for w in lives.snapshot(NODES, QUEUES).workloads}["1"]
    assert (seen.state, seen.placement, seen.claimant) == (State.RELEASING, ONE, "2")

    effects = lives.exited("1", 40, exit_code=143)
    assert effects == [
        Note("1", Milestone.REQUEUED, "back in its original place in the queue: #1 in a"),
        Freed("1"),
    ]
    # a restart is counted when it happens, not while it waits
    assert (one.state, one.placement, one.started_at, one.restart_count) == (S.PENDING, (), None, 0)
    seen = {w.name: w for w in lives.snapshot(NODES, QUEUES).workloads}["1"]
    # the same place in the queue, and it yields to the workload it made room for
    assert (seen.state, seen.seq, seen.submitted_at, seen.claimant) == (State.PENDING, 1, 1.0, "2")


def test_a_lost_node_requeues_at_once_and_stops_the_process_without_grace(
    lives: Lifecycle,
) -> None:
    lives.apply(cycle(Start("1", ONE)), 0)
    effects = lives.apply(cycle(Evict("1", EvictReason.NODE_LOST)), 10)
    assert effects == [
        Evicted("1", EvictReason.NODE_LOST, None, "its node was lost; no work lost"),
        Stop("1", 0.0),
        Note(
            "1",
            Milestone.REQUEUED,
            "its node is gone; back in its original place in the queue: #1 in a",
        ),
        Freed("1"),
    ]
    assert lives["1"].state is S.PENDING


def test_immediate_evictions_requeue_at_once_and_a_move_restarts_where_it_was_moved() -> None:
    lifecycle = Lifecycle(grace_seconds=0, immediate=True)
    lifecycle.submit(life("1", 1), 0)
    lifecycle.submit(life("2", 2), 0)
    lifecycle.apply(cycle(Start("1", ONE)), 0)
    effects = lifecycle.apply(cycle(Move("1", OTHER, "2")), 5)
    assert [type(effect) for effect in effects] == [Evicted, Stop, Note, Freed, Started, Launch]
    one = lifecycle["1"]
    assert (one.state, one.placement, one.started_at, one.claimant) == (S.RUNNING, OTHER, 5, None)


def test_an_evicted_allocation_is_revoked_and_a_cancelled_one_released(
    lives: Lifecycle,
) -> None:
    lives.apply(cycle(Start("nb", ONE), Start("2", OTHER)), 0)
    effects = lives.apply(cycle(Evict("nb", EvictReason.PREEMPT, "1")), 3)
    assert effects == [
        Evicted(
            "nb", EvictReason.PREEMPT, "1", "preempted for a/job-1 (higher priority); no work lost"
        ),
        Freed("nb"),
        Note("nb", S.REVOKED, "preempted for a/job-1 (higher priority); no work lost"),
        Ended("nb", S.REVOKED),
    ]
    assert lives.cancel("2", 4) == [
        Note("2", S.CANCELLING, "stopping at the request of its owner"),
        Stop("2", 30),
    ]
    allocation = Lifecycle(grace_seconds=30)
    allocation.submit(life("nb", 1, allocation=True), 0)
    allocation.apply(cycle(Start("nb", ONE)), 0)
    assert allocation.cancel("nb", 9)[-1] == Ended("nb", S.RELEASED)
    assert allocation["nb"].message == "released by its owner"


def test_cancelling_a_preempting_job_ends_it_cancelled_not_requeued(lives: Lifecycle) -> None:
    lives.apply(cycle(Start("1", ONE)), 0)
    lives.apply(cycle(Evict("1", EvictReason.RECLAIM, "2")), 1)
    assert lives.cancel("1", 2) == [
        Note("1", S.CANCELLING, "cancelled by its owner while preempted")
    ]  # its stop is already under way
    effects = lives.exited("1", 3, exit_code=143)
    assert effects[-1] == Ended("1", S.CANCELLED)
    one = lives["1"]
    assert (one.exit_code, one.message, one.claimant, one.finished_at) == (
        143,
        "cancelled by its owner",
        None,
        3,
    )


def test_max_runtime_stops_the_job_and_it_ends_failed() -> None:
    lifecycle = Lifecycle(grace_seconds=10)
    lifecycle.submit(life("1", 1, max_runtime=60), 0)
    lifecycle.apply(cycle(Start("1", ONE)), 0)
    assert lifecycle.stop_overdue(60) == []
    assert lifecycle.stop_overdue(61) == [
        Note("1", S.STOPPING, "reached its 1 min time limit"),
        Stop("1", 10),
    ]
    assert lifecycle.stop_overdue(62) == []  # already stopping
    lifecycle.exited("1", 70, exit_code=-15)
    assert (lifecycle["1"].state, lifecycle["1"].message) == (
        S.FAILED,
        "stopped: reached its 1 min time limit",
    )


def test_a_job_that_broke_an_enforced_rule_stops_and_fails_with_the_reason() -> None:
    """The memory watchdog's stop: its own grace period, its reason kept as the failure
    message (and its rule as ``stop_reason``); only a running job can be stopped so."""
    lifecycle = Lifecycle(grace_seconds=30)
    lifecycle.submit(life("1", 1), 0)
    with pytest.raises(LifecycleError, match="pending"):
        lifecycle.enforce("1", "memory", "uses too much", 5)
    lifecycle.apply(cycle(Start("1", ONE)), 0)
    why = "uses 52 GiB of its 35 GiB share of GPU 0 for more than 10s"
    assert lifecycle.enforce("1", "memory", why, 5) == [Note("1", S.STOPPING, why), Stop("1", 5)]
    assert lifecycle["1"].stop_reason == "memory"
    with pytest.raises(LifecycleError, match="stopping"):
        lifecycle.enforce("1", "memory", why, 5)
    lifecycle.exited("1", 7, exit_code=143)
    assert (lifecycle["1"].state, lifecycle["1"].message) == (S.FAILED, f"stopped: {why}")


@pytest.mark.parametrize(
    ("code", "message", "after", "words"),
    [
        (0, "", S.SUCCEEDED, "exit code 0"),
        (2, "", S.FAILED, "exited with code 2"),
        (None, "", S.PENDING, "its process vanished"),
    ],
)
def test_a_running_job_exits(
    lives: Lifecycle, code: int | None, message: str, after: WorkloadState, words: str
) -> None:
    lives.apply(cycle(Start("1", ONE)), 0)
    effects = lives.exited("1", 9, code, message)
    assert lives["1"].state is after
    assert words in [effect.message for effect in effects if isinstance(effect, Note)]
    assert Freed("1") in effects


def test_final_workloads_leave_the_snapshot_and_can_be_forgotten(lives: Lifecycle) -> None:
    lives.cancel("2", 1)
    assert [w.name for w in lives.snapshot(NODES, QUEUES).workloads] == ["1", "nb"]
    with pytest.raises(LifecycleError, match="can't forget workload 1 when it is pending"):
        lives.forget("1")
    lives.forget("2")
    assert lives.get("2") is None


def test_a_reported_checkpoint_reaches_the_engine_and_only_moves_forward(
    lives: Lifecycle,
) -> None:
    lives.apply(cycle(Start("1", ONE)), 0)
    assert lives.checkpointed("1", 70, 100)
    seen = {w.name: w for w in lives.snapshot(NODES, QUEUES).workloads}["1"]
    assert (seen.checkpointed_at, seen.work_at_risk(100)) == (70, 30)
    assert not lives.checkpointed("1", 60, 100)  # older than the one known: not news
    assert lives.checkpointed("1", 500, 100)  # never later than now
    assert lives["1"].checkpointed_at == 100
    # the next eviction says what it lost since that save
    effects = lives.apply(cycle(Evict("1", EvictReason.RECLAIM, "2", 20.0, 20.0)), 120)
    assert (
        effects[0].message == "preempted for b/job-2 (borrowed GPUs reclaimed); 20 s of work lost "
        "(0.01 GPU-hours)"
    )


def test_the_snapshot_is_in_submission_order_whatever_the_order_of_joining() -> None:
    lifecycle = Lifecycle(grace_seconds=0, immediate=True)
    lifecycle.submit(life("late", 2), 0)
    lifecycle.submit(life("early", 1), 0)
    assert [w.name for w in lifecycle.snapshot(NODES, QUEUES).workloads] == ["early", "late"]


@pytest.mark.parametrize(
    ("transition", "call"),
    [
        ("start", lambda lc: lc.start("1", ONE, 5)),
        ("evict", lambda lc: lc.evict("1", EvictReason.PREEMPT, None, 5)),
        ("cancel", lambda lc: lc.cancel("1", 5)),
        ("time_limit", lambda lc: lc.time_limit("1", 5)),
        ("exited", lambda lc: lc.exited("1", 5, 0)),
        ("launch_failed", lambda lc: lc.launch_failed("1", 5, "no")),
        ("not_launched", lambda lc: lc.not_launched("1", 5)),
        ("end", lambda lc: lc.end("1", 5, S.SUCCEEDED)),
        ("checkpointed", lambda lc: lc.checkpointed("1", 4, 5)),
    ],
)
@pytest.mark.parametrize("where", [S.PENDING, S.RUNNING, S.PREEMPTING, S.STOPPING, S.FAILED])
def test_illegal_transitions_raise_naming_state_and_event_and_change_nothing(
    transition: str, call, where: WorkloadState
) -> None:
    lifecycle = Lifecycle(grace_seconds=30)
    lifecycle.submit(life("1", 1, max_runtime=1), 0)
    lifecycle.submit(life("2", 2), 0)
    if where is not S.PENDING:
        lifecycle.start("1", ONE, 0)
    if where is S.PREEMPTING:
        lifecycle.evict("1", EvictReason.RECLAIM, "2", 1)
    elif where is S.STOPPING:
        lifecycle.time_limit("1", 2)
    elif where is S.FAILED:
        lifecycle.exited("1", 2, 1)
    if where in ALLOWED[transition]:
        call(lifecycle)  # allowed: the table and the transition agree
        return
    before, seq = state(lifecycle), lifecycle.start_seq
    with pytest.raises(LifecycleError, match=f"can't {transition} workload 1 when it is {where}"):
        call(lifecycle)
    assert state(lifecycle) == before
    assert lifecycle.start_seq == seq


def test_unknown_workloads_and_second_submissions_are_refused() -> None:
    lifecycle = Lifecycle(grace_seconds=30)
    lifecycle.submit(life("1", 1), 0)
    with pytest.raises(LifecycleError, match="it exists already"):
        lifecycle.submit(life("1", 1), 0)
    with pytest.raises(LifecycleError, match="can't cancel workload 9: there is no such"):
        lifecycle.cancel("9", 0)
    with pytest.raises(LifecycleError, match="not a final state"):
        lifecycle.end("1", 0, S.RUNNING)


def test_stale_decisions_are_skipped(lives: Lifecycle) -> None:
    """A cycle's decisions about workloads that moved on since its snapshot change nothing."""
    lives.cancel("1", 0)
    before = state(lives)
    assert lives.apply(cycle(Start("1", ONE), Evict("2", EvictReason.PREEMPT)), 1) == []
    assert lives.apply(cycle(Start("gone", ONE)), 1) == []
    assert state(lives) == before


def test_states_print_as_the_api_spells_them() -> None:
    assert f"{S.PREEMPTING}" == str(S.PREEMPTING) == "preempting"
    assert json.dumps({S.RUNNING: S.RUNNING}) == '{"running": "running"}'
    assert set(ACTIVE_STATES) | set(FINAL_STATES) == set(WorkloadState)
    assert not set(ACTIVE_STATES) & set(FINAL_STATES)


def test_the_api_document_lists_exactly_the_lifecycle_states() -> None:
    document = Path(__file__).parents[2] / "scheduler" / "service" / "openapi.json"
    schema = json.loads(document.read_text())["components"]["schemas"]["WorkloadState"]
    assert schema["enum"] == [state.value for state in WorkloadState]


def test_the_pages_get_the_states_and_their_groups() -> None:
    words = json.loads(json.dumps(vocabulary()))
    assert words["names"]["PENDING"] == "pending"
    assert words["active"] == [state.value for state in ACTIVE_STATES]
    assert words["cancellable"] == ["pending", "running", "preempting"]


def test_a_restart_is_counted_when_it_happens(lives: Lifecycle) -> None:
    lives.apply(cycle(Start("1", ONE)), 0)
    assert lives["1"].restart_count == 0
    lives.apply(cycle(Evict("1", EvictReason.RECLAIM, "2")), 10)
    lives.exited("1", 11, exit_code=143)
    assert lives["1"].restart_count == 0  # requeued: it has not restarted yet
    lives.apply(cycle(Start("1", ONE)), 20)
    assert lives["1"].restart_count == 1
    # a start the service never carried out (it stopped in between) is no restart
    lives.not_launched("1", 21)
    assert lives["1"].restart_count == 0
    lives.apply(cycle(Start("1", ONE)), 30)
    assert lives["1"].restart_count == 1


def test_a_first_start_never_launched_leaves_the_next_start_a_first_one(lives: Lifecycle) -> None:
    lives.apply(cycle(Start("1", ONE)), 0)
    lives.not_launched("1", 1)
    lives.apply(cycle(Start("1", ONE)), 2)
    assert lives["1"].restart_count == 0


def test_a_submission_the_store_refused_is_withdrawn_and_a_started_one_is_not(
    lives: Lifecycle,
) -> None:
    """The service withdraws a sweep whose commit failed, so nothing of it stays in memory;
    work that has started is past withdrawing."""
    lives.withdraw("2")
    assert "2" not in lives.lives and "1" in lives.lives
    lives.withdraw("2")  # already gone: nothing to do
    lives.apply(cycle(Start("1", ONE)), 0)
    with pytest.raises(LifecycleError, match="can't withdraw workload 1 when it is running"):
        lives.withdraw("1")
    assert lives["1"].state is S.RUNNING
