"""The store's tables, as SQLAlchemy ORM classes.

The service keeps the rows of active workloads in memory as these very objects (one
long-lived session with ``expire_on_commit=False``, the way JupyterHub keeps its users), so
there is one representation of a workload, and every change reaches the database in the same
transaction as its event. Times are Unix seconds (floats); the API renders them as ISO 8601.

Changing a table means adding a migration under ``migrations/versions`` as well.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    event,
    inspect,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Mapper, mapped_column

from scheduler.common.limits import MAX_IDEMPOTENCY_KEY
from scheduler.common.placement import GpuShare, Placement, ReplicaPlacement
from scheduler.common.states import WorkloadState
from scheduler.engine import Kind, Queue, Request, Workload, WorkloadRequest, lifecycle
from scheduler.engine.lifecycle import KEPT_FIELDS, Life


class Base(DeclarativeBase):
    pass


class TooLong(ValueError):
    """A string longer than its column: a bug in the edge's checks, refused alike on every
    database (PostgreSQL refuses it, SQLite would keep it whole)."""


_BOUNDED: dict[Mapper, list[tuple[str, str, int]]] = {}
"""Each mapper's string columns with a length: (attribute, column, length), found once
rather than on every row written (a flush of a submission writes two rows)."""


def _bounded(mapper: Mapper) -> list[tuple[str, str, int]]:
    found = _BOUNDED.get(mapper)
    if found is None:
        found = []
        for attribute in mapper.column_attrs:
            column = attribute.columns[0]
            length = getattr(column.type, "length", None)
            if isinstance(column.type, String) and length is not None:
                found.append((attribute.key, column.name, length))
        _BOUNDED[mapper] = found
    return found


@event.listens_for(Base, "before_insert", propagate=True)
@event.listens_for(Base, "before_update", propagate=True)
def _refuse_too_long(mapper: Mapper, connection: Any, target: Base) -> None:
    values = target.__dict__  # what was set or loaded; an unloaded column is not written
    for key, column, length in _bounded(mapper):
        _check(mapper, column, length, values.get(key))


def refuse_too_long(mapper: Mapper, row: Mapping[str, Any]) -> None:
    """The same check for a row written without the ORM (``row`` by column name, as a Core
    insert or update takes it: ``persistence/writer.py``)."""
    for _, column, length in _bounded(mapper):
        _check(mapper, column, length, row.get(column))


def _check(mapper: Mapper, column: str, length: int, value: Any) -> None:
    if isinstance(value, str) and len(value) > length:
        raise TooLong(
            f"{mapper.local_table.name}.{column}: {len(value)} characters, more than "
            f"the {length} it holds"
        )


_COLUMNS: dict[type, frozenset[str]] = {}


def _columns_of(cls: type) -> frozenset[str]:
    """The mapped column attributes of ``cls`` (what its constructor accepts)."""
    found = _COLUMNS.get(cls)
    if found is None:
        found = _COLUMNS[cls] = frozenset(a.key for a in inspect(cls).column_attrs)
    return found


ACTIVE_STATES = tuple(state.value for state in lifecycle.ACTIVE_STATES)
"""States the scheduler still acts on, as stored; every other state is final."""
FINAL_STATES = tuple(state.value for state in lifecycle.FINAL_STATES)

NAME_LENGTH = 255
"""Characters a stored name holds (workload, user, project, server and queue names): the
edge refuses longer input, and a name the service derives is cut to fit
(``scheduler/service/handlers/allocations.py``), so PostgreSQL never refuses a row that
SQLite would silently keep."""


class WorkloadRecord(Base):
    """A training job or a notebook's GPU allocation (``command`` is None for allocations)."""

    __tablename__ = "workloads"
    __table_args__ = (
        # each filter of the lists with the id they are ordered by, and the state that
        # filters a user's or a project's further (migration 0008)
        Index("ix_workloads_user_id_state", "user", "id", "state"),
        Index("ix_workloads_project_id_state", "project", "id", "state"),
        Index("ix_workloads_state_id", "state", "id"),
        # a user's idempotency keys are theirs alone, and one key makes one workload: a
        # retried submission finds the first instead of storing a second (migration 0009)
        Index("ix_workloads_user_idempotency_key", "user", "idempotency_key", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(NAME_LENGTH))
    user: Mapped[str] = mapped_column(String(NAME_LENGTH))
    project: Mapped[str] = mapped_column(String(NAME_LENGTH))
    kind: Mapped[str] = mapped_column(String(32))
    state: Mapped[str] = mapped_column(String(32))
    command: Mapped[Any] = mapped_column(JSON(none_as_null=True), nullable=True)
    working_dir: Mapped[str | None] = mapped_column(Text, nullable=True)
    env: Mapped[dict] = mapped_column(JSON, default=dict)
    server_name: Mapped[str | None] = mapped_column(String(NAME_LENGTH), nullable=True)
    gpus: Mapped[float | None] = mapped_column(Float, nullable=True)
    gpu_memory_mib: Mapped[int | None] = mapped_column(Integer, nullable=True)
    gpu_model: Mapped[list | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    """GPU models it may run on (sorted names); None: any."""
    cpu_milli: Mapped[int] = mapped_column(Integer, server_default="0")
    """CPU per replica in thousandths of a core (0: none asked; migration 0011)."""
    memory_mib: Mapped[int] = mapped_column(Integer, server_default="0")
    """Memory (RAM) per replica in MiB (0: none asked)."""
    replicas: Mapped[int] = mapped_column(Integer, default=1)
    priority: Mapped[int] = mapped_column(Integer)
    preemptible: Mapped[bool] = mapped_column(Boolean)
    min_runtime: Mapped[float] = mapped_column(Float, default=0.0)
    max_runtime: Mapped[float | None] = mapped_column(Float, nullable=True)
    checkpoint_interval: Mapped[float | None] = mapped_column(Float, nullable=True)
    """Seconds between the job's checkpoints, as submitted; None: not declared."""
    checkpointed_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    """When the job last reported a checkpoint (the lifecycle's ``checkpointed_at``)."""
    submitted_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    start_seq: Mapped[int] = mapped_column(Integer, default=0)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True, index=True)
    placement_json: Mapped[list] = mapped_column("placement", JSON, default=list)
    handle: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    restart_count: Mapped[int] = mapped_column(Integer, default=0)
    preemptions: Mapped[int] = mapped_column(Integer, default=0)
    stop_reason: Mapped[str | None] = mapped_column(String(32), nullable=True)
    claimant_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    """While preempting: the workload this one was evicted for."""
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    message: Mapped[str] = mapped_column(Text, default="")
    idle_timeout: Mapped[float | None] = mapped_column(Float, nullable=True)
    """Allocations: seconds of idleness after which the server is stopped; None: never."""
    last_activity: Mapped[float | None] = mapped_column(Float, nullable=True)
    """Allocations with an idle limit: the server's last activity as the service last saw it."""
    idle_stop_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    """When the server is stopped if it stays idle (a warning's promise once warned)."""
    idle_warning: Mapped[str | None] = mapped_column(Text, nullable=True)
    """The warning shown while an idle server waits to be stopped; None when not warned."""
    sweep_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    """Jobs of a sweep: the sweep's id (its first member's id); None for other workloads."""
    sweep_parallel: Mapped[int | None] = mapped_column(Integer, nullable=True)
    """Jobs of a sweep: how many of its members may hold GPUs at once (the service holds the
    others back from the engine, see ``scheduler/service/policies/sweeps.py``)."""
    after_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    """The job it waits for (``after``/``after_ok``), None for none; the service holds it
    back until then (``scheduler/service/policies/dependencies.py``)."""
    after_ok: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    """With ``after_id``: start only once that job succeeded (cancelled if it did not); None
    or False: once it ended, whatever its outcome."""
    idempotency_key: Mapped[str | None] = mapped_column(String(MAX_IDEMPOTENCY_KEY), nullable=True)
    """The ``Idempotency-Key`` it was submitted with (a sweep: on its first member only);
    None when the client sent none. Kept, like the row, for ``workload_retention_days``."""
    request_digest: Mapped[str | None] = mapped_column(String(64), nullable=True)
    """With a key: the SHA-256 of the body it was submitted with, so that the same key with
    another body is refused rather than answered with this workload."""

    @property
    def placement(self) -> Placement:
        return placement_from_json(self.placement_json)

    @placement.setter
    def placement(self, value: Placement) -> None:
        self.placement_json = placement_to_json(value)

    @property
    def is_allocation(self) -> bool:
        return self.command is None

    @property
    def claimant(self) -> str | None:
        """``claimant_id`` as the engine names workloads."""
        return None if self.claimant_id is None else str(self.claimant_id)

    @claimant.setter
    def claimant(self, value: str | None) -> None:
        self.claimant_id = None if value is None else int(value)

    @classmethod
    def asking(cls, ask: WorkloadRequest, **service: Any) -> WorkloadRecord:
        """A new row for what was asked (its project, user and minimum run time resolved);
        ``service`` holds the columns the service adds (name, command, server, ...)."""
        unknown = service.keys() - _columns_of(cls)
        if unknown:
            raise TypeError(f"{cls.__name__} has no column {', '.join(sorted(unknown))}")
        request = ask.request
        # the columns go straight into the new object's __dict__, as a query's load puts
        # them: the instrumented constructor's per-attribute bookkeeping cost 40 us a
        # submission, and a new row has no history to track (the writer inserts what the
        # __dict__ holds and then marks it loaded: ``persistence/writer.py``)
        record = cls._sa_class_manager.new_instance()
        record.__dict__.update(
            user=ask.user,
            project=ask.project,
            kind=ask.kind.value,
            gpus=None if request.gpu_memory_mib is not None else request.gpus,
            gpu_memory_mib=request.gpu_memory_mib,
            gpu_model=sorted(request.gpu_models) or None,
            cpu_milli=request.cpu_milli,
            memory_mib=request.memory_mib,
            replicas=request.replicas,
            priority=ask.priority,
            preemptible=ask.preemptible,
            min_runtime=ask.min_runtime,
            max_runtime=ask.max_runtime,
            checkpoint_interval=ask.checkpoint_interval,
            **service,
        )
        return record

    def asked(self) -> WorkloadRequest:
        """What it asked for, as stored (the inverse of ``asking``)."""
        return WorkloadRequest(
            kind=Kind(self.kind),
            request=Request(
                gpus=self.gpus or 0.0,
                gpu_memory_mib=self.gpu_memory_mib,
                replicas=self.replicas,
                cpu_milli=self.cpu_milli or 0,
                memory_mib=self.memory_mib or 0,
                gpu_models=frozenset(self.gpu_model or ()),
            ),
            priority=self.priority,
            preemptible=self.preemptible,
            project=self.project,
            user=self.user,
            min_runtime=self.min_runtime,
            max_runtime=self.max_runtime,
            checkpoint_interval=self.checkpoint_interval,
        )

    def as_workload(self) -> Workload:
        """What it asked for, as the engine sees it (named by its id, ordered by it)."""
        return self.asked().workload(str(self.id), self.id, self.submitted_at)

    def as_life(self, *, new: bool = False) -> Life:
        """Its life as the lifecycle keeps it: the ask and every ``kept`` field (their
        defaults for a ``new`` workload, which has had no life yet)."""
        kept: dict[str, Any] = {}
        if not new:
            kept = {name: getattr(self, name) for name in KEPT_FIELDS}
            kept["state"] = WorkloadState(self.state)
        return Life(
            self.as_workload(),
            title=self.name,
            allocation=self.is_allocation,
            max_runtime=self.max_runtime,
            **kept,
        )

    def keep(self, life: Life) -> None:
        """Copy what happened to it from its life (the lifecycle's ``kept`` fields)."""
        for name, value in life.kept_values().items():
            setattr(self, name, value.value if isinstance(value, WorkloadState) else value)


class EventRecord(Base):
    """One line of a workload's history ("started on node-0 GPU 1", "preempted: reclaim")."""

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id"), index=True)
    time: Mapped[float] = mapped_column(Float)
    type: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text, default="")


