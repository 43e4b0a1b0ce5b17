"""A notebook server started by ``FracLocalSpawner`` runs in a control group of its own: a
``setsid`` daemon started from one of its kernels does not outlive the server's stop, and
the group holds the server's memory and CPU limits (its ``mem_limit``/``cpu_limit``)."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

from procs import processes_with

from hub.upharness import Kernel, Up


def test_a_daemon_started_in_a_notebook_ends_with_its_server(tmp_path: Path) -> None:
    marker = f"FRACHUB_TEST_PROBE={uuid.uuid4().hex}"
    up = Up(tmp_path).start()
    try:
        assert up.start_server("alice", {"profile": "cpu"}).status_code in (201, 202)
        up.wait_ready("alice")
        name, value = marker.split("=")
        env = f"{{**os.environ, {name!r}: {value!r}}}"
        Kernel(up, "alice").execute(
            f"import os, subprocess\nsubprocess.Popen(['setsid', 'sleep', '400'], env={env})"
        )
        deadline = time.monotonic() + 10
        while not processes_with(marker):
            assert time.monotonic() < deadline, "the daemon should have started"
            time.sleep(0.05)
        assert up.stop_server("alice").status_code in (202, 204)
        assert up.server("alice") is None
        assert processes_with(marker) == [], "the server stopped: nothing it started may remain"
    finally:
        up.stop()
        for pid in processes_with(marker):
            os.kill(pid, signal.SIGKILL)


PROBE = """
groups = dict(line.split(':', 2)[1:] for line in open('/proc/self/cgroup').read().splitlines())
memory = [p for k, p in groups.items() if 'memory' in k.split(',')][0].strip()
cpu = [p for k, p in groups.items() if 'cpu' in k.split(',')][0].strip()
print(open(f'/sys/fs/cgroup/memory{memory}/memory.limit_in_bytes').read().strip(),
      open(f'/sys/fs/cgroup/cpu{cpu}/cpu.cfs_quota_us').read().strip())
"""


def test_a_notebooks_group_holds_its_memory_and_cpu_limits(tmp_path: Path) -> None:
    """The spawner's own limits (as a profile's kubespawner_override would set them) are
    its group's: the kernel reads them from the v1 memory and cpu hierarchies it is in."""
    limits = 'c.FracLocalSpawner.mem_limit = "768M"\nc.FracLocalSpawner.cpu_limit = 1.5\n'
    up = Up(tmp_path, extra_hub_config=limits).start()
    try:
        assert up.start_server("alice", {"profile": "cpu"}).status_code in (201, 202)
        up.wait_ready("alice")
        outputs = Kernel(up, "alice").execute(PROBE)
        text = "".join(o.get("text", "") for o in outputs if o.get("name") == "stdout")
        assert text.split() == [str(768 * 2**20), "150000"], outputs
    finally:
        up.stop()
