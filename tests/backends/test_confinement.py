"""Confinement of local jobs, with real processes and real control groups: nothing a job
started outlives the end its service reports (a killed wrapper, ``setsid`` daemons, a cancel,
a wrapper lost after a restart), in each mode; GPUs outside the share are denied.

Each test's job carries a marker variable of its own, and "what is left" is every process
in /proc whose environment holds it, as an attacker checking the machine would look.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from procs import processes_with

from scheduler.backends import confinement as cg
from scheduler.backends import local
from scheduler.backends.base import Exit, Handle
from scheduler.backends.local import LocalBackend
from tests.backends.test_local_backend import REPO, exits_of, log_shows, make_job, run

pytestmark = pytest.mark.backends

MODES = ["cgroup2", "cgroup1", "session"]


@pytest.fixture
def marker() -> Iterator[str]:
    """``FRACHUB_TEST_PROBE=<unique>`` for the job's environment; whatever still carries it
    at the end is killed, so a failing test leaves nothing behind."""
    value = uuid.uuid4().hex
    yield value
    for pid in processes_with(f"FRACHUB_TEST_PROBE={value}"):
        os.kill(pid, signal.SIGKILL)


def left(marker: str) -> list[str]:
    """The command lines of the processes still carrying the marker."""
    lines = []
    for pid in processes_with(f"FRACHUB_TEST_PROBE={marker}"):
        try:
            lines.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return lines


def confined_backend(data_dir: Path, mode: str) -> LocalBackend:
    backend = LocalBackend(
        data_dir=str(data_dir),
        inventory_source="declared",
        run_as_user=False,
        confinement=mode,
    )
    if backend.confined.mode != mode:
        pytest.skip(f"{mode} confinement is not available here (needs root and a writable mount)")
    return backend


@pytest.fixture(params=MODES)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> LocalBackend:
    return confined_backend(tmp_path / "data", request.param)


def test_nothing_outlives_a_job_whose_wrapper_was_killed(
    backend: LocalBackend, marker: str
) -> None:
    job = make_job(
        1,
        "sleep 1; kill -9 $PPID; echo still-running-on $CUDA_VISIBLE_DEVICES; sleep 200",
        env={"FRACHUB_TEST_PROBE": marker},
    )

    async def scenario() -> Exit:
        await backend.start(job)
        [end] = await exits_of(backend, 1, timeout=20)
        return end

    end = run(scenario)
    assert end.exit_code == 137
    assert left(marker) == [], "the share is free, and the job's processes must be gone"


DAEMON = (
    "setsid sh -c 'touch \"$FRACHUB_CHECKPOINT_DIR/daemon\"; exec sleep 400' & "
    'while [ ! -e "$FRACHUB_CHECKPOINT_DIR/daemon" ]; do sleep 0.02; done'
)
"""A daemon in a session of its own, running before the main process goes on."""


def test_a_setsid_daemon_ends_with_its_succeeded_job(backend: LocalBackend, marker: str) -> None:
    job = make_job(
        2,
        f"{DAEMON}; echo attempt=$FRACHUB_ATTEMPT",
        env={"FRACHUB_TEST_PROBE": marker},
    )

    async def scenario() -> tuple[Handle, Exit]:
        handle = await backend.start(job)
        [end] = await exits_of(backend, 1, timeout=20)
        return handle, end

    handle, end = run(scenario)
    assert end.exit_code == 0
    assert left(marker) == []
    assert f"attempt={handle['attempt']}\n" in Path(backend.log_path(2) or "").read_text()


def test_a_setsid_daemon_ends_with_its_cancelled_job(backend: LocalBackend, marker: str) -> None:
    job = make_job(3, f"{DAEMON}; echo ready; sleep 300", env={"FRACHUB_TEST_PROBE": marker})

    async def scenario() -> Exit:
        handle = await backend.start(job)
        await log_shows(backend, 3, "ready")
        await backend.stop(3, handle, grace_seconds=5)
        [end] = await exits_of(backend, 1, timeout=20)
        return end

    end = run(scenario)
    assert end.exit_code == 143
    assert left(marker) == []


SERVICE = """
import asyncio, json, sys, time
from scheduler.backends.local import LocalBackend
from tests.backends.test_local_backend import make_job

async def main():
    data_dir, mode, marker = sys.argv[1:4]
    backend = LocalBackend(
        data_dir=data_dir, inventory_source="declared", run_as_user=False, confinement=mode
    )
    job = make_job(4, "echo ready; sleep 300", env={"FRACHUB_TEST_PROBE": marker})
    print(json.dumps(await backend.start(job)), flush=True)
    time.sleep(60)

asyncio.run(main())
"""


def started_then_service_killed(data_dir: Path, mode: str, marker: str) -> Handle:
    service = subprocess.Popen(
        [sys.executable, "-c", SERVICE, str(data_dir), mode, marker],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert service.stdout is not None
        handle: Handle = json.loads(service.stdout.readline())
    finally:
        service.kill()
        service.wait()
    return handle


def wrapper_state(handle: Handle) -> str:
    """The wrapper's state letter from /proc/<pid>/stat, "gone" once reaped."""
    try:
        stat = Path(f"/proc/{handle['replicas'][0]['pid']}/stat").read_text()
    except OSError:
        return "gone"
    return stat[stat.rindex(")") + 2 :].split()[0]


def kill_wrapper(handle: Handle) -> None:
    os.kill(handle["replicas"][0]["pid"], signal.SIGKILL)


