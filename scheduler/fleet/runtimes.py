"""Real training run times: Microsoft's Philly trace, as extracted by Alibaba's PAI study.

The file ships inside the package (``scheduler/fleet/traces/``, with its source, terms and
attribution in ``PHILLY-NOTICE.md``), so the fleet simulation works after ``pip install``. One
column, ``runtime``, in seconds: 83,154 jobs, median about 20 minutes, p90 about 3.6 hours,
the longest 53 days.
"""

from __future__ import annotations

import csv
from pathlib import Path

DEFAULT_PHILLY = Path(__file__).resolve().parent / "traces" / "philly_runtime_from_pai_repo.csv"


class TraceMissing(ValueError):
    """The run-time file is missing or unreadable; the message says where it was looked for."""


def load_runtimes(path: Path) -> tuple[float, ...]:
    """Run times in seconds, in file order."""
    try:
        with open(path, encoding="utf-8", newline="") as stream:
            rows = list(csv.reader(stream))
    except FileNotFoundError:
        raise TraceMissing(
            f"no Philly run-time file at {path} (pass --philly PATH to a CSV with one "
            "column headed 'runtime', in seconds)"
        ) from None
    except OSError as error:
        raise TraceMissing(f"cannot read {path}: {error.strerror}") from None
    if not rows or [cell.strip() for cell in rows[0]] != ["runtime"]:
        raise TraceMissing(f"{path}: expected one column headed 'runtime'")
    runtimes = []
    for line, row in enumerate(rows[1:], start=2):
        try:
            value = float(row[0])
        except (IndexError, ValueError):
            raise TraceMissing(f"{path}: line {line}: not a run time in seconds: {row!r}") from None
        if value < 0:
            raise TraceMissing(f"{path}: line {line}: negative run time {value}")
        runtimes.append(value)
    if not runtimes:
        raise TraceMissing(f"{path}: holds no run times")
    return tuple(runtimes)
