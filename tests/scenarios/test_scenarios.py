"""Every scenario file here, replayed through the real engine and checked against its ``expect:``.

Expectation keys (all optional):
- ``running`` / ``pending`` / ``finished`` / ``cancelled``: the exact set in that state;
- ``preemptions_total``, ``preemptions: {name: n}``;
- ``same_gpu`` / ``different_gpu``: pairs that do (not) share a GPU;
- ``nodes: {name: node}`` (first replica), ``gang_nodes: {name: [node, ...]}``;
- ``started_at: {name: t}`` (latest start), ``started_at_events: {name: [t, ...]}``,
  ``end_times: {name: t}``;
- ``evictions: [[name, reason], ...]`` in order;
- ``reasons: {name: substring of the pending reason}``, ``positions: {name: n}``;
- ``fair_share`` / ``allocated: {queue: gpus}``, ``queue_counts: {queue: {running, pending}}``;
- ``fair_share_cpu`` / ``allocated_cpu: {queue: cores}``, ``fair_share_memory_gib`` /
  ``allocated_memory_gib: {queue: GiB}`` (queues of a scenario with CPU or memory quotas).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.scenario import load_scenario, run_scenario

pytestmark = pytest.mark.scenarios

HERE = Path(__file__).parent
FILES = sorted(HERE.glob("*.yaml"))


def _gpus_of(entry: dict) -> set[tuple[str, int]]:
    return {
        (replica["node"], gpu["index"]) for replica in entry["placement"] for gpu in replica["gpus"]
    }


def _states(output: dict, state: str) -> set[str]:
    return {name for name, entry in output["workloads"].items() if entry["state"] == state}


def check(expect: dict, output: dict) -> list[str]:
    """Every way ``output`` differs from ``expect``, as readable lines."""
    problems: list[str] = []
    workloads = output["workloads"]
    for key, state in (
        ("running", "running"),
        ("pending", "pending"),
        ("finished", "succeeded"),
        ("cancelled", "cancelled"),
    ):
        if key in expect and set(expect[key]) != _states(output, state):
            problems.append(
                f"{key}: expected {sorted(expect[key])}, got {sorted(_states(output, state))}"
            )
    if "preemptions_total" in expect:
        total = sum(entry["preemptions"] for entry in workloads.values())
        if total != expect["preemptions_total"]:
            problems.append(
                f"preemptions_total: expected {expect['preemptions_total']}, got {total}"
            )
    for name, count in expect.get("preemptions", {}).items():
        if workloads[name]["preemptions"] != count:
            problems.append(
                f"preemptions[{name}]: expected {count}, got {workloads[name]['preemptions']}"
            )
    for a, b in expect.get("same_gpu", []):
        if not _gpus_of(workloads[a]) & _gpus_of(workloads[b]):
            problems.append(f"same_gpu: {a} and {b} do not share a GPU")
    for a, b in expect.get("different_gpu", []):
        if _gpus_of(workloads[a]) & _gpus_of(workloads[b]):
            problems.append(f"different_gpu: {a} and {b} share a GPU")
    for name, node in expect.get("nodes", {}).items():
        placement = workloads[name]["placement"]
        got = placement[0]["node"] if placement else None
        if got != node:
            problems.append(f"nodes[{name}]: expected {node}, got {got}")
    for name, nodes in expect.get("gang_nodes", {}).items():
        got = sorted(replica["node"] for replica in workloads[name]["placement"])
        if got != sorted(nodes):
            problems.append(f"gang_nodes[{name}]: expected {sorted(nodes)}, got {got}")
    for name, time in expect.get("started_at", {}).items():
        if workloads[name].get("started_at") != time:
            problems.append(
                f"started_at[{name}]: expected {time}, got {workloads[name].get('started_at')}"
            )
    events = output["events"]
    for name, times in expect.get("started_at_events", {}).items():
        got = [e["time"] for e in events if e["type"] == "started" and e["workload"] == name]
        if got != times:
            problems.append(f"started_at_events[{name}]: expected {times}, got {got}")
    for name, time in expect.get("end_times", {}).items():
        got = [
            e["time"]
            for e in events
            if e["workload"] == name and e["type"] in ("succeeded", "cancelled", "failed")
        ]
        if got != [time]:
            problems.append(f"end_times[{name}]: expected [{time}], got {got}")
    if "evictions" in expect:
        got = [[e["workload"], e["reason"]] for e in events if e["type"] == "evicted"]
        if got != expect["evictions"]:
            problems.append(f"evictions: expected {expect['evictions']}, got {got}")
    for name, text in expect.get("reasons", {}).items():
        reason = workloads[name].get("pending_reason") or ""
        if text not in reason:
            problems.append(f"reasons[{name}]: expected to contain {text!r}, got {reason!r}")
    for name, position in expect.get("positions", {}).items():
        if workloads[name].get("queue_position") != position:
            problems.append(
                f"positions[{name}]: expected {position}, "
                f"got {workloads[name].get('queue_position')}"
            )
    for key, field in (
        ("fair_share", "fair_share_gpus"),
        ("allocated", "allocated_gpus"),
        ("fair_share_cpu", "fair_share_cpu"),
        ("allocated_cpu", "allocated_cpu"),
        ("fair_share_memory_gib", "fair_share_memory_gib"),
        ("allocated_memory_gib", "allocated_memory_gib"),
    ):
        for queue, gpus in expect.get(key, {}).items():
            got = output["queues"][queue][field]
            if abs(got - gpus) > 1e-6:
                problems.append(f"{key}[{queue}]: expected {gpus}, got {got}")
    for queue, counts in expect.get("queue_counts", {}).items():
        got = {k: output["queues"][queue][k] for k in counts}
        if got != counts:
            problems.append(f"queue_counts[{queue}]: expected {counts}, got {got}")
    return problems


@pytest.mark.parametrize("path", FILES, ids=[path.stem for path in FILES])
def test_scenario(path: Path) -> None:
    scenario = load_scenario(str(path))
    expect = scenario.extra.get("expect")
    assert expect, f"{path.name} has no expect: section"
    output = run_scenario(scenario).to_json()
    problems = check(expect, output)
    pending = {
        name: (entry["pending_reason"], entry["queue_position"])
        for name, entry in output["workloads"].items()
        if entry["state"] == "pending"
    }
    assert not problems, (
        "\n".join(problems)
        + f"\npending reasons: {json.dumps(pending, indent=1)}"
        + f"\nevents: {json.dumps(output['events'])}"
    )


def test_every_rule_has_a_scenario() -> None:
    """The policy's rules 1-7 each have at least one scenario whose description names it."""
    text = " ".join(path.read_text() for path in FILES)
    for rule in range(1, 8):
        assert f"rule {rule}" in text, f"no scenario describes rule {rule}"


def test_each_scenario_has_its_own_number() -> None:
    """The number before a file's name is how the docs cite a scenario ("scenario 23")."""
    numbers = [path.name.split("_", 1)[0] for path in FILES]
    assert all(number.isdigit() for number in numbers), numbers
    assert len(set(numbers)) == len(numbers), sorted(n for n in numbers if numbers.count(n) > 1)


def test_checker_reports_differences() -> None:
    """The checker itself must fail on a wrong expectation, or the suite proves nothing."""
    output = run_scenario(load_scenario(str(HERE / "03_fractions_share_gpus.yaml"))).to_json()
    assert check({"running": ["a"], "different_gpu": [["a", "b"]]}, output) == [
        "running: expected ['a'], got ['a', 'b', 'c', 'd']",
        "different_gpu: a and b share a GPU",
    ]