HOST_QUOTAS = (
    "deserved_cpu_milli",
    "limit_cpu_milli",
    "over_quota_weight_cpu",
    "deserved_memory_mib",
    "limit_memory_mib",
    "over_quota_weight_memory",
)
"""The engine ``Queue``'s CPU and memory fields, stored in ``queues`` under the same names."""


class QueueRecord(Base):
    """A project or department. ``source`` is "config" for queues the config file defines
    (changed only there) and "api" for queues admins created through the REST API."""

    __tablename__ = "queues"

    name: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    parent: Mapped[str | None] = mapped_column(String(NAME_LENGTH), nullable=True)
    deserved_gpus: Mapped[float | None] = mapped_column(Float, nullable=True)
    over_quota_weight: Mapped[float] = mapped_column(Float, default=1.0)
    limit_gpus: Mapped[float | None] = mapped_column(Float, nullable=True)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    members: Mapped[list] = mapped_column(JSON, default=list)
    source: Mapped[str] = mapped_column(String(16), default="api")
    position: Mapped[int] = mapped_column(Integer, default=0)
    # CPUs (milli-cores) and memory (MiB) by quota (rule 3b; migration 0010); NULL: unlimited
    deserved_cpu_milli: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    limit_cpu_milli: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    over_quota_weight_cpu: Mapped[float | None] = mapped_column(Float, nullable=True)
    deserved_memory_mib: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    limit_memory_mib: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    over_quota_weight_memory: Mapped[float | None] = mapped_column(Float, nullable=True)
    default_time_limit: Mapped[float | None] = mapped_column(Float, nullable=True)
    """Seconds: the time limit of the project's jobs that name none (None: no limit)."""
    max_time_limit: Mapped[float | None] = mapped_column(Float, nullable=True)
    """Seconds: the longest time limit its jobs may name, and theirs when there is no default."""

    def set_quota(self, queue: Queue) -> None:
        """Take a validated queue's place in the tree and its quotas."""
        self.parent = queue.parent
        self.deserved_gpus = queue.deserved_gpus
        self.over_quota_weight = queue.over_quota_weight
        self.limit_gpus = queue.limit_gpus
        self.priority = queue.priority
        for name in HOST_QUOTAS:
            setattr(self, name, getattr(queue, name))

    def as_queue(self) -> Queue:
        return Queue(
            self.name,
            parent=self.parent,
            deserved_gpus=self.deserved_gpus,
            over_quota_weight=self.over_quota_weight,
            limit_gpus=self.limit_gpus,
            priority=self.priority,
            **{name: getattr(self, name) for name in HOST_QUOTAS},
        )


