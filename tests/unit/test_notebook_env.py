"""The environment a job submitted from a notebook gets by default (the magics' rule: the
kernel's own interpreter first on the notebook's PATH)."""

from hub_ext.cli.main import build_parser
from hub_ext.client.jobs import command_from, notebook_environment, submission

NOTEBOOK = {"JUPYTERHUB_USER": "alice", "PATH": "/usr/bin:/opt/k/bin:/bin", "HOME": "/home/a"}


def test_the_kernel_s_interpreter_goes_first_on_the_notebook_s_path() -> None:
    env = notebook_environment(NOTEBOOK, "/opt/k/bin/python3")
    assert env == {"PATH": "/opt/k/bin:/usr/bin:/bin"}


def test_outside_a_notebook_server_nothing_is_sent() -> None:
    assert notebook_environment({"PATH": "/usr/bin", "VIRTUAL_ENV": "/v"}, "/v/bin/python") == {}


def test_the_user_s_env_wins_and_the_flag_opts_out() -> None:
    notebook = notebook_environment({**NOTEBOOK, "CONDA_PREFIX": "/c"})
    words = ["submit", "-g", "1", "-e", "PATH=/mine", "--", "python", "x.py"]
    args = build_parser().parse_args(words)
    assert submission(args, command_from(args.command), None, notebook)["env"] == {
        "PATH": "/mine",
        "CONDA_PREFIX": "/c",
    }
    args = build_parser().parse_args(
        ["submit", "-g", "1", "--no-notebook-env", "--", "python", "x.py"]
    )
    assert submission(args, command_from(args.command), None, notebook)["env"] is None
