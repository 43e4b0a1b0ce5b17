"""Durable state: the SQL database behind the service (SQLite with WAL by default, any
SQLAlchemy URL such as PostgreSQL by configuration).

Every change the scheduler makes is one ``commit()``: the rows it touched and the events
that explain them land together or not at all, so a crash never leaves a half-written
workload. The service shares one session between its requests and its cycles, so each of
them ends its transaction before it yields to another (``end``): a request or cycle that
failed half-way rolls back what it left, and a failed flush never leaves the session unusable
for everyone after it. The schema is versioned with Alembic; ``open_store`` upgrades an
older database on start-up and refuses one written by a newer FracHub.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import (
    Integer,
    case,
    cast,
    create_engine,
    delete,
    event,
    func,
    inspect,
    or_,
    select,
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from scheduler.service.persistence.orm import (
    ACTIVE_STATES,
    EventRecord,
    QueueRecord,
    UsageRecord,
    UsageSampleRecord,
    WorkloadRecord,
)

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"


class StoreError(RuntimeError):
    """The database cannot be used (unreachable, or newer than this FracHub)."""


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    # WAL lets readers go on while the scheduler writes; NORMAL is durable across a process
    # crash (the case we promise), trading only the last transactions on a power loss.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _alembic_config(connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest revision this code knows."""
    with engine.begin() as connection:
        config = _alembic_config(connection)
        current = MigrationContext.configure(connection).get_current_revision()
        known = {rev.revision for rev in ScriptDirectory.from_config(config).walk_revisions()}
        if current is not None and current not in known:
            raise StoreError(
                f"the database is at schema revision {current}, which this FracHub does not "
                "know; it was written by a newer version. Upgrade FracHub or use another "
                "database."
            )
        command.upgrade(config, "head")


def engine_url(url: str) -> str:
    """``postgresql://`` (and ``postgres://``) mean psycopg 3, the driver the ``postgresql``
    extra installs (SQLAlchemy alone would look for psycopg2)."""
    for scheme in ("postgresql://", "postgres://"):
        if url.startswith(scheme):
            return "postgresql+psycopg://" + url.removeprefix(scheme)
    return url


CONNECT_TIMEOUT = 5
"""Seconds to wait for a PostgreSQL server to accept a connection."""


def open_store(url: str) -> Store:
    """Connect, create or upgrade the schema, and return the store."""
    url = engine_url(url)
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    # a PostgreSQL server that accepts connections but never answers must not hang the
    # service: libpq gives up connecting after this many seconds (the request then gets 503)
    connect_args = {"connect_timeout": CONNECT_TIMEOUT} if url.startswith("postgresql") else {}
    try:
        engine = create_engine(url, connect_args=connect_args)
    except Exception as error:  # a malformed URL or a missing driver
        raise StoreError(f"cannot use database {url!r}: {error}") from error
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    try:
        upgrade(engine)
    except StoreError:
        raise
    except Exception as error:
        raise StoreError(f"cannot open database {url!r}: {error}") from error
    return Store(engine)


@dataclass(frozen=True)
class WorkloadPage:
    records: list[WorkloadRecord]
    more: bool
    """Whether more rows match after the last one."""
    total: int | None
    """How many match in all, when asked for."""


@dataclass(frozen=True)
class UsageRow:
    project: str
    user: str
    gpu_hours: float
    cpu_hours: float = 0.0
    """Core-hours held (cores times hours; jobs that asked for no CPU count none)."""
    memory_gib_hours: float = 0.0
    """GiB-hours of memory held."""


@dataclass(frozen=True)
class SampleBucket:
    project: str
    time: float
    allocated_gpus: float
    fair_share_gpus: float
    deserved_gpus: float
    running: int
    pending: int
    cluster_gpus: float
    peak_allocated_gpus: float
    """The most GPUs in use at any one sample of the bucket (``allocated_gpus`` is their
    mean): the peak a chart names is this one, not the largest mean."""
    samples: int
    """How many samples the bucket holds, so means over several buckets weigh them right."""
    allocated_cpu: float = 0.0
    """Mean CPU cores asked for by the work holding GPUs."""
    allocated_memory_gib: float = 0.0


