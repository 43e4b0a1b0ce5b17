"""``dry_run``: the engine's decision for one arrival on a fork of a settled session, in the
words the spawn form shows; the settled session is left as it was. And the never-start checks
at submit, with and without ``cluster_may_grow``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.common.placement import GpuShare, ReplicaPlacement
from scheduler.engine import (
    Kind,
    Node,
    Policy,
    Queue,
    Request,
    Session,
    Snapshot,
    State,
    Workload,
    WorkloadRequest,
    decide,
    scorer_named,
)
from scheduler.engine.dryrun import dry_run
from scheduler.engine.feasibility import never_starts
from scheduler.service.requests import (
    parse_allocation,
    parse_submission,
)

pytestmark = pytest.mark.unit

POLICY = Policy(scorer=scorer_named("pack"), immediate_evictions=False)
QUEUES = (Queue("vision", deserved_gpus=1), Queue("nlp", deserved_gpus=1))
NODE = Node("local", gpus=2)


def job(name: str, queue: str, gpus: tuple[int, ...], priority: int = 50) -> Workload:
    return Workload(
        name=name,
        queue=queue,
        kind=Kind.TRAINING,
        request=Request(gpus=len(gpus)),
        priority=priority,
        preemptible=True,
        submitted_at=0.0,
        seq=1,
        state=State.RUNNING,
        placement=(ReplicaPlacement("local", tuple(GpuShare(i, 1000) for i in gpus)),),
        started_at=0.0,
        start_seq=1,
    )


def notebook(queue: str, gpus: float) -> Workload:
    return Workload(
        name="dry-run",
        queue=queue,
        kind=Kind.INTERACTIVE,
        request=Request(gpus=gpus),
        priority=100,
        preemptible=False,
        submitted_at=10.0,
        seq=99,
    )


def settled(*running: Workload) -> Session:
    session = Session(Snapshot((NODE,), QUEUES, running), 10.0, POLICY)
    assert not decide(session).decisions
    return session


def test_an_idle_gpu_starts_now() -> None:
    verdict = dry_run(settled(), notebook("nlp", 0.5), 10.0, 30)
    assert verdict.outcome == "now"
    assert verdict.message.startswith("starts now on local")


def test_borrowed_gpus_are_reclaimed_and_the_standing_session_is_untouched() -> None:
    standing = settled(job("alice-job", "vision", (0, 1)))
    before = (dict(standing.running), standing.ledger.copy().free, dict(standing.use.allocated))
    verdict = dry_run(standing, notebook("nlp", 1), 10.0, 30)
    assert verdict.outcome == "reclaim" and verdict.reclaims_from == ("vision",)
    assert verdict.message == (
        "starts after reclaiming GPUs that vision borrowed (1 workload); "
        "they get 30s to save their work"
    )
    after = (dict(standing.running), standing.ledger.copy().free, dict(standing.use.allocated))
    assert after == before
    # asked again, the same answer: nothing of the first dry run stayed behind
    assert dry_run(standing, notebook("nlp", 1), 10.0, 30) == verdict


def test_a_full_quota_waits_with_the_engines_reason() -> None:
    held = replace(
        job("bob-notebook", "vision", (0,), priority=100), kind=Kind.INTERACTIVE, preemptible=False
    )
    verdict = dry_run(settled(held), notebook("vision", 0.5), 10.0, 30)
    assert verdict.outcome == "wait"
    assert verdict.message.startswith("would wait: vision's notebooks already use its deserved")
    assert verdict.queue_position == 1


def submission(**fields) -> WorkloadRequest:
    """A job as the API parses it, submitted to vision."""
    return replace(parse_submission({"command": "true", **fields}).ask, project="vision")


def allocation(**fields) -> WorkloadRequest:
    """A notebook's share as the API parses it, asked of vision."""
    return replace(parse_allocation(fields).ask, project="vision")


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"gpus": 2, "replicas": 3}, "even on the idle cluster it needs 3 replicas × 2 GPUs"),
        ({"gpus": 4}, "the largest node has 2 GPUs, so it can never start"),
        ({"gpus": 2, "preemptible": False}, "2 GPUs more would go beyond it"),
    ],
    ids=["gang", "beyond-a-node", "non-preemptible-beyond-quota"],
)
def test_jobs_that_can_never_start_unless_the_cluster_may_grow(fields, words) -> None:
    job = submission(**fields)
    assert words in (never_starts(job, QUEUES, (NODE,)) or "")
    assert never_starts(job, QUEUES, (NODE,), cluster_may_grow=True) is None


def test_what_fits_the_idle_cluster_is_not_refused() -> None:
    for fields in ({"gpus": 1, "replicas": 2}, {"gpus": 2}, {"gpus": 0.5, "replicas": 4}):
        assert never_starts(submission(**fields), QUEUES, (NODE,)) is None


def test_growth_adds_no_quota_to_a_notebook() -> None:
    wide = allocation(gpus=4, preemptible=True)
    beyond = allocation(gpus=2)
    assert "largest node" in (never_starts(wide, QUEUES, (NODE,)) or "")
    assert never_starts(wide, QUEUES, (NODE,), cluster_may_grow=True) is None
    assert "can never start" in (never_starts(beyond, QUEUES, (NODE,), cluster_may_grow=True) or "")


def test_cpus_and_memory_no_node_or_quota_can_hold_are_refused() -> None:
    """Rule 3b: a request for more CPUs than any node has never starts, nor a notebook
    asking for more CPUs (or memory) than its project or department deserves."""
    nodes = (Node("local", gpus=2, cpu_milli=32_000, memory_mib=128 * 1024),)
    queues = (
        Queue("research", deserved_memory_mib=64 * 1024),
        Queue("vision", parent="research", deserved_gpus=1, deserved_cpu_milli=8_000),
    )

    def ask(kind: Kind, preemptible: bool | None = None, **request) -> WorkloadRequest:
        return WorkloadRequest.of(
            kind, Request(**request), preemptible=preemptible, project="vision"
        )

    cpu_only = ask(Kind.TRAINING, cpu_milli=40_000)
    assert never_starts(cpu_only, queues, nodes) == (
        "a job that needs 40 CPUs; the largest node has 32 CPUs, so it can never start"
    )
    assert never_starts(cpu_only, queues, nodes, cluster_may_grow=True) is None
    wide = ask(Kind.INTERACTIVE, gpus=0.5, memory_mib=200 * 1024, preemptible=True)
    assert "the largest node has 128 GiB of memory" in (never_starts(wide, queues, nodes) or "")
    cpus = ask(Kind.INTERACTIVE, gpus=0.5, cpu_milli=12_000)
    assert never_starts(cpus, queues, nodes) == (
        "vision deserves 8 CPUs; a notebook of 12 CPUs can never start: notebooks run only "
        "inside the project's deserved quota"
    )
    memory = ask(Kind.INTERACTIVE, gpus=0.5, memory_mib=96 * 1024)
    assert "department research (above vision) deserves 64 GiB of memory" in (
        never_starts(memory, queues, nodes) or ""
    )
    fits = ask(Kind.INTERACTIVE, gpus=0.5, cpu_milli=8_000, memory_mib=64 * 1024)
    assert never_starts(fits, queues, nodes) is None
    assert never_starts(ask(Kind.TRAINING, gpus=1, cpu_milli=24_000), queues, nodes) is None
