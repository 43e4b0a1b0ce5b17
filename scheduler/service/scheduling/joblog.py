"""Milestones written into a job's own log, between its output, where its owner reads them."""

from __future__ import annotations

import os
import time

from scheduler.backends.base import Backend
from scheduler.common.files import open_own_file
from scheduler.service.persistence.orm import WorkloadRecord


def milestone_line(now: float, text: str) -> str:
    """A milestone as its log line: marked, stamped, so it stands out between the job's own."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now))
    return f"=== frachub {stamp}: {text} ===\n"


def write_milestone(backend: Backend, record: WorkloadRecord, now: float, text: str) -> None:
    """Append ``text`` as a marked line to every replica's log that exists (a backend whose
    logs live elsewhere has none; an allocation has no log). Never creates a log, never
    writes through a symlink or a hard link a job may have put in its place, and a log that
    cannot be written is skipped: the milestone is in the timeline anyway."""
    if record.is_allocation:
        return
    line = milestone_line(now, text).encode()
    for replica in range(record.replicas):
        path = backend.log_path(record.id, replica)
        if not path:
            continue
        try:
            fd = open_own_file(path, os.O_WRONLY | os.O_APPEND)
        except OSError:
            continue
        try:
            os.write(fd, line)
        except OSError:
            pass
        finally:
            os.close(fd)
