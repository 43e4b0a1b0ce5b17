"""Where the %frachub magics save a cell as a job's script (needs IPython, the hub extra)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from hub_ext.magics import script_path

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 22, 14, 10, 0, tzinfo=timezone.utc)


def test_cell_scripts_never_overwrite(tmp_path: Path) -> None:
    first = script_path(tmp_path, "my job/1", NOW + timedelta(hours=1, minutes=0))
    assert first.name == "my-job-1-20261122T151000Z.py"
    first.write_text("")
    assert script_path(tmp_path, "my job/1", NOW + timedelta(hours=1)).name.endswith("Z-2.py")
    assert script_path(tmp_path, None, NOW).name == "cell-20261122T141000Z.py"
