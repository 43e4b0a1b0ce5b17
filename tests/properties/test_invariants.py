"""Hypothesis invariants of the engine over random clusters, queue trees and workloads.

Random scenario documents (SCENARIOS.md format) are replayed through the real runner; a
``Runner`` subclass watches every scheduling cycle and checks, from the snapshot the cycle
saw and the decisions it returned (immediate evictions, no grace period):

1. no GPU holds more than one whole GPU of shares;
2. ``limit_gpus`` is never exceeded at any level of the tree;
3. non-preemptible work is never evicted (except node-lost) and never started beyond deserved;
4. gangs are all-or-nothing and evicted whole;
5. every eviction or move names a claimant that starts in the same cycle;
6. a settled cycle stays settled (same instant again, and later up to the next instant);
7. the same input gives the same output JSON;
8. every pending workload has a reason and a unique position 1..n in its queue;
9. the runner never raises ``Unsettled``;

plus: victims are never min_runtime-protected, preempt stays inside the queue and goes down in
priority, a settled cycle leaves nothing pending that fits idle capacity within its quotas, and
(its own test) nothing is started or moved and then evicted in the same cycle.

A failing example is printed as a scenario YAML (hypothesis ``note``): save it under
``tests/properties/repro/`` and run it with ``frachub scenario run``. Profiles: ``ci`` (the
default: 300 derandomized examples, no shrinking, so it stays fast when red) and ``long``
(``HYPOTHESIS_PROFILE=long``: 2000 random examples per test, shrinks a failure).
"""

from __future__ import annotations

import copy
import json
import os
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st

from scheduler.common.limits import MILLI
from scheduler.common.placement import GpuShare, Placement, ReplicaPlacement
from scheduler.engine import (
    CycleResult,
    Evict,
    EvictReason,
    Move,
    Pending,
    Queue,
    Snapshot,
    Start,
    State,
    Workload,
    run_cycle,
    scorer_named,
)
from scheduler.engine.ledger import Ledger
from scheduler.engine.placement import place
from scheduler.scenario import parse_scenario, run_scenario
from scheduler.scenario.runner import Runner

pytestmark = pytest.mark.properties

