"""Usage history and the GPU-hours CSV against a real hub and service: the service samples
each project's use, quota, fair share and queue on its timer; /history charts them for the
caller's projects (the cluster for admins) and /usage.csv exports GPU-hours, each with its
bounds and refusals; samples outlive a restart and are purged after their retention."""

from __future__ import annotations

import csv
import io
import sqlite3
import time
from datetime import datetime
from pathlib import Path

from hubharness import ServiceProcess
from service_client import service_config, submit, wait_for, wait_state

SAMPLING = """
c.FracHubService.usage_sample_interval = 0.2
c.FracHubService.log_level = "INFO"
"""
DEPARTMENT = """
c.FracHubService.queues = [
    {"name": "research"},
    {"name": "vision", "parent": "research", "deserved_gpus": 1},
    {"name": "nlp", "parent": "research", "deserved_gpus": 1},
]
c.FracHubService.usage_sample_retention_days = 30
"""
DAY = 86400


def recent() -> dict:
    """The last five minutes, one bucket per 0.3 s: about one sample each."""
    return {"start": _iso(time.time() - 300), "points": 1000}


def points(answer: dict, project: str) -> list[dict]:
    return next(item["points"] for item in answer["projects"] if item["project"] == project)


def test_history_shows_use_quota_fair_share_and_queues_to_whom_it_may(
    hub, make_user, api, tmp_path: Path
) -> None:
    service = ServiceProcess(hub, service_config(extra=SAMPLING), tmp_path).start()
    try:
        name, token = make_user(groups=["vision"])
        _, admin_token = make_user(admin=True)
        alice, admin = api(token), api(admin_token)
        running = submit(alice, command="sleep 120", gpus=1, name="holding")
        wait_state(alice, running["id"], "running")
        waiting = submit(alice, command="sleep 120", gpus=2, name="waiting")
        wait_state(alice, waiting["id"], "pending")

        def mine() -> dict | None:
            answer = alice.get("history", params=recent()).json()
            seen = [p for p in points(answer, "vision") if p["pending"] >= 1]
            return answer if seen and seen[-1]["allocated_gpus"] == 1 else None

        answer = wait_for(mine, 20, "a sample of vision with one GPU held and one job queued")
        assert [item["project"] for item in answer["projects"]] == ["vision"]
        assert answer["cluster"] is None
        last = points(answer, "vision")[-1]
        assert (last["deserved_gpus"], last["running"], last["cluster_gpus"]) == (1, 1, 2)
        assert last["fair_share_gpus"] >= 1

        refused = alice.get("history?project=nlp")
        assert refused.status_code == 403 and "nlp" in refused.json()["message"]
        for query, field in (
            ("points=0", "points"),
            ("points=1001", "points"),
            ("points=many", "points"),
            (f"start={_iso(time.time() - 40 * DAY)}", "start"),
            ("start=yesterday", "start"),
            ("start=", "start"),
        ):
            bad = alice.get(f"history?{query}")
            assert bad.status_code == 400, query
            assert bad.json()["message"].startswith(f"{field}:"), bad.json()

        everything = admin.get("history", params={"points": 10}).json()
        assert {"vision", "nlp", "guests"} <= {i["project"] for i in everything["projects"]}
        assert "" not in {i["project"] for i in everything["projects"]}
        assert 1 <= len(everything["cluster"]) <= 10
        cluster = everything["cluster"][-1]
        assert (cluster["cluster_gpus"], cluster["running"]) == (2, 1)
        assert cluster["pending"] >= 1
        one = admin.get("history", params={"project": "nlp"}).json()
        assert [item["project"] for item in one["projects"]] == ["nlp"]
        assert one["cluster"], "an admin naming a project still gets the cluster"

        sheet = alice.get("usage.csv")
        assert sheet.status_code == 200
        assert sheet.headers["content-type"] == "text/csv; charset=utf-8"
        assert sheet.headers["content-disposition"].startswith('attachment; filename="frachub-')
        rows = list(csv.reader(io.StringIO(sheet.text)))
        assert rows[0] == [
            "project",
            "user",
            "gpu_hours",
            "cpu_hours",
            "memory_gib_hours",
            "start",
            "end",
        ]
        assert [(r[0], r[1]) for r in rows[1:]] == [("vision", name)]
        assert float(rows[1][2]) > 0
        assert sheet.text.endswith("\r\n")
        others = alice.get("usage.csv?user=someone-else")
        assert others.status_code == 403 and "custom:frachub:admin" in others.json()["message"]
        too_long = alice.get(f"usage.csv?start={_iso(time.time() - 400 * DAY)}")
        assert too_long.status_code == 400
        assert too_long.json()["message"] == "start: must be at most 366 days before end"
        all_rows = list(csv.reader(io.StringIO(admin.get("usage.csv").text)))
        assert ("vision", name) in {(r[0], r[1]) for r in all_rows[1:]}
    finally:
        service.stop()


