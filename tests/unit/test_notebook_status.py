"""The notebook's share in words (``%frachub status``) and the notices of a user's job
events that the magics print after cells (``hub_ext/client/status.py``)."""

from __future__ import annotations

from hub_ext.client.status import JobNotices, notice, status_report

GIB = 1 << 30
NOTEBOOK = {
    "id": 3,
    "name": "notebook-alice",
    "project": "vision",
    "state": "running",
    "gpus": 0.5,
    "gpu_memory_gib": None,
    "placement": [{"node": "local", "gpus": [{"index": 0, "share": 0.5}]}],
    "borrowed": None,
    "idle_warning": None,
    "gpu_usage": {
        "at": "2026-11-22T14:05:03.000Z",
        "utilization_percent": 12.0,
        "utilization_of": "processes",
        "memory_bytes": 5 * GIB,
        "share_memory_bytes": 40 * GIB,
        "gpus": {},
    },
}


def job(**changes) -> dict:
    value = {
        "id": 12,
        "name": "train",
        "project": "vision",
        "state": "running",
        "command": "python train.py",
        "preemptions": 0,
        "restart_count": 0,
        "queue_position": None,
        "pending_headline": None,
        "message": None,
        "placement": [{"node": "local", "gpus": [{"index": 1, "share": 1.0}]}],
    }
    return {**value, **changes}


def test_status_names_the_share_the_project_and_its_use() -> None:
    text = str(
        status_report(NOTEBOOK, [job(), job(id=13, state="pending"), job(id=9, state="succeeded")])
    )
    assert "Share:" in text and "0.5 GPU on local GPU 0 (0.5) (running)" in text
    assert "Project:" in text and "vision" in text
    assert "12% busy (its own processes), 5.0 GiB of its 40 GiB share in use" in text
    assert "Your jobs:" in text and "1 pending, 1 running (%frachub jobs)" in text
    idle = str(
        status_report({**NOTEBOOK, "gpu_usage": None, "idle_warning": "idle since 14:05"}, [])
    )
    assert "not sampled yet" in idle and "Idle:" in idle and "none active" in idle
    assert "holds no GPU share" in str(status_report(None, []))


def test_a_notice_says_what_happened_to_a_job() -> None:
    before = job()
    preempted = job(
        state="pending",
        preemptions=1,
        queue_position=1,
        pending_headline="waits for vision's quota",
    )
    assert notice(before, preempted) == (
        "job 12 (train) was preempted and requeued (#1 in vision): waits for vision's quota"
    )
    assert notice(preempted, job(restart_count=1, preemptions=1)) == (
        "job 12 (train) started on local GPU 1, attempt 2"
    )
    assert notice(before, job(state="failed", message="exited with code 1")) == (
        "job 12 (train) failed: exited with code 1"
    )
    assert notice(before, job()) is None and notice(None, job()) is None
    # submitted and finished between two looks: its end is news
    assert notice(None, job(state="succeeded")) == "job 12 (train) succeeded"


def test_notices_compare_listings_at_most_every_few_seconds() -> None:
    listings = [[job(state="pending")], [job()], [job(state="succeeded")]]
    now = [0.0]
    notices = JobNotices(lambda: listings.pop(0), every=15, clock=lambda: now[0])
    assert notices.check() == []  # the baseline
    now[0] = 5
    assert notices.check() == [] and len(listings) == 2  # too soon: not asked
    now[0] = 20
    assert notices.check() == ["job 12 (train) started on local GPU 1"]
    now[0] = 40
    assert notices.check() == ["job 12 (train) succeeded"]
