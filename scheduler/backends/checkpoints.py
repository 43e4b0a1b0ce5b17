"""Checkpoint detection for the local backend, kept off the service's event loop.

A job says it saved its work by writing into its ``FRACHUB_CHECKPOINT_DIR``: any file newer
than the last one reported is a checkpoint. That directory is the user's and may hold any
number of files, so walking it on the event loop let one user's files slow every other
user's requests (five jobs with 10,000 files each added about 200 ms to each request; see
docs/benchmarks.md, "Checkpoint scans"). Here one background thread serves all the
backend's jobs:

- ``CheckpointScanner.newest`` (called from the backend's ``poll``) hands the thread the
  workloads now running and returns the newest times found so far; it never waits for a scan.
- Each call asks for one round; rounds asked for while one runs are merged into the next.
  A round visits at most ``entries_per_scan`` entries of each job's directory and spends at
  most ``seconds_per_scan`` there, so a round's cost is bounded whatever users keep. A
  directory larger than that is walked on in the next round from where this one stopped,
  and is named once in the log with what its job should do instead.
- The marker file ``hub_ext.client.checkpointed()`` touches (``CHECKPOINT_MARK``) is looked
  at directly every round, so it is seen at once however large the directory is.

Symlinks are neither followed nor counted: the directory is the user's.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from scheduler.common.contract import CHECKPOINT_MARK

ENTRIES_PER_SCAN = 2_000
"""Entries of one job's checkpoint directory visited per round (one round per poll)."""
SECONDS_PER_SCAN = 0.02
"""Time one job's directory may take per round, whatever its entries cost to read."""
_YIELD_EVERY = 64
"""Entries between two releases of the GIL, so that the event loop's thread never waits
long for it while a large directory is read."""


@dataclass
class Step:
    """What one bounded piece of a walk found."""

    newest: float | None
    """The newest modification time among the files visited (None: no file)."""
    visited: int
    """Entries visited (files, directories, symlinks and anything else)."""
    finished: bool
    """Whether this step reached the end of a walk over the whole directory."""


@dataclass
class Walk:
    """An incremental walk over one directory tree, taken a bounded step at a time.

    Between steps it keeps the directories still to read and the open listing of the one it
    stopped in, so each entry is visited once per pass; after a finished pass the next step
    starts over from the top.
    """

    top: str
    _pending: list[str] = field(default_factory=list, init=False)
    _listing: Iterator[os.DirEntry[str]] | None = field(default=None, init=False)

    def step(self, max_entries: int, deadline: float = float("inf")) -> Step:
        """Visit up to ``max_entries`` entries (fewer once ``time.monotonic()`` passes
        ``deadline``), stopping early at the end of the pass."""
        if self._listing is None and not self._pending:
            self._pending = [self.top]
        newest: float | None = None
        visited = 0
        while visited < max_entries:
            if self._listing is None:
                if not self._pending:
                    return Step(newest, visited, True)
                try:
                    self._listing = os.scandir(self._pending.pop())
                except OSError:
                    continue
            entry = next(self._listing, None)
            if entry is None:
                self.close_listing()
                continue
            visited += 1
            try:
                if entry.is_dir(follow_symlinks=False):
                    self._pending.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    mtime = entry.stat(follow_symlinks=False).st_mtime
                    newest = mtime if newest is None else max(newest, mtime)
            except OSError:
                pass
            if visited % _YIELD_EVERY == 0:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0)  # let the event loop's thread take the GIL
        finished = self._listing is None and not self._pending
        return Step(newest, visited, finished)

    def close_listing(self) -> None:
        """Close the open directory listing, if any (it holds a file descriptor)."""
        if self._listing is not None:
            self._listing.close()  # type: ignore[attr-defined]
            self._listing = None


def marker_time(directory: str) -> float | None:
    """The modification time of the directory's ``CHECKPOINT_MARK`` (a regular file, not
    followed if a symlink), or None."""
    try:
        found = os.lstat(os.path.join(directory, CHECKPOINT_MARK))
    except OSError:
        return None
    return found.st_mtime if (found.st_mode & 0o170000) == 0o100000 else None


