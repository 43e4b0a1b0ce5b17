"""The client's pure parts: configuration from flags and environment, URL completion, flag
parsing, and the tables the CLI prints and the magics display."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timezone
from pathlib import Path

import pytest

from hub_ext.client.api import Quota, connect
from hub_ext.client.arguments import checkpoint_interval, env_pair, gpu_memory
from hub_ext.client.formatting import format_gpus, format_number, format_state
from hub_ext.client.jobs import command_from
from hub_ext.client.reports import Table, describe_report, jobs_table, quota_report, state_line
from hub_ext.client.session import NotConfigured, service_url
from hub_ext.kernelspec import DISPLAY_NAME, write_kernelspec
from scheduler.common.quantities import format_duration

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 22, 14, 10, 0, tzinfo=timezone.utc)


def workload(**changes) -> dict:
    """A running training job as the API returns it."""
    base = {
        "id": 12,
        "name": "resnet",
        "user": "alice",
        "project": "vision",
        "kind": "training",
        "state": "running",
        "gpus": 0.5,
        "gpu_memory_gib": None,
        "replicas": 1,
        "priority": 50,
        "preemptible": True,
        "submitted_at": "2026-11-22T14:05:00.000Z",
        "started_at": "2026-11-22T14:06:30.000Z",
        "finished_at": None,
        "placement": [{"node": "ws", "gpus": [{"index": 1, "uuid": "GPU-1", "share": 0.5}]}],
        "pending_reason": None,
        "queue_position": None,
        "preemptions": 0,
        "restart_count": 0,
        "exit_code": None,
        "message": None,
        "command": ["python", "train.py", "--lr", "0.1 0.2"],
        "working_dir": "/home/alice/exp",
        "env": {"EPOCHS": "3"},
        "min_runtime_seconds": 0,
        "max_runtime_seconds": None,
    }
    base.update(changes)
    return base


@pytest.mark.parametrize(
    "seconds, text",
    [(None, "-"), (0, "0s"), (45.9, "45s"), (192, "3m12s"), (7500, "2h05m"), (273600, "3d04h")],
    ids=["none", "zero", "seconds", "minutes", "hours", "days"],
)
def test_durations_have_two_units_at_most(seconds, text) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    "value, text",
    [(1.0, "1"), (0.5, "0.5"), (0.125, "0.125"), (2.5, "2.5"), (0.0, "0"), (None, "-")],
    ids=["whole", "half", "eighth", "two-and-a-half", "zero", "none"],
)
def test_gpu_numbers_are_written_as_people_write_them(value, text) -> None:
    assert format_number(value) == text


@pytest.mark.parametrize(
    "changes, gpus, state",
    [
        ({}, "0.5", "running"),
        ({"gpus": None, "gpu_memory_gib": 20.0}, "20GiB", "running"),
        ({"replicas": 2, "gpus": 1}, "2x1", "running"),
        ({"state": "pending", "queue_position": 2, "placement": []}, "0.5", "pending #2"),
        ({"state": "failed", "exit_code": 3}, "0.5", "failed (3)"),
    ],
    ids=["fraction", "memory", "gang", "pending", "failed"],
)
def test_gpus_and_states(changes, gpus, state) -> None:
    item = workload(**changes)
    assert format_gpus(item) == gpus
    assert format_state(item) == state


@pytest.mark.parametrize(
    "typed, url",
    [
        ("http://hub:8000", "http://hub:8000/services/frachub/"),
        ("http://hub:8000/", "http://hub:8000/services/frachub/"),
        ("https://h/services/frachub", "https://h/services/frachub/"),
        ("https://h/services/frachub/api/v1/", "https://h/services/frachub/"),
        ("https://h/jhub/services/frachub/?x=1", "https://h/jhub/services/frachub/"),
    ],
    ids=["hub-root", "hub-root-slash", "no-slash", "api-url", "base-url-and-query"],
)
def test_service_url_is_completed(typed, url) -> None:
    assert service_url(typed) == url


@pytest.mark.parametrize("typed", ["hub:8000", "ftp://hub/", ""], ids=["no-scheme", "ftp", "empty"])
def test_service_url_refuses_what_cannot_be_one(typed) -> None:
    with pytest.raises(NotConfigured, match="not an http"):
        service_url(typed)


@pytest.mark.parametrize(
    "flags, environ, url, token, project",
    [
        (
            {},
            {"FRACHUB_URL": "http://a/", "JUPYTERHUB_API_TOKEN": "server", "FRACHUB_PROJECT": "v"},
            "http://a/services/frachub/",
            "server",
            "v",
        ),
        (
            {},
            {"FRACHUB_URL": "http://a/", "JUPYTERHUB_API_TOKEN": "server", "FRACHUB_TOKEN": "me"},
            "http://a/services/frachub/",
            "me",
            None,
        ),
        (
            {"url": "http://b/", "token": "flag"},
            {"FRACHUB_URL": "http://a/", "FRACHUB_TOKEN": "me"},
            "http://b/services/frachub/",
            "flag",
            None,
        ),
    ],
    ids=["server-token", "frachub-token-wins", "flags-win"],
)
def test_connect_reads_flags_then_environment(flags, environ, url, token, project) -> None:
    with connect(**flags, environ=environ) as client:
        assert client.url == url
        assert client._http.headers["Authorization"] == f"token {token}"
        assert client.default_project == project


@pytest.mark.parametrize(
    "environ, words, flag",
    [
        ({"JUPYTERHUB_API_TOKEN": "t"}, "set FRACHUB_URL", "--url"),
        ({"FRACHUB_URL": "http://a/"}, "set FRACHUB_TOKEN", "--token"),
    ],
    ids=["no-url", "no-token"],
)
def test_connect_says_what_to_set(environ, words, flag) -> None:
    with pytest.raises(NotConfigured, match=words) as caught:
        connect(environ=environ)
    assert caught.value.flag == flag


@pytest.mark.parametrize(
    "text, gib",
    [("20", 20.0), ("20G", 20.0), ("20GiB", 20.0), ("1.5gb", 1.5), ("512M", 0.5), ("512 MiB", 0.5)],
    ids=["bare", "G", "GiB", "gb", "M", "MiB-spaced"],
)
def test_gpu_memory_sizes(text, gib) -> None:
    assert gpu_memory(text) == gib


@pytest.mark.parametrize("text", ["lots", "0", "-3G", "20T"], ids=["word", "zero", "neg", "unit"])
def test_bad_gpu_memory_sizes(text) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        gpu_memory(text)


def test_checkpoint_intervals_and_their_bounds() -> None:
    assert [checkpoint_interval(t) for t in ("600", "600s", "10m", "1.5h")] == [600, 600, 600, 5400]
    for text in ("0", "-1m", "soon", "nanh", "1e12", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            checkpoint_interval(text)


def test_a_job_without_credentials_reports_its_checkpoint_by_a_file(tmp_path) -> None:
    from hub_ext.client.api import CHECKPOINT_MARK, checkpointed

    env = {"FRACHUB_WORKLOAD_ID": "7", "FRACHUB_CHECKPOINT_DIR": str(tmp_path)}
    checkpointed(environ=env)
    assert (tmp_path / CHECKPOINT_MARK).exists()
    with pytest.raises(NotConfigured, match="not inside a FracHub job"):
        checkpointed(environ={})


def test_env_pairs_and_commands() -> None:
    assert env_pair("A=b=c") == ("A", "b=c")
    assert env_pair("EMPTY=") == ("EMPTY", "")
    with pytest.raises(argparse.ArgumentTypeError, match="NAME=VALUE"):
        env_pair("novalue")
    assert command_from(["python a.py > out"]) == "python a.py > out"  # one word: a shell line
    assert command_from(["python", "a.py"]) == ["python", "a.py"]


def test_tables_align_in_text_and_escape_in_html() -> None:
    table = Table(("ID", "NAME"), (("7", "<b>x</b>"), ("1234", "y")), title="T", note="n")
    lines = str(table).splitlines()
    assert lines == ["T", "ID    NAME", "7     <b>x</b>", "1234  y", "n"]
    assert repr(table) == str(table)
    assert "&lt;b&gt;x&lt;/b&gt;" in table._repr_html_() and "<b>x</b>" not in table._repr_html_()
    assert str(Table(("A",), (), empty="no jobs")) == "no jobs"


def test_jobs_table_columns_line_up() -> None:
    rows = [
        workload(),
        workload(id=9, name="w", state="pending", queue_position=1, pending_reason="queue full"),
        workload(id=3, state="failed", exit_code=2, message="exited with code 2", placement=[]),
    ]
    text = str(jobs_table(rows, NOW)).splitlines()
    header = text[0]
    assert header.split() == [
        *("ID", "NAME", "PROJECT", "KIND", "STATE", "GPUS", "GPU%", "MEM", "NODE", "AGE"),
        *("RUNTIME", "INFO"),
    ]
    state_at = header.index("STATE")
    assert [line[state_at:].split("  ")[0] for line in text[1:]] == [
        "running",
        "pending #1",
        "failed (2)",
    ]
    assert "ws GPU 1 (0.5)" in text[1] and "5m00s" in text[1] and "3m30s" in text[1]
    assert "queue full" in text[2] and "exited with code 2" in text[3]
    assert "USER" not in header
    both = str(jobs_table([workload(), workload(id=1, user="bob")], NOW))
    assert both.splitlines()[0].split()[2] == "USER"  # an admin's view names the owners


def test_describe_shows_request_placement_and_events() -> None:
    item = workload(
        events=[
            {"time": "2026-11-22T14:05:00.000Z", "type": "submitted", "message": "by alice"},
            {"time": "2026-11-22T14:06:30.000Z", "type": "started", "message": "on ws"},
        ]
    )
    report = describe_report(item, NOW, tz=timezone.utc)
    text = str(report)
    assert text.splitlines()[0] == "Training 12: resnet"
    assert "Command:      python train.py --lr '0.1 0.2'" in text
    assert "Submitted:    2026-11-22 14:05:00" in text
    assert "Placement" in text and "GPU-1" in text
    assert "2026-11-22 14:06:30  started on ws" in text
    assert "<table" in report._repr_html_() and "Timeline" in report._repr_html_()
    saving = workload(checkpoint_interval_seconds=600.0, checkpointed_at="2026-11-22T14:20:00.000Z")
    text = str(describe_report(saving, NOW, tz=timezone.utc))
    assert "every 10m" in text and "2026-11-22 14:20:00" in text
    limited = workload(state="pending", max_runtime_seconds=7200.0, after_ok=11)
    text = str(describe_report(limited, NOW, tz=timezone.utc))
    assert "Time limit:   2 h" in text and "After:        job 11 succeeds" in text


def test_quota_counts_the_callers_own_share() -> None:
    queue = {
        "name": "vision",
        "deserved_gpus": 1,
        "limit_gpus": None,
        "allocated_gpus": 1.25,
        "fair_share_gpus": 1.5,
        "running": 3,
        "pending": 1,
    }
    user = {"name": "alice", "projects": ["vision"], "read": True, "submit": True, "admin": False}
    quarter = [{"node": "ws", "gpus": [{"index": 0, "share": 0.25}]}]
    quota = Quota(user, projects=[queue], holding=[workload(), workload(id=13, placement=quarter)])
    text = str(quota_report(quota))
    assert "Rights:    read, submit" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("vision"))
    assert row.split() == ["vision", "1", "none", "1.25", "1.5", "0.75", "3", "1"]
    assert "CPUs" not in text  # no CPU or memory quota anywhere: GPUs alone, as before
    nobody = Quota({**user, "projects": []}, [], [])
    assert "not a member of any project" in str(quota_report(nobody))


def test_quota_shows_cpu_and_memory_rows_when_they_are_scheduled() -> None:
    queue = {
        "name": "vision",
        "deserved_gpus": 1,
        "limit_gpus": None,
        "allocated_gpus": 0,
        "fair_share_gpus": 0,
        "running": 1,
        "pending": 1,
        "deserved_cpu": 32,
        "limit_cpu": 48,
        "allocated_cpu": 30,
        "fair_share_cpu": 32,
        "deserved_memory_gib": None,
        "limit_memory_gib": None,
        "allocated_memory_gib": None,
        "fair_share_memory_gib": None,
    }
    user = {"name": "alice", "projects": ["vision"], "read": True, "submit": True, "admin": False}
    report = quota_report(Quota(user, projects=[queue], holding=[]))
    text = str(report)
    assert "Projects (CPUs and memory)" in text
    row = next(line for line in text.splitlines() if "CPUs " in line and "vision" in line)
    assert row.split() == ["vision", "CPUs", "32", "48", "30", "32"]
    assert "memory GiB" not in text  # memory is not counted: no row
    assert "Projects (CPUs and memory)" in report._repr_html_()


def test_state_lines_say_where_a_job_is() -> None:
    pending = workload(state="pending", queue_position=2, pending_reason="vision is at its limit")
    assert state_line(pending) == (
        "job 12 (resnet) is pending: #2 in queue vision; vision is at its limit"
    )
    assert state_line(workload()) == "job 12 (resnet) is running on ws GPU 1 (0.5)"
    failed = workload(state="failed", exit_code=3, message="exited with code 3")
    assert state_line(failed) == "job 12 (resnet) failed with exit code 3: exited with code 3"


def test_kernelspec_is_written_and_rewritten(tmp_path: Path) -> None:
    assert write_kernelspec(tmp_path, python="/opt/py/bin/python") == tmp_path
    spec_file = tmp_path / "kernels" / "python3" / "kernel.json"
    spec = json.loads(spec_file.read_text())
    assert spec["display_name"] == DISPLAY_NAME
    assert spec["argv"][:3] == ["/opt/py/bin/python", "-m", "ipykernel_launcher"]
    assert "{connection_file}" in spec["argv"] and "--ext=hub_ext.magics" in spec["argv"]
    write_kernelspec(tmp_path, python="/other/python")
    assert json.loads(spec_file.read_text())["argv"][0] == "/other/python"
    assert sorted(p.name for p in spec_file.parent.iterdir() if p.name.startswith(".")) == []


def test_describe_puts_the_plain_reason_first_and_the_engines_detail_second() -> None:
    waiting = workload(
        state="pending",
        placement=[],
        started_at=None,
        queue_position=1,
        pending_headline="waiting: vision is using its 1-GPU quota; borrowed GPUs are all taken",
        pending_reason="needs 1 GPU; no node has a wholly free GPU; vision already uses its fair "
        "share of 1 GPU, so nothing is reclaimed for it",
        preemptions=1,
    )
    text = str(describe_report(waiting, NOW, timezone.utc))
    assert "State:        pending #1: waiting: vision is using its 1-GPU quota;" in text
    assert "Why:          needs 1 GPU; no node has a wholly free GPU;" in text
    assert "Preempted:    1 time\n" in text and "1 times" not in text
    assert "waiting: vision" in state_line(waiting)


def test_describe_marks_borrowed_work_and_reads_the_timeline_in_words() -> None:
    borrowed = "vision is using 2 GPUs, beyond its 1 GPU quota; may be preempted when nlp needs"
    events = [
        {"time": "2026-11-22T14:05:00.000Z", "type": "submitted", "message": "to project vision"},
        {"time": "2026-11-22T14:06:00.000Z", "type": "preempting", "message": "for nlp/nb (x)"},
        {"time": "2026-11-22T14:06:30.000Z", "type": "restarted", "message": "attempt 2 on ws"},
    ]
    running = workload(borrowed=borrowed, events=events, preemptions=2, restart_count=1)
    text = str(describe_report(running, NOW, timezone.utc))
    assert f"Borrowed:     {borrowed}" in text
    assert "Preempted:    2 times" in text and "Restarts:     1" in text
    assert "14:06:00  preempted for nlp/nb (x)" in text  # worded even without the API's text
    assert "14:06:30  restarted: attempt 2 on ws" in text
    table = str(jobs_table([running], NOW))
    assert "borrowed: may be preempted" in table


def test_gpu_use_columns_read_as_nvidia_smi_does() -> None:
    own = {
        "at": "2026-11-22T14:05:03.000Z",
        "utilization_percent": 37.4,
        "utilization_of": "processes",
        "memory_bytes": int(12.3 * 2**30),
        "share_memory_bytes": 40 * 2**30,
        "gpus": {},
    }
    whole = {**own, "utilization_of": "gpu", "utilization_percent": 80.0}
    rows = [
        workload(gpu_usage=own),
        workload(id=2, gpu_usage=whole),
        workload(id=3, state="pending", placement=[]),
    ]
    table = str(jobs_table(rows, NOW))
    lines = table.splitlines()
    header = lines[0]
    at = header.index("GPU%")
    assert [line[at:].split()[:2] for line in lines[1:4]] == [
        ["37%", "12.3/40GiB"],
        ["80%*", "12.3/40GiB"],
        ["-", "-"],
    ]
    assert "* GPU%: the whole GPU's utilization" in table
    assert "GPU%: the whole" not in str(jobs_table(rows[:1], NOW))
    described = str(describe_report(workload(gpu_usage=own), NOW, UTC))
    assert (
        "37% busy (its own processes), 12.3 GiB of its 40 GiB share in use, at 14:05:03 UTC"
        in described
    )
    assert "GPU use" not in str(describe_report(workload(), NOW, UTC))
