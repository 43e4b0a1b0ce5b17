"""KAI's scale tests (benchmarks/kai_scale.py) run end to end at a CI size, so the benchmark
cannot rot: 4 fake nodes of 8 GPUs, one run of each test, through a real JupyterHub, the
real ``frachub service`` on the Kubernetes backend and the fake API server. Behaviour only:
every test's condition is reached (a full cluster, a reclaim that needs an eviction, a gang
that needs every node, a gang that fits one rack and keeps to it); no timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "kai_scale.py"


def test_the_four_kai_scale_tests_run_end_to_end_at_four_nodes() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--nodes", "4", "--runs", "1", "--timeout", "60", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=BENCH.parents[1],
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout)
    assert result["nodes"] == 4
    fill, reclaim = result["fill"]["runs"][0], result["reclaim"]["runs"][0]
    assert fill["jobs"] == 32  # every GPU of 4 x 8 busy with one job
    assert reclaim["running_jobs"] == 32 and len(reclaim["samples"]) == 10
    assert result["large"]["runs"][0] == {**result["large"]["runs"][0], "replicas": 4, "gpus": 32}
    topology = result["topology"]["runs"][0]
    # 4 replicas x 2 GPUs fit one rack of 2 nodes x 8 GPUs: the gang keeps to one rack
    assert topology["replicas"] == 4 and topology["racks_used"] == topology["racks_needed"] == 1
    for test in ("fill", "reclaim", "large", "topology"):
        assert result[test]["median_seconds"] > 0
        assert result[test]["kai_seconds"] > 0


def bench_json(script: str, *args: str) -> Any:
    """Run ``benchmarks/<script>`` with ``args`` and ``--json``; its parsed output."""
    done = subprocess.run(
        [sys.executable, str(BENCH.parent / script), *args, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=BENCH.parents[1],
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)


def test_the_hub_token_benchmark_runs_against_a_real_hub() -> None:
    """benchmarks/hub_tokens.py (the hub's CPU per job token) issues its tokens through
    the service's own HubTokens against a real hub; behaviour only, no timing."""
    [result] = bench_json("hub_tokens.py", "--tokens", "5", "--variants", "info")
    assert result["hub"] == "info" and result["tokens"] == 5
    assert result["hub_user_ms"] >= 0 and result["wall_ms"] > 0


def test_the_kubernetes_start_benchmark_runs_every_start_to_running() -> None:
    """benchmarks/kube_starts.py (the backend's start path alone) at 2 nodes: every one of
    its 16 starts reaches Running on the fake; behaviour only, no timing."""
    result = bench_json("kube_starts.py", "--nodes", "2", "--timeout", "120")
    assert result["nodes"] == 2 and result["jobs"] == 16
    assert result["running_seconds"] > 0
