"""The local backend with real subprocesses: the contract a job sees, exits, stops, gangs,
adoption by a restarted service and the inventory (the start-up hook: test_pyhook.py).

Event-loop code runs through ``asyncio.run`` inside plain tests. Commands are short ``sh``
lines and ``python -c`` scripts; anything that waits does so on a file or a log line, not on
a guessed delay, so the tests stay fast and steady on a busy two-core machine.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from scheduler.backends import inventory as inventory_module
from scheduler.backends.base import BackendError, Checkpoint, Exit, Handle, JobSpec
from scheduler.backends.inventory import declared_inventory, load_inventory, validate_declared
from scheduler.backends.local import LocalBackend
from scheduler.common.paths import HOOK_DIR
from scheduler.common.placement import GpuShare, ReplicaPlacement
from tests.fakenvml import FakeNvml

pytestmark = pytest.mark.backends

NO_SUCH_USER = "frachub-test-no-such-user"
PRINT_ENV = [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"]
REPO = Path(__file__).parents[2]


def make_job(
    workload_id: int,
    command: str | Sequence[str],
    *,
    replicas: int = 1,
    user: str = NO_SUCH_USER,
    env: dict[str, str] | None = None,
    working_dir: str | None = None,
    restart_count: int = 0,
    fraction: float = 0.5,
) -> JobSpec:
    placement = tuple(
        ReplicaPlacement("local", (GpuShare(rank % 2, round(fraction * 1000)),))
        for rank in range(replicas)
    )
    return JobSpec(
        workload_id=workload_id,
        name=f"job-{workload_id}",
        user=user,
        project="vision",
        command=command,
        working_dir=working_dir,
        env=env or {},
        placement=placement,
        restart_count=restart_count,
        replicas=replicas,
    )


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(
        data_dir=str(tmp_path / "data"),
        inventory_source="declared",
        gang_stop_grace_seconds=5,
        run_as_user=False,
    )


def run(scenario: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(scenario())


async def exits_of(backend: LocalBackend, count: int, timeout: float = 10.0) -> list[Exit]:
    """Poll like the service does until ``count`` attempts have ended (checkpoints the
    jobs' files show are left out)."""
    found: list[Exit] = []
    deadline = time.monotonic() + timeout
    while len(found) < count:
        assert time.monotonic() < deadline, f"only {found} ended within {timeout}s"
        found += [report for report in await backend.poll() if isinstance(report, Exit)]
        await asyncio.sleep(0.02)
    again = [report for report in await backend.poll() if isinstance(report, Exit)]
    assert again == [], "an end was reported twice"
    return found


async def log_shows(backend: LocalBackend, workload_id: int, text: str, replica: int = 0) -> str:
    deadline = time.monotonic() + 10
    while True:
        path = backend.log_path(workload_id, replica)
        content = Path(path).read_text() if path else ""
        if text in content:
            return content
        assert time.monotonic() < deadline, f"{text!r} never appeared in {content!r}"
        await asyncio.sleep(0.02)


def last_json_line(backend: LocalBackend, workload_id: int, replica: int = 0) -> dict[str, str]:
    path = backend.log_path(workload_id, replica)
    assert path is not None
    return json.loads(Path(path).read_text().strip().splitlines()[-1])


# --- the environment contract, exits ---------------------------------------------------------


def test_process_sees_the_contract_and_nothing_of_the_service(
    backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "service-secret")
    job = make_job(
        7,
        PRINT_ENV,
        fraction=0.25,
        restart_count=1,
        env={"MY_SETTING": "on", "CUDA_VISIBLE_DEVICES": "0,1,2,3", "PYTHONPATH": "/mine"},
    )

    async def scenario() -> list[Exit]:
        await backend.start(job)
        return await exits_of(backend, 1)

    assert run(scenario) == [Exit(7, 0, "exited with code 0")]
    env = last_json_line(backend, 7)
    data = Path(backend.data_dir)
    assert {name: env[name] for name in ("CUDA_VISIBLE_DEVICES", "FRACHUB_GPU_FRACTION")} == {
        "CUDA_VISIBLE_DEVICES": "0",  # the share, not what the user's variables asked for
        "FRACHUB_GPU_FRACTION": "0.25",
    }
    assert env["FRACHUB_GPU_MEMORY_MIB"] == "20480"
    assert env["FRACHUB_WORKLOAD_ID"] == "7"
    assert env["FRACHUB_RESTART_COUNT"] == "1"
    assert env["FRACHUB_CHECKPOINT_DIR"] == str(data / "checkpoints" / "7")
    assert Path(env["FRACHUB_CHECKPOINT_DIR"]).is_dir()
    assert env["FRACHUB_GPU_UUIDS"] == "GPU-declared-local-0"
    assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.25"
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert env["PYTHONPATH"] == f"{HOOK_DIR}:/mine"
    assert env["MY_SETTING"] == "on"
    assert env["HOME"] == env["PWD"] == str(data / "users" / NO_SUCH_USER)
    assert env["USER"] == NO_SUCH_USER
    assert "JUPYTERHUB_API_TOKEN" not in env
    assert "RANK" not in env
    header = Path(backend.log_path(7) or "").read_text().splitlines()[0]
    assert "workload 7 attempt 2" in header and "GPUs 0" in header


@pytest.mark.parametrize(
    ("command", "code"),
    [(["true"], 0), ("echo working; exit 3", 3), ("no-such-command-frachub", 127)],
    ids=["list exits 0", "string exits 3", "unknown command in a string is 127"],
)
def test_exit_code_is_reported_once(backend: LocalBackend, command: Any, code: int) -> None:
    async def scenario() -> list[Exit]:
        await backend.start(make_job(1, command))
        return await exits_of(backend, 1)

    [end] = run(scenario)
    assert (end.workload_id, end.exit_code) == (1, code)


def test_poll_reports_the_newest_checkpoint_file_once(backend: LocalBackend) -> None:
    """A job that saves into $FRACHUB_CHECKPOINT_DIR is seen saving: each poll reports the
    newest file's time when it is newer than the last reported (subdirectories count,
    symlinks do not: the directory is the user's)."""
    script = (
        'cd "$FRACHUB_CHECKPOINT_DIR" && echo 1 > step-1 && sleep 0.5'
        " && mkdir -p deep && echo 2 > deep/step-2 && ln -s /etc/hostname link && sleep 0.5"
    )

    async def scenario() -> list:
        await backend.start(make_job(1, script))
        reports: list = []
        deadline = time.monotonic() + 10
        while not any(isinstance(report, Exit) for report in reports):
            assert time.monotonic() < deadline, reports
            reports += await backend.poll()
            await asyncio.sleep(0.02)
        assert await backend.poll() == []
        return reports

    reports = run(scenario)
    saves = [report for report in reports if isinstance(report, Checkpoint)]
    directory = Path(backend.data_dir) / "checkpoints" / "1"
    newest = (directory / "deep" / "step-2").stat().st_mtime
    assert [save.workload_id for save in saves] == [1] * len(saves)
    assert len(saves) >= 2 and saves[0].at == (directory / "step-1").stat().st_mtime
    assert saves[-1].at == newest  # the symlink made later is not counted
    assert [save.at for save in saves] == sorted({save.at for save in saves})


def test_attempts_append_to_one_log(backend: LocalBackend) -> None:
    async def scenario() -> None:
        for restart in range(2):
            await backend.start(make_job(1, f"echo run {restart}", restart_count=restart))
            await exits_of(backend, 1)

    run(scenario)
    lines = Path(backend.log_path(1) or "").read_text().splitlines()
    assert [line.split(" (")[0] for line in lines if "attempt" in line] == [
        "=== frachub: workload 1 attempt 1",
        "=== frachub: workload 1 attempt 2",
    ]
    assert "run 0" in lines and "run 1" in lines


def test_log_notes_come_between_the_header_and_the_first_line(backend: LocalBackend) -> None:
    """A milestone decided with the start ("borrowed") is written by the start itself, so no
    milestone written while the launch is under way can come before it."""
    note = "=== frachub 2026-01-01T00:00:00+0000: borrowed: vision is using 2 GPUs ===\n"
    job = dataclasses.replace(make_job(1, "echo first-line"), log_notes=(note,))

    async def scenario() -> None:
        await backend.start(job)
        await exits_of(backend, 1)

    run(scenario)
    lines = Path(backend.log_path(1) or "").read_text().splitlines()
    assert lines[0].startswith("=== frachub: workload 1 attempt 1")
    assert lines[1:3] == [note.strip(), "first-line"]


REFUSED = {
    "missing working directory": (
        {"working_dir": "/no/such/dir"},
        "working directory /no/such/dir does not exist",
    ),
    "unknown command in a list": ({"command": ["no-such-command-frachub"]}, "command not found"),
    "empty command": ({"command": "  "}, "the command is empty"),
    "user name with a slash": ({"user": "../etc"}, "cannot be used as a directory name"),
}


@pytest.mark.parametrize(("change", "message"), REFUSED.values(), ids=REFUSED.keys())
def test_start_refuses_with_a_plain_message(
    backend: LocalBackend, change: dict[str, Any], message: str
) -> None:
    args: dict[str, Any] = {"command": ["true"], **change}
    job = make_job(1, args.pop("command"), **args)
    with pytest.raises(BackendError, match=message):
        run(lambda: backend.start(job))


def test_start_refuses_a_placement_that_does_not_match_replicas(backend: LocalBackend) -> None:
    job = make_job(1, ["true"], replicas=2)
    job = JobSpec(**{**job.__dict__, "replicas": 3})
    with pytest.raises(BackendError, match="placement has 2 replica"):
        run(lambda: backend.start(job))


# --- stopping --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "code"),
    [
        ("echo ready; exec sleep 30", 143),
        ("trap 'echo saving; exit 7' TERM; echo ready; sleep 30 & wait", 7),
    ],
    ids=["default TERM is 143", "script traps TERM and exits 7"],
)
def test_stop_ends_within_grace(backend: LocalBackend, command: str, code: int) -> None:
    async def scenario() -> tuple[list[Exit], float]:
        handle = await backend.start(make_job(2, command))
        await log_shows(backend, 2, "ready")
        began = time.monotonic()
        await backend.stop(2, handle, grace_seconds=20)
        return await exits_of(backend, 1), time.monotonic() - began

    [end], took = run(scenario)
    assert end.exit_code == code
    assert took < 5, "SIGTERM should end it long before the grace period"


