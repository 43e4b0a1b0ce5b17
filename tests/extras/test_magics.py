"""The %frachub magics' own parts (they need IPython, the hub extra): where a cell is saved
as a job's script, and that loading them loads no engine."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from heavy_imports import heavy_modules_after

from hub_ext.client.jobs import command_from, submission
from hub_ext.magics import build_parser, script_path

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


def test_the_magics_send_time_limits_and_dependencies() -> None:
    args = build_parser().parse_args(
        ["submit", "--gpus", "1", "--time", "2:00:00", "--after", "7", "--", "x"]
    )
    body = submission(args, command_from(args.command), None)
    assert body["time_limit"] == "2:00:00" and body["after"] == 7 and "after_ok" not in body
    args = build_parser(cell=True).parse_args(["submit", "--gpus", "1", "--after-ok", "8"])
    assert submission(args, [], None)["after_ok"] == 8
