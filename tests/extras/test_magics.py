"""The %frachub magics' own parts (they need IPython, the hub extra): where a cell is saved
as a job's script, and that loading them loads no engine."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from heavy_imports import heavy_modules_after

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
    loaded = heavy_modules_after("import hub_ext.magics")
    assert loaded == [], f"hub_ext.magics imported {loaded}"
