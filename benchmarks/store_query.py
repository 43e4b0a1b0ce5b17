"""How fast the lists read at 100,000 workloads (docs/benchmarks.md, "Lists at 100,000
workloads").

Fills a store with ``--workloads`` workloads (``--active`` of them pending, the others
finished, each with its events and usage interval) of ``--users`` users, a few of them
heavy (a Pareto spread: the heaviest holds about half), in ``--projects`` projects. Then
it times the pages the panel, the admin page and ``frachub jobs`` ask for:

- through the store, ``Store.workloads`` as the list handlers call it: **before** (schema
  0007's single-column indexes; pages by offset, the total counted on every page, as every
  ``GET workloads`` did) and **after** (0008's (column, id) indexes; pages by cursor; the
  total counted only for the pagination envelope, shown apart); and what each write costs
  with either set of indexes (``--writes`` workloads submitted, started and finished, one
  commit each);
- through the real service's HTTP API (a JupyterHub and its proxy in front, the service on
  the filled store, ``--no-http`` skips it): the same pages by offset and by cursor, bare
  and in the envelope; with ``--before-source DIR`` (the code before, say
  ``git archive f08d69e | tar -x -C DIR``) its service answers them first, on the store at
  0007.

Each figure is the median wall time of ``--repeat`` reads and the CPU time they took (the
process time of this process for the store; the service's own, from /proc, for HTTP).

    .venv/bin/python benchmarks/store_query.py                 # 100,000 workloads, SQLite
    .venv/bin/python benchmarks/store_query.py --postgres      # on a throwaway PostgreSQL
    .venv/bin/python benchmarks/store_query.py --workloads 10000 --no-http
    .venv/bin/python benchmarks/store_query.py --before-source /tmp/frachub-before
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
from alembic import command
from sqlalchemy import Column, create_engine, event, insert, inspect, text

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from hubharness import API_PATH, Hub, ServiceProcess  # noqa: E402

from scheduler.service.persistence.orm import (  # noqa: E402
    ACTIVE_STATES,
    FINAL_STATES,
    EventRecord,
    UsageRecord,
    WorkloadRecord,
)
from scheduler.service.persistence.store import (  # noqa: E402
    Store,
    _alembic_config,
    _sqlite_pragmas,
    engine_url,
)

DAY = 86400.0
PAGINATED = {"Accept": "application/jupyterhub-pagination+json"}
SPACING = 10.0
"""Seconds between two submissions: 100,000 workloads span the last 12 days."""


def later_columns() -> list[Column]:
    """The workloads' columns that later migrations than 0007 added (0009's idempotency key):
    the "before" store has them too, empty and unindexed, so that the ORM of today can read
    and write it; only the list indexes differ, which is what the benchmark compares."""
    engine = create_engine("sqlite://")
    with engine.begin() as connection:
        command.upgrade(_alembic_config(connection), "0007")
        old = {column["name"] for column in inspect(connection).get_columns("workloads")}
    engine.dispose()
    return [column for column in WorkloadRecord.__table__.columns if column.name not in old]


def fill(url: str, args: argparse.Namespace) -> dict[str, str]:
    """The workloads, their events and usage intervals, at schema 0007 (with
    ``later_columns``); the names the cases use (the heaviest and a light user, the
    heaviest user's project)."""
    engine = create_engine(engine_url(url))
    with engine.begin() as connection:
        command.upgrade(_alembic_config(connection), "0007")
        for column in later_columns():
            kind = column.type.compile(engine.dialect)
            connection.execute(text(f"ALTER TABLE workloads ADD COLUMN {column.name} {kind}"))
    rng = random.Random(args.seed)
    start = time.time() - args.workloads * SPACING - 3600
    workloads, events, usage = [], [], []
    for i in range(1, args.workloads + 1):
        user = f"user-{min(int(rng.paretovariate(1.2)) - 1, args.users - 1):02d}"
        home = int(user[5:]) % args.projects
        project = f"p{home if rng.random() < 0.8 else rng.randrange(args.projects):02d}"
        notebook = rng.random() < 0.1
        final = i <= args.workloads - args.active
        state = rng.choice(["succeeded"] * 6 + ["failed", "cancelled"]) if final else "pending"
        submitted = start + i * SPACING
        workloads.append(
            dict(
                id=i, name=f"job-{i}", user=user, project=project,
                kind="interactive" if notebook else "training", state=state,
                command=None if notebook else ["python", "train.py", f"--seed={i}"],
                env={"SEED": str(i)}, gpus=0.5, replicas=1, priority=50, preemptible=True,
                min_runtime=0.0, submitted_at=submitted,
                started_at=submitted + 1 if final else None,
                finished_at=submitted + 100 if final else None, start_seq=i, placement=[],
                restart_count=0, preemptions=0, message="exited with code 0" if final else "",
            )
        )  # fmt: skip
        events.append(dict(workload_id=i, time=submitted, type="submitted", message="by owner"))
        if final:
            events.append(dict(workload_id=i, time=submitted + 1, type="started", message="ok"))
            events.append(dict(workload_id=i, time=submitted + 100, type=state, message="done"))
            usage.append(dict(workload_id=i, user=user, project=project, gpus=0.5,
                              start=submitted + 1, end=submitted + 100))  # fmt: skip
    with engine.begin() as connection:
        tables = (
            (WorkloadRecord.__table__, workloads),
            (EventRecord.__table__, events),
            (UsageRecord.__table__, usage),
        )
        for table, rows in tables:
            for k in range(0, len(rows), 5000):
                connection.execute(insert(table), rows[k : k + 5000])
        if engine.dialect.name == "postgresql":
            connection.execute(text(f"SELECT setval('workloads_id_seq', {args.workloads})"))
            connection.execute(text("ANALYZE"))  # what autovacuum does after a load
    engine.dispose()
    counts: dict[str, int] = {}
    for row in workloads:
        counts[row["user"]] = counts.get(row["user"], 0) + 1
    ranked = sorted(counts, key=counts.get, reverse=True)  # type: ignore[arg-type]
    heavy, light = ranked[0], ranked[len(ranked) // 2]
    project = f"p{int(heavy[5:]) % args.projects:02d}"
    return {
        "workloads": str(args.workloads),
        "heavy": heavy,
        "light": light,
        "project": project,
        "heavy_rows": str(counts[heavy]),
        "light_rows": str(counts[light]),
        "project_rows": str(sum(row["project"] == project for row in workloads)),
    }


def store_at(url: str) -> Store:
    """The service's store on ``url`` as it is (no upgrade: ``open_store`` would migrate)."""
    engine = create_engine(engine_url(url))
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return Store(engine)


def upgrade(url: str) -> None:
    """From the "before" store to today's schema: ``later_columns`` out, and every
    migration after 0007 (which puts them back, with their indexes)."""
    engine = create_engine(engine_url(url))
    with engine.begin() as connection:
        for column in later_columns():
            connection.execute(text(f"ALTER TABLE workloads DROP COLUMN {column.name}"))
        command.upgrade(_alembic_config(connection), "head")
    engine.dispose()


def timed(read: Callable[[], object], repeat: int, cpu: Callable[[], float]) -> tuple[float, float]:
    """Median wall milliseconds of ``repeat`` reads, and CPU milliseconds per read."""
    read()  # warm: the first read of a page pulls it into the cache
    walls = []
    used = cpu()
    for _ in range(repeat):
        began = time.perf_counter()
        read()
        walls.append(time.perf_counter() - began)
    return 1000 * statistics.median(walls), 1000 * (cpu() - used) / repeat


def cases(names: dict[str, str]) -> list[tuple[str, dict, int]]:
    """(what, filters, position): the pages the panel, the admin page and the CLI read; deep
    pages half-way through their list."""
    heavy, light, project = names["heavy"], names["light"], names["project"]
    active, final = ACTIVE_STATES, FINAL_STATES
    half = {key: int(names[key]) // 2 for key in ("workloads", "heavy_rows", "project_rows")}
    return [
        ("admin: newest 50", {}, 0),
        (f"admin: page at {half['workloads']:,}", {}, half["workloads"]),
        (f"heavy user ({int(names['heavy_rows']):,} rows): newest 50", {"users": [heavy]}, 0),
        (f"heavy user: page at {half['heavy_rows']:,}", {"users": [heavy]}, half["heavy_rows"]),
        (f"light user ({names['light_rows']} rows): newest 50", {"users": [light]}, 0),
        (
            f"project ({int(names['project_rows']):,} rows): page at {half['project_rows']:,}",
            {"projects": [project]},
            half["project_rows"],
        ),
        ("admin page: active, 500", {"states": active, "limit": 500}, 0),
        ("panel: a user's active, 500", {"users": [heavy], "states": active, "limit": 500}, 0),
        (
            "panel: a user's notebooks (pending, running)",
            {"users": [heavy], "allocations": True, "states": ["pending", "running"]},
            0,
        ),
        (
            "`jobs`: a user's 10 latest finished",
            {"users": [heavy], "states": final, "limit": 10},
            0,
        ),
    ]


def cursor_at(store: Store, filters: dict, position: int) -> int | None:
    """The cursor a client holds after reading ``position`` rows (the last id it saw)."""
    if position == 0:
        return None
    page = store.workloads(**{**filters, "limit": 1}, offset=position - 1)
    return page.records[0].id


def writes(store: Store, count: int) -> list[tuple[str, float, float]]:
    """What each write costs with the indexes there are: ``count`` workloads submitted, then
    started, then finished, one commit each (the service commits each change with its
    event). Median wall ms and CPU ms per write, for each kind."""
    records = [
        WorkloadRecord(
            name=f"written-{i}", user="writer", project="p00", kind="training",
            state="pending", command=["true"], env={}, gpus=0.5, replicas=1, priority=50,
            preemptible=True, min_runtime=0.0, submitted_at=time.time(),
        )
        for i in range(count)
    ]  # fmt: skip

    def submit(record: WorkloadRecord) -> None:
        store.add(record)

    def start(record: WorkloadRecord) -> None:
        record.state, record.started_at = "running", time.time()

    def finish(record: WorkloadRecord) -> None:
        record.state, record.finished_at = "succeeded", time.time()

    found = []
    for what, change in (("submit", submit), ("start", start), ("finish", finish)):
        walls = []
        used = time.process_time()
        for record in records:
            began = time.perf_counter()
            change(record)
            store.commit()
            walls.append(time.perf_counter() - began)
        cpu = 1000 * (time.process_time() - used) / count
        found.append((f"write: {what} (one commit)", 1000 * statistics.median(walls), cpu))
    return found


def measure_store(url: str, names: dict[str, str], args: argparse.Namespace) -> list[list]:
    cpu = time.process_time
    heavy = names["heavy"]
    rows = []
    before = store_at(url)
    for what, filters, position in cases(names):
        filters = {"limit": 50, **filters}
        wall, used = timed(
            lambda f=filters, p=position: before.workloads(**f, offset=p, count=True),
            args.repeat,
            cpu,
        )
        rows.append([what, wall, used])
        before.rollback()
    written = writes(before, args.writes)
    before.close()
    upgrade(url)
    after = store_at(url)
    for row, (_, filters, position) in zip(rows, cases(names), strict=True):
        filters = {"limit": 50, **filters}
        cursor = cursor_at(after, filters, position)
        page = after.workloads(**filters, before=cursor)
        assert len(page.records) == filters["limit"] or not page.more
        row += timed(lambda f=filters, c=cursor: after.workloads(**f, before=c), args.repeat, cpu)
        row += timed(
            lambda f=filters, c=cursor: after.workloads(**f, before=c, count=True),
            args.repeat,
            cpu,
        )
        after.rollback()
    for what, read in (
        ("a workload's events", lambda: after.events(args.workloads // 2)),
        (
            "usage, 30 days, heavy user",
            lambda: after.usage(time.time() - 30 * DAY, time.time(), time.time(), (), [heavy]),
        ),
        ("usage, 30 days, admin", lambda: after.usage(time.time() - 30 * DAY, *[time.time()] * 2)),
    ):
        rows.append([what, None, None, *timed(read, args.repeat, cpu), None, None])
        after.rollback()
    for old, new in zip(written, writes(after, args.writes), strict=True):
        rows.append([old[0], *old[1:], *new[1:], None, None])
    after.close()
    return rows


def service_cpu(pid: int) -> float:
    """The service's user + system CPU seconds so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_http(
    url: str, names: dict[str, str], args: argparse.Namespace, source: Path | None = None
) -> list[list]:
    """Each request of ``http_cases`` by offset and (unless the service runs the code in
    ``source``, from before cursors) by cursor."""
    work = Path(tempfile.mkdtemp(prefix="frachub-store-bench-"))
    env = {"PYTHONPATH": str(source)} if source is not None else None
    queues = [{"name": f"p{i:02d}", "deserved_gpus": 0} for i in range(args.projects)]
    config = "\n".join(
        [
            f"c.FracHubService.db_url = {url!r}",
            f"c.FracHubService.queues = {queues!r}",
            "c.FracHubService.idle_check_interval = 0",
            "c.FracHubService.workload_retention_days = 0",  # keep every filled workload
            'c.LocalBackend.inventory_source = "declared"',
            "c.LocalBackend.declared_inventory = []",
            "c.LocalBackend.run_as_user = False",
            'c.Application.log_level = "WARN"',
        ]
    )
    rows = []
    print(f"starting JupyterHub and the service in {work}", file=sys.stderr)
    with (
        Hub(work / "hub") as hub,
        ServiceProcess(hub, config, work / "service", env=env, start_timeout=300) as service,
    ):
        hub.create_user(names["heavy"])
        hub.create_user("bench-admin", admin=True)
        pid = service.pid
        assert pid is not None
        cpu = service_cpu
        clients = {
            who: httpx.Client(
                base_url=hub.service_url(API_PATH),
                headers={"Authorization": f"token {hub.token_for(name)}"},
                timeout=120,
            )
            for who, name in (("user", names["heavy"]), ("admin", "bench-admin"))
        }
        with contextlib.ExitStack() as stack:
            for client in clients.values():
                stack.enter_context(client)
            for what, who, query, position, envelope in http_cases(names):
                client = clients[who]
                offset = f"{query}&offset={position}" if position else query
                cursor = query
                if position:
                    page = client.get(f"{query}&offset={position - 1}&limit=1").json()
                    cursor = f"{query}&cursor={page[0]['id']}.{position}"
                headers = PAGINATED if envelope else {}

                def get(path: str, c: httpx.Client = client, h: dict = headers) -> None:
                    c.get(path, headers=h).raise_for_status()

                row = [what, *timed(lambda p=offset: get(p), args.repeat, lambda: cpu(pid))]
                if source is None:
                    row += timed(lambda p=cursor: get(p), args.repeat, lambda: cpu(pid))
                rows.append(row)
    return rows


def http_cases(names: dict[str, str]) -> Iterator[tuple[str, str, str, int, bool]]:
    """(what, who, query, position, envelope)."""
    deep, middle = int(names["heavy_rows"]) // 2, int(names["workloads"]) // 2
    yield "heavy user: newest 50 (the panel)", "user", "workloads?limit=50", 0, False
    yield f"heavy user: page at {deep:,}", "user", "workloads?limit=50", deep, False
    yield f"heavy user: page at {deep:,}, envelope", "user", "workloads?limit=50", deep, True
    yield f"admin: page at {middle:,}", "admin", "workloads?limit=50", middle, False
    yield "admin page: active, 500, envelope", "admin", "workloads?active=1&limit=500", 0, True


def cell(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}" if value < 10 else f"{value:.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=100_000)
    parser.add_argument("--active", type=int, default=2_000)
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--projects", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--writes", type=int, default=1000, help="workloads written")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--postgres", action="store_true", help="a throwaway PostgreSQL")
    parser.add_argument("--no-http", action="store_true", help="the store only")
    parser.add_argument(
        "--before-source",
        type=Path,
        help="a copy of the code before (git archive COMMIT | tar -x -C DIR): its service "
        "answers the API on the 0007 store first, for the HTTP table's 'before' column",
    )
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        if args.postgres:
            from postgres import PostgresServer

            url = stack.enter_context(PostgresServer()).database()
        else:
            directory = stack.enter_context(tempfile.TemporaryDirectory())
            url = f"sqlite:///{Path(directory) / 'frachub.sqlite'}"
        began = time.perf_counter()
        names = fill(url, args)
        before_http = None
        if args.before_source and not args.no_http:  # the old service on the 0007 store
            before_http = measure_http(url, names, args, source=args.before_source.resolve())
        print(
            f"{args.workloads:,} workloads ({args.active:,} pending) of {args.users} users in "
            f"{args.projects} projects, filled in {time.perf_counter() - began:.0f} s;"
            f" {'PostgreSQL' if args.postgres else 'SQLite'}; median of {args.repeat}",
            file=sys.stderr,
        )
        print("\nThrough the store (ms per page: wall / CPU)\n")
        print("| page | before: 0007, offset, counted | after: 0008, cursor | after, counted |")
        print("| --- | --- | --- | --- |")
        for what, *values in measure_store(url, names, args):
            pairs = [f"{cell(values[i])} / {cell(values[i + 1])}" for i in (0, 2, 4)]
            print(f"| {what} | " + " | ".join(p if p != " / " else "" for p in pairs) + " |")
        if not args.no_http:
            rows = measure_http(url, names, args)
            print("\nThrough the service's HTTP API (ms per request: wall / service CPU)\n")
            heads = ["after: by offset", "after: by cursor"]
            if before_http is not None:
                heads.insert(0, "before: by offset")
                rows = [
                    [row[0], *old[1:], *row[1:]] for old, row in zip(before_http, rows, strict=True)
                ]
            print("| request | " + " | ".join(heads) + " |")
            print("| --- " * (len(heads) + 1) + "|")
            for what, *values in rows:
                pairs = [
                    f"{cell(values[i])} / {cell(values[i + 1])}"
                    for i in range(0, 2 * len(heads), 2)
                ]
                print(f"| {what} | " + " | ".join(pairs) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