def test_sigkill_after_grace_for_a_process_ignoring_term(backend: LocalBackend) -> None:
    async def scenario() -> tuple[list[Exit], float]:
        handle = await backend.start(make_job(3, "trap '' TERM; echo ready; sleep 30"))
        await log_shows(backend, 3, "ready")
        began = time.monotonic()
        await backend.stop(3, handle, grace_seconds=0.3)
        return await exits_of(backend, 1), time.monotonic() - began

    [end], took = run(scenario)
    assert end.exit_code == 137
    assert "killed after the grace period" in end.message
    assert 0.3 <= took < 5


def test_stopping_an_ended_attempt_is_harmless(backend: LocalBackend) -> None:
    async def scenario() -> list[Exit]:
        handle = await backend.start(make_job(4, ["true"]))
        await exits_of(backend, 1)
        await backend.stop(4, handle, grace_seconds=0)
        await asyncio.sleep(0.05)
        return await backend.poll()

    assert run(scenario) == []


# --- gangs -----------------------------------------------------------------------------------


def test_gang_replicas_get_rendezvous_and_succeed_together(backend: LocalBackend) -> None:
    async def scenario() -> list[Exit]:
        await backend.start(make_job(5, PRINT_ENV, replicas=2))
        return await exits_of(backend, 1)

    assert run(scenario) == [Exit(5, 0, "exited with code 0")]
    envs = [last_json_line(backend, 5, replica) for replica in (0, 1)]
    assert [(e["RANK"], e["LOCAL_RANK"], e["WORLD_SIZE"]) for e in envs] == [
        ("0", "0", "2"),
        ("1", "1", "2"),
    ]
    # both see the gang's GPUs on this node, so cuda:LOCAL_RANK is each one's own (torchrun)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0,1", "0,1"]
    assert envs[0]["MASTER_ADDR"] == envs[1]["MASTER_ADDR"] == "127.0.0.1"
    assert envs[0]["MASTER_PORT"] == envs[1]["MASTER_PORT"]


