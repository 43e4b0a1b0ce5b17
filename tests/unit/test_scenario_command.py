"""``frachub scenario run``: the JSON contract, and one clear line with exit 2 for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hub_ext.cli.main import main

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).parents[1] / "scenarios"

GOOD = {
    "cluster": {"nodes": [{"name": "ws", "gpus": 2}]},
    "queues": [{"name": "lab", "deserved_gpus": 2}],
    "workloads": [{"name": "t1", "queue": "lab", "kind": "training", "gpus": 1}],
}


def _with(path: str, value) -> dict:
    """GOOD with one field replaced; ``path`` like "workloads.0.gpus"."""
    document = json.loads(json.dumps(GOOD))
    *parents, last = path.split(".")
    target = document
    for part in parents:
        target = target[int(part)] if part.isdigit() else target.setdefault(part, {})
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return document


BAD = {
    "fraction above one": (_with("workloads.0.gpus", 1.5), "workloads[0] (t1).gpus"),
    "zero gpus": (_with("workloads.0.gpus", 0), "workloads[0] (t1).gpus"),
    "negative deserved": (_with("queues.0.deserved_gpus", -1), "queues[0] (lab).deserved_gpus"),
    "unknown queue": (_with("workloads.0.queue", "nope"), "workloads[0] (t1).queue"),
    "unknown kind": (_with("workloads.0.kind", "batch"), "workloads[0] (t1).kind"),
    "duplicate workload": ({**GOOD, "workloads": GOOD["workloads"] * 2}, "workloads[1] (t1).name"),
    "duplicate node after count": (
        {
            **GOOD,
            "cluster": {
                "nodes": [{"name": "a", "count": 2, "gpus": 1}, {"name": "a-1", "gpus": 1}]
            },
        },
        "cluster.nodes[1].name",
    ),
    "misspelt field": (_with("workloads.0.gpu", 2), "workloads[0] (t1).gpu"),
    "both gpus and memory": (
        _with("workloads.0.gpu_memory_gib", 20),
        "workloads[0] (t1).gpu_memory_gib",
    ),
    "replicas zero": (_with("workloads.0.replicas", 0), "workloads[0] (t1).replicas"),
    "negative at": (_with("workloads.0.at", -5), "workloads[0] (t1).at"),
    "boolean as number": (_with("queues.0.limit_gpus", True), "queues[0] (lab).limit_gpus"),
    "parent unknown": (_with("queues.0.parent", "ghost"), "queues[0] (lab).parent"),
    "submit to a department": (
        {**GOOD, "queues": [{"name": "lab"}, {"name": "p", "parent": "lab"}]},
        "workloads[0] (t1).queue",
    ),
    "event names unknown workload": (
        {**GOOD, "events": [{"at": 1, "finish": "ghost"}]},
        "events[0].finish",
    ),
    "event with two actions": (
        {**GOOD, "events": [{"at": 1, "finish": "t1", "cancel": "t1"}]},
        "events[0]",
    ),
    "placement on a missing GPU": (
        _with(
            "workloads.0",
            {
                "name": "t1",
                "queue": "lab",
                "gpus": 1,
                "state": "running",
                "placement": [{"node": "ws", "gpus": [7]}],
            },
        ),
        "workloads[0] (t1).placement[0].gpus",
    ),
    "unknown placement policy": ({**GOOD, "placement": "best"}, "placement"),
    "no cluster": ({"queues": [], "workloads": []}, "cluster"),
    "not a mapping": ([1, 2], "document"),
}


@pytest.mark.parametrize("document, where", BAD.values(), ids=BAD.keys())
def test_malformed_input_is_one_line_and_exit_2(tmp_path, capsys, document, where) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(document))
    assert main(["scenario", "run", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"frachub scenario run: {path}: {where}"), lines[0]


def test_yaml_syntax_error_names_the_line(tmp_path, capsys) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("cluster:\n  nodes: [\n")
    assert main(["scenario", "run", str(path)]) == 2
    assert f"{path}: line" in capsys.readouterr().err


def test_missing_file(capsys) -> None:
    assert main(["scenario", "run", "/no/such/file.yaml"]) == 2
    assert "cannot read the file" in capsys.readouterr().err


def test_output_contract(tmp_path) -> None:
    """The console script prints the documented JSON document on stdout, and nothing else."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "hub_ext.cli",
            "scenario",
            "run",
            str(EXAMPLES / "02_notebook_gets_a_fraction_now.yaml"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    output = json.loads(result.stdout)
    assert output["time"] == 60
    assert set(output) == {"time", "workloads", "queues", "events"}
    notebook = output["workloads"]["notebook"]
    assert notebook["state"] == "running"
    assert notebook["placement"] == [{"node": "ws", "gpus": [{"index": 1, "share": 0.25}]}]
    extra = output["workloads"]["extra"]
    assert extra["state"] == "pending" and extra["preemptions"] == 1 and extra["placement"] == []
    assert extra["queue_position"] == 1 and extra["pending_reason"]
    assert set(output["queues"]["lab-a"]) == {
        "allocated_gpus",
        "fair_share_gpus",
        "running",
        "pending",
    }
    evicted = [event for event in output["events"] if event["type"] == "evicted"]
    assert [(e["time"], e["workload"], e["reason"]) for e in evicted] == [(30, "extra", "reclaim")]
    # in words: the reason, the claimant and the work it lost
    assert evicted[0]["message"].startswith(
        "preempted for lab-b/notebook (borrowed GPUs reclaimed); 30 s of work lost"
    )


def test_default_run_until_is_when_nothing_changes(tmp_path, capsys) -> None:
    document = {**GOOD, "workloads": [{**GOOD["workloads"][0], "duration": 40, "at": 5}]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(document))
    assert main(["scenario", "run", str(path)]) == 0
    output = json.loads(capsys.readouterr().out)
    assert output["time"] == 45
    assert output["workloads"]["t1"]["state"] == "succeeded"


def test_placement_frachub_runs(capsys) -> None:
    """``placement: frachub`` used to exit 2: the engine had no such scorer."""
    assert main(["scenario", "run", str(EXAMPLES / "27_frachub_placement.yaml")]) == 0
    output = json.loads(capsys.readouterr().out)
    assert output["workloads"]["half"]["placement"][0]["gpus"][0]["index"] == 1


def test_table_format_for_people(capsys) -> None:
    """--format table: the same outcome as the JSON, as aligned tables."""
    scenario = str(EXAMPLES / "01_borrow_and_reclaim.yaml")
    assert main(["scenario", "run", scenario]) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert main(["scenario", "run", scenario, "--format", "table"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"At t={outcome['time']:g}s\n")
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.strip()}
    assert rows["WORKLOAD"][:3] == ["WORKLOAD", "QUEUE", "STATE"]
    for name, workload in outcome["workloads"].items():
        assert rows[name][1:3] == [workload["queue"], workload["state"]], rows[name]
    assert rows["v6"][3] == "#1"  # a pending workload's place in its queue
    assert "needs 1 GPU" in text and "evicted  v8        reason reclaim" in text
