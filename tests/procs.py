"""Finding a job's processes the way an operator would: by what their environment carries
(every job holds ``FRACHUB_ATTEMPT=<token>``), read from /proc."""

from __future__ import annotations

import os
from pathlib import Path


def processes_with(variable: str) -> list[int]:
    """Live processes whose environment holds ``variable`` (``NAME=value``)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if variable.encode() in environ.split(b"\0"):
            found.append(int(entry))
    return found