def test_gang_with_a_failing_replica_stops_the_rest(backend: LocalBackend) -> None:
    command = 'if [ "$RANK" = 1 ]; then exit 5; fi; echo ready; exec sleep 30'

    async def scenario() -> tuple[list[Exit], float]:
        began = time.monotonic()
        await backend.start(make_job(6, command, replicas=2))
        return await exits_of(backend, 1), time.monotonic() - began

    [end], took = run(scenario)
    assert end == Exit(6, 5, "replica 1 exited with code 5")
    assert took < 4, "the surviving replica should end on SIGTERM, not after 30 s"


# --- a restarted service ---------------------------------------------------------------------

SERVICE = """
import asyncio, json, sys, time
from scheduler.backends.local import LocalBackend
from tests.backends.test_local_backend import make_job

async def main():
    backend = LocalBackend(data_dir=sys.argv[1], inventory_source="declared", run_as_user=False)
    handles = {
        "waits_for_go": await backend.start(make_job(
            1, 'while [ ! -e "$FRACHUB_CHECKPOINT_DIR/go" ]; do sleep 0.02; done; exit 6')),
        "ends_while_down": await backend.start(make_job(2, "exit 9")),
        "sleeps": await backend.start(make_job(3, "echo ready; exec sleep 30")),
        "ignores_term": await backend.start(make_job(4, "trap '' TERM; echo ready; sleep 30")),
    }
    print(json.dumps(handles), flush=True)
    time.sleep(60)

asyncio.run(main())
"""


