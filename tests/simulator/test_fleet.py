"""``frachub simulate fleet``: small runs whose outcome is known by hand, determinism, and the
command's output and refusals."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from dataclasses import replace
from pathlib import Path

import pytest

from hub_ext.cli.main import main
from scheduler.engine import Kind
from scheduler.fleet.description import HOUR, parse_description_text
from scheduler.fleet.driver import simulate
from scheduler.fleet.metrics import summarize, time_average
from scheduler.fleet.presets import PRESETS
from scheduler.fleet.report import tables
from scheduler.fleet.variants import VARIANTS
from scheduler.fleet.workload import Job, generate

pytestmark = pytest.mark.simulator

REPO = Path(__file__).resolve().parents[2]


def two_gpus(a: float, b: float, grace: float = 30) -> str:
    """One node with two GPUs shared by projects a and b (no generated work)."""
    return f"""
cluster: {{nodes: [{{name: ws, gpus: 2}}]}}
grace_seconds: {grace}
projects:
  - {{name: a, deserved_gpus: {a}}}
  - {{name: b, deserved_gpus: {b}}}
"""


def training(name: str, project: str, at: float, hours: float, *, every: float | None = None):
    return Job(name, project, Kind.TRAINING, 1.0, 1, at, hours * HOUR, checkpoint_seconds=every)


def notebook(name: str, project: str, at: float, gpus: float, hours: float) -> Job:
    return Job(name, project, Kind.INTERACTIVE, gpus, 1, at, hours * HOUR)


def run(text: str, jobs: list[Job], variant: str, days: int = 1, **kwargs):
    return simulate(parse_description_text(text), jobs, VARIANTS[variant], days, **kwargs)


def records(fleet_run):
    return {record.job.name: record for record in fleet_run.records}


def test_static_queues_behind_its_quota_while_the_pool_uses_the_idle_gpu():
    """Project a deserves 1 of 2 GPUs and submits two 1-hour jobs at t=0; b is idle."""
    jobs = [training("t1", "a", 0, 1), training("t2", "a", 0, 1)]
    static = records(run(two_gpus(1, 1), jobs, "static"))
    assert (static["t1"].first_start, static["t1"].ended) == (0, HOUR)
    assert (static["t2"].first_start, static["t2"].ended) == (HOUR, 2 * HOUR)
    for variant in ("pool", "reclaim", "frachub"):
        ran = run(two_gpus(1, 1), jobs, variant)
        assert [(r.first_start, r.ended) for r in ran.records] == [(0, HOUR), (0, HOUR)], variant
        # two GPUs for the first hour of the day: 2 * 1 h / (2 GPUs * 24 h)
        assert summarize(ran).allocation == pytest.approx(1 / 24)
    summary = summarize(run(two_gpus(1, 1), jobs, "static"))
    assert summary.allocation == pytest.approx(1 / 24)  # the same work, spread over two hours
    assert summary.training_wait.p99.seconds == HOUR
    assert summary.training_completion.p99.seconds == 2 * HOUR


def test_in_quota_notebook_into_borrowed_gpus_waits_exactly_the_grace_period():
    """b's two 10-hour jobs fill the node, one on a's idle GPU; at 1 h a opens a notebook."""
    jobs = [
        training("b1", "b", 0, 10),
        training("b2", "b", 1, 10),
        notebook("nb", "a", HOUR, 0.5, 2),
    ]
    for variant, wait in (("frachub", 30), ("reclaim", 30), ("static", 0)):
        fleet = records(run(two_gpus(1, 1, grace=30), jobs, variant))
        assert fleet["nb"].in_quota
        assert fleet["nb"].first_start - HOUR == wait, variant
    pool = records(run(two_gpus(1, 1, grace=30), jobs, "pool"))
    assert pool["nb"].first_start == 10 * HOUR  # first come, first served: b1 ends at 10 h

    frachub = run(two_gpus(1, 1, grace=30), jobs, "frachub")
    victim = records(frachub)["b2"]  # the most recently started of b's jobs
    assert [(t, reason) for t, reason, _ in victim.evictions] == [(HOUR, "reclaim")]
    summary = summarize(frachub)
    assert summary.in_quota_wait.p99.seconds == 30
    assert summary.lost_gpu_hours == pytest.approx((HOUR - 1) / HOUR)  # ran 1 s short of 1 h


def test_checkpointing_limits_the_work_lost_to_the_time_since_the_last_checkpoint():
    jobs = [
        training("b1", "b", 0, 10),
        training("b2", "b", 0, 10, every=1500),
        notebook("nb", "a", HOUR, 0.5, 2),
    ]
    fleet = run(two_gpus(1, 1), jobs, "frachub")
    victim = records(fleet)["b2"]
    ((_, _, lost),) = victim.evictions
    assert lost == HOUR - 2 * 1500  # checkpoints at 25 and 50 minutes
    # it resumes from 50 minutes when the notebook leaves (at 3 h 30 s) and the GPU is whole
    assert victim.ended == pytest.approx(HOUR + 30 + 2 * HOUR + 10 * HOUR - 3000)
    rerun = records(run(two_gpus(1, 1), jobs, "frachub", checkpointing=False))["b2"]
    assert rerun.evictions[0][2] == HOUR


def test_fraction_packing_doubles_the_asked_for_allocation_of_half_gpu_notebooks():
    jobs = [notebook(f"nb{i}", "a", 0, 0.5, 1) for i in range(4)]
    text = two_gpus(2, 0)
    frac = run(text, jobs, "frachub")
    whole = run(text, jobs, "reclaim")
    assert [r.first_start for r in frac.records] == [0, 0, 0, 0]
    assert sorted(r.first_start for r in whole.records) == [0, 0, HOUR, HOUR]

    def first_hour(fleet, values):
        return time_average(fleet.timeline.times, values, fleet.end, [(0, HOUR)]) / fleet.capacity

    assert first_hour(frac, frac.timeline.asked) == 1.0
    assert first_hour(whole, whole.timeline.asked) == 0.5
    assert first_hour(whole, whole.timeline.held) == 1.0  # whole GPUs for half-GPU requests


def test_a_gang_starts_whole_or_not_at_all():
    text = """
