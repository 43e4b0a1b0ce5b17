"""How long the usage history takes to read (docs/benchmarks.md, "Usage history").

Fills a fresh SQLite store (the service's own ``open_store``, WAL) with a week of minute
samples for ``--projects`` projects and the cluster row, as the service's sampler writes
them, then times ``Store.first_sample_time`` and ``Store.sample_buckets``, the two queries
behind ``GET history`` and the panel's charts, for the day (288 buckets) and week (336
buckets) views, one project (a user) and every project (an admin). Best of ``--repeat``
runs with ``time.perf_counter``.

    .venv/bin/python benchmarks/history_query.py               # 10 projects, a week
    .venv/bin/python benchmarks/history_query.py --projects 50
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from scheduler.service.persistence.orm import UsageSampleRecord
from scheduler.service.persistence.store import open_store
from scheduler.service.runtime.sampler import CLUSTER

DAY = 86400.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--projects", type=int, default=10)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--interval", type=float, default=60.0, help="seconds between samples")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        store = open_store(f"sqlite:///{Path(directory) / 'frachub.sqlite'}")
        now = time.time()
        names = [f"project-{i}" for i in range(args.projects)] + [CLUSTER]
        count = int(args.days * DAY / args.interval)
        for k in range(count):
            moment = now - args.days * DAY + k * args.interval
            store.add_samples(
                UsageSampleRecord(
                    time=moment,
                    project=name,
                    allocated_gpus=k % 4,
                    deserved_gpus=1.0,
                    fair_share_gpus=2.0,
                    running=k % 5,
                    pending=k % 3,
                    cluster_gpus=8.0,
                )
                for name in names
            )
        store.commit()
        print(f"{count * len(names):,} samples ({args.projects} projects + the cluster)")
        print("| view | caller | buckets | best of", args.repeat, "|")
        print("| --- | --- | --- | --- |")
        for view, span, points in (("day", DAY, 288), ("week", 7 * DAY, 336)):
            for caller, projects in (("user (1 project)", [names[0]]), ("admin (all)", None)):
                best = float("inf")
                for _ in range(args.repeat):
                    began = time.perf_counter()
                    store.first_sample_time()
                    buckets = store.sample_buckets(now - span, now, span / points, projects)
                    best = min(best, time.perf_counter() - began)
                print(f"| {view} | {caller} | {len(buckets):,} | {best * 1000:.0f} ms |")
        store.close()


if __name__ == "__main__":
    main()
