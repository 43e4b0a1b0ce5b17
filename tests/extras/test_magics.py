"""The %frachub magics' own parts (they need IPython, the hub extra): where a cell is saved
as a job's script, and that loading them loads no engine."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from hub_ext.magics import script_path

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 22, 14, 10, 0, tzinfo=timezone.utc)


def test_cell_scripts_never_overwrite(tmp_path: Path) -> None:
    first = script_path(tmp_path, "my job/1", NOW + timedelta(hours=1, minutes=0))
    assert first.name == "my-job-1-20261122T151000Z.py"
    first.write_text("")
    assert script_path(tmp_path, "my job/1", NOW + timedelta(hours=1)).name.endswith("Z-2.py")
    assert script_path(tmp_path, None, NOW).name == "cell-20261122T141000Z.py"


def test_the_magics_load_no_engine() -> None:
    """As tests/unit/test_layers.py checks for the REST client and the CLI: the magics, in
    every notebook's kernel, import without the engine and its number crunchers."""
    heavy = ("scheduler.engine", "numpy", "sortedcontainers")
    check = (
        "import hub_ext.magics\nimport sys\n"
        f"print(sorted(m for m in sys.modules if m.startswith({heavy})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", check],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "[]", f"hub_ext.magics imported {result.stdout.strip()}"