def started_by_a_service_that_was_killed(data_dir: str) -> dict[str, Handle]:
    """Run a service in its own process, let it start jobs, then SIGKILL it."""
    service = subprocess.Popen(
        [sys.executable, "-c", SERVICE, data_dir], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert service.stdout is not None
        handles = json.loads(service.stdout.readline())
    finally:
        service.kill()
        service.wait()
    return handles


def test_restarted_service_adopts_running_and_finished_jobs(tmp_path: Path) -> None:
    data_dir = str(tmp_path / "data")
    handles = started_by_a_service_that_was_killed(data_dir)
    exit_file = Path(handles["ends_while_down"]["replicas"][0]["exit_file"])
    deadline = time.monotonic() + 10
    while not exit_file.exists():
        assert time.monotonic() < deadline, "the job should finish without its service"
        time.sleep(0.02)
    restarted = LocalBackend(data_dir=data_dir, inventory_source="declared", run_as_user=False)

    async def scenario() -> dict[int, Exit]:
        for name, handle in handles.items():
            assert restarted.adopt(handle["workload_id"], handle), name
        ended = {end.workload_id: end for end in await exits_of(restarted, 1)}
        assert list(ended) == [2], "only the job that ended while the service was down"
        await log_shows(restarted, 3, "ready")
        await log_shows(restarted, 4, "ready")
        await restarted.stop(3, handles["sleeps"], grace_seconds=20)
        await restarted.stop(4, handles["ignores_term"], grace_seconds=0.3)
        (Path(data_dir) / "checkpoints" / "1" / "go").touch()
        ended |= {end.workload_id: end for end in await exits_of(restarted, 3)}
        return ended

    ended = run(scenario)
    assert {wid: end.exit_code for wid, end in ended.items()} == {1: 6, 2: 9, 3: 143, 4: 137}
    assert "killed after the grace period" in ended[4].message


def test_adopt_is_false_for_a_process_gone_without_an_exit_file(backend: LocalBackend) -> None:
    async def scenario() -> Handle:
        handle = await backend.start(make_job(8, ["true"]))
        await exits_of(backend, 1)
        return handle

    handle = run(scenario)
    Path(handle["replicas"][0]["exit_file"]).unlink()
    assert LocalBackend(data_dir=backend.data_dir, run_as_user=False).adopt(8, handle) is False


def test_adopt_tells_a_reused_pid_from_the_job(backend: LocalBackend) -> None:
    """The pid is alive (it is this test's), but its start time is not the job's."""
    handle = {
        "backend": "local",
        "workload_id": 9,
        "attempt": "a0-reused",
        "replicas": [{"pid": os.getpid(), "start_time": 1, "exit_file": "/nonexistent/exit"}],
    }
    assert backend.adopt(9, handle) is False


@pytest.mark.parametrize(
    "handle",
    [{}, {"backend": "kubernetes", "attempt": "x", "replicas": []}, {"backend": "local"}],
    ids=["empty", "another backend's", "no replicas"],
)
def test_adopt_refuses_a_malformed_handle(backend: LocalBackend, handle: Handle) -> None:
    assert backend.adopt(10, handle) is False


def test_close_leaves_running_work_alone(backend: LocalBackend) -> None:
    async def scenario() -> tuple[Handle, list[Exit]]:
        handle = await backend.start(make_job(11, "echo ready; exec sleep 30"))
        await log_shows(backend, 11, "ready")
        await backend.close()
        again = LocalBackend(data_dir=backend.data_dir, run_as_user=False)
        assert again.adopt(11, handle)
        assert await again.poll() == [], "closing must not have ended the job"
        await again.stop(11, handle, grace_seconds=5)
        return handle, await exits_of(again, 1)

    _, [end] = run(scenario)
    assert end.exit_code == 143


# --- running as the user ---------------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")
def test_root_service_runs_the_job_as_the_user() -> None:
    data_dir = tempfile.mkdtemp(prefix="frachub-as-user-")  # /tmp/pytest-of-root is 0700
    os.chmod(data_dir, 0o755)
    try:
        backend = LocalBackend(data_dir=data_dir, inventory_source="declared")

        async def scenario() -> list[Exit]:
            await backend.start(
                make_job(12, 'echo "id=$(id -u) home=$HOME user=$USER"', user="nobody")
            )
            return await exits_of(backend, 1)

        [end] = run(scenario)
        assert end.exit_code == 0
        log = Path(backend.log_path(12) or "").read_text()
        home = os.path.join(data_dir, "users", "nobody")  # nobody's own home does not exist
        assert f"id=65534 home={home} user=nobody" in log
        for owned in ("logs/12", "checkpoints/12", "users/nobody", "logs/12/replica-0.log"):
            assert os.stat(os.path.join(data_dir, owned)).st_uid == 65534, owned
    finally:
        shutil.rmtree(data_dir)


# --- inventory -------------------------------------------------------------------------------


def test_declared_inventory_with_defaults_and_fake_uuids() -> None:
    inventory = declared_inventory(
        [{"name": "a", "gpus": 2, "gpu_memory_gib": 24, "model": "L4"}, {"name": "b", "gpus": 1}]
    )
    assert inventory.source == "declared"
    assert [(n.name, n.gpus, n.gpu_memory_mib, n.gpu_model) for n in inventory.nodes] == [
        ("a", 2, 24576, "L4"),
        ("b", 1, 81920, "declared"),
    ]
    assert [g.uuid for g in inventory.gpus] == [
        "GPU-declared-a-0",
        "GPU-declared-a-1",
        "GPU-declared-b-0",
    ]
    assert inventory.uuid("a", 1) == "GPU-declared-a-1"
    assert [dict(n.labels) for n in inventory.nodes] == [{}, {}]


def test_declared_inventory_keeps_node_labels() -> None:
    zone = "topology.kubernetes.io/zone"
    inventory = declared_inventory(
        [{"name": "a", "gpus": 2, "labels": {zone: "a", "rack": 7}}, {"name": "b", "gpus": 2}]
    )
    assert [dict(n.labels) for n in inventory.nodes] == [{zone: "a", "rack": "7"}, {}]


BAD_INVENTORIES = {
    "not a list": ({"name": "a", "gpus": 1}, "must be a list"),
    "entry not a mapping": (["a"], r"inventory\[0\] must be a mapping"),
    "zero gpus": ([{"name": "a", "gpus": 1}, {"name": "b", "gpus": 0}], r"inventory\[1\].gpus"),
    "fractional gpus": ([{"name": "a", "gpus": 1.5}], r"inventory\[0\].gpus must be a positive"),
    "boolean gpus": ([{"name": "a", "gpus": True}], r"inventory\[0\].gpus"),
    "missing name": ([{"gpus": 1}], r"inventory\[0\].name must be a non-empty string"),
    "duplicate name": ([{"name": "a", "gpus": 1}] * 2, r"inventory\[1\].name 'a' is declared"),
    "bad memory": ([{"name": "a", "gpus": 1, "gpu_memory_gib": "80G"}], "gpu_memory_gib"),
    "typo in a key": ([{"name": "a", "gpu": 1}], r"unknown key\(s\) 'gpu'"),
    "model not text": ([{"name": "a", "gpus": 1, "model": 4}], r"inventory\[0\].model"),
    "labels not a mapping": (
        [{"name": "a", "gpus": 1, "labels": ["zone=a"]}],
        r"inventory\[0\].labels: must be a mapping of label names to values",
    ),
    "label value not text": (
        [{"name": "a", "gpus": 1, "labels": {"zone": {"a": 1}}}],
        r"inventory\[0\].labels",
    ),
}


@pytest.mark.parametrize(("entries", "message"), BAD_INVENTORIES.values(), ids=BAD_INVENTORIES)
def test_declared_inventory_errors_name_the_field(entries: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_declared(entries)


def test_backend_refuses_a_bad_declared_inventory_at_configuration() -> None:
    with pytest.raises(ValueError, match=r"inventory\[0\].gpus must be a positive integer"):
        LocalBackend(declared_inventory=[{"name": "local", "gpus": -1}])


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> Callable[[bool], None]:
    def install(broken: bool) -> None:
        monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(broken))

    return install


def test_nvml_inventory_is_one_node_named_after_the_host(nvml: Callable[[bool], None]) -> None:
    nvml(False)
    inventory = load_inventory("auto", [{"name": "declared", "gpus": 1}], node_name="box")
    assert inventory.source == "nvml"
    assert inventory.nodes[0].name == "box"
    assert (inventory.nodes[0].gpus, inventory.nodes[0].gpu_memory_mib) == (2, 81920)
    assert [g.uuid for g in inventory.gpus] == ["GPU-real-0", "GPU-real-1"]
    assert inventory.gpus[0].model == "NVIDIA H100"
    assert load_inventory("nvml", []).nodes[0].name == inventory_module.socket.gethostname()


def test_auto_falls_back_to_declared_and_nvml_says_why_not(nvml: Callable[[bool], None]) -> None:
    nvml(True)
    assert load_inventory("auto", [{"name": "local", "gpus": 2}]).source == "declared"
    with pytest.raises(inventory_module.NvmlUnavailable, match="inventory source is 'nvml' but"):
        load_inventory("nvml", [])
    with pytest.raises(ValueError, match="must be one of auto, nvml, declared"):
        load_inventory("magic", [])


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root service switches users")
def test_root_refuses_a_user_without_a_system_account(tmp_path: Path) -> None:
    backend = LocalBackend(data_dir=str(tmp_path / "data"), inventory_source="declared")
    with pytest.raises(BackendError, match="no system account"):
        run(lambda: backend.start(make_job(1, "true")))


# --- where jobs run ----------------------------------------------------------------------------


def test_jobs_run_in_the_notebooks_home_and_relative_dirs_are_taken_from_it(
    tmp_path: Path,
) -> None:
    """frachub up gives notebooks <data>/home/<user>; jobs without a working directory run
    there too, and relative or ~ paths are taken from it, never from the service's home."""
    backend = LocalBackend(
        data_dir=str(tmp_path / "data"),
        inventory_source="declared",
        run_as_user=False,
        home_dir_template=str(tmp_path / "data" / "home" / "{username}"),
    )
    home = tmp_path / "data" / "home" / NO_SUCH_USER
    (home / "exp").mkdir(parents=True)
    (home / "train.py").write_text("import os; print('cwd', os.getcwd(), os.environ['HOME'])\n")
    where = "import os; print('cwd', os.getcwd())"
    jobs = [
        make_job(31, [sys.executable, "train.py"]),
        make_job(32, [sys.executable, "-c", where], working_dir="exp"),
        make_job(33, [sys.executable, "-c", where], working_dir="~/exp"),
        make_job(34, [sys.executable, "-c", where], working_dir="~"),
    ]

    async def scenario() -> list[Exit]:
        for job in jobs:
            await backend.start(job)
        return await exits_of(backend, len(jobs))

    assert sorted(e.exit_code for e in run(scenario)) == [0, 0, 0, 0]
    assert f"cwd {home} {home}" in Path(backend.log_path(31) or "").read_text()
    assert f"cwd {home / 'exp'}" in Path(backend.log_path(32) or "").read_text()
    assert f"cwd {home / 'exp'}" in Path(backend.log_path(33) or "").read_text()
    assert f"cwd {home}\n" in Path(backend.log_path(34) or "").read_text()
