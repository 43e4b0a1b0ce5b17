"""A replica's end wakes the service's poll at once (``scheduler.backends.exitwatch``), with
real subprocesses: a stopped job that exits on SIGTERM, one killed at the end of its grace
period, one that leaves a process behind, an adopted one; and the fallback to the poll
interval where no pidfd can be had.

Every wait here is ``wait_for_exit(timeout=3600)``: it returns early only because an end
was noticed, so a test that passes shows the mechanism, with no bound on how fast the
machine is (``speed is measured in benchmarks``). The outer ``asyncio.wait_for`` is only
there so that a broken watch fails instead of hanging.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import time
from pathlib import Path

import pytest

from scheduler.backends import processes
from scheduler.backends.base import Exit
from scheduler.backends.exitwatch import ExitWatch
from scheduler.backends.local import LocalBackend
from tests.backends.test_local_backend import log_shows, make_job, run

pytestmark = pytest.mark.backends

AN_HOUR = 3600.0
"""The poll interval the tests wait with: nothing they wait for may come from it."""


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(
        data_dir=str(tmp_path / "data"), inventory_source="declared", run_as_user=False
    )


async def ends_noticed(backend: LocalBackend, count: int = 1) -> list[Exit]:
    """Wait as the service does (``wait_for_exit``, then ``poll``) with an hour's interval,
    until ``count`` attempts are reported ended."""

    async def until_reported() -> list[Exit]:
        found: list[Exit] = []
        while len(found) < count:
            await backend.wait_for_exit(AN_HOUR)
            found += [r for r in await backend.poll() if isinstance(r, Exit)]
        return found

    return await asyncio.wait_for(until_reported(), 60)


@pytest.mark.parametrize(
    ("command", "grace", "code"),
    [
        ("echo ready; exec sleep 300", AN_HOUR, 143),
        ("trap '' TERM; echo ready; sleep 300", 0.3, 137),
        # the command's own end leaves a child that ignores TERM: killed with its group
        ("(trap '' TERM; exec sleep 300) & echo ready; exec sleep 300", AN_HOUR, 143),
    ],
    ids=["exits on SIGTERM", "ignores SIGTERM: killed at the grace's end", "leaves a child"],
)
def test_a_stopped_jobs_end_is_noticed_without_a_poll_tick(
    backend: LocalBackend, command: str, grace: float, code: int
) -> None:
    async def scenario() -> tuple[Exit, float]:
        handle = await backend.start(make_job(2, command))
        await log_shows(backend, 2, "ready")
        began = time.monotonic()
        await backend.stop(2, handle, grace_seconds=grace)
        [end] = await ends_noticed(backend)
        return end, time.monotonic() - began

    end, took = run(scenario)
    assert end.exit_code == code
    if grace < AN_HOUR:
        assert took >= grace, "killed before the end of its grace period"
    assert backend._exits.watched == 0, "nothing stays watched once reported"


def test_a_job_that_ends_on_its_own_is_noticed_too(backend: LocalBackend) -> None:
    async def scenario() -> list[Exit]:
        await backend.start(make_job(3, "exit 4"))
        return await ends_noticed(backend)

    assert [end.exit_code for end in run(scenario)] == [4]


def test_an_adopted_replicas_end_is_noticed(tmp_path: Path) -> None:
    """A restarted service's replicas are not its children: their pidfds still tell."""
    data_dir = str(tmp_path / "data")
    first = LocalBackend(data_dir=data_dir, inventory_source="declared", run_as_user=False)
    restarted = LocalBackend(data_dir=data_dir, inventory_source="declared", run_as_user=False)

    async def scenario() -> list[Exit]:
        handle = await first.start(make_job(4, "echo ready; exec sleep 300"))
        await log_shows(first, 4, "ready")
        await first.close()
        assert restarted.adopt(4, handle)
        await restarted.stop(4, handle, grace_seconds=AN_HOUR)
        return await ends_noticed(restarted)

    assert [end.exit_code for end in run(scenario)] == [143]


def test_without_a_pidfd_an_end_waits_for_the_poll_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """At the limit (or without pidfds) a process is not watched, once said in the log, and
    ``wait`` returns at its timeout: the poll interval, as before."""
    watch = ExitWatch(logging.getLogger("test"), limit=0)
    process = subprocess.Popen(["sleep", "300"])

    async def scenario() -> tuple[bool, bool, float]:
        stat = processes.proc_stat(process.pid)
        assert stat is not None
        first = watch.watch(process.pid, stat[1])
        second = watch.watch(process.pid, stat[1])
        process.terminate()
        began = time.monotonic()
        await watch.wait(0.2)
        return first, second, time.monotonic() - began

    try:
        with caplog.at_level(logging.WARNING):
            first, second, took = run(scenario)
    finally:
        process.kill()
        process.wait()
    assert (first, second) == (False, False)
    assert took >= 0.2
    said = [r.getMessage() for r in caplog.records if "poll interval" in r.getMessage()]
    assert said == [
        "Replica ends are noticed at the poll interval, not at once (0 processes watched already)"
    ]


def test_a_reused_pid_is_not_taken_for_the_job() -> None:
    """A pid whose start time is not the job's belongs to a later process: the job is gone,
    so ``wait`` returns at once (the poll reports the end) and nothing is watched."""
    watch = ExitWatch(logging.getLogger("test"))

    async def scenario() -> bool:
        stat = processes.proc_stat(os.getpid())
        assert stat is not None
        watched = watch.watch(os.getpid(), stat[1] - 1)
        await asyncio.wait_for(watch.wait(AN_HOUR), 60)
        return watched

    assert run(scenario) is True
    assert watch.watched == 0
