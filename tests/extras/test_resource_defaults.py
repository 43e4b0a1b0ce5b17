"""The admin's CPU and memory defaults per kind (``default_cpu``, ``default_memory_gib``):
checked at start-up naming the setting and kind, and applied by the request parsers to
what a request leaves out, never to what it names (0 included)."""

from __future__ import annotations

import pytest

from scheduler.engine import Kind
from scheduler.fields import InvalidSpec
from scheduler.service.app import FracHubService
from scheduler.service.requests import (
    parse_allocation,
    parse_dry_run,
    parse_submission,
    resource_defaults,
)

DEFAULTS = resource_defaults({"notebook": 1, "training": 4}, {"training": 32, "inference": 8})


def test_defaults_fill_what_a_request_leaves_out() -> None:
    job = parse_submission({"command": "true", "gpus": 1}, DEFAULTS).ask.request
    assert (job.cpu_milli, job.memory_mib) == (4000, 32 * 1024)
    served = parse_submission(
        {"command": "true", "gpus": 1, "kind": "inference"}, DEFAULTS
    ).ask.request
    assert (served.cpu_milli, served.memory_mib) == (0, 8 * 1024)  # no inference CPU default
    notebook = parse_allocation({"gpus": 0.5}, DEFAULTS).ask.request
    assert (notebook.cpu_milli, notebook.memory_mib) == (1000, 0)
    [tried] = parse_dry_run({"requests": [{"gpus": 0.5}]}, DEFAULTS).requests
    assert (tried.request.cpu_milli, tried.kind) == (1000, Kind.INTERACTIVE)


def test_what_a_request_names_wins_zero_included() -> None:
    body = {"command": "true", "gpus": 1, "cpu": 0, "memory_gib": 0.5}
    job = parse_submission(body, DEFAULTS).ask.request
    assert (job.cpu_milli, job.memory_mib) == (0, 512)
    job = parse_submission({**body, "cpu": None}, DEFAULTS).ask.request  # null: as absent
    assert job.cpu_milli == 4000


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"default_cpu": {"gpu": 1}}, r"default_cpu\['gpu'\]: is not a kind; one of notebook"),
        ({"default_cpu": {"training": "4"}}, r"default_cpu\['training'\]: must be a number"),
        ({"default_memory_gib": {"notebook": -1}}, r"default_memory_gib\['notebook'\]: must be"),
    ],
)
def test_a_bad_default_stops_the_service_naming_it(settings, words) -> None:
    with pytest.raises(ValueError, match=words):
        FracHubService(**settings)
    with pytest.raises(InvalidSpec):
        resource_defaults(settings.get("default_cpu", {}), settings.get("default_memory_gib", {}))
