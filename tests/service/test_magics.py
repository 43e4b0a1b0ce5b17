"""The ``%frachub`` magics in a real ipykernel, started by jupyter_client from FracHub's own
kernelspec (so the magics are there without ``%load_ext``), acting through a server-like token
on the real service: displays (HTML and plain text), ``%%frachub`` scripts and their jobs'
output, ``logs --follow`` and Ctrl-C, cancel, and one-line errors."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hubharness import ACCESS_SCOPE, READ_SCOPE, SUBMIT_SCOPE, module_service
from jupyter_client import KernelManager
from jupyter_client.blocking import BlockingKernelClient
from service_client import service_config, submit, wait_state

from hub_ext.kernelspec import DISPLAY_NAME, write_kernelspec

pytestmark = pytest.mark.service

SERVER_SCOPES = [ACCESS_SCOPE, READ_SCOPE, SUBMIT_SCOPE]  # what a server's token carries here


service = module_service(service_config(gpus=2, grace=1), "magics")


@dataclass
class Kernel:
    manager: KernelManager
    client: BlockingKernelClient
    cwd: Path
    user: str
    token: str


@pytest.fixture(scope="module")
def kernel(service, hub, tmp_path_factory):
    """A kernel as a FracHub notebook server starts it: the kernelspec found through
    JUPYTER_PATH, FRACHUB_URL and the server's token in its environment."""
    name = "magics-alice"
    hub.create_user(name, groups=["vision"])
    token = hub.token_for(name, scopes=SERVER_SCOPES)
    specs = write_kernelspec(tmp_path_factory.mktemp("jupyter"))
    cwd = tmp_path_factory.mktemp("notebooks")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("JUPYTERHUB_", "FRACHUB_", "JUPYTER_"))
    }
    env.update(FRACHUB_URL=hub.service_url(), JUPYTERHUB_API_TOKEN=token)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_PATH", str(specs))
        manager = KernelManager(kernel_name="python3")
        assert manager.kernel_spec.display_name == DISPLAY_NAME
        assert Path(manager.kernel_spec.resource_dir).parent.parent == specs
        manager.start_kernel(env=env, cwd=str(cwd))
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        yield Kernel(manager, client, cwd, name, token)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


@dataclass
class Run:
    reply: dict[str, Any]
    stdout: str = ""
    stderr: str = ""
    displays: list[dict[str, str]] = field(default_factory=list)
    error: dict[str, Any] | None = None

    @property
    def everything(self) -> str:
        return json.dumps([self.reply, self.stdout, self.stderr, self.displays, self.error])


def execute(kernel: Kernel, code: str, timeout: float = 60) -> Run:
    """Run code in the kernel; collect its output until it is idle again."""
    run = Run(reply={})

    def collect(message: dict[str, Any]) -> None:
        kind, content = message["msg_type"], message["content"]
        if kind == "stream":
            if content["name"] == "stdout":
                run.stdout += content["text"]
            else:
                run.stderr += content["text"]
        elif kind in ("display_data", "execute_result"):
            run.displays.append(content["data"])
        elif kind == "error":
            run.error = content

    run.reply = kernel.client.execute_interactive(code, output_hook=collect, timeout=timeout)[
        "content"
    ]
    assert "Traceback" not in run.everything, run.everything
    return run


def ok(kernel: Kernel, code: str, timeout: float = 60) -> Run:
    run = execute(kernel, code, timeout)
    assert run.reply["status"] == "ok", run.everything
    return run


def job_id(run: Run) -> int:
    [shown] = run.displays
    match = re.search(r"Submitted job (\d+) to project vision", shown["text/plain"])
    assert match, shown
    return int(match.group(1))


def test_the_kernelspec_loads_the_magics(kernel) -> None:
    shown = ok(kernel, "%frachub help")  # no %load_ext: --ext=hub_ext.magics did it
    assert "%frachub submit --gpus 0.5" in shown.stdout and "%%frachub submit" in shown.stdout
    assert "--follow" in ok(kernel, "%frachub help logs").stdout
    # the extension also loads (and reloads) by hand, as in any other kernel
    assert "already loaded" in ok(kernel, "%load_ext hub_ext.magics").stdout
    ok(kernel, "%reload_ext hub_ext.magics")
    assert ok(kernel, "%frachub").stdout.startswith("usage: %frachub")
    # --help and -h as any command line takes them, for the magic and each command
    for code in ("%frachub --help", "%frachub -h", "%%frachub --help\nprint(1)"):
        assert "%frachub submit --gpus 0.5" in ok(kernel, code).stdout, code
    assert "--all-users" in ok(kernel, "%frachub list --help").stdout