class UsageRecord(Base):
    """An interval during which a workload held GPUs; ``end`` is None while it still does."""

    __tablename__ = "usage"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id"), index=True)
    user: Mapped[str] = mapped_column(String(NAME_LENGTH), index=True)
    project: Mapped[str] = mapped_column(String(NAME_LENGTH), index=True)
    gpus: Mapped[float] = mapped_column(Float)
    cpu: Mapped[float] = mapped_column(Float, server_default="0")
    """CPU cores it held (all replicas), for CPU-hours (migration 0011)."""
    memory_gib: Mapped[float] = mapped_column(Float, server_default="0")
    """Memory (GiB) it held (all replicas), for memory-hours."""
    start: Mapped[float] = mapped_column(Float, index=True)
    end: Mapped[float | None] = mapped_column(Float, nullable=True, index=True)


class UsageSampleRecord(Base):
    """One project's state at one moment, written by the service every
    ``usage_sample_interval``: what the panel's history charts draw (GPUs in use against
    quota and fair share, queue lengths), kept ``usage_sample_retention_days``."""

    __tablename__ = "usage_samples"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    time: Mapped[float] = mapped_column(Float, index=True)
    project: Mapped[str] = mapped_column(String(NAME_LENGTH), index=True)
    allocated_gpus: Mapped[float] = mapped_column(Float)
    deserved_gpus: Mapped[float] = mapped_column(Float)
    fair_share_gpus: Mapped[float] = mapped_column(Float)
    running: Mapped[int] = mapped_column(Integer)
    pending: Mapped[int] = mapped_column(Integer)
    cluster_gpus: Mapped[float] = mapped_column(Float)
    """The GPUs the cluster had at that moment (the same on every row of one sample)."""
    allocated_cpu: Mapped[float] = mapped_column(Float, server_default="0")
    """CPU cores the project's work holding GPUs asked for (migration 0011)."""
    allocated_memory_gib: Mapped[float] = mapped_column(Float, server_default="0")
    """Memory (GiB) the project's work holding GPUs asked for."""


class RevocationRecord(Base):
    """A job token still to be revoked: its attempt has ended and been reported, and the hub
    has not yet confirmed the token gone (``scheduler/service/hub/revocations.py``). Stored
    before the end is reported, deleted once revoked, so a service that stops in between
    revokes it after its restart (migration 0013)."""

    __tablename__ = "pending_revocations"

    token_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user: Mapped[str] = mapped_column(String(NAME_LENGTH))
    since: Mapped[float] = mapped_column(Float)
    """When its attempt's end was heard: a token older than its lifetime has expired."""


def placement_to_json(placement: Placement) -> list:
    return [
        {"node": replica.node, "gpus": [[share.index, share.milli] for share in replica.gpus]}
        for replica in placement
    ]


def placement_from_json(data: list) -> Placement:
    return tuple(
        ReplicaPlacement(
            replica["node"], tuple(GpuShare(int(i), int(milli)) for i, milli in replica["gpus"])
        )
        for replica in data or ()
    )
