"""Each policy's choice on tiny clusters where the right node is known by hand."""

from __future__ import annotations

import random

import numpy as np
import pytest

from scheduler.openb.cluster import ClusterState, Request, request_key
from scheduler.openb.policies import POLICIES, pick_best
from scheduler.openb.trace import Node, Pod

pytestmark = pytest.mark.simulator


def node(
    name: str, gpus: int = 2, cpu: int = 64_000, mem: int = 262_144, model: str = "T4"
) -> Node:
    return Node(name, cpu, mem, gpus, model)


def pod(
    milli: int, num: int = 1, cpu: int = 1000, mem: int = 1024, spec: frozenset[str] = frozenset()
) -> Pod:
    return Pod(f"p-{milli}-{num}-{cpu}", cpu, mem, num, milli if num else 0, spec)


def setup(nodes, workload_pods, busy=(), ranks=None, policy="fgd"):
    """Cluster of ``nodes`` with ``busy`` = [(node index, pod, gpu)] already placed."""
    state = ClusterState(nodes)
    reqs: dict = {}
    for p in [*workload_pods, *(b[1] for b in busy)]:
        reqs.setdefault(request_key(p), Request(len(reqs), *request_key(p)))
    for n, p, gpu in busy:
        state.place(n, reqs[request_key(p)], gpu)
    rank = np.array(ranks if ranks is not None else range(len(nodes)), dtype=np.int64)
    chosen = POLICIES[policy](
        state, rank, random.Random(0), list(reqs.values()), list(workload_pods)
    )
    return state, reqs, chosen


def decide(state, reqs, chosen, p):
    req = reqs[request_key(p)]
    return chosen.choose(req, state.feasible(req))


def test_pick_best_breaks_ties_by_rank_not_index():
    scores = np.array([1.0, 0.0, 0.0, 0.0])
    feasible = np.array([True, True, True, False])
    assert pick_best(scores, feasible, np.array([0, 3, 1, 2])) == 2
    assert pick_best(scores, np.zeros(4, dtype=bool), np.arange(4)) == -1


@pytest.mark.parametrize("policy", list(POLICIES))
def test_every_policy_takes_the_best_ranked_of_identical_nodes(policy):
    nodes = [node("a"), node("b"), node("c")]
    p = pod(1000)
    state, reqs, chosen = setup(nodes, [p], ranks=[2, 0, 1], policy=policy)
    if policy == "random":
        assert decide(state, reqs, chosen, p)[0] in (0, 1, 2)
    else:
        assert decide(state, reqs, chosen, p) == (1, 0)


@pytest.mark.parametrize("policy", list(POLICIES))
def test_every_policy_refuses_when_nothing_fits(policy):
    nodes = [node("a", cpu=2000)]
    p = pod(500, cpu=4000)
    state, reqs, chosen = setup(nodes, [p], policy=policy)
    assert decide(state, reqs, chosen, p)[0] == -1


@pytest.mark.parametrize("policy", list(POLICIES))
def test_every_policy_respects_the_gpu_model(policy):
    nodes = [node("a", model="T4"), node("b", model="V100M16"), node("c", model="T4")]
    p = pod(1000, spec=frozenset({"V100M16", "G2"}))
    state, reqs, chosen = setup(nodes, [p], policy=policy)
    assert decide(state, reqs, chosen, p)[0] == 1


def test_bestfit_prefers_the_fuller_node():
    # Node b already runs one whole GPU: after placement it has less left.
    p = pod(1000)
    state, reqs, chosen = setup(
        [node("a"), node("b")], [p], busy=[(1, pod(1000), 0)], ranks=[0, 1], policy="bestfit"
    )
    assert decide(state, reqs, chosen, p) == (1, 1)


def test_bestfit_weighs_cpu_half_and_gpu_half():
    # a: 8 cores + 2 GPUs free; b: 64 cores + 1 GPU free.
    # leftover a = 0.5*7/128 + 0.5*1/8 = 0.090; b = 0.5*63/128 + 0.5*0 = 0.246 -> a.
    nodes = [node("a", cpu=8000), node("b", cpu=64_000)]
    p = pod(1000)
    state, reqs, chosen = setup(
        nodes, [p], busy=[(1, pod(1000, cpu=0), 0)], ranks=[1, 0], policy="bestfit"
    )
    assert decide(state, reqs, chosen, p)[0] == 0


