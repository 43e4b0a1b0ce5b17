"""MPS on the local backend, with a stand-in ``nvidia-cuda-mps-control`` (``fake_mps/``) that
records how it is run: the daemons' start, restart after a crash, stop through ``quit``,
adoption after a restart of the service, health, the missing-binary refusal, and the MPS
variables real job processes get.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from scheduler.backends import mps
from scheduler.backends.base import Exit, JobSpec
from scheduler.backends.local import LocalBackend
from scheduler.backends.mps import MpsDaemons, MpsUnavailable, find_control
from scheduler.common.placement import GpuShare, ReplicaPlacement
from tests.backends.test_local_backend import PRINT_ENV, exits_of, last_json_line, make_job, run

pytestmark = pytest.mark.backends

FAKE = Path(__file__).parent / "fake_mps" / mps.CONTROL_NAME
UUID = "GPU-declared-local-{}"


@pytest.fixture
def record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in's record of its invocations (its environment carries the path)."""
    path = tmp_path / "mps-record.jsonl"
    monkeypatch.setenv("FAKE_MPS_RECORD", str(path))
    return path


def invocations(record: Path) -> list[dict[str, Any]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines()]


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout}s"
        time.sleep(0.02)
    return value


def daemons(tmp_path: Path, gpus: int = 2, **kwargs: Any) -> MpsDaemons:
    return MpsDaemons(
        str(FAKE),
        str(tmp_path / "mps"),
        [("local", i, UUID.format(i)) for i in range(gpus)],
        env={"PATH": os.environ["PATH"], "FAKE_MPS_RECORD": os.environ["FAKE_MPS_RECORD"]},
        check_interval=0.05,
        stop_timeout=5.0,
        **kwargs,
    )


def test_one_foreground_daemon_per_gpu_each_shown_its_gpu_and_quit_at_stop(
    tmp_path: Path, record: Path
) -> None:
    manager = daemons(tmp_path)
    manager.start()
    try:
        for gpu in (0, 1):
            pipe = tmp_path / "mps" / f"gpu{gpu}" / "pipe"
            wait_for((pipe / "control").exists, f"GPU {gpu}'s control socket")
            assert manager.pipe_directory("local", gpu) == str(pipe)
        started = [i for i in invocations(record) if i["argv"] == ["-f"]]
        assert sorted(
            (i["env"]["CUDA_VISIBLE_DEVICES"], i["env"]["CUDA_MPS_PIPE_DIRECTORY"]) for i in started
        ) == [
            (UUID.format(0), str(tmp_path / "mps" / "gpu0" / "pipe")),
            (UUID.format(1), str(tmp_path / "mps" / "gpu1" / "pipe")),
        ]
        assert started[0]["env"]["CUDA_MPS_LOG_DIRECTORY"].endswith("/log")
        assert [d["up"] for d in manager.health()] == [True, True]
        pids = [d["pid"] for d in manager.health()]
        # every account's clients reach their daemon's pipe directory
        for path in (
            tmp_path / "mps",
            tmp_path / "mps" / "gpu0",
            tmp_path / "mps" / "gpu0" / "pipe",
        ):
            assert path.stat().st_mode & 0o777 == 0o755, path
    finally:
        manager.stop()
    quits = [i for i in invocations(record) if i["argv"] == []]
    assert sorted(i["env"]["CUDA_MPS_PIPE_DIRECTORY"] for i in quits) == [
        str(tmp_path / "mps" / f"gpu{gpu}" / "pipe") for gpu in (0, 1)
    ]
    assert all(i["stdin"] == ["quit"] for i in quits)
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists(), "a daemon outlived stop"
    assert "# QUIT" in (tmp_path / "mps" / "gpu0" / "log" / "control.log").read_text()


