"""One working-directory rule for every client (hub_ext/workdir.py): a relative path, or
``~/...``, is sent as written and taken by the service from the user's home where jobs run;
the CLI and the magics send their current directory only when none is asked for."""

from __future__ import annotations

import pytest

from hub_ext.cli.main import build_parser
from hub_ext.client.jobs import command_from, submission
from hub_ext.workdir import working_dir_field


@pytest.mark.parametrize(
    ("asked", "current", "sent"),
    [
        ("exp", "/home/alice/notebooks", "exp"),
        ("~/exp", "/home/alice/notebooks", "~/exp"),
        ("/data/exp", "/home/alice", "/data/exp"),
        (None, "/home/alice/notebooks", "/home/alice/notebooks"),
        (None, None, None),  # the Python API and the panel: the home
    ],
)
def test_the_rule(asked, current, sent) -> None:
    assert working_dir_field(asked, current) == sent


def test_the_cli_sends_a_relative_working_dir_as_written() -> None:
    args = build_parser().parse_args(
        ["submit", "--gpus", "0.5", "--working-dir", "exp", "--", "python", "train.py"]
    )
    body = submission(args, command_from(args.command), working_dir_field(args.working_dir, "/x"))
    assert body["working_dir"] == "exp"
