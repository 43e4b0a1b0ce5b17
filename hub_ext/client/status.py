"""The notebook's share inside Jupyter (issue 27): ``%frachub status`` and the notices of the
user's job events that the magics print after a cell.

Why the magics and not a JupyterLab extension: jupyter-resource-usage's status bar shows the
server's own processes' host memory and CPU (psutil), with no way to feed it another source;
jupyterlab-nvdashboard reads NVML for whole GPUs, so it would show a user on half an H100 the
whole card, and neither knows projects or job events. A frontend extension of our own needs a
TypeScript build chain FracHub does not ship. The kernel already loads the ``%frachub``
magics (``hub_ext/kernelspec.py``) with the server's token and FracHub's URL; so the share is
one magic away, and the notices ride on IPython's ``post_run_cell`` event, in JupyterLab,
the classic notebook and VS Code alike, with no new server-side part.

``status_report`` words the notebook's allocation (``FRACHUB_WORKLOAD_ID``, which the spawner
sets) and the user's jobs. ``JobNotices`` compares two listings of the user's jobs and says
what happened in between (preempted and requeued, restarted, finished), in the words of the
panel; the first listing only sets the baseline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hub_ext.client.formatting import format_placement, gpu_use_words
from hub_ext.client.reports import Report
from scheduler.common.quantities import gpus as gpus_in_words
from scheduler.common.states import FINAL_STATES, WorkloadState

NOTICE_EVERY = 15.0
"""Seconds between two looks at the user's jobs after cells (the rest are not asked);
``FRACHUB_NOTICE_SECONDS`` in the kernel's environment changes it."""


def status_report(notebook: Mapping[str, Any] | None, jobs: Sequence[Mapping[str, Any]]) -> Report:
    """The notebook's share, project and use, and the user's jobs in a line."""
    fields: list[tuple[str, str]] = []
    if notebook is None:
        fields.append(("Share", "none: this server holds no GPU share (a CPU-only profile)"))
    else:
        share = gpus_in_words(notebook["gpus"]) if notebook.get("gpus") is not None else "-"
        if notebook.get("gpu_memory_gib") is not None:
            share = f"{notebook['gpu_memory_gib']:g} GiB of one GPU"
        fields += [
            ("Share", f"{share} on {format_placement(notebook)} ({notebook['state']})"),
            ("Project", notebook["project"]),
            ("GPU use", gpu_use_words(notebook) or "not sampled yet (or no NVML here)"),
        ]
        if notebook.get("borrowed"):
            fields.append(("Borrowed", notebook["borrowed"]))
        if notebook.get("idle_warning"):
            fields.append(("Idle", notebook["idle_warning"]))
    active = [j for j in jobs if j["state"] not in FINAL_STATES and "command" in j]
    counts: dict[str, int] = {}
    for job in active:
        counts[job["state"]] = counts.get(job["state"], 0) + 1
    words = ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "none active"
    fields.append(("Your jobs", f"{words} (%frachub jobs)"))
    return Report("This notebook on FracHub", tuple(fields))


def _job(job: Mapping[str, Any]) -> str:
    return f"job {job['id']} ({job['name']})"


def notice(before: Mapping[str, Any] | None, now: Mapping[str, Any]) -> str | None:
    """What happened to one job between two listings, in a line; None for nothing worth a
    notice (a new job's own submission, a pending job still waiting). A job the last look did
    not see was submitted since: only its end is news."""
    state = now["state"]
    if before is None:
        before = {"state": WorkloadState.PENDING} if state in FINAL_STATES else now
    if now.get("preemptions", 0) > before.get("preemptions", 0):
        where = ""
        if now.get("queue_position"):
            where = f" (#{now['queue_position']} in {now['project']})"
        why = f": {now['pending_headline']}" if now.get("pending_headline") else ""
        return f"{_job(now)} was preempted and requeued{where}{why}"
    if state == before["state"]:
        return None
    if state == WorkloadState.RUNNING:
        again = f", attempt {now['restart_count'] + 1}" if now.get("restart_count") else ""
        return f"{_job(now)} started on {format_placement(now)}{again}"
    if state in FINAL_STATES:
        detail = f": {now['message']}" if now.get("message") else ""
        return f"{_job(now)} {state}{detail}"
    return None


class JobNotices:
    """Notices of the user's jobs since the last look (``check``), at most every
    ``every`` seconds; ``listing`` returns the user's jobs."""

    def __init__(
        self,
        listing: Callable[[], Sequence[Mapping[str, Any]]],
        *,
        every: float = NOTICE_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.listing = listing
        self.every = every
        self.clock = clock
        self.seen: dict[int, Mapping[str, Any]] | None = None
        self.last = -float("inf")

    def check(self) -> list[str]:
        if self.clock() - self.last < self.every:
            return []
        self.last = self.clock()
        jobs = {job["id"]: job for job in self.listing() if "command" in job}  # not notebooks
        if self.seen is None:
            self.seen = jobs
            return []
        lines = [line for i, job in sorted(jobs.items()) if (line := notice(self.seen.get(i), job))]
        self.seen = {**self.seen, **jobs}
        return lines
