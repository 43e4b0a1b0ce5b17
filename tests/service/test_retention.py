"""Operations of the service itself: finished workloads and job logs are purged after their
retention (the first pass runs at start-up), active work never; one service per data
directory; the database is private to the service."""

from __future__ import annotations

import sqlite3
import subprocess
import time
from pathlib import Path

from hubharness import ServiceProcess
from service_client import service_config, submit, wait_for, wait_state

RETENTION = """
c.FracHubService.log_level = "INFO"
c.FracHubService.workload_retention_days = 10
c.FracHubService.log_retention_days = 2
"""
DAY = 86400


def test_finished_work_and_its_logs_are_purged_after_their_retention(
    hub, make_user, api, tmp_path: Path
) -> None:
    service = ServiceProcess(hub, service_config(extra=RETENTION), tmp_path).start()
    data = tmp_path / "frachub-data"
    try:
        _, token = make_user(groups=["vision"])
        alice = api(token)
        old, middling, recent = (
            submit(alice, command="echo done", gpus=0.25, name=name)["id"]
            for name in ("old", "middling", "recent")
        )
        for job in (old, middling, recent):
            assert wait_state(alice, job, "succeeded", "failed")["state"] == "succeeded"
        running = submit(alice, command="sleep 600", gpus=0.25, name="running")["id"]
        wait_state(alice, running, "running")
        assert (data / "frachub.sqlite").stat().st_mode & 0o777 == 0o600
        service.stop()
        # as if the first two had ended 11 and 3 days ago
        with sqlite3.connect(data / "frachub.sqlite") as db:
            now = time.time()
            for job, age in ((old, 11), (middling, 3)):
                db.execute(
                    "UPDATE workloads SET finished_at = ? WHERE id = ?", (now - age * DAY, job)
                )
            # an active workload is never purged, whatever its timestamps say
            db.execute(
                "UPDATE workloads SET state = 'pending', handle = NULL, finished_at = ? "
                "WHERE id = ?",
                (now - 30 * DAY, running),
            )
        service.start()
        wait_for(lambda: "retention: deleted" in service.log_text(), 20, "the first pass")
        assert alice.get(f"workloads/{old}").status_code == 404
        assert not (data / "logs" / str(old)).exists()
        assert alice.get(f"workloads/{middling}").json()["state"] == "succeeded"
        assert not (data / "logs" / str(middling)).exists()  # its log went after 2 days
        assert "done" in alice.get(f"workloads/{recent}/logs").text
        active = alice.get(f"workloads/{running}").json()
        assert active["state"] in ("pending", "running"), active
        assert "retention: deleted 1 finished workloads" in service.log_text()
        alice.delete(f"workloads/{running}")
    finally:
        service.stop()


def test_a_second_service_on_the_same_data_dir_is_refused(hub, tmp_path: Path) -> None:
    first = ServiceProcess(hub, service_config(), tmp_path).start()
    try:
        second = subprocess.run(
            first.command, cwd=tmp_path, env=first.env, capture_output=True, text=True, timeout=60
        )
        assert second.returncode == 2
        assert f"another FracHub service (pid {first.pid}) is using" in second.stderr
        assert first.running
    finally:
        first.stop()
