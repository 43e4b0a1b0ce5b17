"""Checkpoint detection stays off the event loop and within a budget per job, whatever a
user keeps in ``FRACHUB_CHECKPOINT_DIR`` (the directory is the user's: a job with 10,000
files there must not slow anyone else's requests)."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from scheduler.backends.base import Checkpoint, Exit
from scheduler.backends.checkpoints import CheckpointScanner, Walk
from scheduler.backends.local import LocalBackend
from scheduler.common.contract import CHECKPOINT_MARK
from tests.backends.test_local_backend import make_job

pytestmark = pytest.mark.backends


def many_files(directory: Path, count: int, *, first_mtime: float = 1_000_000.0) -> None:
    """``count`` files with distinct times, the newest last (``file-<count - 1>``)."""
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        path = directory / f"file-{i}"
        path.touch()
        os.utime(path, (first_mtime + i, first_mtime + i))


def test_the_backend_reads_checkpoint_directories_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every listing of a checkpoint directory happens in another thread than the one
    running the event loop, and the checkpoint still reaches ``poll``."""
    backend = LocalBackend(
        data_dir=str(tmp_path / "data"), inventory_source="declared", run_as_user=False
    )
    checkpoints = os.path.join(backend.data_dir, "checkpoints")
    listed_by: list[int] = []
    real_scandir = os.scandir

    def recording_scandir(path: Any = ".") -> Any:
        if str(path).startswith(checkpoints):
            listed_by.append(threading.get_ident())
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", recording_scandir)
    job = make_job(5, 'echo 1 > "$FRACHUB_CHECKPOINT_DIR/step-1"; sleep 0.5')

    async def scenario() -> tuple[int, list[Any]]:
        await backend.start(job)
        reports: list[Any] = []
        deadline = time.monotonic() + 10
        while not any(isinstance(report, Exit) for report in reports):
            assert time.monotonic() < deadline, reports
            reports += await backend.poll()
            await asyncio.sleep(0.02)
        await backend.close()
        return threading.get_ident(), reports

    loop_thread, reports = asyncio.run(scenario())
    saved = (Path(checkpoints) / "5" / "step-1").stat().st_mtime
    # The shell creates the file, then writes it: a scan between the two sees an earlier
    # mtime, so the last report is the file as saved, and none come out of order.
    seen = [r.at for r in reports if isinstance(r, Checkpoint)]
    assert seen and seen[-1] == saved and seen == sorted(seen), seen
    assert listed_by, "the checkpoint directory was never read"
    assert loop_thread not in listed_by


def test_a_walk_visits_at_most_its_budget_per_step_and_goes_on_where_it_stopped(
    tmp_path: Path,
) -> None:
    many_files(tmp_path / "deep", 20)
    many_files(tmp_path, 4)  # 4 files and the directory "deep": 25 entries in all
    walk = Walk(str(tmp_path))
    steps = [walk.step(10) for _ in range(3)]
    assert [(s.visited, s.finished) for s in steps] == [(10, False), (10, False), (5, True)]
    newest = max(s.newest for s in steps if s.newest is not None)
    assert newest == (tmp_path / "deep" / "file-19").stat().st_mtime
    again = walk.step(100)  # a finished pass starts over from the top
    assert (again.visited, again.finished, again.newest) == (25, True, newest)


def test_symlinks_are_neither_followed_nor_counted_as_checkpoints(tmp_path: Path) -> None:
    many_files(tmp_path / "ckpt", 1)
    outside = tmp_path / "outside"
    many_files(outside, 1, first_mtime=2_000_000.0)
    (tmp_path / "ckpt" / "link").symlink_to(outside / "file-0")
    (tmp_path / "ckpt" / "dirlink").symlink_to(outside)
    step = Walk(str(tmp_path / "ckpt")).step(100)
    assert (step.visited, step.newest) == (3, 1_000_000.0)


def scanner(root: Path, caplog: pytest.LogCaptureFixture, **budget: Any) -> CheckpointScanner:
    caplog.set_level(logging.INFO, logger="test-checkpoints")
    return CheckpointScanner(str(root), logging.getLogger("test-checkpoints"), **budget)


def test_a_directory_over_budget_is_read_a_part_per_round_and_named_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    many_files(tmp_path / "1", 25)
    many_files(tmp_path / "2", 3)
    steps: dict[str, list[int]] = {"1": [], "2": []}
    real_step = Walk.step

    def recording_step(walk: Walk, max_entries: int, deadline: float = float("inf")) -> Any:
        step = real_step(walk, max_entries, deadline)
        steps[os.path.basename(walk.top)].append(step.visited)
        return step

    monkeypatch.setattr(Walk, "step", recording_step)
    scan = scanner(tmp_path, caplog, entries_per_scan=10)
    rounds = []
    for _ in range(4):
        scan.scan_round(frozenset({1, 2}))
        rounds.append(scan.found([1, 2]))
    assert steps == {"1": [10, 10, 5, 10], "2": [3, 3, 3, 3]}
    assert rounds[2] == rounds[3] == {1: 1_000_024.0, 2: 1_000_002.0}
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    message = warning.getMessage()
    assert message.startswith(f"Workload 1 keeps more in its checkpoint directory {tmp_path}/1")
    assert "checkpointed()" in message and CHECKPOINT_MARK in message


def test_the_marker_is_seen_at_once_even_in_a_directory_over_budget(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    many_files(tmp_path / "3", 100)
    mark = tmp_path / "3" / CHECKPOINT_MARK
    mark.touch()
    os.utime(mark, (3_000_000.0, 3_000_000.0))
    scan = scanner(tmp_path, caplog, entries_per_scan=5)
    scan.scan_round(frozenset({3}))
    assert scan.found([3]) == {3: 3_000_000.0}


def test_a_job_no_longer_running_is_forgotten(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    many_files(tmp_path / "4", 2)
    scan = scanner(tmp_path, caplog)
    scan.scan_round(frozenset({4}))
    assert scan.found([4]) == {4: 1_000_001.0}
    scan.scan_round(frozenset())
    assert scan.found([4]) == {}


def test_newest_answers_from_what_is_known_and_the_thread_scans(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``newest`` never scans itself: the first call knows nothing yet; the thread's round
    makes the time known to a later call."""
    many_files(tmp_path / "6", 3)
    scan = scanner(tmp_path, caplog)
    try:
        assert scan.newest([6]) == {}
        deadline = time.monotonic() + 10
        while not scan.found([6]):
            assert time.monotonic() < deadline, "the scanner's thread never reported"
            time.sleep(0.01)
        assert scan.newest([6]) == {6: 1_000_002.0}
    finally:
        scan.close()