def test_dotproduct_prefers_the_node_with_less_free_in_the_asked_dimensions():
    nodes = [node("a", gpus=8, cpu=96_000), node("b", gpus=2, cpu=16_000)]
    p = pod(1000, cpu=4000)
    state, reqs, chosen = setup(nodes, [p], ranks=[0, 1], policy="dotproduct")
    assert decide(state, reqs, chosen, p) == (1, 0)


def test_gpupacking_reuses_the_partly_used_gpu_with_least_leftover():
    # a: one GPU at 500 free; b: one GPU at 400 free; c idle (best rank).
    nodes = [node("a"), node("b"), node("c")]
    p = pod(300)
    state, reqs, chosen = setup(
        nodes,
        [p],
        busy=[(0, pod(500), 0), (1, pod(600), 1)],
        ranks=[1, 2, 0],
        policy="gpupacking",
    )
    assert decide(state, reqs, chosen, p) == (1, 1)


def test_gpupacking_opens_a_gpu_on_a_busy_node_before_an_idle_one():
    nodes = [node("a"), node("b")]
    p = pod(1000)
    state, reqs, chosen = setup(
        nodes, [p], busy=[(1, pod(1000), 0)], ranks=[0, 1], policy="gpupacking"
    )
    assert decide(state, reqs, chosen, p) == (1, 1)


def test_random_stays_within_the_feasible_nodes():
    nodes = [node("a", cpu=500), node("b"), node("c", cpu=500)]
    p = pod(250)
    state, reqs, chosen = setup(nodes, [p], policy="random")
    for _ in range(20):
        n, gpu = decide(state, reqs, chosen, p)
        assert n == 1 and gpu in (0, 1)


@pytest.mark.parametrize("policy", ["fgd", "frachub"])
def test_fragmentation_policies_keep_the_gpu_that_would_strand_milli(policy):
    # The workload is all 500-milli pods. a: one GPU with 600 free (rank 0);
    # b: an idle GPU. On a, 100 milli would be left that no 500 pod can use
    # (fragment grows by 100); on b the GPU keeps 500, exactly one more pod.
    nodes = [node("a", gpus=1), node("b", gpus=1)]
    p = pod(500)
    state, reqs, chosen = setup(nodes, [p], busy=[(0, pod(400), 0)], ranks=[0, 1], policy=policy)
    assert decide(state, reqs, chosen, p) == (1, 0)


@pytest.mark.parametrize("policy", ["fgd", "frachub"])
def test_fragmentation_policies_send_cpu_only_pods_where_gpus_are_gone(policy):
    # Workload: 500-milli pods needing 8 cores. a has its GPU free, b none; a
    # 60-core CPU-only pod on a would leave 4 cores and strand a's GPU.
    nodes = [node("a", gpus=1), node("b", gpus=1)]
    share, cpu_only = pod(500, cpu=8000), pod(0, num=0, cpu=60_000)
    state, reqs, chosen = setup(
        nodes,
        [share, share, cpu_only],
        busy=[(1, pod(1000, cpu=0), 0)],
        ranks=[0, 1],
        policy=policy,
    )
    assert decide(state, reqs, chosen, cpu_only) == (1, -1)


@pytest.mark.parametrize(("policy", "expected"), [("fgd", 1), ("frachub", 0)])
def test_cpu_only_pods_tie_within_frachubs_window(policy, expected):
    # Target workload: a 200-milli, 8-core share task (4 pods of 100, p=0.04)
    # and rare CPU-only shapes. A 60-core pod on a (rank 0) leaves 4 cores, so
    # a's last 200 free milli become a fragment for the share task: growth
    # 0.04 * 200 = 8 expected milli. On b (no GPU free) growth is 0. FGD's
    # integer score puts 8 one step below 0; frachub's 10-milli window ties
    # them and the rank picks a.
    cpu_pod = pod(0, num=0, cpu=60_000)
    workload = (
        [pod(200, cpu=8000)] * 4
        + [cpu_pod]
        + [pod(0, num=0, cpu=1000 + 100 * i) for i in range(95)]
    )
    nodes = [node("a", gpus=1), node("b", gpus=1)]
    busy = [(0, pod(800, cpu=0), 0), (1, pod(1000, cpu=0), 0)]
    state, reqs, chosen = setup(nodes, workload, busy=busy, ranks=[0, 1], policy=policy)
    assert decide(state, reqs, chosen, cpu_pod) == (expected, -1)
