"""The share-memory benchmark's verdicts, on the rows it printed on an H200 (behaviour only:
the measuring needs a GPU). A framework that allocated less than asked, or was told other
than its share, fails the run."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.unit

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "share_memory.py"
_SPEC = importlib.util.spec_from_file_location("share_memory_bench", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)

SHARE = 30_766 << 20
MEASURED: dict[str, Any] = {
    "gpu": "NVIDIA H200",
    "gpu_memory_mib": 143_771,
    "asked_gib": 30.0,
    "milli": 214,
    "share_mib": 30_766,
    "rows": [
        {
            "framework": "torch",
            "wrapped": True,
            "told": [SHARE, SHARE],
            "refusal": "this process has 30.51 GiB memory in use. 30.04 GiB allowed",
            "allocated_gib": 30,
            "whole": False,
        },
        {
            "framework": "jax",
            "fraction": "0.214912498",
            "bytes_limit": 32_262_586_368,
            "allocated_gib": 30,
            "whole": False,
        },
        {
            "framework": "torch",
            "wrapped": False,
            "told": [149_557_477_376, 150_109_880_320],
            "allocated_gib": 2,
            "whole": True,
        },
    ],
}


def test_the_measured_run_passes_and_reads_as_a_table() -> None:
    assert bench.verdicts(MEASURED) == []
    table = bench.table(MEASURED)
    assert "share 0.214, 30766 MiB" in table
    assert "| torch | 30 GiB | 30.04 GiB allowed | 30.04, 30.04 |" in table
    assert "| torch, whole GPU | 2 GiB | none reached | 139.29, 139.80 |" in table


def test_less_than_asked_or_a_wrong_view_fails() -> None:
    before = copy.deepcopy(MEASURED)  # what the product did before the share's bytes
    before["rows"][0].update(allocated_gib=29, wrapped=False, told=[149 << 30, 150_109_880_320])
    before["rows"][1].update(bytes_limit=32_124_174_336, allocated_gib=29)
    before["rows"][2]["wrapped"] = True
    assert bench.verdicts(before) == [
        "torch: allocated 29 GiB of 30 asked",
        f"torch: mem_get_info's total 150109880320 is not the share {SHARE}",
        "jax: allocated 29 GiB of 30 asked",
        f"jax: bytes_limit 32124174336 is below the share {SHARE}",
        "torch (whole GPU): mem_get_info was replaced for a whole GPU",
    ]
