"""A notebook server started by ``FracLocalSpawner`` runs in a control group of its own: a
``setsid`` daemon started from one of its kernels does not outlive the server's stop."""

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
