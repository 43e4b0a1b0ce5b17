"""A node that serves one account per GPU (``Node.one_account_per_gpu``: NVIDIA MPS with jobs
run as their users): shares of one GPU go to one account's work at a time, through every
path that places work (allocation, gangs, preemption and reclaim), with the pending reason in
words; without the flag nothing changes."""

from __future__ import annotations

import pytest

from scheduler.engine import Evict, Node, Policy, Queue, Snapshot, Start, run_cycle, scorer_named
from tests.unit.test_cycle import running, workload

pytestmark = pytest.mark.unit

MPS = Node("ws1", 2, one_account_per_gpu=True)
SCORERS = ["pack", "spread", "frachub"]


def starts(result) -> dict[str, tuple[int, ...]]:
    return {
        d.workload: tuple(share.index for r in d.placement for share in r.gpus)
        for d in result.decisions
        if isinstance(d, Start)
    }


@pytest.mark.parametrize("scorer", SCORERS)
def test_a_share_goes_beside_its_own_account_never_another_s(scorer: str) -> None:
    policy = Policy(scorer=scorer_named(scorer))
    snapshot = Snapshot(
        (MPS,),
        (Queue("lab", deserved_gpus=2),),
        (
            running("a1", "ws1", [(0, 500)], user="alice"),
            workload("b1", gpus=0.25, seq=1, user="bob"),
            workload("a2", gpus=0.25, seq=2, user="alice"),
        ),
    )
    result = run_cycle(snapshot, 0.0, policy)
    assert starts(result) == {"b1": (1,), "a2": (0,)}


def test_without_the_flag_shares_mix_as_before() -> None:
    plain = Node("ws1", 2)
    snapshot = Snapshot(
        (plain,),
        (Queue("lab", deserved_gpus=2),),
        (
            running("a1", "ws1", [(0, 500)], user="alice"),
            workload("b1", gpus=0.25, seq=1, user="bob"),
        ),
    )
    assert starts(run_cycle(snapshot, 0.0, Policy(scorer=scorer_named("pack")))) == {"b1": (0,)}


def test_a_share_that_only_fits_beside_another_account_waits_saying_why() -> None:
    snapshot = Snapshot(
        (MPS,),
        (Queue("lab", deserved_gpus=2),),
        (
            running("a1", "ws1", [(0, 500)], user="alice"),
            running("c1", "ws1", [(1, 250)], user="carol", start_seq=2),
            workload("b1", gpus=0.5, seq=1, user="bob", preemptible=False),
        ),
    )
    result = run_cycle(snapshot, 0.0, Policy(scorer=scorer_named("pack")))
    assert result.decisions == ()
    assert result.pending["b1"].reason == (
        "needs 0.5 of a GPU; GPU 0 of node ws1 runs MPS for alice's workloads; "
        "MPS serves one account at a time"
    )


def test_whole_gpus_and_work_without_a_user_are_not_bound() -> None:
    snapshot = Snapshot(
        (MPS,),
        (Queue("lab", deserved_gpus=2),),
        (
            running("a1", "ws1", [(0, 500)], user="alice"),
            workload("b1", gpus=1, seq=1, user="bob"),
            workload("anon", gpus=0.5, seq=2),
        ),
    )
    assert starts(run_cycle(snapshot, 0.0, Policy(scorer=scorer_named("pack")))) == {
        "b1": (1,),
        "anon": (0,),
    }


def test_a_fractional_gang_of_one_account_spreads_only_over_gpus_it_may_use() -> None:
    snapshot = Snapshot(
        (Node("ws1", 3, one_account_per_gpu=True),),
        (Queue("lab", deserved_gpus=3),),
        (
            running("a1", "ws1", [(0, 250)], user="alice"),
            workload("gang", gpus=0.5, replicas=2, seq=1, user="bob"),
        ),
    )
    assert starts(run_cycle(snapshot, 0.0, Policy(scorer=scorer_named("pack")))) == {"gang": (1, 2)}


def test_reclaim_frees_a_gpu_of_every_other_account_s_share_or_none() -> None:
    """nlp claims its deserved GPU: vision borrows both GPUs. GPU 0 holds two shares of
    alice, GPU 1 one of alice and one of carol. Evicting one share anywhere would leave room
    for a 0.5 share by the numbers, but bob's notebook may go only where no other account
    stays: every holder of the GPU it takes is evicted."""
    snapshot = Snapshot(
        (MPS,),
        (Queue("vision", deserved_gpus=1), Queue("nlp", deserved_gpus=1)),
        (
            running("a1", "ws1", [(0, 500)], queue="vision", user="alice"),
            running("a2", "ws1", [(0, 500)], queue="vision", user="alice", start_seq=2),
            running("a3", "ws1", [(1, 500)], queue="vision", user="alice", start_seq=3),
            running("c1", "ws1", [(1, 500)], queue="vision", user="carol", start_seq=4),
            workload("b1", "nlp", gpus=0.5, seq=9, user="bob"),
        ),
    )
    result = run_cycle(snapshot, 0.0, Policy(scorer=scorer_named("pack")))
    evicted = {d.workload for d in result.decisions if isinstance(d, Evict)}
    gpu_of = {"a1": 0, "a2": 0, "a3": 1, "c1": 1}
    freed = {gpu_of[name] for name in evicted}
    assert len(freed) == 1, evicted
    (gpu,) = freed
    assert {name for name, g in gpu_of.items() if g == gpu} <= evicted  # all its holders
