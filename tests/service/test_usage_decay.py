"""Usage-decayed fair share against a real hub and service: the service decays its own usage
samples (a day in which ``vision`` held the whole cluster, written into its store), lowers
vision's part of the idle GPUs for it, and says so in the queues API, in ``frachub quota`` and
in the waiting job's pending reason (docs/scheduling.md, "Usage-decayed fair share")."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from hubharness import ServiceProcess
from service_client import service_config, submit, wait_for, wait_state

USAGE = """
c.FracHubService.queues = [
    {"name": "vision"},
    {"name": "nlp"},
]
c.FracHubService.usage_sample_interval = 0.5
c.FracHubService.fair_share_usage = True
c.FracHubService.fair_share_usage_half_life_hours = 24
c.FracHubService.fair_share_usage_refresh_seconds = 1
c.FracHubService.log_level = "INFO"
"""
HOUR = 3600.0


def _past_day(database: Path, now: float) -> None:
    """Samples every ten minutes of the last day: vision held all 4 GPUs, nlp none."""
    rows = []
    for k in range(1, 145):
        t = now - k * 600.0
        for project, held in (("vision", 4.0), ("nlp", 0.0), ("", 4.0)):
            rows.append((t, project, held, 0.0, 2.0, 1, 0, 4.0))
    with sqlite3.connect(database) as db:
        db.executemany(
            "INSERT INTO usage_samples (time, project, allocated_gpus, deserved_gpus, "
            "fair_share_gpus, running, pending, cluster_gpus) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )


def test_a_project_that_used_the_cluster_yesterday_waits_and_is_told_why(
    hub, make_user, api, tmp_path: Path
) -> None:
    service = ServiceProcess(hub, service_config(gpus=4, extra=USAGE), tmp_path).start()
    database = tmp_path / "frachub-data" / "frachub.sqlite"
    try:
        service.stop()  # the store exists now; give it yesterday's samples
        _past_day(database, time.time())
        service.start()
        wait_for(lambda: "usage-decayed fair share: half-life 24h" in service.log_text(), 20)
        _, alice_token = make_user(groups=["vision"])
        bob_name, bob_token = make_user(groups=["nlp"])
        alice, bob = api(alice_token), api(bob_token)
        for k in range(4):
            job = submit(bob, command="sleep 120", gpus=1, name=f"nlp-{k}")
            wait_state(bob, job["id"], "running")
        waiting = submit(alice, command="sleep 120", gpus=1, name="vision-0")

        def queues() -> dict | None:
            listed = {q["name"]: q for q in alice.get("queues").json()}
            vision = listed["vision"]
            return listed if vision["pending"] == 1 and vision["usage"] is not None else None

        listed = wait_for(queues, 20, "vision's queue with its recent use")
        vision, nlp = listed["vision"], listed["nlp"]
        # vision held 4 of 4 GPUs all day (and nlp holds them now): its usage is nearly all
        assert vision["usage"] > 0.9 and nlp["usage"] < 0.1
        # without usage vision's one GPU of demand would be its fair share (nlp has 3 more);
        # with it vision's share weight is 0 and nlp's takes all four
        assert vision["fair_share_without_usage_gpus"] == 1
        assert vision["fair_share_gpus"] == 0 and nlp["fair_share_gpus"] == 4
        note = re.fullmatch(
            r"lowered from 1 GPU by its recent use \((\d+)% of the cluster's, decayed\)",
            vision["fair_share_note"],
        )
        assert note and int(note.group(1)) >= 90, vision["fair_share_note"]
        assert nlp["fair_share_note"].startswith(
            "raised from 3 GPUs: it used less than its part recently ("
        ), nlp["fair_share_note"]
        job = wait_state(alice, waiting["id"], "pending")
        assert (
            "fair share of 0 GPUs (lowered from 1 GPU by its recent use)" in (job["pending_reason"])
        ), job["pending_reason"]

        metrics = alice.get("../../metrics").text
        recent = re.search(r'frachub_queue_recent_use\{queue="vision"\} ([0-9.]+)', metrics)
        assert recent and float(recent.group(1)) > 0.9, metrics

        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("JUPYTERHUB_", "FRACHUB_"))
        }
        env.update(FRACHUB_URL=hub.service_url(), FRACHUB_TOKEN=alice_token)
        quota = subprocess.run(
            [sys.executable, "-m", "hub_ext.cli", "quota"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert quota.returncode == 0, quota.stderr
        line = r"vision: fair share 0 GPUs, lowered from 1 GPU by its recent use \(\d+% of the"
        assert re.search(line, quota.stdout), quota.stdout
        assert bob_name  # nlp's jobs kept running: nothing was reclaimed for vision
        assert all(j["state"] == "running" for j in bob.get("workloads").json())
    finally:
        service.stop()