cluster: {nodes: [{name: n, count: 2, gpus: 2}]}
projects: [{name: a, deserved_gpus: 4}]
"""
    gang = Job("g", "a", Kind.TRAINING, 2.0, 2, 60, HOUR)
    small = training("s", "a", 0, 2)
    fleet = records(run(text, [small, gang], "static"))
    assert fleet["g"].first_start == 2 * HOUR  # one node free is not enough for 2 x 2 GPUs
    assert fleet["g"].held == 4


def test_notebooks_give_up_after_their_patience():
    nb = Job("nb", "a", Kind.INTERACTIVE, 1.0, 1, 1, HOUR, patience_seconds=600)
    blocker = training("t", "a", 0, 5)
    text = "cluster: {nodes: [{name: ws, gpus: 1}]}\nprojects: [{name: a, deserved_gpus: 1}]\n"
    fleet = run(text, [blocker, nb], "static")
    record = records(fleet)["nb"]
    assert (record.first_start, record.abandoned, record.ended) == (None, True, 601)
    wait = summarize(fleet).notebook_wait.p99
    assert (wait.seconds, wait.censored) == (600, True)


def test_same_seed_same_result_and_another_seed_differs():
    description = parse_description_text(PRESETS["lab"])
    runtimes = [60.0, 600.0, 3600.0, 7200.0, 36000.0]
    jobs = generate(description, 2, 7, runtimes)
    assert jobs == generate(description, 2, 7, runtimes)
    assert jobs != generate(description, 2, 8, runtimes)
    first = summarize(simulate(description, jobs, VARIANTS["frachub"], 2))
    again = summarize(simulate(description, jobs, VARIANTS["frachub"], 2))
    assert first == again


# -- the command ------------------------------------------------------------------------------


@pytest.fixture
def philly(tmp_path):
    path = tmp_path / "philly.csv"
    path.write_text("runtime\n60\n600\n3600\n7200\n36000\n")
    return path


def test_json_output_has_every_variant(philly, capsys):
    lab = ["simulate", "fleet", "--preset", "lab", "--philly", str(philly), "--jobs", "1"]
    code = main([*lab, "--days", "2", "--json"])
    out = capsys.readouterr()
    assert code == 0
    data = json.loads(out.out)
    assert [v["variant"] for v in data["variants"]] == ["static", "pool", "reclaim", "frachub"]
    assert data["gpus"] == 8 and data["days"] == 2 and data["warmup_days"] == 1
    for variant in data["variants"]:
        assert 0 <= variant["allocation"] <= 1
        assert set(variant["notebook_wait"]) == {"count", "p50", "p99"}
    assert out.err == ""  # no progress bar with --json, nor when stderr is not a terminal


def test_one_progress_bar_on_a_terminal_for_parallel_variants(philly):
    """Two worker processes, one bar: every frame on the terminal is the parent's bar (the
    workers send their days through a queue), and it counts every simulated day."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    argv = ["simulate", "fleet", "--preset", "lab", "--philly", str(philly)]
    process = subprocess.Popen(
        [sys.executable, "-m", "hub_ext.cli", *argv, "--days", "2", "--jobs", "2"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=follower,
        text=True,
    )
    os.close(follower)
    drawn = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the other end closed: the process ended
            break
        if not chunk:
            break
        drawn += chunk
    out, _ = process.communicate(timeout=120)
    os.close(leader)
    assert process.returncode == 0 and "FracHub" in out
    frames = [f for f in drawn.decode().replace("\n", "\r").split("\r") if f.strip()]
    assert len(frames) >= 2 and all(f.startswith("simulated days:") for f in frames), frames
    assert frames[0].startswith("simulated days:   0%") and "  0%" not in frames[-1], frames
    assert "fleet:" not in drawn.decode()


def test_table_and_plots(philly, tmp_path, capsys):
    lab = ["simulate", "fleet", "--preset", "lab", "--philly", str(philly), "--jobs", "1"]
    code = main([*lab, "--days", "1", "--variants", "static,frachub", "--plots", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    assert "| FracHub |" in out and "| static quotas, whole GPUs |" in out
    for name in ("allocation", "time_to_gpu", "fair_share"):
        assert (tmp_path / f"fleet_{name}.png").stat().st_size > 10_000


def test_print_description_is_a_valid_description(capsys):
    assert main(["simulate", "fleet", "--preset", "institute", "--print-description"]) == 0
    assert parse_description_text(capsys.readouterr().out).capacity == 128


BAD = [
    pytest.param(["--preset", "campus"], "--preset: unknown preset 'campus'", id="preset"),
    pytest.param(["--variants", "slurm"], "--variants: unknown variant 'slurm'", id="variant"),
    pytest.param(["--days", "0"], "--days: must be at least 1", id="days"),
    pytest.param(
        ["--days", "5", "--warmup-days", "5"], "--warmup-days: must be in [0, 5)", id="warmup"
    ),
    pytest.param(["--philly", "{tmp}/none.csv"], "no Philly run-time file at", id="philly"),
    pytest.param(
        ["--description", "{tmp}/bad.yaml"],
        "bad.yaml: projects[0] (a).training.shapes[0].gpus: must be a fraction",
        id="description",
    ),
    pytest.param(["--description", "{tmp}/absent.yaml"], "cannot read the file", id="no-file"),
    pytest.param(
        ["--usage-half-life", "0"], "--usage-half-life: must be > 0 hours, got 0", id="half-life"
    ),
    pytest.param(
        ["--usage-half-life", "12", "--usage-k", "-1"], "--usage-k: must be >= 0", id="usage-k"
    ),
    pytest.param(
        ["--take-offer", "1.5"], "--take-offer: must be a share from 0 to 1, got 1.5", id="offer"
    ),
    pytest.param(
        ["--interactive-reserve", "-1"],
        "--interactive-reserve: must be a number of GPUs >= 0, got -1",
        id="reserve",
    ),
]


@pytest.mark.parametrize(("argv", "message"), BAD)
def test_bad_input_is_one_line_and_exit_2(argv, message, tmp_path, philly, capsys):
    (tmp_path / "bad.yaml").write_text(
        "cluster: {nodes: [{name: n, gpus: 2}]}\nprojects:\n  - name: a\n"
        "    training: {per_day: 1, shapes: [{gpus: 1.5}]}\n"
    )
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in argv]
    if "--philly" not in argv:
        argv += ["--philly", str(philly)]
    code = main(["simulate", "fleet", *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("frachub simulate fleet: ") and message in err
    assert err.count("\n") == 1


def test_the_command_line_exits_2_without_a_traceback():
    result = subprocess.run(
        [sys.executable, "-m", "hub_ext.cli", "simulate", "fleet", "--philly", "/nonexistent"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1


def test_a_user_who_takes_the_offer_starts_preemptible_and_is_stopped_for_in_quota_work():
    """a deserves 1 of 2 GPUs and has a notebook on it; at 1 h a second notebook of a would
    wait at a's quota, so the form offers to start it preemptible on b's idle GPU. At 2 h b
    trains inside its own quota: the notebook's share is revoked, it stops at once."""
    first = notebook("nb1", "a", 0, 1, 5)
    second = Job("nb2", "a", Kind.INTERACTIVE, 1.0, 1, HOUR, 3 * HOUR, patience_seconds=600)
    jobs = [first, second, training("b1", "b", 2 * HOUR, 1)]

    declined = records(run(two_gpus(1, 1), jobs, "frachub"))["nb2"]
    assert (declined.first_start, declined.abandoned, declined.preemptible) == (None, True, False)

    jobs[1] = replace(second, takes_offer=True)
    fleet = run(two_gpus(1, 1), jobs, "frachub")
    taken = records(fleet)["nb2"]
    assert (taken.first_start, taken.preemptible, taken.abandoned) == (HOUR, True, False)
    assert (taken.stopped, taken.ended) == (True, 2 * HOUR)
    assert [(t, reason, lost) for t, reason, lost in taken.evictions] == [(2 * HOUR, "reclaim", 0)]
    assert records(fleet)["b1"].first_start == 2 * HOUR  # a revoked share is free at once
    summary = summarize(fleet)
    assert (summary.notebooks_abandoned, summary.notebooks_preemptible) == (0, 1)
    assert summary.notebooks_stopped == 1
    assert summary.notebook_hours_cut == pytest.approx(2.0)  # a 3-hour session cut after 1
    # a fifth table says it, only when some user took the offer
    assert "| FracHub | 0 | 1 | 1 | 2.0 |" in tables([summary])
    assert "started preemptible" not in tables([summarize(run(two_gpus(1, 1), jobs, "reclaim"))])

    # a variant without the offer (Kueue-like reclaim) leaves the user waiting, who gives up
    assert records(run(two_gpus(1, 1), jobs, "reclaim"))["nb2"].abandoned


def test_the_share_who_take_the_offer_changes_nothing_else_in_the_arrivals():
    description = parse_description_text(PRESETS["startup"])
    runtimes = [60.0, 600.0, 3600.0]
    none = generate(description, 3, 2, runtimes)
    research = next(p for p in description.projects if p.name == "research")
    most = replace(research, notebooks=replace(research.notebooks, take_offer=0.8))
    projects = tuple(most if p.name == "research" else p for p in description.projects)
    taken = generate(replace(description, projects=projects), 3, 2, runtimes)
    assert [replace(job, takes_offer=False) for job in taken] == list(none)
    offered = [job for job in taken if job.project == "research" and job.kind is Kind.INTERACTIVE]
    assert 0.6 < sum(job.takes_offer for job in offered) / len(offered) < 0.95
    assert not any(job.takes_offer for job in taken if job.project != "research")