@pytest.mark.parametrize("mode", MODES)
def test_an_adopted_jobs_lost_wrapper_leaves_nothing_before_attempt_2(
    tmp_path: Path, mode: str, marker: str
) -> None:
    data_dir = tmp_path / "data"
    restarted = confined_backend(data_dir, mode)
    handle = started_then_service_killed(data_dir, mode, marker)

    async def scenario() -> Exit:
        assert restarted.adopt(4, handle)
        await log_shows(restarted, 4, "ready")
        kill_wrapper(handle)
        [end] = await exits_of(restarted, 1, timeout=20)
        return end

    end = run(scenario)
    assert end.exit_code is None and "vanished" in end.message
    assert left(marker) == [], "attempt 2 may start now: attempt 1 must be gone"


@pytest.mark.parametrize("mode", MODES)
def test_a_wrapper_lost_while_the_service_was_down_is_killed_at_adoption(
    tmp_path: Path, mode: str, marker: str
) -> None:
    data_dir = tmp_path / "data"
    restarted = confined_backend(data_dir, mode)
    handle = started_then_service_killed(data_dir, mode, marker)
    deadline = time.monotonic() + 10
    while "ready" not in (data_dir / "logs" / "4" / "replica-0.log").read_text():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    kill_wrapper(handle)
    deadline = time.monotonic() + 10
    while wrapper_state(handle) not in ("gone", "Z"):  # ends with its mm, then turns zombie
        assert time.monotonic() < deadline, "the wrapper should be gone"
        time.sleep(0.02)
    assert restarted.adopt(4, handle) is False
    assert left(marker) == [], "the service restarts a lost job: its old processes must be gone"


def test_a_new_attempt_kills_an_earlier_one_nobody_adopted(tmp_path: Path, marker: str) -> None:
    data_dir = tmp_path / "data"
    restarted = confined_backend(data_dir, "cgroup2")
    started_then_service_killed(data_dir, "cgroup2", marker)

    async def scenario() -> Exit:
        await restarted.start(make_job(4, "echo second", restart_count=1))
        [end] = await exits_of(restarted, 1)
        return end

    assert left(marker) != [], "the first attempt runs on, unwatched"
    assert run(scenario).exit_code == 0
    assert left(marker) == []


@pytest.mark.parametrize("mode", ["cgroup2", "cgroup1"])
def test_gpus_outside_the_share_are_denied(tmp_path: Path, mode: str) -> None:
    """Device nodes with NVIDIA's major: the share's opens as far as the (absent) driver,
    ENXIO; the other GPU's is refused by the devices controller, EPERM."""
    backend = confined_backend(tmp_path / "data", mode)
    if backend.confined.devices is None:
        pytest.skip("no cgroup v1 devices hierarchy here (cgroup v2 only)")
    devices = tmp_path / "dev"
    devices.mkdir()
    for minor in (0, 1):
        os.mknod(devices / f"nvidia{minor}", 0o666 | 0o020000, os.makedev(cg.NVIDIA_MAJOR, minor))
    job = make_job(5, f"cat {devices}/nvidia0; cat {devices}/nvidia1; exit 0")  # GPU 0

    async def scenario() -> list[Exit]:
        await backend.start(job)
        return await exits_of(backend, 1)

    run(scenario)
    log = Path(backend.log_path(5) or "").read_text()
    assert "nvidia0: No such device or address" in log
    assert "nvidia1: Operation not permitted" in log


def test_without_any_cgroup_mount_the_session_mode_is_chosen_and_says_why() -> None:
    chosen, why = cg.choose("cgroup2", "scope", cg.Mounts())
    assert chosen == cg.Confinement("session")
    assert why == "no writable cgroup v2 mount"
    assert "sweep of /proc" in chosen.describe()
    assert cg.choose("auto", "scope", cg.Mounts())[0].mode == "session"


def test_mountinfo_names_each_hierarchy(tmp_path: Path) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "30 25 0:26 / /sys/fs/cgroup/pids rw,relatime shared:9 - cgroup cgroup rw,pids\n"
        "31 25 0:27 / /sys/fs/cgroup/devices rw shared:10 - cgroup cgroup rw,devices\n"
        "32 25 0:28 / /sys/fs/cgroup/unified rw shared:11 - cgroup2 cgroup2 rw,nsdelegate\n"
    )
    mounts = cg.cgroup_mounts(str(mountinfo))
    assert mounts.v2 == "/sys/fs/cgroup/unified"
    assert mounts.v1["pids"] == "/sys/fs/cgroup/pids"
    assert mounts.v1["devices"] == "/sys/fs/cgroup/devices"


def test_denied_minors_are_the_gpus_not_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cg, "gpu_minors", lambda: [])
    assert cg.denied_minors([1], [0, 1, 2]) == [0, 2]
    assert cg.denied_minors([], [0, 1]) == [0, 1]
    monkeypatch.setattr(cg, "gpu_minors", lambda: [3, 5])  # the driver's minors, PCI order
    assert cg.denied_minors([1], [0, 1]) == [3]


def test_an_end_is_reported_even_when_its_processes_cannot_die(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process stuck in the kernel outlives SIGKILL: the end still comes, late, rather
    than a share held forever."""
    backend = confined_backend(tmp_path / "data", "cgroup2")
    monkeypatch.setattr(local, "UNKILLABLE_SECONDS", 0.3)
    monkeypatch.setattr(cg, "kill_all", lambda *args: False)

    async def scenario() -> tuple[Handle, float, Exit]:
        handle = await backend.start(make_job(6, "true"))
        started = time.monotonic()
        [end] = await exits_of(backend, 1)
        return handle, time.monotonic() - started, end

    handle, waited, end = run(scenario)
    assert end.exit_code == 0 and waited >= 0.3
    monkeypatch.undo()  # the group is empty: remove it
    assert cg.kill_all(backend.confined, cg.group_name(6, handle["attempt"], 0), "")
