"""The ``frachub`` job commands, run as real subprocesses against the real service behind a
real JupyterHub: submit, jobs, describe, logs (tail and follow), cancel, quota, and every
refusal as one line on stderr with the right exit status, never a traceback."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from hubharness import free_port, module_service
from service_client import service_config, submit, wait_state

from scheduler.common.scopes import (
    ACCESS_SCOPE,
    ADMIN_GROUP,
    ADMIN_SCOPE,
    READ_SCOPE,
    SCOPE_HOLDERS,
    SUBMIT_SCOPE,
)

pytestmark = pytest.mark.service

SUBMITTED = re.compile(r"^Submitted job (\d+) \((\S+)\) to project (\S+): ")


PAGE = "\nc.FracHubService.page_default_limit = 2\nc.FracHubService.page_max_limit = 3\n"
"""Small pages: every listing of more than three jobs follows the service's cursor."""
service = module_service(service_config(gpus=2, grace=1, extra=PAGE), "cli")


def base_env(**extra: str) -> dict[str, str]:
    """The test's environment without any hub or FracHub settings it may run inside."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("JUPYTERHUB_", "FRACHUB_"))
    }
    env.update(extra)
    return env


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, env: dict[str, str], cwd=None, timeout: float = 60) -> Result:
    done = subprocess.run(
        [sys.executable, "-m", "hub_ext.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout, done.stderr
    return Result(done.returncode, done.stdout, done.stderr)


@dataclass
class User:
    name: str
    token: str
    env: dict[str, str]

    def __call__(self, *args: str, **kwargs) -> Result:
        """Run ``frachub ARGS`` as this user."""
        return run_cli(*args, env=kwargs.pop("env", self.env), **kwargs)


@pytest.fixture
def user(service, hub, make_user) -> Callable[..., User]:
    """user(groups=("vision",)) -> a new user whose FRACHUB_URL/FRACHUB_TOKEN are set."""

    def make(groups=("vision",)) -> User:
        name, token = make_user(groups=list(groups))
        return User(name, token, base_env(FRACHUB_URL=hub.service_url(), FRACHUB_TOKEN=token))

    return make


def submitted_id(result: Result) -> int:
    assert result.returncode == 0, result.stderr
    match = SUBMITTED.match(result.stdout)
    assert match, result.stdout
    return int(match.group(1))


def test_submit_declares_a_checkpoint_interval(user, api) -> None:
    alice = user()
    client = api(alice.token)
    job = submitted_id(alice("submit", "-g", "1", "--checkpoint-interval", "10m", "--", "true"))
    assert client.get(f"workloads/{job}").json()["checkpoint_interval_seconds"] == 600


def test_submit_names_gpu_models(user, api) -> None:
    alice = user()
    client = api(alice.token)
    job = submitted_id(alice("submit", "-g", "1", "--gpu-model", "declared", "--", "true"))
    assert client.get(f"workloads/{job}").json()["gpu_model"] == ["declared"]
    never = alice("submit", "-g", "1", "--gpu-model", "H100", "--gpu-model", "B200", "--", "true")
    assert never.returncode == 1 and "Traceback" not in never.stderr
    assert never.stderr.startswith(
        "frachub: not submitted: a job that needs a GPU of model B200 or H100 (its gpu_model)"
    ), never.stderr


def test_a_job_from_a_notebook_runs_with_the_notebook_s_environment(user, api, tmp_path) -> None:
    """``frachub submit -- python ...`` in a notebook's terminal runs the notebook's
    ``python`` (the first on its PATH), not the service's; ``--no-notebook-env`` and a
    submission from outside a notebook server keep the service's PATH."""
    alice = user()
    client = api(alice.token)
    bindir = tmp_path / "notebook-env" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "python").write_text('#!/bin/sh\necho "the notebook python runs $*"\n')
    (bindir / "python").chmod(0o755)
    path = f"{bindir}{os.pathsep}{alice.env['PATH']}"
    outside = {**alice.env, "PATH": path}
    notebook = {**outside, "JUPYTERHUB_USER": alice.name, "VIRTUAL_ENV": str(bindir.parent)}
    show = ["--", "sh", "-c", "command -v python; echo venv=$VIRTUAL_ENV"]

    def log_of(result: Result) -> str:
        job = submitted_id(result)
        wait_state(client, job, "succeeded", "failed")
        return client.get(f"workloads/{job}/logs").text

    ran = log_of(alice("submit", "-g", "0.5", "--", "python", "train.py", env=notebook))
    assert "the notebook python runs train.py" in ran, ran
    assert f"venv={bindir.parent}" in log_of(alice("submit", "-g", "0.5", *show, env=notebook))
    for opted_out in (
        alice("submit", "-g", "0.5", "--no-notebook-env", *show, env=notebook),
        alice("submit", "-g", "0.5", *show, env=outside),
    ):
        log = log_of(opted_out)
        assert str(bindir) not in log and "venv=\n" in log, log
    # an --env PATH of the user's own wins
    own = log_of(alice("submit", "-g", "0.5", "-e", "PATH=/usr/bin:/bin", *show, env=notebook))
    assert str(bindir) not in own and f"venv={bindir.parent}" in own, own


