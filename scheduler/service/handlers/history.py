"""Usage over time: the samples behind the panel's history charts, and GPU-hours per
project and user as CSV for cost sharing.

``history`` reads the samples the service writes every ``usage_sample_interval``
(scheduler/service/runtime/sampler.py), summed up by the database into at most ``points`` buckets,
so a week of minute samples stays a small answer and a quick query. A user sees the
projects they belong to; an admin sees every project and the whole cluster (its allocation
and queue lengths).

Each series comes with its summary over the whole range (the most GPUs in use at any one
sample, the mean over all samples, the longest queue), so that a chart names the true peak
and the average rather than the largest bucket mean; and the answer says since when samples
are kept (``recorded_since``, the oldest sample's time: stable between refreshes), with the
buckets spread from then on when that is later than ``start``, so a young service's chart
is not one dot at the end of an empty day.
"""

from __future__ import annotations

import asyncio
import csv
import io
import time

from tornado import web

from scheduler.common.limits import shown
from scheduler.common.projects import projects_of
from scheduler.fields import InvalidSpec
from scheduler.service.access import ADMIN, READ
from scheduler.service.handlers.info import UsageHandler
from scheduler.service.persistence.store import SampleBucket
from scheduler.service.runtime.sampler import CLUSTER
from scheduler.service.views import iso

DAY = 86400.0
HISTORY_MAX_DAYS = 31
CSV_MAX_DAYS = 366
DEFAULT_POINTS = 200
MAX_POINTS = 1000


def point(bucket: SampleBucket) -> dict:
    return {
        "time": iso(bucket.time),
        "allocated_gpus": round(bucket.allocated_gpus, 3),
        "peak_allocated_gpus": round(bucket.peak_allocated_gpus, 3),
        "fair_share_gpus": round(bucket.fair_share_gpus, 3),
        "deserved_gpus": bucket.deserved_gpus,
        "running": bucket.running,
        "pending": bucket.pending,
        "cluster_gpus": bucket.cluster_gpus,
        "allocated_cpu": round(bucket.allocated_cpu or 0.0, 3),
        "allocated_memory_gib": round(bucket.allocated_memory_gib or 0.0, 3),
    }


def summary(buckets: list[SampleBucket]) -> dict | None:
    """One series over the whole range: the peak is the most GPUs in use at one sample, the
    average the mean over every sample (each bucket's mean weighed by its samples)."""
    samples = sum(bucket.samples for bucket in buckets)
    if not samples:
        return None
    total = sum(bucket.allocated_gpus * bucket.samples for bucket in buckets)
    return {
        "samples": samples,
        "peak_allocated_gpus": round(max(bucket.peak_allocated_gpus for bucket in buckets), 3),
        "average_allocated_gpus": round(total / samples, 3),
        "peak_pending": max(bucket.pending for bucket in buckets),
    }


class HistoryHandler(UsageHandler):
    """GET /history: each of the caller's projects over ``start``..``end`` (default: the
    last day), and for admins the cluster."""

    async def get(self) -> None:
        self.require(READ)
        end = self._time("end", time.time())
        start = self._time("start", end - DAY)
        if start >= end:
            raise InvalidSpec("start", "must be before end")
        if end - start > HISTORY_MAX_DAYS * DAY:
            raise InvalidSpec("start", f"must be at most {HISTORY_MAX_DAYS} days before end")
        points = self._points()
        asked = self.list_argument("project")
        caller = self.caller
        if caller.is_admin:
            allowed = None
        else:
            allowed = projects_of(caller.name, caller.groups, self.loop.queues, self.loop.members)
            others = [name for name in asked if name not in allowed]
            if others:
                raise web.HTTPError(
                    403, f"the history of {others[0]} needs membership of it or {ADMIN}"
                )
        wanted = asked or allowed
        # in a thread with a session of its own: a long range must not stall other requests
        read = wanted if wanted is None or not caller.is_admin else [*wanted, CLUSTER]
        run = asyncio.get_running_loop().run_in_executor
        first = await run(None, self.loop.store.first_sample_time)
        origin = first if first is not None and start < first < end else start
        step = (end - origin) / points
        buckets = await run(None, self.loop.store.sample_buckets, origin, end, step, read)
        # every project the caller may see has its series, empty until it has samples
        shown = wanted if wanted is not None else [queue.name for queue in self.loop.queues]
        by_project: dict[str, list[SampleBucket]] = {name: [] for name in shown}
        cluster: list[SampleBucket] = []
        for bucket in buckets:
            if bucket.project != CLUSTER:
                by_project.setdefault(bucket.project, []).append(bucket)
            else:
                cluster.append(bucket)
        self.write_json(
            {
                "start": iso(start),
                "end": iso(end),
                "step_seconds": max(round(step, 3), 0.001),
                "recorded_since": None if first is None else iso(first),
                "sample_interval_seconds": self.settings.get("usage_sample_interval", 0.0),
                "projects": [
                    {
                        "project": name,
                        "points": [point(bucket) for bucket in series],
                        "summary": summary(series),
                    }
                    for name, series in sorted(by_project.items())
                ],
                "cluster": [point(bucket) for bucket in cluster] if caller.is_admin else None,
                "cluster_summary": summary(cluster) if caller.is_admin else None,
            }
        )

    def _points(self) -> int:
        raw = self.get_argument("points", None)
        if raw is None:
            return DEFAULT_POINTS
        try:
            value = int(raw)
        except ValueError:
            raise InvalidSpec("points", f"must be a whole number, got {shown(raw)}") from None
        if not 1 <= value <= MAX_POINTS:
            raise InvalidSpec("points", f"must be between 1 and {MAX_POINTS}, got {value}")
        return value


CSV_COLUMNS = ("project", "user", "gpu_hours", "cpu_hours", "memory_gib_hours", "start", "end")
"""The usage file's columns: GPU-hours, CPU core-hours and memory GiB-hours held."""


def _cell(value: str) -> str:
    """A spreadsheet must not run a name as a formula (CSV injection)."""
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


class UsageCSVHandler(UsageHandler):
    """GET /usage.csv: the rows of /usage (same parameters and rights) as a CSV file."""

    max_days = CSV_MAX_DAYS

    async def get(self) -> None:
        self.require(READ)
        start, end, rows = await self.usage_rows()
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\r\n")
        writer.writerow(CSV_COLUMNS)
        for row in rows:
            writer.writerow(
                [
                    _cell(row.project),
                    _cell(row.user),
                    f"{row.gpu_hours:.6f}",
                    f"{row.cpu_hours:.6f}",
                    f"{row.memory_gib_hours:.6f}",
                    iso(start),
                    iso(end),
                ]
            )
        name = f"frachub-usage-{iso(start)[:10]}-{iso(end)[:10]}.csv"
        self.set_header("Content-Type", "text/csv; charset=utf-8")
        self.set_header("Content-Disposition", f'attachment; filename="{name}"')
        self.finish(out.getvalue())


default_handlers = [
    (r"/api/v1/history/?", HistoryHandler),
    (r"/api/v1/usage\.csv", UsageCSVHandler),
]
