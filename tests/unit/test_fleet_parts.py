"""The fleet simulation's pure parts: description validation, arrivals, percentiles with
censoring, time averages, and how the baselines transform queues and requests."""

from __future__ import annotations

import pytest
import yaml

from scheduler.engine import Kind, Queue
from scheduler.fields import InvalidSpec
from scheduler.fleet.description import DAY, HOUR, parse_description, parse_description_text
from scheduler.fleet.metrics import (
    Quantile,
    binned,
    intervals_at_least,
    offered_load,
    quantile,
    time_average,
)
from scheduler.fleet.presets import PRESETS
from scheduler.fleet.variants import VARIANTS, variant_queues, variant_spec
from scheduler.fleet.workload import Job, generate, is_weekend

pytestmark = pytest.mark.unit

GOOD = {
    "cluster": {"nodes": [{"name": "n", "count": 2, "gpus": 4}]},
    "projects": [
        {
            "name": "a",
            "deserved_gpus": 4,
            "notebooks": {"per_day": 10, "shapes": [{"gpus": 0.5}]},
            "training": {"per_day": 20, "shapes": [{"gpus": 1}, {"gpus": 4, "replicas": 2}]},
        },
        {"name": "b", "deserved_gpus": 4},
    ],
}


def _with(path: str, value) -> dict:
    """GOOD with one field set (``None`` deletes it); ``path`` like "projects.0.training.x"."""
    document = yaml.safe_load(yaml.safe_dump(GOOD))
    *parents, last = path.split(".")
    target = document
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    key = int(last) if last.isdigit() else last
    if value is None:
        del target[key]
    else:
        target[key] = value
    return document


BAD = [
    pytest.param(_with("grace_second", 30), "grace_second: unknown field", id="top-typo"),
    pytest.param(_with("cluster", None), "cluster: is required", id="no-cluster"),
    pytest.param(
        _with("cluster.nodes.0.gpus", -1), "cluster.nodes[0] (n).gpus: must be a whole", id="node"
    ),
    pytest.param(_with("projects", []), "projects: must list at least one", id="no-projects"),
    pytest.param(
        _with("projects.1.deserved_gpus", -2),
        "projects[1] (b).deserved_gpus: must be >= 0",
        id="quota",
    ),
    pytest.param(
        _with("projects.0.training.per_day", None),
        "projects[0] (a).training.per_day: is required",
        id="per-day-missing",
    ),
    pytest.param(
        _with("projects.0.training.shapes.0.gpus", 1.5),
        "projects[0] (a).training.shapes[0].gpus: must be a fraction in (0, 1]",
        id="gpus",
    ),
    pytest.param(
        _with("projects.0.training.shapes.1.gpus", 8),
        "projects[0] (a).training.shapes[1].gpus: 8 GPUs per replica, but the largest node has 4",
        id="never-fits",
    ),
    pytest.param(
        _with("projects.0.notebooks.shapes.0.replicas", 2),
        "projects[0] (a).notebooks.shapes[0].replicas: unknown field",
        id="notebook-gang",
    ),
    pytest.param(
        _with("projects.0.notebooks.session_hours", {"median": 3, "p90": 1}),
        "projects[0] (a).notebooks.session_hours.p90: must be >= median",
        id="session",
    ),
    pytest.param(
        _with("projects.0.training.working_hours_share", 1.5),
        "projects[0] (a).training.working_hours_share: must be at most 1",
        id="share",
    ),
    pytest.param(
        _with("projects.0.training.shapes", []),
        "projects[0] (a).training.shapes: must list at least one",
        id="no-shapes",
    ),
    pytest.param(
        _with("projects.0.training.checkpoint_minutes", 0),
        "projects[0] (a).training.checkpoint_minutes: must be greater than 0",
        id="checkpoint",
    ),
    pytest.param(
        _with("projects.1.parent", "a"),
        "projects[0] (a): is a department; give notebooks and training to its projects",
        id="department-with-work",
    ),
    pytest.param(
        _with("working_hours", {"start": 18, "end": 9}),
        "working_hours: needs 0 <= start < end <= 24",
        id="hours",
    ),
    pytest.param(_with("days", 0), "days: must be a whole number >= 1", id="days"),
    pytest.param(_with("placement", "tetris"), "placement: unknown placement", id="placement"),
]


@pytest.mark.parametrize(("document", "message"), BAD)
def test_bad_descriptions_name_the_field(document, message):
    with pytest.raises(InvalidSpec) as error:
        parse_description(document)
    assert message in str(error.value)


def test_yaml_errors_name_the_line():
    with pytest.raises(InvalidSpec, match="line 2: mapping values are not allowed"):
        parse_description_text("cluster:\n  nodes: a: b\n")


def test_defaults_and_presets():
    description = parse_description(GOOD)
    assert (description.capacity, description.days, description.grace_seconds) == (8, 7, 30)
    assert description.working_hours == (9, 18)
    notebooks = description.projects[0].notebooks
    assert (notebooks.session_hours_median, notebooks.patience_minutes) == (2, 60)
    assert [p.name for p in description.projects] == ["a", "b"]
    assert parse_description_text(PRESETS["lab"]).capacity == 8
    institute = parse_description_text(PRESETS["institute"])
    assert institute.capacity == 128
    assert sum(q.deserved_gpus for q in institute.queues) == 128