def test_samples_outlive_a_restart_and_go_after_their_retention(
    hub, make_user, api, tmp_path: Path
) -> None:
    """Under a department, the cluster's row counts each GPU once (the department's numbers
    already include its projects')."""
    service = ServiceProcess(hub, service_config(extra=SAMPLING + DEPARTMENT), tmp_path).start()
    database = tmp_path / "frachub-data" / "frachub.sqlite"
    try:
        _, token = make_user(groups=["vision"])
        _, admin_token = make_user(admin=True)
        alice, admin = api(token), api(admin_token)
        job = submit(alice, command="sleep 120", gpus=1, cpu=2, memory_gib=4)
        wait_state(alice, job["id"], "running")

        def held() -> dict | None:
            answer = admin.get("history", params=recent()).json()
            cluster = answer["cluster"] or []
            return answer if cluster and cluster[-1]["allocated_gpus"] == 1 else None

        answer = wait_for(held, 20, "a sample of the cluster with one GPU held")
        assert points(answer, "research")[-1]["allocated_gpus"] == 1
        assert points(answer, "vision")[-1]["allocated_gpus"] == 1
        assert answer["cluster"][-1]["deserved_gpus"] == 2
        # its CPU and memory, counted once for the department and once for the cluster
        for series in (points(answer, "vision"), points(answer, "research"), answer["cluster"]):
            assert (series[-1]["allocated_cpu"], series[-1]["allocated_memory_gib"]) == (2, 4)
        assert points(answer, "nlp")[-1]["allocated_cpu"] == 0

        def sample_times() -> int:
            with sqlite3.connect(database) as db:
                return db.execute("SELECT count(DISTINCT time) FROM usage_samples").fetchone()[0]

        # two moments sampled at least, so that aging the first one leaves the second
        wait_for(lambda: sample_times() >= 2, 20, "a second sample")
        stopped_at = time.time()
        service.stop()
        with sqlite3.connect(database) as db:
            (taken,) = db.execute("SELECT count(*) FROM usage_samples").fetchone()
            assert taken >= 4  # research, vision, nlp and the cluster, at least once
            oldest = db.execute("SELECT min(id) FROM usage_samples").fetchone()[0]
            # the first sample's rows, as if taken 31 days ago
            db.execute(
                "UPDATE usage_samples SET time = time - ? WHERE time = "
                "(SELECT time FROM usage_samples WHERE id = ?)",
                (31 * DAY, oldest),
            )
        service.start()
        wait_for(
            lambda: "usage samples (older than 30 days)" in service.log_text(), 20, "the purge"
        )
        with sqlite3.connect(database) as db:
            left = db.execute("SELECT count(*) FROM usage_samples WHERE id = ?", (oldest,))
            assert left.fetchone() == (0,)
            (kept,) = db.execute("SELECT count(*) FROM usage_samples").fetchone()
            assert kept > 0
        again = admin.get("history", params=recent()).json()
        first = datetime.fromisoformat(again["cluster"][0]["time"].replace("Z", "+00:00"))
        assert first.timestamp() < stopped_at, "samples from before the restart are kept"
    finally:
        service.stop()


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
