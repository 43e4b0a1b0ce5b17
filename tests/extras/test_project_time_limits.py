"""A project's time limits in the projects file (``FracHubService.queues``, ``frachub up
--projects``): read in Slurm's formats beside the quota fields, refused with the entry and the
field named when malformed, and never handed to the engine's queue parser."""

from __future__ import annotations

import re

import pytest

from scheduler.service.app import check_queues
from scheduler.service.requests import parse_time_limits


def test_the_projects_file_takes_time_limits() -> None:
    entries = [
        {
            "name": "hpc",
            "deserved_gpus": 2,
            "default_time_limit": "2:00:00",
            "max_time_limit": "7-00",
        },
        {"name": "lab", "members": ["alice"]},
    ]
    assert check_queues(entries, "queues") == entries


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"name": "hpc", "max_time_limit": "a week"},
            "queues[0] (hpc).max_time_limit: must be a time limit as Slurm writes it",
        ),
        (
            {"name": "hpc", "default_time_limit": "2-00", "max_time_limit": "1-00"},
            "queues[0] (hpc).default_time_limit: must be at most max_time_limit (1-00:00:00), "
            "got 2-00:00:00",
        ),
        ({"name": "hpc", "default_time_limit": 3600}, "queues[0] (hpc).default_time_limit"),
    ],
)
def test_a_malformed_limit_names_the_entry_and_the_field(entry: dict, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        check_queues([entry], "queues")


def test_a_patch_keeps_what_it_leaves_out_and_null_clears() -> None:
    current = (3600.0, 86400.0)
    assert parse_time_limits({}, current) == current
    assert parse_time_limits({"default_time_limit": None}, current) == (None, 86400.0)
    assert parse_time_limits({"max_time_limit": "2-00"}, current) == (3600.0, 172800.0)