def test_arrivals_follow_the_working_week():
    description = parse_description(
        _with("projects.0.notebooks.weekend_factor", 0) | {"working_hours": {"start": 9, "end": 17}}
    )
    jobs = generate(description, 7, 3, [100.0, 200.0])
    notebooks = [job for job in jobs if job.kind is Kind.INTERACTIVE]
    training = [job for job in jobs if job.kind is Kind.TRAINING]
    assert notebooks and training
    for job in notebooks:
        day, hour = divmod(job.at, DAY)
        assert not is_weekend(int(day)) and 9 * HOUR <= hour < 17 * HOUR
        assert job.gpus == 0.5 and job.patience_seconds == 3600 and job.duration >= 60
    assert {job.duration for job in training} <= {100.0, 200.0}
    assert {(job.gpus, job.replicas) for job in training} == {(1.0, 1), (4.0, 2)}
    assert [job.at for job in jobs] == sorted(job.at for job in jobs)
    # about 20 a weekday and 6 a weekend day (weekend_factor 0.3): 5*20 + 2*6 = 112
    assert 80 < len(training) < 150


def test_run_times_are_scaled_and_capped():
    document = _with("projects.0.training.runtime_scale", 2)
    document["projects"][0]["training"]["max_runtime_hours"] = 1
    jobs = generate(parse_description(document), 2, 1, [600.0, 36000.0])
    assert {job.duration for job in jobs if job.kind is Kind.TRAINING} == {1200.0, 3600.0}


def test_adding_a_project_leaves_the_others_arrivals_alone():
    one = generate(parse_description(GOOD), 3, 5, [60.0])
    more = _with("projects.1.notebooks", {"per_day": 50, "shapes": [{"gpus": 1}]})
    two = generate(parse_description(more), 3, 5, [60.0])
    assert one == tuple(job for job in two if job.project == "a")


@pytest.mark.parametrize(
    ("waits", "q", "expected"),
    [
        pytest.param([], 0.5, None, id="empty"),
        pytest.param([(5, False)], 0.99, Quantile(5), id="one"),
        pytest.param([(1, False), (2, False), (3, False), (4, False)], 0.5, Quantile(2), id="p50"),
        pytest.param([(1, False)] * 99 + [(7, False)], 0.99, Quantile(1), id="p99-of-100"),
        pytest.param([(1, False)] * 98 + [(7, False)] * 2, 0.99, Quantile(7), id="p99-tail"),
        pytest.param([(3, False), (600, True)], 0.99, Quantile(600, True), id="censored-tail"),
        pytest.param([(1, True), (2, False), (9, False)], 0.5, Quantile(2, True), id="lower-bound"),
    ],
)
def test_quantile_nearest_rank_with_censoring(waits, q, expected):
    assert quantile(waits, q) == expected


def test_time_average_and_bins_of_a_step_function():
    times, values = [10.0, 20.0], [2.0, 4.0]
    assert time_average(times, values, 40, [(0, 40)]) == (10 * 2 + 20 * 4) / 40
    assert time_average(times, values, 40, [(15, 25)]) == (5 * 2 + 5 * 4) / 10
    assert time_average(times, values, 40, [(0, 10), (30, 40)]) == (0 + 10 * 4) / 20
    assert binned(times, values, 40, 20) == [1.0, 4.0]


def test_offered_load_and_busy_hours():
    jobs = [
        Job("t", "a", Kind.TRAINING, 2.0, 2, 0, 100),  # 4 GPUs over [0, 100)
        Job("n", "a", Kind.INTERACTIVE, 0.5, 1, 50, 100),  # 0.5 over [50, 150)
        Job("late", "a", Kind.TRAINING, 1.0, 1, 500, 100),  # after the end
    ]
    times, values = offered_load(jobs, 120)
    assert (times, values) == ([0, 50, 100], [4.0, 4.5, 0.5])
    assert intervals_at_least(times, values, 4, 0, 120) == [(0, 100)]
    assert intervals_at_least(times, values, 4.5, 60, 120) == [(60, 100)]
    assert intervals_at_least(times, values, 5, 0, 120) == []


def test_baselines_are_queue_and_request_transformations():
    queues = (Queue("a", deserved_gpus=2.0), Queue("b", deserved_gpus=1.0, limit_gpus=0.5))
    static = variant_queues(VARIANTS["static"], queues, 4)
    assert [q.limit_gpus for q in static] == [2.0, 0.5]
    assert variant_queues(VARIANTS["pool"], queues, 4) == (Queue("pool", deserved_gpus=4.0),)
    assert variant_queues(VARIANTS["frachub"], queues, 4) == queues
    notebook = Job("nb", "a", Kind.INTERACTIVE, 0.25, 1, 0, 60)
    job = Job("t", "a", Kind.TRAINING, 2.0, 2, 0, 60)
    cases = {
        "static": ((1.0, "a", False, 100), (2.0, "a", False, 50)),
        "pool": ((1.0, "pool", False, 0), (2.0, "pool", False, 0)),
        "reclaim": ((1.0, "a", False, 100), (2.0, "a", True, 50)),
        "frachub": ((0.25, "a", False, 100), (2.0, "a", True, 50)),
    }
    for name, expected in cases.items():
        specs = [variant_spec(VARIANTS[name], j) for j in (notebook, job)]
        got = tuple(
            (s.ask.request.gpus, s.ask.project, s.ask.preemptible, s.ask.priority) for s in specs
        )
        assert got == expected, name
