"""``frachub simulate openb``: the JSON shape, and one clean line with exit 2 for bad input."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.openb import command

pytestmark = pytest.mark.simulator

REPO = Path(__file__).resolve().parents[2]
NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,8000,32768,1,T4\nn1,8000,32768,2,V100M16\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
    "p0,1000,1024,1,500,\np1,1000,1024,1,1000,V100M16\np2,2000,1024,0,0,\n"
    "p3,1000,1024,2,1000,\n"
)


@pytest.fixture
def trace(tmp_path):
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    return tmp_path


def run_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return command.run(parser.parse_args(argv))


def test_json_has_the_contract_shape(trace, capsys):
    code = run_command(
        [
            "--nodes",
            str(trace / "nodes.csv"),
            "--pods",
            str(trace / "pods.csv"),
            "--policy",
            "fgd",
            "--seeds",
            "1-3",
            "--json",
        ]
    )
    out = capsys.readouterr()
    assert code == 0
    assert out.err == ""
    data = json.loads(out.out)
    assert set(data) == {
        "policy",
        "seeds",
        "allocation_pct",
        "unallocated_pct",
        "unallocated_pct_std",
        "decision_us",
    }
    assert data["policy"] == "fgd"
    assert data["seeds"] == [1, 2, 3]
    buckets = ["50", "70", "80", "90", "95", "100", "105", "110", "120", "130"]
    for field in ("allocation_pct", "unallocated_pct", "unallocated_pct_std"):
        assert list(data[field]) == buckets
    assert data["allocation_pct"]["50"] + data["unallocated_pct"]["50"] == pytest.approx(100)
    assert set(data["decision_us"]) == {"p50", "p99"}


def test_policy_all_prints_one_object_with_every_policy(trace, capsys):
    code = run_command(
        [
            "--nodes",
            str(trace / "nodes.csv"),
            "--pods",
            str(trace / "pods.csv"),
            "--policy",
            "all",
            "--seeds",
            "5",
            "--json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["policy"] == "all"
    assert [r["policy"] for r in data["results"]] == [
        "random",
        "dotproduct",
        "gpupacking",
        "bestfit",
        "fgd",
        "pack",
        "frachub",
    ]


def test_table_output_and_progress_on_stderr(trace, capsys):
    code = run_command(
        ["--nodes", str(trace / "nodes.csv"), "--pods", str(trace / "pods.csv"), "--seeds", "1"]
    )
    out = capsys.readouterr()
    assert code == 0
    assert "frachub" in out.out and "p99" in out.out
    assert out.err == ""  # the progress bar draws only on a terminal


BAD_CASES = [
    pytest.param(["--nodes", "{tmp}/missing.csv"], "missing.csv: no such file", id="missing-file"),
    pytest.param(["--pods", "{tmp}/nocol.csv"], "missing column(s) num_gpu", id="missing-column"),
    pytest.param(["--pods", "{tmp}/badint.csv"], "row 3: field 'gpu_milli'", id="bad-integer"),
    pytest.param(
        ["--pods", "{tmp}/range.csv"], "row 2: field 'gpu_milli': 1500", id="out-of-range"
    ),
    pytest.param(["--nodes", "{tmp}/badnode.csv"], "row 2: field 'gpu'", id="bad-node-row"),
    pytest.param(["--policy", "tetris"], "unknown policy 'tetris'", id="unknown-policy"),
    pytest.param(["--seeds", "51-42"], "range '51-42' is empty", id="reversed-seeds"),
    pytest.param(["--seeds", "x"], "--seeds: 'x' is not a seed list", id="non-numeric-seeds"),
]


def write_bad_files(tmp: Path) -> None:
    (tmp / "nocol.csv").write_text("name,cpu_milli,memory_mib,gpu_milli\np0,1,1,1\n")
    (tmp / "badint.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1,1,1,100\np1,1,1,1,abc\n"
    )
    (tmp / "range.csv").write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1,1,1,1500\n")
    (tmp / "badnode.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,many,T4\n")


@pytest.mark.parametrize(("extra", "message"), BAD_CASES)
def test_bad_input_is_one_line_and_exit_2(trace, capsys, extra, message):
    write_bad_files(trace)
    argv = [
        "--nodes",
        str(trace / "nodes.csv"),
        "--pods",
        str(trace / "pods.csv"),
        "--seeds",
        "1",
        "--json",
    ]
    argv += [a.format(tmp=trace) for a in extra]
    code = run_command(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1, err
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize(("extra", "message"), BAD_CASES[:1] + BAD_CASES[-2:])
def test_frachub_cli_subprocess_reports_bad_input(trace, extra, message):
    write_bad_files(trace)
    argv = [
        "simulate",
        "openb",
        "--nodes",
        str(trace / "nodes.csv"),
        "--pods",
        str(trace / "pods.csv"),
        "--seeds",
        "1",
        "--json",
    ]
    argv += [a.format(tmp=trace) for a in extra]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "hub_ext.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert message in proc.stderr


def test_frachub_cli_main_json(trace, capsys):
    from hub_ext.cli.main import main

    code = main(
        [
            "simulate",
            "openb",
            "--nodes",
            str(trace / "nodes.csv"),
            "--pods",
            str(trace / "pods.csv"),
            "--policy",
            "frachub",
            "--seeds",
            "42",
            "--json",
        ]
    )
    assert code == 0
    assert json.loads(capsys.readouterr().out)["seeds"] == [42]
