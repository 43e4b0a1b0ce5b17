"""The scheduler's state between cycles, kept current one change at a time.

Building a ``Session`` from a snapshot touches every workload: at 4,000 nodes with 80,000
running and 40,000 pending that is a large share of a cycle, repeated every cycle although
only a few hundred workloads changed since the last one. A ``Standing`` is built once from
a snapshot and then told of each workload that changed (``put``, ``drop``): it keeps the
ledger, the accounting, the claims and the victim, protection and node indexes as a
``Session`` built from a snapshot of the same workloads would have them (a property test
holds it to that). Each cycle works on ``fork(now)``, a copy, and the standing state moves
on only when the driver reports what it did with the decisions.

The lifecycle (``scheduler.engine.lifecycle``) is the natural owner: every arrival, start,
eviction and exit passes through it, so it marks what changed and brings its standing
state up to date before each cycle (``Lifecycle.session``).
"""

from __future__ import annotations

from collections.abc import Sequence

from sortedcontainers import SortedList

from scheduler.engine.model import Node, Queue, Snapshot, State, Workload, held_milli
from scheduler.engine.session import RECENT_REQUESTS, Policy, Session, VictimLists

_CLAIMED, _HELD = "claimed", "held"


class Standing:
    """A ``Session`` that never decides, kept equal to one built from the current snapshot.

    ``session`` holds the state; ``fork`` hands each cycle its own copy. Containers a fork
    shares instead of copying (the node and victim indexes, the protections) are copied
    here before the next change touches them, so a fork never sees a later change.
    """

    def __init__(self, snapshot: Snapshot, now: float, policy: Policy) -> None:
        self.nodes = tuple(snapshot.nodes)
        self.queues = tuple(snapshot.queues)
        self.node_names = {node.name for node in self.nodes}
        session = Session(snapshot, now, policy)
        self.session = session
        self.usable = not session.decisions
        """False when building it decided something (work on a lost node): the driver runs
        that session as it is, and builds a new standing state next time."""
        self.members: dict[str, Workload] = {}
        """Every workload as this state counts it."""
        self.release: dict[str, str] = {}
        """Releasing workloads: whether their capacity is claimed or held."""
        self.claims_on: dict[str, dict[str, None]] = {}
        """Claimant -> the workloads that name it (their part depends on whether it waits)."""
        self.victims: dict[str, dict[str, Workload]] = {}
        self.by_node: dict[str, dict[str, None]] = {}
        self.recent = SortedList()
        self._shared = False
        for workload in snapshot.workloads:
            self.members[workload.name] = workload
            self.recent.add((workload.seq, workload.name))
            if workload.claimant is not None:
                self.claims_on.setdefault(workload.claimant, {})[workload.name] = None
            if workload.state is State.RELEASING and self._on_known_nodes(workload):
                held = workload.claimant not in session.pending
                self.release[workload.name] = _HELD if held else _CLAIMED
        for workload in session.running.values():
            self._index(workload, +1)
        session._protections = SortedList(session._protections)
        session.ledger.compact()

    def serves(self, nodes: Sequence[Node], queues: Sequence[Queue]) -> bool:
        """Whether this state is for these nodes and queues (else the driver builds anew)."""
        return self.usable and tuple(nodes) == self.nodes and tuple(queues) == self.queues

    # -- changes ------------------------------------------------------------------------------

    def put(self, name: str, workload: Workload | None) -> None:
        """``name`` is now ``workload`` (None: gone, or not for the engine to see)."""
        old = self.members.get(name)
        if old is workload:
            return
        self._copy_shared()
        if (
            workload is not None
            and workload.state is State.RUNNING
            and not self._on_known_nodes(workload)
        ):
            self.usable = False  # a Session decides a lost node's work: build one next time
            return
        waited = old is not None and old.state is State.PENDING
        if old is not None:
            self._retract(old)
        if workload is not None:
            self._contribute(workload)
        waits = workload is not None and workload.state is State.PENDING
        if waited != waits:
            for dependent in list(self.claims_on.get(name, ())):
                member = self.members[dependent]
                self._retract(member)
                self._contribute(member)

    def recent_workloads(self) -> list[Workload]:
        """The latest ``RECENT_REQUESTS`` workloads by submission (``Policy.for_recent``)."""
        start = max(0, len(self.recent) - RECENT_REQUESTS)
        return [self.members[name] for _, name in self.recent.islice(start)]

    def fork(self, now: float, policy: Policy) -> Session:
        """The next cycle's session: a copy of this state at ``now`` under ``policy``."""
        session = self.session
        if policy.scorer is not session.policy.scorer:
            scratch = session.ledger.scratch
            for owner in [owner for owner in scratch if owner is not policy.scorer]:
                del scratch[owner]
        session.policy = policy
        twin = session.fork((), now)  # prepares the scorer's caches here, copied by each fork
        session.ledger.compact()
        twin.yielding = set(session.yielding)
        twin._by_node = self.by_node
        twin._victims = VictimLists(self.victims, policy.victim_key, now)
        twin._victims_cover = twin._next_start_seq
        self._shared = True
        return twin

    # -- one workload's part ------------------------------------------------------------------

    def _copy_shared(self) -> None:
        """Copy what the last fork shares before changing it."""
        if self._shared:
            session = self.session
            self.by_node = {node: dict(names) for node, names in self.by_node.items()}
            self.victims = {queue: dict(names) for queue, names in self.victims.items()}
            session._protections = session._protections.copy()
            self._shared = False

    def _on_known_nodes(self, workload: Workload) -> bool:
        return all(replica.node in self.node_names for replica in workload.placement)

    def _index(self, workload: Workload, sign: int) -> None:
        """The running workload in (or out of) the node and victim indexes."""
        node = workload.placement[0].node if workload.placement else ""
        if sign > 0:
            self.by_node.setdefault(node, {})[workload.name] = None
            if workload.preemptible:
                self.victims.setdefault(workload.queue, {})[workload.name] = workload
        else:
            self.by_node[node].pop(workload.name, None)
            if workload.preemptible:
                self.victims[workload.queue].pop(workload.name, None)

    def _contribute(self, workload: Workload) -> None:
        session = self.session
        name = workload.name
        self.members[name] = workload
        self.recent.add((workload.seq, name))
        if workload.claimant is not None:
            self.claims_on.setdefault(workload.claimant, {})[name] = None
        if workload.state is State.PENDING:
            session.pending[name] = workload
            session.demand[workload.queue] += session.request_size(workload)
            if session.host:
                session.host_demand(workload, +1)
            if workload.claimant in session.pending:
                session.yielding.add(name)
            return
        if workload.state is State.RELEASING:
            session.demand[workload.queue] += session.request_size(workload)
            if session.host:
                session.host_demand(workload, +1)
            if not self._on_known_nodes(workload):
                return
            if workload.claimant in session.pending:
                self.release[name] = _CLAIMED
                session.claimed.setdefault(workload.claimant, []).append(workload.placement)
                session.ledger.take(workload.placement)
            else:
                self.release[name] = _HELD
                session._hold(workload.placement)
            return
        session.running[name] = workload
        size = session._placed_size[name] = held_milli(workload.placement)
        session.demand[workload.queue] += size
        if session.host:
            session.host_demand(workload, +1)
        session._count(workload, +1, size)
        session.running_count[workload.queue] += 1
        request = workload.request
        session.ledger.take(
            workload.placement, request.cpu_milli, request.memory_mib, workload.user
        )
        if workload.preemptible and workload.min_runtime > 0 and workload.started_at is not None:
            entry = (workload.started_at + workload.min_runtime, name, workload.started_at)
            session._protections.add(entry)
        session._next_start_seq = max(session._next_start_seq, workload.start_seq + 1)
        self._index(workload, +1)

    def _retract(self, workload: Workload) -> None:
        session = self.session
        name = workload.name
        del self.members[name]
        self.recent.remove((workload.seq, name))
        if workload.claimant is not None:
            claims = self.claims_on[workload.claimant]
            del claims[name]
            if not claims:
                del self.claims_on[workload.claimant]
        if workload.state is State.PENDING:
            del session.pending[name]
            session.demand[workload.queue] -= session.request_size(workload)
            if session.host:
                session.host_demand(workload, -1)
            session.yielding.discard(name)
            return
        if workload.state is State.RELEASING:
            session.demand[workload.queue] -= session.request_size(workload)
            if session.host:
                session.host_demand(workload, -1)
            kind = self.release.pop(name, None)
            if kind == _CLAIMED:
                placements = session.claimed[workload.claimant]  # type: ignore[index]
                placements.remove(workload.placement)
                if not placements:
                    del session.claimed[workload.claimant]  # type: ignore[arg-type]
                session.ledger.give_back(workload.placement)
            elif kind == _HELD:
                session._hold(workload.placement, -1)
            return
        del session.running[name]
        size = session._placed_size.pop(name)
        session.demand[workload.queue] -= size
        if session.host:
            session.host_demand(workload, -1)
        session._count(workload, -1, size)
        session.running_count[workload.queue] -= 1
        request = workload.request
        session.ledger.give_back(
            workload.placement, request.cpu_milli, request.memory_mib, workload.user
        )
        if workload.preemptible and workload.min_runtime > 0 and workload.started_at is not None:
            entry = (workload.started_at + workload.min_runtime, name, workload.started_at)
            session._protections.discard(entry)
        self._index(workload, -1)