def test_a_line_job_shows_in_tables_and_its_logs(kernel, api) -> None:
    submitted = ok(
        kernel, '%frachub submit --gpus 0.25 --name line-job -- sh -c "pwd; echo from-line"'
    )
    job = job_id(submitted)
    [shown] = submitted.displays
    assert "<table" in shown["text/html"] and "line-job" in shown["text/html"]
    assert f"%frachub logs {job} --follow" in shown["text/plain"]

    followed = ok(kernel, f"%frachub logs {job} --follow")
    assert "from-line" in followed.stdout
    assert f"\n{kernel.cwd}\n" in followed.stdout  # it ran in the kernel's directory
    assert f"frachub: job {job} (line-job) succeeded" in followed.stdout

    [listing] = ok(kernel, "%frachub list").displays  # Run:ai's word for jobs
    assert re.search(rf"<td[^>]*>{job}</td>\s*<td[^>]*>line-job</td>", listing["text/html"])
    assert "succeeded" in listing["text/html"]
    header, *rows = listing["text/plain"].splitlines()
    [row] = [line for line in rows if line.startswith(f"{job} ")]
    assert row[header.index("STATE") :].startswith("succeeded")

    [described] = ok(kernel, f"%frachub describe {job}").displays
    assert "Placement" in described["text/html"] and "<table" in described["text/html"]
    assert re.search(r"Working dir:\s+" + re.escape(str(kernel.cwd)), described["text/plain"])

    assert ok(kernel, f"%frachub logs {job} --tail 2").stdout.startswith("from-line\n=== frachub")


def test_a_cell_sweep_runs_one_job_per_value_and_cancels_as_one(kernel) -> None:
    cell = "import os, time\nprint('lr', os.environ['FRACHUB_SWEEP_LR'])\ntime.sleep(60)"
    code = "%%frachub submit --gpus 0.25 --name cellsweep --sweep lr=0.1,0.01 --parallel 1\n"
    [shown] = ok(kernel, code + cell).displays
    match = re.search(
        r"Submitted sweep (\d+) to project vision: 2 jobs of 0.25 GPU", shown["text/plain"]
    )
    assert match, shown["text/plain"]
    sweep = int(match.group(1))
    assert "cellsweep-0" in shown["text/plain"] and "cellsweep-1" in shown["text/plain"]
    assert f"%frachub cancel --sweep {sweep}" in shown["text/plain"]
    cancelled = ok(kernel, f"%frachub cancel --sweep {sweep}").stdout
    assert (
        f"job {sweep} (cellsweep-0)" in cancelled and f"job {sweep + 1} (cellsweep-1)" in cancelled
    )


def test_a_cell_is_saved_as_a_script_and_run_with_the_kernels_python(kernel) -> None:
    cell = (
        "import os, sys\n"
        "print('cell-says', sys.executable, os.getcwd())\n"
        "print('restarts', os.environ['FRACHUB_RESTART_COUNT'])"
    )
    submitted = ok(
        kernel, f"%%frachub submit --gpu-memory 20 --name cell-job -- --some-arg\n{cell}"
    )
    job = job_id(submitted)
    [script] = (kernel.cwd / "frachub-jobs").glob("cell-job-*.py")
    assert re.fullmatch(r"cell-job-\d{8}T\d{6}Z\.py", script.name)
    assert script.read_text() == cell + "\n"
    assert "script: frachub-jobs/cell-job-" in submitted.displays[0]["text/plain"]

    followed = ok(kernel, f"%frachub logs {job} --follow")
    assert f"cell-says {sys.executable} {kernel.cwd}\n" in followed.stdout
    assert "restarts 0" in followed.stdout
    [described] = ok(kernel, f"%frachub describe {job}").displays
    assert f"{script} --some-arg" in described["text/plain"]
    assert "20 GiB of one GPU" in described["text/plain"]


