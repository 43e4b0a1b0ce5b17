"""benchmarks/gpu_sharing.py without a GPU: it says it needs one (exit 2, no traceback), and
the table it writes into docs/gpu-sharing.md says what each measurement found."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import gpu_sharing  # noqa: E402

RESULT = {
    "share_gib": 35.1,
    "fill_torch": {
        "allocated_gib": 35.0,
        "stopped": True,
        "seen": {"free_gib": 35.0, "total_gib": 35.1},
    },
    "fill_jax": {"allocated_gib": 35.0, "stopped": True, "seen": {"bytes_limit_gib": 35.1}},
    "fill_cupy": {
        "allocated_gib": 78.0,
        "stopped": False,
        "seen": {"free_gib": 139.2, "total_gib": 139.8},
    },
    "alloc30_torch": {"ok": True},
    "alloc30_jax": {"ok": True},
    "alloc30_cupy": {"ok": False, "error": "cudaErrorMemoryAllocation: out of memory"},
    "compute": [170.0, 503.0],
    "fault": {"victim": {"ok": False, "error": "CUBLAS_STATUS_INTERNAL_ERROR"}},
}


def test_without_a_gpu_it_says_so(tmp_path: Path) -> None:
    run = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "gpu_sharing.py"),
            "--modes",
            "cooperative",
            "--doc",
            "",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2, run
    assert "this benchmark needs an NVIDIA GPU" in run.stderr
    assert "Traceback" not in run.stderr


def test_the_table_says_what_each_measurement_found() -> None:
    text = gpu_sharing.table({"cooperative": RESULT})
    lines = text.splitlines()
    assert lines[0] == "| what | `cooperative` |"
    row = {line.split(" | ")[0].strip("| "): line.split(" | ")[1].strip(" |") for line in lines[2:]}
    assert row["PyTorch job at 0.25: memory it could take"].startswith("35 GiB, then refused")
    assert "**not stopped**" in row["raw CUDA (CuPy) job at 0.25: memory it could take"]
    assert row["asked for 30 GiB: raw CUDA allocates 30 GiB"].startswith("no: cudaErrorMemory")
    assert row["bf16 matmul, jobs at 0.25 and 0.75 at once"] == "170 + 503 TFLOP/s (1 : 2.96)"
    assert row["one job faults (illegal address)"] == "**the job beside it died too**"


def test_the_doc_block_is_replaced_and_nothing_else(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(f"# Title\n\n{gpu_sharing.BEGIN}\nold\n{gpu_sharing.END}\n\nAfter.\n")
    gpu_sharing.write_doc(doc, "| new |")
    assert (
        doc.read_text() == f"# Title\n\n{gpu_sharing.BEGIN}\n| new |\n{gpu_sharing.END}\n\nAfter.\n"
    )
    with pytest.raises(SystemExit, match="no <!-- gpu-sharing-table:begin -->"):
        gpu_sharing.write_doc(_plain(tmp_path), "x")


def _plain(tmp_path: Path) -> Path:
    path = tmp_path / "plain.md"
    path.write_text("# No block\n")
    return path


def test_the_published_table_is_the_saved_run() -> None:
    """docs/gpu-sharing.md's table is what the saved run in benchmarks/results renders: a
    figure in the doc is one a run measured."""
    saved = REPO / "benchmarks" / "results" / "gpu_sharing-h200-2026-11-28.json"
    doc = (REPO / "docs" / "gpu-sharing.md").read_text()
    published = doc.split(gpu_sharing.BEGIN)[1].split(gpu_sharing.END)[0].strip()
    run = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "gpu_sharing.py"),
            "--doc",
            "",
            "--from-json",
            str(saved),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == published