def test_submit_follow_jobs_describe_and_tail(user, api, tmp_path) -> None:
    alice = user()
    # the job waits (up to 30 s) for a file the test makes once --follow has shown tick-1
    script = (
        "echo tick-1-$FRACHUB_WORKLOAD_ID; i=0; "
        "while [ ! -e go ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; "
        "echo tick-2-$FRACHUB_WORKLOAD_ID; pwd"
    )
    submitted = alice("submit", "--gpus", "0.5", "--name", "ticker", "--", script, cwd=tmp_path)
    job = submitted_id(submitted)
    # on an idle GPU the fast arrival path has started it before the service answers
    assert re.search(r"\(ticker\) to project vision: 0\.5 GPU, (pending|running)", submitted.stdout)

    follow = subprocess.Popen(
        [sys.executable, "-m", "hub_ext.cli", "logs", str(job), "--follow"],
        env=alice.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert follow.stdout is not None and follow.stderr is not None
    lines = []
    for line in follow.stdout:
        lines.append(line.strip())
        if line.strip() == f"tick-1-{job}":
            (tmp_path / "go").touch()  # streamed while the job still runs: let it finish
    assert follow.wait(30) == 0
    stderr = follow.stderr.read()
    assert "Traceback" not in stderr
    assert (tmp_path / "go").exists(), lines
    assert lines[-3:-1] == [f"tick-2-{job}", str(tmp_path)]  # ran in the current directory
    assert lines[-1].endswith(": succeeded: exit code 0 ===")  # FracHub's line: how it ended
    assert f"frachub: job {job} (ticker) succeeded" in stderr  # progress, then how it ended

    jobs = alice("jobs")
    assert jobs.returncode == 0, jobs.stderr
    header, *rows = jobs.stdout.splitlines()
    [row] = [line for line in rows if line.startswith(f"{job} ")]
    assert row[header.index("NAME") :].startswith("ticker")
    assert row[header.index("STATE") :].startswith("succeeded")
    assert row[header.index("NODE") :].startswith("local GPU ")

    described = alice("describe", str(job))
    assert described.returncode == 0, described.stderr
    text = described.stdout
    assert f"Training {job}: ticker" in text
    assert re.search(r"State:\s+succeeded", text) and re.search(r"Exit code:\s+0", text)
    assert re.search(r"Working dir:\s+" + re.escape(str(tmp_path)), text)
    assert re.search(r"\n\s+0\s+local\s+\d\s+0\.5\s", text), text  # the placement row
    for event in ("submitted", "started", "succeeded"):
        assert re.search(rf"\d\d:\d\d:\d\d\s+{event}\b", text), text

    tail = alice("logs", str(job), "--tail", "3")
    assert tail.returncode == 0
    assert tail.stdout.splitlines()[:2] == [f"tick-2-{job}", str(tmp_path)]
    assert tail.stdout.splitlines()[2].endswith(": succeeded: exit code 0 ===")  # FracHub's line
    for follow_flag in ((), ("--follow",)):
        beyond = alice("logs", str(job), "--replica", "1", *follow_flag)
        assert (beyond.returncode, beyond.stderr) == (
            1,
            "frachub: replica: must be below 1, got 1\n",
        )
    assert alice("jobs", "--project", "nlp").stdout == "no jobs\n"


def test_cancel_a_sleeping_job_and_see_quota(user, api) -> None:
    alice = user()
    job = submitted_id(alice("submit", "-g", "0.25", "--", "sleep", "60"))
    wait_state(api(alice.token), job, "running")

    quota = alice("quota")
    assert quota.returncode == 0, quota.stderr
    assert re.search(rf"User:\s+{alice.name}", quota.stdout)
    header = next(line for line in quota.stdout.splitlines() if "DESERVED" in line)
    assert header.split() == [
        *("PROJECT", "DESERVED", "LIMIT", "IN", "USE", "FAIR", "SHARE", "YOURS"),
        *("RUNNING", "PENDING"),
    ]
    row = next(line for line in quota.stdout.splitlines() if line.strip().startswith("vision"))
    assert row.split()[:3] == ["vision", "1", "none"]
    assert row.split()[5] == "0.25"  # YOURS: the sleeping job's share

    cancelled = alice("cancel", str(job))
    assert cancelled.returncode == 0, cancelled.stderr
    assert re.match(rf"Cancell(ing|ed) job {job} \(job-{job}\)", cancelled.stdout)
    wait_state(api(alice.token), job, "cancelled")
    listed = alice("jobs", "--all-states")
    assert re.search(rf"^{job}\s+job-{job}\s+vision\s+training\s+cancelled\s", listed.stdout, re.M)
    again = alice("cancel", str(job))
    assert again.returncode == 1
    assert again.stderr == f"frachub: workload {job} is already cancelled\n"


def test_jobs_pages_through_the_service_and_takes_a_limit(user, api) -> None:
    """The service answers at most three workloads a page here: ``jobs`` follows its
    cursor to the last one; ``--limit N`` shows the newest N and says more exist."""
    alice = user()
    client = api(alice.token)
    ids = [submit(client, command="true", gpus=0.25)["id"] for _ in range(7)]
    for job in ids:
        wait_state(client, job, "succeeded", timeout=60)
    newest_first = ids[::-1]
    everything = json.loads(alice("jobs", "--all-states", "--json").stdout)
    assert [record["id"] for record in everything] == newest_first
    assert [record["id"] for record in json.loads(alice("jobs", "--json").stdout)] == newest_first
    limited = json.loads(alice("jobs", "-A", "--limit", "4", "--json").stdout)
    assert [record["id"] for record in limited] == newest_first[:4]
    table = alice("jobs", "-A", "-n", "2")
    assert table.returncode == 0, table.stderr
    listed = [line.split()[0] for line in table.stdout.splitlines()[1:] if line[:1].isdigit()]
    assert listed == [str(job) for job in newest_first[:2]]
    assert "(the newest 2; --limit for more)" in table.stdout
    assert "--limit" not in alice("jobs", "-A", "-n", "7").stdout


def from_a_terminal(arguments: list[str], env: dict[str, str]) -> subprocess.Popen:
    """``frachub ARGUMENTS`` as a terminal starts it, with Ctrl-C (SIGINT) delivered. A test
    run started in the background (``cmd &`` in a script) ignores SIGINT, and an ignored signal
    stays ignored across exec: Python would then never raise KeyboardInterrupt."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "hub_ext.cli", *arguments],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        signal.signal(signal.SIGINT, before)


def test_ctrl_c_stops_following_but_not_the_job(user, api) -> None:
    alice = user()
    job = submitted_id(alice("submit", "--gpus", "0.25", "--", "sh", "-c", "echo up; sleep 60"))
    follow = from_a_terminal(["logs", str(job), "-f"], alice.env)
    assert follow.stdout is not None and follow.stderr is not None
    for line in follow.stdout:
        if line.strip() == "up":
            break
    follow.send_signal(signal.SIGINT)
    assert follow.wait(10) == 130
    stderr = follow.stderr.read()
    assert f"stopped following job {job}; it goes on" in stderr and "Traceback" not in stderr
    client = api(alice.token)
    assert client.get(f"workloads/{job}").json()["state"] == "running"
    assert alice("cancel", str(job)).returncode == 0


def test_one_project_of_several(user, hub) -> None:
    """With several projects the service wants one named: --project, else the notebook's
    FRACHUB_PROJECT, else a message saying so."""
    both = user(groups=("vision", "nlp"))
    refused = both("submit", "--gpus", "0.25", "--", "true")
    assert refused.returncode == 1
    assert refused.stderr == (
        f"frachub: project: is required: {both.name} is in vision, nlp; choose one with --project\n"
    )
    in_notebook = {**both.env, "FRACHUB_PROJECT": "nlp"}
    taken = both("submit", "--gpus", "0.25", "--", "true", env=in_notebook)
    assert SUBMITTED.match(taken.stdout).group(3) == "nlp"
    named = both("submit", "--gpus", "0.25", "-p", "vision", "--", "true", env=in_notebook)
    assert SUBMITTED.match(named.stdout).group(3) == "vision"


def test_tokens_and_urls_from_flags_and_environment(user, hub) -> None:
    alice = user()
    server_like = base_env(FRACHUB_URL=hub.service_url(), JUPYTERHUB_API_TOKEN=alice.token)
    assert alice("quota", env=server_like).returncode == 0  # the notebook server's token
    # FRACHUB_TOKEN beats JUPYTERHUB_API_TOKEN; flags beat both, and a hub URL is completed
    wrong_server = {**alice.env, "JUPYTERHUB_API_TOKEN": "not-a-token"}
    assert alice("quota", env=wrong_server).returncode == 0
    flags = ["--url", hub.url, "--token", alice.token]
    nothing = base_env(FRACHUB_URL="http://127.0.0.1:9/", FRACHUB_TOKEN="not-a-token")
    assert alice("jobs", *flags, env=nothing).returncode == 0


REFUSALS = [
    # (id, arguments, environment change, exit status, words in the one stderr line)
    ("bad-flag", ["jobs", "--bogus"], {}, 2, "unrecognized arguments: --bogus"),
    ("no-limit", ["jobs", "--limit", "0"], {}, 2, "--limit: must be at least 1, got 0"),
    ("huge-limit", ["jobs", "-n", "9" * 30], {}, 2, "--limit: must be at most 1000000"),
    ("no-gpus", ["submit", "--", "true"], {}, 2, "one of the arguments -g/--gpus --gpu-memory"),
    ("no-command", ["submit", "--gpus", "1"], {}, 2, "give the command after --"),
    ("bad-id", ["logs", "abc"], {}, 2, "a job id is a number"),
    ("bad-memory", ["submit", "--gpu-memory", "lots", "--", "true"], {}, 2, "not a memory size"),
    (
        "long-gpu-model",
        ["submit", "-g", "1", "--gpu-model", "x" * 254, "--", "true"],
        {},
        2,
        "a GPU model name is 1 to 253 characters",
    ),
    (
        "too-many-gpu-models",
        ["submit", "-g", "1", *[f"--gpu-model=m{i}" for i in range(17)], "--", "true"],
        {},
        1,
        "frachub: gpu_model: must be a GPU model name",
    ),
    (
        "bad-checkpoint-interval",
        ["submit", "-g", "1", "--checkpoint-interval", "0", "--", "true"],
        {},
        2,
        "--checkpoint-interval: must be above 0",
    ),
    (
        "odd-fraction",
        ["submit", "-g", "0.3333", "--", "true"],
        {},
        2,
        "--gpus: fractions are counted in thousandths, got 0.3333",
    ),
    (
        "gpus-across-gpus",
        ["submit", "-g", "1.5", "--", "true"],
        {},
        2,
        "--gpus: must be a fraction in (0, 1] or a whole number >= 1, got 1.5",
    ),
    (
        "reserved-env",
        ["submit", "-g", "1", "-e", "CUDA_VISIBLE_DEVICES=1", "--", "true"],
        {},
        1,
        "frachub: env.CUDA_VISIBLE_DEVICES",
    ),
    (
        "not-a-member",
        ["submit", "-g", "1", "-p", "nlp", "--", "true"],
        {},
        1,
        "is not a member of project nlp",
    ),
    (
        "never-starts",
        ["submit", "-g", "9", "--", "true"],
        {},
        1,
        "frachub: not submitted: a job that needs 9 GPUs on one node; the largest node has",
    ),
    (
        "gang-never-starts",
        ["submit", "-g", "2", "--replicas", "3", "--", "true"],
        {},
        1,
        "frachub: not submitted: a job that can never start here: even on the idle cluster "
        "it needs 3 replicas × 2 GPUs",
    ),
    ("no-such-job", ["describe", "999999"], {}, 1, "frachub: workload 999999 not found"),
    ("wrong-token", ["jobs"], {"FRACHUB_TOKEN": "0123456789abcdef"}, 1, "token in FRACHUB_TOKEN"),
    ("no-url", ["jobs"], {"FRACHUB_URL": None}, 2, "set FRACHUB_URL to the FracHub service"),
    ("no-token", ["quota"], {"FRACHUB_TOKEN": None}, 2, "set FRACHUB_TOKEN to a JupyterHub API"),
    ("bad-url", ["jobs"], {"FRACHUB_URL": "hub:8000"}, 2, "is not an http(s) URL"),
    ("unreachable", ["jobs"], {"FRACHUB_URL": "free-port"}, 1, "cannot reach the FracHub service"),
    ("not-the-service", ["jobs"], {"FRACHUB_URL": "hub/nothing/"}, 1, "the FracHub service? Set"),
]


@pytest.mark.parametrize(
    "args, change, status, words",
    [row[1:] for row in REFUSALS],
    ids=[row[0] for row in REFUSALS],
)
def test_refusals_are_one_line(user, hub, args, change, status, words) -> None:
    alice = user()
    env = dict(alice.env)
    for key, value in change.items():
        if value is None:
            env.pop(key)
        elif value == "free-port":
            env[key] = f"http://127.0.0.1:{free_port()}/services/frachub/"
        elif value.startswith("hub/"):
            env[key] = hub.url + value[3:]
        else:
            env[key] = value
    result = alice(*args, env=env)
    assert result.returncode == status, result
    assert words in result.stderr, result.stderr
    if status == 1:  # argparse prints its usage line before a usage error
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("frachub: ")
    assert result.stdout == ""


def test_another_users_job_is_not_found(user, api) -> None:
    alice, bob = user(), user()
    job = submit(api(bob.token), command="sleep 30", gpus=0.25)["id"]
    for command in (["describe"], ["logs"], ["logs", "--follow"], ["cancel"]):
        result = alice(*command, str(job))
        assert result.returncode == 1
        assert result.stderr == f"frachub: workload {job} not found\n"
    assert str(job) not in alice("jobs", "--all-states").stdout
    assert bob("cancel", str(job)).returncode == 0


def test_runai_and_slurm_words_json_and_admin_views(user, make_user, hub, api) -> None:
    """``list``/``delete`` are ``jobs``/``cancel``; ``--json`` gives the service's records;
    an admin sees their own jobs by default and others' with --all-users or --user; a user
    asking for others' gets one line."""
    alice, bob = user(), user()
    job = submitted_id(alice("submit", "-g", "0.25", "--name", "aliased", "--", "sleep", "60"))
    other = submitted_id(bob("submit", "-g", "0.25", "--", "sleep", "60"))

    listed = alice("list")
    assert listed.returncode == 0, listed.stderr
    assert re.search(rf"^{job}\s+aliased\s+vision\s", listed.stdout, re.M)
    assert str(other) not in listed.stdout.split()

    records = json.loads(alice("jobs", "--json").stdout)
    assert [record["id"] for record in records] == [job]
    assert json.loads(alice("describe", str(job), "--json").stdout)["name"] == "aliased"
    quota = json.loads(alice("quota", "--json").stdout)
    assert quota["user"]["name"] == alice.name and quota["projects"][0]["name"] == "vision"

    refused = alice("jobs", "--all-users")
    assert refused.returncode == 1
    # the token is what lacks the scope, named by where it came from; and who has it
    assert refused.stderr == (
        f"frachub: --all-users needs the FracHub admin scope {ADMIN_SCOPE}: the token in "
        f"FRACHUB_TOKEN lacks it; the hub grants it to {SCOPE_HOLDERS[ADMIN_SCOPE]}\n"
    )

    admin_name, admin_token = make_user(admin=True)
    admin = User(
        admin_name,
        admin_token,
        base_env(FRACHUB_URL=hub.service_url(), FRACHUB_TOKEN=admin_token),
    )
    assert json.loads(admin("jobs", "--json").stdout) == []  # their own: none
    everyone = {
        record["id"] for record in json.loads(admin("jobs", "--json", "--all-users").stdout)
    }
    assert {job, other} <= everyone
    only_bob = json.loads(admin("list", "--json", "--user", bob.name).stdout)
    assert [record["id"] for record in only_bob] == [other]
    table = admin("jobs", "--all-users")
    assert "USER" in table.stdout.splitlines()[0]

    # an admin's token made without the admin scope: the refusal says how to get one that
    # has it, rather than that the admin is none
    narrow = hub.token_for(admin_name, [ACCESS_SCOPE, READ_SCOPE, SUBMIT_SCOPE])
    lacking = admin("jobs", "--user", bob.name, env={**admin.env, "FRACHUB_TOKEN": narrow})
    assert lacking.returncode == 1
    assert lacking.stderr.startswith(
        f"frachub: --user needs the FracHub admin scope {ADMIN_SCOPE}: the token in "
        "FRACHUB_TOKEN lacks it; the hub grants it to FracHub admins"
    ), lacking.stderr
    assert f"You are in {ADMIN_GROUP}, so a new token carries it" in lacking.stderr
    assert admin_name not in lacking.stderr
    over_api = api(narrow).get("workloads", params={"user": bob.name})
    assert over_api.status_code == 403
    assert over_api.json()["message"].startswith(
        f"listing other users' workloads needs {ADMIN_SCOPE}: this token lacks it; the hub "
        "grants it to FracHub admins"
    ), over_api.json()

    deleted = alice("delete", str(job))
    assert deleted.returncode == 0, deleted.stderr
    assert re.match(rf"Cancell(ing|ed) job {job} \(aliased\)", deleted.stdout)
    assert bob("cancel", str(other)).returncode == 0


@pytest.mark.parametrize(
    ("args", "usage"),
    [
        (["submit", "--gpus", "1", "--nmae", "x", "--", "true"], "frachub submit"),
        (["jobs", "--nmae"], "frachub jobs"),
        (["scenario", "run", "--nmae", "f.yaml"], "frachub scenario run"),
        (["--nmae", "jobs"], "frachub"),
    ],
)
def test_a_mistyped_flag_shows_the_usage_of_the_command_it_was_given_to(
    args: list[str], usage: str
) -> None:
    done = run_cli(*args, env=base_env())
    assert done.returncode == 2
    assert done.stderr.startswith(f"usage: {usage} "), done.stderr
    assert done.stderr.endswith(f"{usage}: error: unrecognized arguments: --nmae\n")


def test_help_per_command_and_watch(user) -> None:
    alice = user()
    for command, words in (
        ("list", "newest first"),
        ("delete", "grace period"),
        ("describe", "its events"),
        ("quota", "fair share"),
    ):
        shown = alice(command, "--help")
        assert shown.returncode == 0 and words in " ".join(shown.stdout.split()), shown.stdout
    bad = alice("jobs", "--watch", "0.1")
    assert bad.returncode == 2 and "must be between 0.5" in bad.stderr

    # --watch redraws until Ctrl-C, then exits 0 without a traceback
    watching = from_a_terminal(["jobs", "--watch", "0.5"], alice.env)
    assert watching.stdout is not None
    seen = [watching.stdout.readline() for _ in range(4)]
    watching.send_signal(signal.SIGINT)
    out, err = watching.communicate(timeout=30)
    assert watching.returncode == 0 and "Traceback" not in err
    text = "".join(seen) + out
    assert text.count("Every 0.5s") >= 2 and "no jobs" in text


def test_a_sweep_runs_at_most_parallel_jobs_with_its_values_and_cancels_as_one(
    user, api, tmp_path
) -> None:
    """--sweep lr=... --sweep bs=... --parallel 2: four jobs (the product), each with its
    values in its environment, two at a time, listed together, cancelled as one."""
    alice = user()
    script = 'echo "lr=$FRACHUB_SWEEP_LR bs=$FRACHUB_SWEEP_BS i=$FRACHUB_SWEEP_INDEX"; sleep 60'
    argv = ["submit", "-g", "0.25", "--name", "hpo", "--sweep", "lr=0.1,0.01"]
    submitted = alice(*argv, "--sweep", "bs=32,64", "--parallel", "2", "--", script, cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    match = re.match(r"Submitted sweep (\d+) to project vision: 4 jobs \(2 x 2\)", submitted.stdout)
    assert match, submitted.stdout
    sweep = int(match.group(1))
    assert f"frachub cancel --sweep {sweep}" in submitted.stdout
    client = api(alice.token)
    members = client.get(f"sweeps/{sweep}").json()["workloads"]
    assert [m["id"] for m in members] == list(range(sweep, sweep + 4))
    assert [m["name"] for m in members] == [f"hpo-{i}" for i in range(4)]
    assert members[3]["env"]["FRACHUB_SWEEP_LR"] == "0.01"
    assert members[3]["env"]["FRACHUB_SWEEP_BS"] == "64"

    wait_state(client, sweep, "running")
    wait_state(client, sweep + 1, "running")
    held = client.get(f"workloads/{sweep + 2}").json()
    assert held["state"] == "pending"
    assert (
        held["pending_reason"]
        == f"sweep {sweep} runs at most 2 jobs at once; 2 of its jobs hold GPUs"
    )
    assert alice("logs", str(sweep + 1), "--tail", "1").stdout == "lr=0.1 bs=64 i=1\n"

    listed = alice("jobs").stdout
    assert f"sweep {sweep}: jobs {sweep}-{sweep + 3} shown, 2 running, at most 2 at once" in listed

    # a member that ends lets the next one start
    assert alice("cancel", str(sweep)).returncode == 0
    wait_state(client, sweep + 2, "running")

    cancelled = alice("cancel", "--sweep", str(sweep))
    assert cancelled.returncode == 0, cancelled.stderr
    for member in range(sweep + 1, sweep + 4):
        wait_state(client, member, "cancelled")

    refused = alice("submit", "-g", "0.25", "--sweep", "lr=", "--", "true")
    assert refused.returncode == 2 and "expected NAME=V1,V2" in refused.stderr
    lonely = alice("submit", "-g", "0.25", "--parallel", "2", "--", "true")
    assert lonely.returncode == 2 and "--parallel goes with --sweep" in lonely.stderr
    too_many = alice(
        "submit",
        "-g",
        "0.25",
        "--sweep",
        "a=" + ",".join("1" * 20),
        "--sweep",
        "b=" + ",".join("2" * 20),
        "--",
        "true",
    )
    assert too_many.returncode == 1
    assert too_many.stderr == "frachub: sweep.parameters: make 400 jobs; a sweep has at most 256\n"


HOP_HEADERS = ("content-length", "transfer-encoding", "connection", "content-encoding")
"""Not passed on: httpx has read (and decoded) the body, which goes with a length of its own."""


class LosingProxy:
    """Between the CLI and the hub, on a port of its own: every request goes on to the hub,
    but the answers to the first submissions are lost the way the probe lost them while the
    service was killed. Each of ``losses`` in turn: "503" (the submission reached the
    service, which stored it, and the client got the hub proxy's 503 instead of its answer)
    or "drop" (it reached the service and the connection closed before any answer)."""

    def __init__(self, upstream: str, losses: list[str]) -> None:
        self.upstream = upstream.rstrip("/")
        self.losses = losses
        self.keys: list[str | None] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                proxy.forward(self)

            do_POST = do_DELETE = do_GET

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def forward(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        headers = {
            k: v for k, v in handler.headers.items() if k.lower() not in ("host", "connection")
        }
        answer = httpx.request(
            handler.command, self.upstream + handler.path, headers=headers, content=body
        )
        submitting = handler.command == "POST" and handler.path.rstrip("/").endswith("/workloads")
        if submitting:
            self.keys.append(handler.headers.get("Idempotency-Key"))
        loss = self.losses.pop(0) if submitting and self.losses else None
        if loss == "drop":
            handler.close_connection = True
            handler.connection.shutdown(socket.SHUT_RDWR)
            return
        if loss == "503":
            answer = httpx.Response(503, text="<html>503 Service Unavailable</html>")
        handler.send_response(answer.status_code)
        for name, value in answer.headers.items():
            if name.lower() not in HOP_HEADERS:
                handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(answer.content)))
        handler.end_headers()
        handler.wfile.write(answer.content)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def losing_proxy(hub) -> Iterator[Callable[[list[str]], LosingProxy]]:
    made: list[LosingProxy] = []

    def make(losses: list[str]) -> LosingProxy:
        made.append(LosingProxy(hub.url, losses))
        return made[-1]

    yield make
    for proxy in made:
        proxy.close()


def test_a_submission_whose_answers_are_lost_is_sent_again_and_stored_once(
    user, api, losing_proxy
) -> None:
    """The probe's case: the service stored the job, the client got a 503 (then, the second
    time, no answer at all); the CLI sends it again under the same key, says so, and ends
    with the one job the service stored."""
    alice = user()
    proxy = losing_proxy(["503", "drop"])
    env = {**alice.env, "FRACHUB_URL": f"{proxy.url}/services/frachub/"}
    submitted = alice("submit", "-g", "0.25", "--name", "once", "--", "sleep 30", env=env)
    job = submitted_id(submitted)
    assert len(proxy.keys) == 3 and proxy.keys[0] and len(set(proxy.keys)) == 1
    notes = [line for line in submitted.stderr.splitlines() if line.startswith("frachub: ")]
    assert len(notes) == 2, submitted.stderr
    assert "503" in notes[0] and "trying again in 0.5 s (try 2 of 5;" in notes[0]
    assert "lost the connection" in notes[1] and "trying again in 1 s (try 3 of 5;" in notes[1]
    client = api(alice.token)
    assert [item["id"] for item in client.get("workloads").json()] == [job]
    client.delete(f"workloads/{job}")