class Store:
    """One long-lived session whose objects stay usable after commit (the service keeps the
    active workloads in memory as these rows)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.session: Session = sessionmaker(engine, expire_on_commit=False)()

    def close(self) -> None:
        self.session.close()
        self.engine.dispose()

    # -- writing ------------------------------------------------------------------------

    def add(self, *records: object) -> None:
        self.session.add_all(records)

    def adopt(self, records: Iterable[WorkloadRecord]) -> None:
        """Rows another session has committed (the writer thread's) join this one as stored,
        without SQL. A copy of one that this session loaded meanwhile (a list of workloads
        read it back) leaves it, so the scheduler's row is the one the session keeps."""
        identities = self.session.identity_map
        for record in records:
            key = inspect(record).key
            found = identities.get(key) if key is not None else None
            if found is not None and found is not record:
                self.session.expunge(found)
            self.session.add(record)

    def event(self, workload: WorkloadRecord, time: float, type_: str, message: str = "") -> None:
        self.session.add(
            EventRecord(workload_id=workload.id, time=time, type=type_, message=message)
        )

    def commit(self) -> None:
        try:
            self.session.commit()
        except Exception:
            self.session.rollback()
            raise

    def rollback(self) -> None:
        self.session.rollback()

    def flush(self) -> None:
        try:
            self.session.flush()
        except Exception:
            self.session.rollback()
            raise

    def end(self, *, failed: bool) -> None:
        """Close whatever transaction a request or a round of background work left open:
        roll back if it failed with changes pending (or the database refused a flush), else
        commit. A clean failure (a 400 before anything changed) commits nothing and keeps
        the in-memory rows, which a rollback would expire and reload one by one."""
        session = self.session
        if not session.in_transaction():
            return
        transaction = session.get_transaction()
        broken = transaction is not None and not transaction.is_active
        pending = bool(session.new or session.dirty or session.deleted)
        if broken or (failed and pending):
            session.rollback()
        else:
            self.commit()

    # -- workloads ----------------------------------------------------------------------

    def active_workloads(self) -> list[WorkloadRecord]:
        query = select(WorkloadRecord).where(WorkloadRecord.state.in_(ACTIVE_STATES))
        return list(self.session.scalars(query.order_by(WorkloadRecord.id)))

    def workload(self, workload_id: int) -> WorkloadRecord | None:
        return self.session.get(WorkloadRecord, workload_id)

    def workloads(
        self,
        *,
        states: Sequence[str] = (),
        projects: Sequence[str] = (),
        users: Sequence[str] = (),
        kinds: Sequence[str] = (),
        allocations: bool | None = None,
        before: int | None = None,
        offset: int = 0,
        limit: int = 50,
        count: bool = False,
    ) -> WorkloadPage:
        """One page of workloads, newest first: those below id ``before`` (a cursor: the
        last id of the page before, read straight from the list's index however deep), or
        ``offset`` rows in (the hub's way, which reads every row it skips). ``count`` adds
        how many match in all, which reads every match's index entry: only the pagination
        envelope asks for it."""
        query = select(WorkloadRecord)
        if states:
            query = query.where(WorkloadRecord.state.in_(states))
        if projects:
            query = query.where(WorkloadRecord.project.in_(projects))
        if users:
            query = query.where(WorkloadRecord.user.in_(users))
        if kinds:
            query = query.where(WorkloadRecord.kind.in_(kinds))
        if allocations is True:
            query = query.where(WorkloadRecord.command.is_(None))
        elif allocations is False:
            query = query.where(WorkloadRecord.command.is_not(None))
        total = None
        if count:
            counted = select(func.count()).select_from(query.subquery())
            total = self.session.scalar(counted) or 0
        if before is not None:
            query = query.where(WorkloadRecord.id < before)
        # one row more than the page tells whether another page follows, without a count
        page = query.order_by(WorkloadRecord.id.desc()).offset(offset).limit(limit + 1)
        records = list(self.session.scalars(page))
        return WorkloadPage(records[:limit], len(records) > limit, total)

    def submitted_with(self, user: str, key: str) -> WorkloadRecord | None:
        """The workload ``user`` submitted with ``Idempotency-Key`` ``key`` (a sweep's first
        member), while its record is kept; read from the unique (user, key) index."""
        query = select(WorkloadRecord).where(
            WorkloadRecord.user == user, WorkloadRecord.idempotency_key == key
        )
        return self.session.scalars(query).one_or_none()

    def sweep_members(self, sweep_id: int) -> list[WorkloadRecord]:
        """A sweep's jobs in order (``scheduler/service/policies/sweeps.py``)."""
        query = select(WorkloadRecord).where(WorkloadRecord.sweep_id == sweep_id)
        return list(self.session.scalars(query.order_by(WorkloadRecord.id)))

    def events(self, workload_id: int) -> list[EventRecord]:
        query = select(EventRecord).where(EventRecord.workload_id == workload_id)
        return list(self.session.scalars(query.order_by(EventRecord.id)))

    def max_start_seq(self) -> int:
        return self.session.scalar(select(func.max(WorkloadRecord.start_seq))) or 0

    # -- queues -------------------------------------------------------------------------

    def queues(self) -> list[QueueRecord]:
        query = select(QueueRecord).order_by(QueueRecord.position, QueueRecord.name)
        return list(self.session.scalars(query))

    def delete(self, record: object) -> None:
        self.session.delete(record)

    # -- usage --------------------------------------------------------------------------

    def open_usage(self, workload: WorkloadRecord, gpus: float, start: float) -> None:
        """An interval from ``start`` on, holding ``gpus`` and the CPU and memory the
        workload asked for (each replica's, times its replicas)."""
        replicas = workload.replicas or 1
        self.session.add(
            UsageRecord(
                workload_id=workload.id,
                user=workload.user,
                project=workload.project,
                gpus=gpus,
                cpu=(workload.cpu_milli or 0) * replicas / 1000,
                memory_gib=(workload.memory_mib or 0) * replicas / 1024,
                start=start,
                end=None,
            )
        )

    def close_usage(self, workload: WorkloadRecord, end: float) -> None:
        query = select(UsageRecord).where(
            UsageRecord.workload_id == workload.id, UsageRecord.end.is_(None)
        )
        for interval in self.session.scalars(query):
            interval.end = max(end, interval.start)

    def usage(
        self,
        start: float,
        end: float,
        now: float,
        projects: Iterable[str] = (),
        users: Iterable[str] = (),
    ) -> list[UsageRow]:
        """GPU-hours (and CPU core-hours and memory GiB-hours) per (project, user) held within
        [start, end); open intervals run to now.
        Summed by the database: a month of everyone's intervals never becomes Python objects
        (100,000 of them took about a second that way). Like ``sample_buckets`` it reads in
        a session of its own, so the handler can run it in a thread."""
        stop = func.coalesce(UsageRecord.end, now)
        overlap = case((stop < end, stop), else_=end) - case(
            (UsageRecord.start > start, UsageRecord.start), else_=start
        )
        query = (
            select(
                UsageRecord.project,
                UsageRecord.user,
                func.sum(UsageRecord.gpus * overlap),
                func.sum(UsageRecord.cpu * overlap),
                func.sum(UsageRecord.memory_gib * overlap),
            )
            .where(
                UsageRecord.start < end,
                or_(UsageRecord.end.is_(None), UsageRecord.end > start),
                overlap > 0,
            )
            .group_by(UsageRecord.project, UsageRecord.user)
            .order_by(UsageRecord.project, UsageRecord.user)
        )
        projects, users = list(projects), list(users)
        if projects:
            query = query.where(UsageRecord.project.in_(projects))
        if users:
            query = query.where(UsageRecord.user.in_(users))
        with Session(self.engine) as session:
            return [
                UsageRow(p, u, held / 3600, (cores or 0) / 3600, (gib or 0) / 3600)
                for p, u, held, cores, gib in session.execute(query)
            ]

    # -- usage samples (the history charts) -------------------------------------------------

    def add_samples(self, samples: Iterable[UsageSampleRecord]) -> None:
        self.session.add_all(list(samples))

    def sample_buckets(
        self, start: float, end: float, step: float, projects: Iterable[str] | None = None
    ) -> list[SampleBucket]:
        """The samples taken within [start, end), summed up per project and ``step``-wide
        bucket by the database (a week of minute samples never becomes Python objects):
        mean GPUs in use and fair share, the largest quota, cluster size and queues, the
        time of the bucket's last sample, the most GPUs in use at one sample, how many
        samples it holds, and the mean CPU and memory asked for. Sorted by project, then
        time.

        It reads in a session of its own, not the scheduler's, so the handler can run it in a
        thread: a week of everyone's samples takes a quarter of a second on SQLite, which the
        event loop (requests and cycles) must not wait for."""
        # truncated (SQLite) or rounded (PostgreSQL): either way, equal buckets
        bucket = cast((UsageSampleRecord.time - start) / step, Integer)
        query = (
            select(
                UsageSampleRecord.project,
                func.max(UsageSampleRecord.time),
                func.avg(UsageSampleRecord.allocated_gpus),
                func.avg(UsageSampleRecord.fair_share_gpus),
                func.max(UsageSampleRecord.deserved_gpus),
                func.max(UsageSampleRecord.running),
                func.max(UsageSampleRecord.pending),
                func.max(UsageSampleRecord.cluster_gpus),
                func.max(UsageSampleRecord.allocated_gpus),
                func.count(),
                func.avg(UsageSampleRecord.allocated_cpu),
                func.avg(UsageSampleRecord.allocated_memory_gib),
            )
            .where(UsageSampleRecord.time >= start, UsageSampleRecord.time < end)
            .group_by(UsageSampleRecord.project, bucket)
            .order_by(UsageSampleRecord.project, func.max(UsageSampleRecord.time))
        )
        if projects is not None:
            query = query.where(UsageSampleRecord.project.in_(list(projects)))
        with Session(self.engine) as session:
            return [SampleBucket(*row) for row in session.execute(query)]

    def first_sample_time(self) -> float | None:
        """When the oldest sample kept was taken: since when the service has been recording,
        what the charts call "recorded since". It moves only when retention deletes old
        samples. Over every project (a younger project's chart is empty before it was made,
        which is true): the time index answers that at once, where a project filter read
        all of the project's rows."""
        with Session(self.engine) as session:
            return session.execute(select(func.min(UsageSampleRecord.time))).scalar()


# -- retention (its own short transactions, apart from the scheduler's session) -------------

PURGE_BATCH = 500


def finished_before(engine: Engine, before: float, ids: Iterable[int]) -> list[int]:
    """Those of ``ids`` that finished before ``before`` (epoch seconds)."""
    ids = list(ids)
    found: list[int] = []
    with Session(engine) as session:
        for i in range(0, len(ids), PURGE_BATCH):
            query = select(WorkloadRecord.id).where(
                WorkloadRecord.id.in_(ids[i : i + PURGE_BATCH]),
                WorkloadRecord.state.not_in(ACTIVE_STATES),
                WorkloadRecord.finished_at < before,
            )
            found += session.scalars(query)
    return found


def purge_finished(engine: Engine, before: float) -> list[int]:
    """Delete the workloads that finished before ``before``, with their events and usage
    intervals, in batches of one transaction each; return their ids. Active work is never
    touched."""
    purged: list[int] = []
    while True:
        with Session(engine) as session, session.begin():
            query = select(WorkloadRecord.id).where(
                WorkloadRecord.state.not_in(ACTIVE_STATES), WorkloadRecord.finished_at < before
            )
            batch = list(session.scalars(query.limit(PURGE_BATCH)))
            if not batch:
                return purged
            session.execute(delete(EventRecord).where(EventRecord.workload_id.in_(batch)))
            session.execute(delete(UsageRecord).where(UsageRecord.workload_id.in_(batch)))
            session.execute(delete(WorkloadRecord).where(WorkloadRecord.id.in_(batch)))
        purged += batch


def purge_samples(engine: Engine, before: float) -> int:
    """Delete the usage samples taken before ``before``, in one short transaction of their
    own; return how many."""
    with Session(engine) as session, session.begin():
        result = session.execute(delete(UsageSampleRecord).where(UsageSampleRecord.time < before))
    return result.rowcount or 0