def test_interrupting_follow_leaves_the_job_running_until_cancelled(kernel, api) -> None:
    job = job_id(ok(kernel, '%frachub submit --gpus 0.25 -- sh -c "echo awake; sleep 60"'))
    request = kernel.client.execute(f"%frachub logs {job} --follow")
    seen = ""
    deadline = time.monotonic() + 30
    while "awake" not in seen:
        assert time.monotonic() < deadline, f"no output while following: {seen!r}"
        message = kernel.client.get_iopub_msg(timeout=30)
        if message["msg_type"] == "stream":
            seen += message["content"]["text"]
    kernel.manager.interrupt_kernel()  # Ctrl-C, as the notebook's stop button does
    reply = kernel.client.get_shell_msg(timeout=30)
    assert reply["parent_header"]["msg_id"] == request
    assert reply["content"]["status"] == "ok", reply["content"]
    while True:  # the rest of the cell's output, until the kernel is idle
        message = kernel.client.get_iopub_msg(timeout=10)
        if message["msg_type"] == "stream":
            seen += message["content"]["text"]
        if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
            break
    assert f"Stopped following job {job}; it goes on" in seen and "Traceback" not in seen

    client = api(kernel.token)
    assert client.get(f"workloads/{job}").json()["state"] == "running"
    cancelled = ok(kernel, f"%frachub cancel {job}")
    assert re.match(rf"Cancell(ing|ed) job {job} ", cancelled.stdout)
    wait_state(client, job, "cancelled")


def test_quota_shows_the_project(kernel) -> None:
    [shown] = ok(kernel, "%frachub quota").displays
    assert f"FracHub quota for {kernel.user}" in shown["text/plain"]
    assert re.search(r"^\s+vision\s+1\s+none\s", shown["text/plain"], re.M)
    assert "<td" in shown["text/html"] and "vision" in shown["text/html"]


USAGE_ERRORS = [
    ("unknown-flag", "%frachub submit --gpus 0.5 --bogus -- true", "unrecognized arguments"),
    ("no-size", "%frachub submit -- true", "one of the arguments -g/--gpus --gpu-memory"),
    ("no-command", "%frachub submit --gpus 0.5", "give the command after --"),
    ("bad-id", "%frachub logs last", "a job id is a number"),
    ("unknown-command", "%frachub run", "invalid choice: 'run'"),
    ("bad-quote", '%frachub submit --gpus 1 -- echo "open', "No closing quotation"),
    ("cell-for-jobs", "%%frachub jobs\nprint(1)", "only %%frachub submit takes a cell"),
    ("empty-cell", "%%frachub submit --gpus 1\n  \n", "the cell is empty"),
    # the API's own GPU-count rule, checked before anything is sent
    ("odd-fraction", "%frachub submit --gpus 0.3333 -- true", "counted in thousandths"),
    ("gpus-across-gpus", "%frachub submit --gpus 1.5 -- true", "or a whole number >= 1, got 1.5"),
]


@pytest.mark.parametrize(
    "code, words", [row[1:] for row in USAGE_ERRORS], ids=[row[0] for row in USAGE_ERRORS]
)
def test_usage_errors_are_one_line(kernel, code, words) -> None:
    run = execute(kernel, code)
    assert run.reply["status"] == "error" and run.reply["ename"] == "UsageError"
    assert words in run.stderr, run.everything
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("UsageError: ")
    assert not run.displays and run.error is None


def test_refusals_are_one_line(kernel, hub, api) -> None:
    hub.create_user("magics-bob", groups=["nlp"])
    bob = api(hub.token_for("magics-bob"))
    others = submit(bob, command="sleep 30", gpus=0.25)["id"]
    for code, words in (
        (f"%frachub describe {others}", f"workload {others} not found"),
        (f"%frachub cancel {others}", f"workload {others} not found"),
        ("%frachub submit --gpus 1 --project nlp -- true", "not a member of project nlp"),
        ("%frachub submit --gpus 4 -- true", "not submitted: a job that needs 4 GPUs on one"),
    ):
        run = execute(kernel, code)
        assert run.reply["status"] == "error", run.everything
        assert run.error is not None and run.error["ename"] == "FracHubMagicError"
        [line] = run.error["traceback"]
        assert "frachub: " in line and words in line, line
    assert not list((kernel.cwd / "frachub-jobs").glob("refused-*"))
    run = execute(kernel, "%%frachub submit --gpus 0.3333 --name refused\nprint(1)")
    assert run.reply["status"] == "error"
    assert not list((kernel.cwd / "frachub-jobs").glob("refused-*"))  # no orphan script
    run = execute(kernel, "%%frachub submit --gpus 4 --name refused\nprint(1)")
    assert run.reply["status"] == "error" and "not submitted" in run.error["traceback"][0]
    assert not list((kernel.cwd / "frachub-jobs").glob("refused-*"))
    bob.delete(f"workloads/{others}")