def test_a_daemon_that_dies_is_started_again_with_a_log_line(
    tmp_path: Path, record: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    manager = daemons(tmp_path, gpus=1)
    manager.start()
    try:
        pipe = tmp_path / "mps" / "gpu0" / "pipe"
        first = wait_for(lambda: manager.health()[0]["pid"], "a pid")
        wait_for((pipe / "control").exists, "the control socket")
        (pipe / "die").touch()  # the stand-in exits with code 3
        wait_for(lambda: not manager.health()[0]["up"], "the crash")
        (pipe / "die").unlink()
        health = wait_for(
            lambda: (h := manager.health()[0])["up"] and h["pid"] != first and h, "a restart"
        )
        assert health["restarts"] == 1
        assert health["last_exit"] == "exited with code 3"
        assert "MPS control daemon for GPU 0 exited with code 3; starting it again in 1 s" in (
            caplog.text
        )
    finally:
        manager.stop()
    assert len([i for i in invocations(record) if i["argv"] == ["-f"]]) == 2


def test_a_daemon_that_ignores_quit_is_killed_after_the_timeout(
    tmp_path: Path, record: Path
) -> None:
    manager = daemons(tmp_path, gpus=1)
    manager.stop_timeout = 0.5
    manager.start()
    pid = wait_for(lambda: manager.health()[0]["pid"], "a pid")
    wait_for((tmp_path / "mps" / "gpu0" / "pipe" / "control").exists, "the control socket")
    os.kill(pid, signal.SIGSTOP)  # it can no longer answer quit
    started = time.monotonic()
    manager.stop()
    assert time.monotonic() - started < 5
    assert not Path(f"/proc/{pid}").exists()


def test_a_daemon_left_running_by_a_killed_service_is_adopted_not_doubled(
    tmp_path: Path, record: Path
) -> None:
    first = daemons(tmp_path, gpus=1)
    first.start()
    pid = wait_for(lambda: first.health()[0]["pid"], "a pid")
    wait_for((tmp_path / "mps" / "gpu0" / "pipe" / "control").exists, "the control socket")
    first._stopping.set()  # the service dies: nobody supervises or quits the daemon
    second = daemons(tmp_path, gpus=1)
    second.start()
    try:
        assert second.health()[0] == {**second.health()[0], "pid": pid, "up": True}
        assert len([i for i in invocations(record) if i["argv"] == ["-f"]]) == 1
    finally:
        second.stop()
    # the adopted daemon quit (the test process is its parent: reap it)
    assert first.daemons[0].process.wait(timeout=5) == 0  # type: ignore[union-attr]


def test_find_control_names_the_setting_and_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(MpsUnavailable) as missing:
        find_control("", search_path=str(tmp_path))
    if not any(os.access(os.path.join(d, mps.CONTROL_NAME), os.X_OK) for d in mps.DRIVER_BIN_DIRS):
        assert "LocalBackend.mps_control" in str(missing.value)
        assert "nvidia-utils" in str(missing.value)
    with pytest.raises(MpsUnavailable, match=r"LocalBackend\.mps_control is '/nowhere/mps'"):
        find_control("/nowhere/mps")
    assert find_control(str(FAKE)) == str(FAKE)
    assert find_control(mps.CONTROL_NAME, search_path=str(FAKE.parent)) == str(FAKE)


# --- the local backend in mps mode ---------------------------------------------------------------


def mps_local(tmp_path: Path) -> LocalBackend:
    return LocalBackend(
        data_dir=str(tmp_path / "data"),
        inventory_source="declared",
        run_as_user=False,
        gpu_sharing="mps",
        mps_control=str(FAKE),
        env_keep=["PATH", "FAKE_MPS_RECORD"],
    )


@pytest.fixture
def mps_backend(tmp_path: Path, record: Path) -> LocalBackend:
    return mps_local(tmp_path)


def test_jobs_on_a_shared_gpu_are_mps_clients_within_their_share(
    mps_backend: LocalBackend,
) -> None:
    mps_backend.start_gpu_sharing()
    try:
        partial = make_job(1, PRINT_ENV, fraction=0.25)
        whole = make_job(2, PRINT_ENV, fraction=1.0)

        async def scenario() -> list[Exit]:
            await mps_backend.start(partial)
            await mps_backend.start(whole)
            return await exits_of(mps_backend, 2)

        assert sorted(e.exit_code for e in run(scenario)) == [0, 0]
        env = last_json_line(mps_backend, 1)
        pipe = os.path.join(mps_backend.data_dir, "mps", "gpu0", "pipe")
        # declared GPUs: 80 GiB; a quarter is 20480 MiB, plus the context allowance
        assert {k: v for k, v in env.items() if k.startswith("CUDA_")} == {
            "CUDA_VISIBLE_DEVICES": UUID.format(0),  # the daemon's one GPU, by UUID
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "CUDA_MPS_PIPE_DIRECTORY": pipe,
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={20480 + 1024}M",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        }
        assert not any(k.startswith("CUDA_MPS") for k in last_json_line(mps_backend, 2))
        health = mps_backend.gpu_sharing_health()
        assert health["mode"] == "mps"
        assert [(d["gpu"], d["up"]) for d in health["daemons"]] == [(0, True), (1, True)]
    finally:
        asyncio.run(mps_backend.close())
    assert mps_backend.gpu_sharing_health() == {"mode": "mps"}


def test_begin_starts_the_daemons_off_the_event_loop_and_close_stops_them(
    mps_backend: LocalBackend, record: Path
) -> None:
    async def scenario() -> dict[str, Any]:
        await mps_backend.begin()
        health = mps_backend.gpu_sharing_health()
        await mps_backend.close()
        return health

    health = run(scenario)
    assert [d["up"] for d in health["daemons"]] == [True, True]
    assert mps_backend.gpu_sharing_health() == {"mode": "mps"}
    assert sorted(i["stdin"] == ["quit"] for i in invocations(record) if i["argv"] == []) == [
        True,
        True,
    ]


def test_the_context_allowance_is_a_setting(mps_backend: LocalBackend) -> None:
    mps_backend.mps_context_allowance_mib = 0
    mps_backend.start_gpu_sharing()
    try:
        job = make_job(3, PRINT_ENV, fraction=0.5)

        async def scenario() -> list[Exit]:
            await mps_backend.start(job)
            return await exits_of(mps_backend, 1)

        run(scenario)
        assert last_json_line(mps_backend, 3)["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=40960M"
    finally:
        mps_backend.stop_gpu_sharing()


def test_cooperative_mode_starts_no_daemon(tmp_path: Path, record: Path) -> None:
    backend = LocalBackend(
        data_dir=str(tmp_path / "data"), inventory_source="declared", mps_control="/nowhere"
    )
    backend.start_gpu_sharing()  # cooperative: the missing binary does not matter
    assert backend.gpu_sharing_health() == {"mode": "cooperative"}
    assert invocations(record) == []
    assert not (tmp_path / "data" / "mps").exists()


def test_mps_without_the_binary_is_refused_naming_the_setting(tmp_path: Path) -> None:
    backend = LocalBackend(
        data_dir=str(tmp_path / "data"),
        inventory_source="declared",
        gpu_sharing="mps",
        mps_control=str(tmp_path / "missing"),
    )
    with pytest.raises(MpsUnavailable, match=r"LocalBackend\.mps_control"):
        backend.start_gpu_sharing()


def run_together(
    backend: LocalBackend, jobs: list[JobSpec], fault_line: str = ""
) -> dict[int, Exit]:
    """Start ``jobs``, whose commands wait for a file ``go``; write ``fault_line`` to GPU 0's
    control log, then let them go, and collect every end."""
    go = Path(backend.data_dir) / "go"

    async def scenario() -> list[Exit]:
        for job in jobs:
            await backend.start(job)
        if fault_line:
            control_log = Path(backend.data_dir) / "mps" / "gpu0" / "log" / "control.log"
            await asyncio.sleep(0.2)
            with control_log.open("a") as log:
                log.write(fault_line + "\n")
        go.touch()
        return await exits_of(backend, len(jobs))

    return {e.workload_id: e for e in run(scenario)}


def after_go(backend: LocalBackend, command: str) -> str:
    return f"while [ ! -e {Path(backend.data_dir) / 'go'} ]; do sleep 0.02; done; {command}"


def test_a_gpu_fault_s_victims_are_reported_lost_naming_the_faulting_workload(
    mps_backend: LocalBackend,
) -> None:
    """Two MPS clients of GPU 0 end together after the daemon's log reports a fault: the one
    whose output names an illegal address fails with its code; the other is reported with no
    exit code (the service requeues it in its place) and the faulting workload named. A
    failure on GPU 1 without a fault is reported as it is."""
    mps_backend.mps_fault_window_seconds = 0.5
    mps_backend.start_gpu_sharing()
    try:
        culprit = make_job(
            21, after_go(mps_backend, "echo 'CUDA error: an illegal memory access'; exit 1")
        )
        victim = make_job(22, after_go(mps_backend, "sleep 0.1; exit 134"))
        alone = replace(
            make_job(23, "exit 2"), placement=(ReplicaPlacement("local", (GpuShare(1, 500),)),)
        )
        line = "[2026-11-28 12:00:00.000 Control 73] Server 95 exited with status 1"
        exits = run_together(mps_backend, [culprit, victim, alone], line)
    finally:
        mps_backend.stop_gpu_sharing()
    assert exits[21].exit_code == 1
    assert exits[22] == Exit(
        22, None, "Stopped by a GPU fault of workload 21 sharing GPU 0; requeued in its place"
    )
    assert exits[23].exit_code == 2


def test_a_fault_the_daemon_does_not_name_is_known_by_the_faulting_program_s_error(
    mps_backend: LocalBackend,
) -> None:
    """As measured on an H200: the MPS server logs no fault of its own and does not exit;
    the faulting program prints CUDA's illegal address, its neighbour any CUDA error 0.4 s
    later. The neighbour is the victim."""
    mps_backend.mps_fault_window_seconds = 1.0
    mps_backend.start_gpu_sharing()
    try:
        culprit = make_job(
            31,
            after_go(
                mps_backend,
                "echo 'cudaErrorIllegalAddress: an illegal memory access was encountered'; exit 1",
            ),
        )
        error = "RuntimeError: CUDA error: CUBLAS_STATUS_INTERNAL_ERROR"
        victim = make_job(32, after_go(mps_backend, f"sleep 0.4; echo '{error}'; exit 1"))
        exits = run_together(mps_backend, [culprit, victim])
    finally:
        mps_backend.stop_gpu_sharing()
    assert exits[31].exit_code == 1
    assert exits[32] == Exit(
        32, None, "Stopped by a GPU fault of workload 31 sharing GPU 0; requeued in its place"
    )


def test_failures_held_for_faults_are_reported_when_the_daemons_stop(
    mps_backend: LocalBackend,
) -> None:
    mps_backend.mps_fault_window_seconds = 60
    mps_backend.start_gpu_sharing()
    job = make_job(41, "exit 3")

    async def scenario() -> list[Exit]:
        await mps_backend.start(job)
        deadline = time.monotonic() + 10
        while not mps_backend._fault_hold:  # until poll has seen the end, and held it
            assert [r for r in await mps_backend.poll() if isinstance(r, Exit)] == []  # held
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        mps_backend.stop_gpu_sharing()
        return await exits_of(mps_backend, 1)

    assert [e.exit_code for e in run(scenario)] == [3]


def test_closing_with_jobs_running_leaves_their_daemons_for_the_next_start(
    mps_backend: LocalBackend, record: Path, tmp_path: Path
) -> None:
    """Jobs run on across a restart of the service; so do the MPS servers they use: the
    daemons are not told to quit, and the restarted backend adopts them."""
    job = make_job(51, "sleep 30")

    async def first_life() -> tuple[dict[str, Any], list[int]]:
        await mps_backend.begin()
        handle = await mps_backend.start(job)
        pids = [d["pid"] for d in mps_backend.gpu_sharing_health()["daemons"]]
        for gpu in (0, 1):  # the daemons are up (their pid files written)
            pipe = Path(mps_backend.data_dir) / "mps" / f"gpu{gpu}" / "pipe"
            wait_for((pipe / "control").exists, f"GPU {gpu}'s control socket")
        await mps_backend.close()
        return handle, pids

    handle, pids = run(first_life)
    assert [i for i in invocations(record) if i["argv"] == []] == []  # no quit
    assert all(Path(f"/proc/{pid}").exists() for pid in pids)
    again = mps_local(tmp_path)  # the restarted service's backend

    async def second_life() -> list[Any]:
        await again.begin()
        assert again.adopt(51, handle)
        adopted = [d["pid"] for d in again.gpu_sharing_health()["daemons"]]
        await again.stop(51, handle, 0.1)
        await exits_of(again, 1)
        await again.close()  # nothing runs now: the daemons quit
        return adopted

    assert run(second_life) == pids
    assert len([i for i in invocations(record) if i["argv"] == ["-f"]]) == 2  # none doubled
    assert len([i for i in invocations(record) if i["stdin"] == ["quit"]]) == 2