settings.register_profile(
    "ci",
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: stays fast when red
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "long",
    max_examples=2000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PROFILE = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
EXAMPLES = PROFILE.max_examples

EPS = 1e-6


# -- random scenario documents ------------------------------------------------------------

FRACTIONS = [0.1, 0.2, 0.25, 0.3, 0.5, 0.75, 1]
WHOLE = [1, 1, 2, 2, 3, 4, 8]
MEMORY_GIB = [10, 20, 40]


def _queue_entry(draw, name: str, parent: str | None, department: bool) -> dict:
    entry: dict = {"name": name}
    if parent is not None:
        entry["parent"] = parent
    deserved = draw(st.sampled_from([None, 0, 0.5, 1, 2, 2, 3, 4, 4, 6, 8]))
    if deserved is not None or department:
        entry["deserved_gpus"] = deserved
    entry["over_quota_weight"] = draw(st.sampled_from([1, 1, 0, 2, 3]))
    limit = draw(st.sampled_from([None, None, None, 0.5, 1, 2, 3, 5, 8]))
    if limit is not None:
        entry["limit_gpus"] = limit
    entry["priority"] = draw(st.sampled_from([0, 0, 0, 1, 2]))
    return entry


def _explicit_placement(draw, free: dict, nodes: Mapping, gpus, memory, replicas):
    """A random valid placement on what ``free`` has left, or None; takes it from ``free``."""
    trial = dict(free)
    placement = []
    for _ in range(replicas):
        if memory is None and gpus >= 1:
            options = [
                n for n in nodes if sum(trial[n, g] == MILLI for g in range(nodes[n][0])) >= gpus
            ]
            if not options:
                return None
            node = draw(st.sampled_from(options))
            whole = [g for g in range(nodes[node][0]) if trial[node, g] == MILLI]
            start = draw(st.integers(0, len(whole) - 1))
            chosen = sorted((whole[start:] + whole[:start])[: int(gpus)])
            for g in chosen:
                trial[node, g] = 0
        else:

            def milli(n):
                if memory is None:
                    return round(gpus * MILLI)
                return -(-memory * 1024 * MILLI // (nodes[n][1] * 1024))

            options = [(n, g) for (n, g), left in trial.items() if 0 < milli(n) <= left]
            if not options:
                return None
            node, g = draw(st.sampled_from(sorted(options)))
            trial[node, g] -= milli(node)
            chosen = [g]
        placement.append({"node": node, "gpus": chosen})
    free.update(trial)
    return placement


@st.composite
def scenario_docs(draw) -> dict:
    """A scenario dict: 1-4 node groups, a flat or two-level tree, 1-25 workloads, events."""
    groups = []
    nodes: dict[str, tuple[int, int]] = {}  # name -> (gpus, GiB per GPU)
    for i in range(draw(st.integers(1, 4))):
        gpus = draw(st.integers(1, 8))
        count = draw(st.integers(1, 2))
        memory = draw(st.sampled_from([80, 80, 40]))
        group: dict = {"name": f"n{i}", "count": count, "gpus": gpus, "gpu_memory_gib": memory}
        if draw(st.booleans()):
            group["labels"] = {"zone": draw(st.sampled_from(["a", "b"]))}
        groups.append(group)
        for k in range(count):
            nodes[f"n{i}-{k}"] = (gpus, memory)

    queues: list[dict] = []
    if draw(st.booleans()):
        for d in range(draw(st.integers(1, 2))):
            queues.append(_queue_entry(draw, f"d{d}", None, department=True))
            for p in range(draw(st.integers(1, 3))):
                queues.append(_queue_entry(draw, f"d{d}p{p}", f"d{d}", department=False))
    else:
        for q in range(draw(st.integers(1, 4))):
            queues.append(_queue_entry(draw, f"q{q}", None, department=False))
    parents = {q.get("parent") for q in queues}
    leaves = [q["name"] for q in queues if q["name"] not in parents]

    free = {(n, g): MILLI for n, (count, _) in nodes.items() for g in range(count)}
    workloads = []
    # In a "borrow" scenario the first queue fills the cluster with training at t=0 and the
    # others arrive later, which is what makes reclaim happen.
    borrow = len(leaves) > 1 and draw(st.booleans())
    for w in range(draw(st.integers(1, 25))):
        at = draw(st.sampled_from([0, 0, 0, 5, 10, 20, 20, 30, 50, 80]))
        if borrow:
            queue = leaves[0] if at == 0 else draw(st.sampled_from(leaves[1:]))
        else:
            queue = draw(st.sampled_from(leaves))
        kinds = ["training", "training", "training", "interactive", "inference"]
        entry: dict = {
            "name": f"w{w}",
            "queue": queue,
            "kind": "training" if borrow and at == 0 else draw(st.sampled_from(kinds)),
        }
        shape = draw(st.sampled_from(["fraction", "fraction", "whole", "whole", "memory"]))
        gpus, memory = 0.0, None
        if shape == "fraction":
            gpus = entry["gpus"] = draw(st.sampled_from(FRACTIONS))
        elif shape == "whole":
            gpus = entry["gpus"] = draw(st.sampled_from(WHOLE))
        else:
            memory = entry["gpu_memory_gib"] = draw(st.sampled_from(MEMORY_GIB))
        replicas = draw(st.sampled_from([1, 1, 1, 1, 2, 3]))
        if replicas > 1:
            entry["replicas"] = replicas
        preemptible = draw(st.sampled_from([None, None, True, False]))
        if preemptible is not None:
            entry["preemptible"] = preemptible
        priority = draw(st.sampled_from([None, None, None, 40, 50, 75, 100, 125, 150]))
        if priority is not None:
            entry["priority"] = priority
        min_runtime = draw(st.sampled_from([0, 0, 0, 15, 40]))
        if min_runtime:
            entry["min_runtime"] = min_runtime
        if at:
            entry["at"] = at
        duration = draw(st.sampled_from([None, None, 10, 25, 40, 60, 100]))
        if duration is not None:
            entry["duration"] = duration
        if at == 0 and draw(st.integers(0, 3)) == 0:
            entry["state"] = "running"
            if draw(st.booleans()):
                placement = _explicit_placement(draw, free, nodes, gpus, memory, replicas)
                if placement is None:
                    del entry["state"]
                else:
                    entry["placement"] = placement
        workloads.append(entry)

    events = []
    names = [w["name"] for w in workloads]
    added = 0
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.sampled_from([5, 10, 15, 30, 45, 60, 90]))
        action = draw(st.sampled_from(["finish", "cancel", "remove_node", "add_node"]))
        if action in ("finish", "cancel"):
            events.append({"at": at, action: draw(st.sampled_from(names))})
        elif action == "remove_node":
            events.append({"at": at, "remove_node": draw(st.sampled_from(sorted(nodes)))})
        else:
            node = {"name": f"x{added}", "gpus": draw(st.integers(1, 8))}
            added += 1
            events.append({"at": at, "add_node": node})

    doc: dict = {"cluster": {"nodes": groups}, "queues": queues, "workloads": workloads}
    if events:
        doc["events"] = events
    run_until = draw(st.sampled_from([None, None, 60, 150]))
    if run_until is not None:
        doc["run_until"] = run_until
    placement = draw(st.sampled_from(["pack", "pack", "spread", "frachub"]))
    if placement != "pack":
        doc["placement"] = placement
    return doc


# -- independent bookkeeping --------------------------------------------------------------


class Tree:
    """Queue ancestry and resolved deserved quotas (milli), computed here, not by the engine."""

    def __init__(self, queues: Iterable[Queue]) -> None:
        self.queues = {q.name: q for q in queues}
        children: dict[str, list[str]] = defaultdict(list)
        for q in self.queues.values():
            if q.parent is not None:
                children[q.parent].append(q.name)
        self.deserved: dict[str, float] = {}

        def resolve(name: str) -> float:
            if name not in self.deserved:
                own = self.queues[name].deserved_gpus
                self.deserved[name] = (
                    own * MILLI if own is not None else sum(resolve(c) for c in children[name])
                )
            return self.deserved[name]

        for name in self.queues:
            resolve(name)

    def up(self, name: str) -> list[str]:
        chain = []
        current: str | None = name
        while current is not None:
            chain.append(current)
            current = self.queues[current].parent
        return chain

    def use(self, running: Mapping[str, tuple[Workload, Placement]], np_only=False) -> Counter:
        """Milli per queue, departments including their subtree."""
        total: Counter = Counter()
        for workload, placement in running.values():
            if np_only and workload.preemptible:
                continue
            size = sum(s.milli for r in placement for s in r.gpus)
            for name in self.up(workload.queue):
                total[name] += size
        return total


def _protected(workload: Workload, now: float) -> bool:
    return (
        workload.min_runtime > 0
        and workload.started_at is not None
        and workload.started_at + workload.min_runtime > now
    )


def _shape_problem(workload: Workload, placement: Placement, nodes: Mapping) -> str | None:
    """Rule 1 and 4 for one placement: one entry per replica, each the right shares."""
    request = workload.request
    if len(placement) != request.replicas:
        return f"{len(placement)} placements for a gang of {request.replicas}"
    for replica in placement:
        node = nodes.get(replica.node)
        if node is None:
            return f"placed on unknown node {replica.node}"
        indices = [s.index for s in replica.gpus]
        if len(set(indices)) != len(indices) or not all(0 <= i < node.gpus for i in indices):
            return f"bad GPU indices {indices} on {replica.node}"
        if not request.whole_gpus and not request.is_fraction:  # CPU-only (rule 3b)
            if indices:
                return f"a CPU-only request got GPUs {replica.gpus}"
        elif request.whole_gpus:
            if len(indices) != request.whole_gpus or any(s.milli != MILLI for s in replica.gpus):
                return f"whole request of {request.whole_gpus} got {replica.gpus}"
        elif len(indices) != 1 or replica.gpus[0].milli != request.milli_on(node.gpu_memory_mib):
            return f"fraction got {replica.gpus} on {replica.node}"
    return None


def apply_decisions(snapshot: Snapshot, result: CycleResult) -> dict:
    """Running workloads and placements after the cycle (immediate evictions)."""
    running = {w.name: (w, w.placement) for w in snapshot.workloads if w.state is State.RUNNING}
    workloads = {w.name: w for w in snapshot.workloads}
    for decision in result.decisions:
        if isinstance(decision, Evict):
            running.pop(decision.workload, None)
        else:
            running[decision.workload] = (workloads[decision.workload], decision.placement)
    return running


def check_cycle(
    snapshot: Snapshot, result: CycleResult, now: float, churn: bool = True
) -> list[str]:
    """Everything one cycle must respect; returns the problems found (empty when fine).

    ``churn`` also refuses a workload started or moved and then evicted in the same cycle.
    """
    problems: list[str] = []
    tree = Tree(snapshot.queues)
    nodes = {n.name: n for n in snapshot.nodes}
    workloads = {w.name: w for w in snapshot.workloads}
    pending = {w.name for w in snapshot.workloads if w.state is State.PENDING}
    started = Counter(d.workload for d in result.decisions if isinstance(d, Start))
    lost = {
        d.workload
        for d in result.decisions
        if isinstance(d, Evict) and d.reason is EvictReason.NODE_LOST
    }
    at = f"t={now:g}"

    # the decisions themselves (invariants 3, 4, 5 and the victim rules)
    running_now = {w.name for w in snapshot.workloads if w.state is State.RUNNING}
    placed_now: set[str] = set()  # started or moved in this cycle
    for decision in result.decisions:
        name = decision.workload
        workload = workloads.get(name)
        if workload is None:
            problems.append(f"{at}: decision for unknown workload {name}: {decision}")
            continue
        if isinstance(decision, Start):
            if started[name] > 1:
                problems.append(f"{at}: {name} started {started[name]} times in one cycle")
            if name not in pending and name not in lost:
                problems.append(f"{at}: {name} started but was not pending")
            shape = _shape_problem(workload, decision.placement, nodes)
            if shape:
                problems.append(f"{at}: start {name}: {shape}")
            running_now.add(name)
            placed_now.add(name)
            continue
        if name not in running_now:
            problems.append(f"{at}: {decision} of a workload that is not running")
        if churn and name in placed_now and isinstance(decision, Evict):
            problems.append(f"{at}: {name} is placed and then evicted in the same cycle")
        if isinstance(decision, Move):
            placed_now.add(name)
        if isinstance(decision, Evict) and decision.reason is EvictReason.NODE_LOST:
            if all(r.node in nodes for r in workload.placement):
                problems.append(f"{at}: {name} evicted node-lost but all its nodes are there")
            running_now.discard(name)
            continue
        claimant = workloads.get(decision.claimant or "")
        if not workload.preemptible:
            problems.append(f"{at}: non-preemptible {name} evicted/moved: {decision}")
        if _protected(workload, now):
            problems.append(f"{at}: {name} is protected by min_runtime but {decision}")
        if claimant is None or started[claimant.name] == 0:
            problems.append(f"{at}: {decision} but its claimant does not start in this cycle")
        elif claimant.name == name:
            problems.append(f"{at}: {name} is its own claimant")
        if isinstance(decision, Move):
            if workload.request.replicas != 1:
                problems.append(f"{at}: gang {name} moved")
            shape = _shape_problem(workload, decision.placement, nodes)
            if shape:
                problems.append(f"{at}: move {name}: {shape}")
        else:
            running_now.discard(name)
            if (
                claimant is not None
                and decision.reason is EvictReason.PREEMPT
                and (claimant.queue != workload.queue or workload.priority >= claimant.priority)
            ):
                problems.append(
                    f"{at}: preempt of {name} ({workload.queue}, priority "
                    f"{workload.priority}) for {claimant.name} ({claimant.queue}, "
                    f"priority {claimant.priority})"
                )
            if (
                claimant is not None
                and decision.reason is EvictReason.RECLAIM
                and claimant.queue == workload.queue
            ):
                problems.append(f"{at}: reclaim of {name} inside its own queue {workload.queue}")
    for workload in snapshot.workloads:  # a gang with a replica on a lost node goes whole
        on_lost = any(r.node not in nodes for r in workload.placement)
        if workload.state is State.RUNNING and on_lost and workload.name not in lost:
            problems.append(f"{at}: {workload.name} runs on a lost node and is not evicted")

    # the state after the cycle (invariants 1-4)
    before = {w.name: (w, w.placement) for w in snapshot.workloads if w.state is State.RUNNING}
    after = apply_decisions(snapshot, result)
    used: Counter = Counter()
    for name, (workload, placement) in after.items():
        if any(r.node not in nodes for r in placement):
            problems.append(f"{at}: {name} still runs on a lost node")
            continue
        shape = _shape_problem(workload, placement, nodes)
        if shape:
            problems.append(f"{at}: running {name}: {shape}")
        for replica in placement:
            for share in replica.gpus:
                used[replica.node, share.index] += share.milli
    for (node, index), milli in sorted(used.items()):
        if milli > MILLI:
            problems.append(f"{at}: GPU {index} of {node} holds {milli} milli")
    use_before = tree.use(before)
    use_after = tree.use(after)
    np_after = tree.use(after, np_only=True)
    claimed = set(started)  # a move keeps its size: its queue only must not grow past the limit
    strict = {q for name in claimed for q in tree.up(workloads[name].queue)}
    for name, queue in tree.queues.items():
        if queue.limit_gpus is None:
            continue
        limit = queue.limit_gpus * MILLI
        bound = limit if name in strict else max(limit, use_before[name])
        if use_after[name] > bound + EPS:
            problems.append(
                f"{at}: {name} uses {use_after[name]} milli, limit {limit:g} "
                f"(before the cycle {use_before[name]})"
            )
    for name in started:
        workload = workloads[name]
        if workload.preemptible:
            continue
        for level in tree.up(workload.queue):
            if np_after[level] > tree.deserved[level] + EPS:
                problems.append(
                    f"{at}: non-preemptible {name} started; {level}'s non-preemptible use is "
                    f"{np_after[level]} milli, deserved {tree.deserved[level]:g}"
                )

    # pending reasons and positions (invariant 8)
    expected = (pending | lost) - set(started)
    if set(result.pending) != expected:
        problems.append(
            f"{at}: pending reasons for {sorted(result.pending)}, expected {sorted(expected)}"
        )
    positions: dict[str, list[int]] = defaultdict(list)
    for name, entry in result.pending.items():
        if not entry.reason or not entry.reason.strip() or entry.reason.startswith(";"):
            problems.append(f"{at}: {name} pending with reason {entry.reason!r}")
        if name in workloads:
            positions[workloads[name].queue].append(entry.position)
    for queue, found in positions.items():
        if sorted(found) != list(range(1, len(found) + 1)):
            problems.append(f"{at}: positions in {queue} are {sorted(found)}")
    return problems


def fits_idle(snapshot: Snapshot, scorer) -> list[str]:
    """Pending workloads that idle capacity and every quota would let start right now."""
    tree = Tree(snapshot.queues)
    ledger = Ledger(snapshot.nodes)
    nodes = {n.name for n in snapshot.nodes}
    running = {}
    for w in snapshot.workloads:
        if w.state is State.RUNNING and all(r.node in nodes for r in w.placement):
            ledger.take(w.placement)
            running[w.name] = (w, w.placement)
    use, np_use = tree.use(running), tree.use(running, np_only=True)
    largest = max((n.gpu_memory_mib for n in snapshot.nodes), default=1)
    startable = []
    for w in snapshot.workloads:
        if w.state is not State.PENDING:
            continue
        request = w.request
        per = request.whole_gpus * MILLI if request.whole_gpus else request.milli_on(largest)
        mark = ledger.mark()
        placement = place(ledger, request, scorer)
        ledger.rollback(mark)
        if placement is None:
            continue
        actual = sum(s.milli for r in placement for s in r.gpus)
        ok = True
        for size in {per * request.replicas, actual}:
            for level in tree.up(w.queue):
                limit = tree.queues[level].limit_gpus
                if limit is not None and use[level] + size > limit * MILLI + EPS:
                    ok = False
                if not w.preemptible and np_use[level] + size > tree.deserved[level] + EPS:
                    ok = False
        if ok:
            startable.append(w.name)
    return startable


def queue_status_problems(snapshot: Snapshot, result: CycleResult, at: str) -> list[str]:
    """A settled cycle's queue status: allocation and counts include the subtree."""
    tree = Tree(snapshot.queues)
    running = {w.name: (w, w.placement) for w in snapshot.workloads if w.state is State.RUNNING}
    use = tree.use(running)
    counts: dict[State, Counter] = {State.RUNNING: Counter(), State.PENDING: Counter()}
    for w in snapshot.workloads:
        for level in tree.up(w.queue):
            counts[w.state][level] += 1
    problems = []
    for name, status in result.queues.items():
        found = (round(status.allocated_gpus * MILLI), status.running, status.pending)
        wanted = (use[name], counts[State.RUNNING][name], counts[State.PENDING][name])
        if found != wanted:
            problems.append(f"{at}: {name} status (milli, running, pending) {found} != {wanted}")
    return problems


# -- the observing runner -----------------------------------------------------------------


class ObservedRunner(Runner):
    """The real runner, checking every cycle it runs and every instant it settles."""

    def __init__(self, scenario, churn: bool = True) -> None:
        super().__init__(scenario)
        self.churn = churn
        self.problems: list[str] = []
        self.cycles = 0

    def after_cycle(self, snapshot: Snapshot, result: CycleResult, now: float) -> None:
        self.cycles += 1
        self.problems += check_cycle(snapshot, result, now, self.churn)
        expected = {
            name: placement for name, (_, placement) in apply_decisions(snapshot, result).items()
        }
        actual = {n: life.placement for n, life in self.lives.items() if life.state == "running"}
        if expected != actual:
            self.problems.append(f"t={now:g}: the runner's state differs from the decisions")
        self._stop_early()

    def after_instant(self, now: float) -> None:
        self.cycles += 1
        snapshot = self.snapshot()
        settled = self.result
        assert settled is not None and not settled.decisions
        at = f"t={now:g}"
        self.problems += check_cycle(snapshot, settled, now)
        again = run_cycle(snapshot, now, self.policy)  # invariant 6, same instant
        if again.decisions or again.pending != settled.pending:
            self.problems.append(f"{at}: a settled snapshot decides {again.decisions} when rerun")
        upcoming = self.next_instant(now)
        later = now + 10**6 if upcoming is None else upcoming - 1e-3
        if later > now:
            quiet = run_cycle(snapshot, later, self.policy)
            if quiet.decisions:
                self.problems.append(
                    f"{at}: settled, but at t={later:g} (before the next instant "
                    f"{upcoming}) the same snapshot decides {quiet.decisions}"
                )
        self.problems += queue_status_problems(snapshot, settled, at)
        idle = fits_idle(snapshot, self.policy.scorer)
        if idle:
            self.problems.append(
                f"{at}: settled with {idle} pending although idle capacity and quotas allow them"
            )
        self._stop_early()

    def _stop_early(self) -> None:
        if self.problems:
            raise AssertionError("\n".join(self.problems[:10]))


def _yaml(doc: Mapping) -> str:
    return yaml.safe_dump(dict(doc), sort_keys=False, default_flow_style=None, width=100)


def _run_checked(doc: dict, churn: bool) -> None:
    note("scenario:\n" + _yaml(doc))
    runner = ObservedRunner(parse_scenario(copy.deepcopy(doc)), churn)
    runner.run()  # raises Unsettled (invariant 9) or AssertionError with the problems


# -- the properties -----------------------------------------------------------------------


@settings(PROFILE)
@given(doc=scenario_docs())
def test_every_cycle_keeps_the_invariants(doc):
    _run_checked(doc, churn=False)


@settings(PROFILE, max_examples=max(10, EXAMPLES // 3))
@given(doc=scenario_docs())
def test_no_workload_is_started_and_evicted_in_one_cycle(doc):
    """Rule 7 serves the claimant first, so what starts in a cycle is never its victim; see
    repro/started_then_evicted_same_cycle.yaml."""
    _run_checked(doc, churn=True)


@settings(PROFILE, max_examples=max(10, EXAMPLES // 5))
@given(doc=scenario_docs())
def test_same_input_gives_identical_output(doc):
    """Invariant 7; the third run goes through the printed YAML, so a failure's note replays."""
    text = _yaml(doc)
    note("scenario:\n" + text)
    first = run_scenario(parse_scenario(copy.deepcopy(doc))).to_json()
    second = run_scenario(parse_scenario(copy.deepcopy(doc))).to_json()
    replayed = run_scenario(parse_scenario(yaml.safe_load(text))).to_json()
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)
    assert json.dumps(first, sort_keys=True) == json.dumps(replayed, sort_keys=True)
    positions = defaultdict(list)
    for name, entry in first["workloads"].items():
        if entry["state"] == "pending":
            assert entry["pending_reason"], name
            positions[entry["queue"]].append(entry["queue_position"])
    for queue, found in positions.items():
        assert sorted(found) == list(range(1, len(found) + 1)), queue


# -- the checker can fail -----------------------------------------------------------------
# Doctored cycles that break one invariant each: check_cycle must name the problem, so the
# properties above are not vacuous.

_TWO_GPUS = {
    "cluster": {"nodes": [{"name": "a", "gpus": 2}]},
    "queues": [
        {"name": "lab", "deserved_gpus": 1, "limit_gpus": 2},
        {"name": "ops", "deserved_gpus": 1},
    ],
    "workloads": [
        {
            "name": "t1",
            "queue": "lab",
            "kind": "training",
            "gpus": 1,
            "state": "running",
            "placement": [{"node": "a", "gpus": [0]}],
        },
        {
            "name": "nb",
            "queue": "lab",
            "kind": "interactive",
            "gpus": 0.5,
            "state": "running",
            "placement": [{"node": "a", "gpus": [1]}],
        },
        {"name": "p1", "queue": "lab", "kind": "training", "gpus": 1},
        {"name": "g2", "queue": "ops", "kind": "training", "gpus": 1, "replicas": 2},
        {"name": "inf", "queue": "ops", "kind": "inference", "gpus": 0.5},
    ],
}


def _doctored_snapshot() -> Snapshot:
    runner = Runner(parse_scenario(copy.deepcopy(_TWO_GPUS)))
    runner.begin_running()
    for seq, spec in runner.unsubmitted:
        runner.submit(seq, spec, 0.0)
    return runner.snapshot()


def _result(snapshot: Snapshot, decisions, reasons: Mapping[str, str]) -> CycleResult:
    """A cycle result with ``reasons`` as pending reasons, numbered 1.. per queue."""
    queues = {w.name: w.queue for w in snapshot.workloads}
    positions: Counter = Counter()
    pending = {}
    for name, reason in reasons.items():
        positions[queues[name]] += 1
        pending[name] = Pending(reason, positions[queues[name]])
    return CycleResult(tuple(decisions), pending, {}, None)


def _share(node: str, index: int, milli: int):
    return ReplicaPlacement(node, (GpuShare(index, milli),))


@pytest.mark.parametrize(
    ("decisions", "pending", "problem"),
    [
        ([], None, None),
        ([Evict("t1", EvictReason.RECLAIM, "g2")], None, "claimant does not start"),
        ([Evict("nb", EvictReason.PREEMPT, "p1")], None, "non-preemptible nb"),
        ([Start("inf", (_share("a", 1, 1000 // 2 + 1),))], None, "fraction got"),
        ([Start("g2", (_share("a", 1, MILLI),))], None, "placements for a gang of 2"),
        (
            [Evict("t1", EvictReason.PREEMPT, "p1"), Start("p1", (_share("a", 0, MILLI),))],
            {"g2": "waits", "inf": "waits"},
            "preempt of t1",
        ),
        (
            [
                Start("p1", (_share("a", 1, MILLI),)),
                Evict("p1", EvictReason.RECLAIM, "inf"),
                Start("inf", (_share("a", 1, 500),)),
            ],
            {"g2": "waits", "p1": "waits"},
            "p1 is placed and then evicted in the same cycle",
        ),
        ([], {"p1": "", "g2": "waits", "inf": "waits"}, "pending with reason ''"),
        ([], {"g2": "waits", "inf": "waits"}, "expected ['g2', 'inf', 'p1']"),
    ],
    ids=[
        "clean",
        "no-claimant",
        "np-evicted",
        "bad-share",
        "half-gang",
        "equal-priority",
        "started-then-evicted",
        "empty-reason",
        "missing-reason",
    ],
)
def test_check_cycle_names_each_broken_invariant(decisions, pending, problem):
    snapshot = _doctored_snapshot()
    if pending is None:
        pending = dict.fromkeys(["p1", "g2", "inf"], "waits")
    problems = check_cycle(snapshot, _result(snapshot, decisions, pending), now=5)
    if problem is None:
        assert problems == []
    else:
        assert any(problem in p for p in problems), problems


def test_check_cycle_sees_a_gpu_over_one_and_a_limit_broken():
    snapshot = _doctored_snapshot()
    start = Start("inf", (_share("a", 1, 600),))  # nb already holds 0.5 of GPU 1
    waiting = {"p1": "waits", "g2": "waits"}
    problems = check_cycle(snapshot, _result(snapshot, [start], waiting), now=0)
    assert any("GPU 1 of a holds 1100 milli" in p for p in problems), problems
    over = Start("p1", (_share("a", 1, MILLI),))  # lab: 1 + 0.5 + 1 > limit 2
    waiting = {"g2": "waits", "inf": "waits"}
    problems = check_cycle(snapshot, _result(snapshot, [over], waiting), now=0)
    assert any("lab uses 2500 milli, limit 2000" in p for p in problems), problems


def test_fits_idle_sees_work_left_waiting():
    snapshot = _doctored_snapshot()
    assert fits_idle(snapshot, scorer_named("pack")) == ["inf"]
