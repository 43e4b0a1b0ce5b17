"""Time limits in Slurm's formats (scheduler/common/quantities.py), one grammar for the API's
``time_limit``, the CLI's and the magics' ``--time`` and a project's limits; and the flags
``--time``, ``--after``, ``--after-ok`` as the CLI and the magics send them."""

from __future__ import annotations

import pytest

from hub_ext.cli.main import build_parser
from hub_ext.client.jobs import command_from, submission
from scheduler.common.quantities import slurm_time, time_limit_seconds, time_limit_words


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 30 * 60),  # MM
        ("90", 90 * 60),
        ("30:15", 30 * 60 + 15),  # MM:SS
        ("2:00:00", 7200),  # HH:MM:SS
        ("02:00:00", 7200),
        ("1-12", 36 * 3600),  # D-HH
        ("1-0:30", 86400 + 1800),  # D-HH:MM
        ("2-03:04:05", 2 * 86400 + 3 * 3600 + 4 * 60 + 5),  # D-HH:MM:SS
        (" 45 ", 45 * 60),
    ],
)
def test_slurm_formats(text: str, seconds: int) -> None:
    assert time_limit_seconds(text) == seconds
    assert time_limit_seconds(slurm_time(seconds)) == seconds  # what is shown reads back


@pytest.mark.parametrize(
    "text", ["", "0", "0:00", "2h", "1.5", "-5", "1:2:3:4", "1-", "-1-2", "x-1", "1" * 41]
)
def test_what_is_not_a_time_limit(text: str) -> None:
    assert time_limit_seconds(text) is None


@pytest.mark.parametrize(
    ("seconds", "words", "shown"),
    [
        (7200, "2 h", "02:00:00"),
        (5400, "1 h 30 min", "01:30:00"),
        (45, "45 s", "00:00:45"),
        (86400 + 4 * 3600, "1 d 4 h", "1-04:00:00"),
        (0, "0 s", "00:00:00"),
    ],
)
def test_a_limit_in_words_and_as_slurm_shows_it(seconds: int, words: str, shown: str) -> None:
    assert time_limit_words(seconds) == words
    assert slurm_time(seconds) == shown


def test_submit_sends_time_and_dependencies() -> None:
    """The CLI's flags (the magics take the same ones: tests/extras/test_magics.py)."""
    words = ["submit", "--gpus", "1", "--time", "1-12", "--after-ok", "12", "--", "train.sh"]
    args = build_parser().parse_args(words)
    body = submission(args, command_from(args.command), None)
    assert body["time_limit"] == "1-12" and body["after_ok"] == 12 and "after" not in body
    args = build_parser().parse_args(["submit", "--gpus", "1", "--after", "3", "--", "x"])
    body = submission(args, command_from(args.command), None)
    assert body["after"] == 3 and "time_limit" not in body and "after_ok" not in body


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--time", "2h"], "not a time limit: '2h'"),
        (["--after", "twelve"], "a job id is a number"),
        (["--after", "1", "--after-ok", "2"], "not allowed with argument --after"),
    ],
)
def test_submit_refuses_bad_flags(capsys, flags: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["submit", "--gpus", "1", *flags, "--", "x"])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
