"""CPU and memory limits of local jobs, with real processes in real control groups: a job
that asked for memory is killed by the kernel when it uses more, and its end says so in
words; one that asked for cores gets them as its CPU quota; the machine's cores and memory,
less the reserve, are what the NVML node offers.

The groups are this machine's own: v1 ``memory`` and ``cpu`` hierarchies beside the tracking
one (cgroup1 mode), or beside a v2 mount without controllers (cgroup2 mode on a hybrid host,
as CI's machine is). cgroup v2's own files (``memory.max``, ``cpu.max``) are written to a
directory laid out as the kernel lays out a group, since no v2 mount here offers them.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from scheduler.backends import confinement as cg
from scheduler.backends import processes
from scheduler.backends.base import Exit
from scheduler.backends.inventory import load_inventory, machine_resources
from tests.backends.test_confinement import confined_backend
from tests.backends.test_local_backend import exits_of, make_job, run

pytestmark = pytest.mark.backends

HOG = (
    f"{sys.executable} -c \"import time; hog = b'x' * (256 * 2**20); "
    "print('survived', len(hog), flush=True); time.sleep(0.2)\""
)
"""Writes 256 MiB (every page touched), more than the 64 MiB the tests allow."""


@pytest.mark.parametrize("mode", ["cgroup2", "cgroup1"])
def test_a_job_past_its_memory_is_killed_by_the_kernel_and_says_so(
    tmp_path: Path, mode: str
) -> None:
    backend = confined_backend(tmp_path / "data", mode)
    assert backend.confined.memory is not None, backend.confined.describe()
    job = replace(make_job(7, HOG), memory_mib=64)

    async def scenario() -> list[Exit]:
        await backend.start(job)
        return await exits_of(backend, 1, timeout=30)

    [end] = run(scenario)
    assert end.exit_code == 137
    assert end.message == (
        "killed: used more than its 64 MiB memory (the kernel's OOM killer, SIGKILL)"
    )
    log = Path(backend.log_path(7) or "").read_text()
    assert "survived" not in log
    assert cg.groups_of(backend.confined, 7) == []  # its groups are gone, memory's too
    assert not any(Path(backend.confined.memory).glob("w7-*"))


@pytest.mark.parametrize("mode", ["cgroup2", "cgroup1"])
def test_a_job_within_its_limits_runs_under_them(tmp_path: Path, mode: str) -> None:
    """The job's own groups (as /proc/self/cgroup names them) hold its limits: 64 MiB, and
    a quarter of a core (25 ms per 100 ms), which a busy loop of a second cannot exceed."""
    backend = confined_backend(tmp_path / "data", mode)
    assert backend.confined.cpu is not None, backend.confined.describe()
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os, time\n"
        "groups = dict(line.split(':', 2)[1:] for line in open('/proc/self/cgroup').read()"
        ".splitlines())\n"
        "memory = [p for k, p in groups.items() if 'memory' in k.split(',')][0].strip()\n"
        "cpu = [p for k, p in groups.items() if 'cpu' in k.split(',')][0].strip()\n"
        "base = '/sys/fs/cgroup'\n"
        "print('limit', open(f'{base}/memory{memory}/memory.limit_in_bytes').read().strip())\n"
        "print('quota', open(f'{base}/cpu{cpu}/cpu.cfs_quota_us').read().strip())\n"
        "start = time.monotonic()\n"
        "while time.monotonic() - start < 1.0:\n"
        "    pass\n"
        "print('cpu', sum(os.times()[:2]))\n"
    )
    job = replace(make_job(8, [sys.executable, str(probe)]), memory_mib=64, cpu_milli=250)

    async def scenario() -> list[Exit]:
        await backend.start(job)
        return await exits_of(backend, 1, timeout=30)

    [end] = run(scenario)
    log = Path(backend.log_path(8) or "").read_text()
    assert end.exit_code == 0, log
    lines = dict(line.split(" ", 1) for line in log.splitlines() if not line.startswith("==="))
    assert lines["limit"] == str(64 * 2**20)
    assert lines["quota"] == "25000"
    assert float(lines["cpu"]) < 0.5  # a quarter of a core for a second, with some slack


def test_a_job_that_asked_for_nothing_is_not_limited(tmp_path: Path) -> None:
    backend = confined_backend(tmp_path / "data", "cgroup1")
    job = make_job(9, HOG)

    async def scenario() -> list[Exit]:
        await backend.start(job)
        return await exits_of(backend, 1, timeout=30)

    [end] = run(scenario)
    assert end.exit_code == 0 and end.message == "exited with code 0"


def test_cgroup_v2_files_hold_the_limits(tmp_path: Path) -> None:
    """On a v2 host the limits go to the group's own files, the controllers enabled from the
    mount down; the kill is read from ``memory.events``."""
    mount = tmp_path / "cgroup"
    root = mount / cg.GROUPS_DIR / "scope"
    group = root / "w1-a0-r0"
    group.mkdir(parents=True)
    for directory in (mount, root.parent, root):
        (directory / "cgroup.subtree_control").write_text("")
    for name in ("memory.max", "memory.swap.max", "cpu.max", "memory.events"):
        (group / name).write_text("")
    confinement = cg.Confinement("cgroup2", str(root), None, str(root), str(root))
    cg.prepare(confinement, "w1-a0-r0", [], cg.Limits(memory_mib=16 * 1024))
    assert (group / "memory.max").read_text() == str(16 * 2**30)
    assert (group / "memory.swap.max").read_text() == "0"
    assert (group / "cpu.max").read_text() == ""  # no CPU asked: none limited
    for directory in (mount, root.parent, root):
        assert (directory / "cgroup.subtree_control").read_text() == "+memory"
    cg.prepare(confinement, "w1-a0-r0", [], cg.Limits(cpu_milli=1500))
    assert (group / "cpu.max").read_text() == "150000 100000"
    assert cg.memory_limit_mib(confinement, "w1-a0-r0") == 16 * 1024
    (group / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n")
    assert cg.oom_kills(confinement, "w1-a0-r0") == 1
    (group / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    assert cg.oom_kills(confinement, "w1-a0-r0") == 0


def test_an_oom_kill_in_words() -> None:
    assert processes.out_of_memory(137, 16 * 1024, killed=False) == (
        "killed: used more than its 16 GiB memory (the kernel's OOM killer, SIGKILL)"
    )
    assert processes.out_of_memory(1, 512, killed=False) == (
        "exited with code 1 after the kernel killed one of its processes for using more than "
        "its 512 MiB memory"
    )


def test_the_machine_offers_its_cores_and_memory_less_the_reserve() -> None:
    # the default reserve: the larger of 1 core / 2 GiB and a tenth
    assert machine_resources(cores=2, memory_mib=8192) == (1000, 6144)
    assert machine_resources(cores=64, memory_mib=512 * 1024) == (57600, round(512 * 1024 * 0.9))
    assert machine_resources(0.5, 1, cores=4, memory_mib=4096) == (3500, 3072)
    assert machine_resources(8, 64, cores=4, memory_mib=4096) == (0, 0)  # never below nothing
    cpu_milli, memory_mib = machine_resources()
    assert 0 <= cpu_milli < len(os.sched_getaffinity(0)) * 1000
    assert 0 < memory_mib < os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20


def test_declared_nodes_offer_what_they_declare() -> None:
    declared = [
        {"name": "a", "gpus": 2, "cpu": 16, "memory_gib": 64},
        {"name": "b", "gpus": 1},
    ]
    a, b = load_inventory("declared", declared).nodes
    assert (a.cpu_milli, a.memory_mib) == (16000, 64 * 1024)
    assert (b.cpu_milli, b.memory_mib) == (None, None)  # not counted
    with pytest.raises(ValueError, match=r"inventory\[0\]\.cpu must be a positive number"):
        load_inventory("declared", [{"name": "a", "gpus": 1, "cpu": "many"}])