class CheckpointScanner:
    """The newest checkpoint time of each running job, found by one background thread.

    A job's checkpoint directory is ``<root>/<workload id>``. The thread starts with the
    first call to ``newest`` that names a workload and ends with ``close``, after which the
    scanner scans no more.
    """

    def __init__(
        self,
        root: str,
        log: logging.Logger | logging.LoggerAdapter[logging.Logger],
        *,
        entries_per_scan: int = ENTRIES_PER_SCAN,
        seconds_per_scan: float = SECONDS_PER_SCAN,
    ) -> None:
        if entries_per_scan < 1:
            raise ValueError(f"entries_per_scan must be >= 1, not {entries_per_scan}")
        self.root = root
        self.log = log
        self.entries_per_scan = entries_per_scan
        self.seconds_per_scan = seconds_per_scan
        self._lock = threading.Lock()
        self._asked = threading.Condition(self._lock)
        self._wanted: frozenset[int] = frozenset()
        self._round_asked = False
        self._closed = False
        self._newest: dict[int, float] = {}
        self._thread: threading.Thread | None = None
        # owned by the thread
        self._walks: dict[int, Walk] = {}
        self._named_too_large: set[int] = set()

    def newest(self, workload_ids: Iterable[int]) -> dict[int, float]:
        """The newest checkpoint time found so far of each of ``workload_ids`` that has one,
        and a request for the next round over exactly these workloads (others are
        forgotten). Never waits for a scan: safe to call on the event loop."""
        wanted = frozenset(workload_ids)
        found = self.found(wanted)
        with self._lock:
            if self._closed:
                return found
            self._wanted = wanted
            self._round_asked = True
            self._asked.notify()
            if self._thread is None and wanted:
                self._thread = threading.Thread(
                    target=self._serve, name="frachub-checkpoints", daemon=True
                )
                self._thread.start()
        return found

    def found(self, workload_ids: Iterable[int]) -> dict[int, float]:
        """The newest checkpoint time found so far of each of ``workload_ids`` that has one;
        asks for nothing."""
        with self._lock:
            return {wid: self._newest[wid] for wid in workload_ids if wid in self._newest}

    def close(self) -> None:
        """Stop the thread after the round it is in (without waiting for it)."""
        with self._lock:
            self._closed = True
            self._asked.notify()

    # --- the thread ---------------------------------------------------------------------------

    def _serve(self) -> None:
        try:
            while True:
                with self._lock:
                    while not self._round_asked and not self._closed:
                        self._asked.wait()
                    if self._closed:
                        return
                    self._round_asked = False
                    wanted = self._wanted
                self.scan_round(wanted)
        finally:
            for walk in self._walks.values():
                walk.close_listing()

    def scan_round(self, wanted: frozenset[int]) -> None:
        """One round: a bounded step of each wanted job's walk, and its marker; jobs no
        longer wanted are forgotten. Runs in the scanner's thread (tests call it directly)."""
        for gone in set(self._walks) - wanted:
            self._walks.pop(gone).close_listing()
            self._named_too_large.discard(gone)
        with self._lock:
            for gone in set(self._newest) - wanted:
                del self._newest[gone]
        for workload_id in sorted(wanted):
            try:
                found = self._scan_one(workload_id)
            except Exception:  # a bug here must not end checkpoint detection for everyone
                self.log.exception("Checkpoint scan of workload %s failed", workload_id)
                continue
            if found is None:
                continue
            with self._lock:
                known = self._newest.get(workload_id)
                if known is None or found > known:
                    self._newest[workload_id] = found

    def _scan_one(self, workload_id: int) -> float | None:
        directory = os.path.join(self.root, str(workload_id))
        walk = self._walks.get(workload_id)
        if walk is None:
            walk = self._walks[workload_id] = Walk(directory)
        step = walk.step(self.entries_per_scan, time.monotonic() + self.seconds_per_scan)
        if not step.finished and workload_id not in self._named_too_large:
            self._named_too_large.add(workload_id)
            self.log.warning(
                "Workload %s keeps more in its checkpoint directory %s than one poll reads "
                "(%s entries): it is read a part per poll, so a new checkpoint there may be "
                "seen late. The job should save its checkpoints to fewer files, or call "
                "hub_ext.client.checkpointed() after each save (it touches %s, which is "
                "seen at once).",
                workload_id,
                directory,
                f"{self.entries_per_scan:,}",
                CHECKPOINT_MARK,
            )
        times = [t for t in (step.newest, marker_time(directory)) if t is not None]
        return max(times) if times else None
