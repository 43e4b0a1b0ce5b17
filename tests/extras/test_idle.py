"""Idle GPU notebooks: the pure decisions (``scheduler/service/policies/idle_policy.py``) as tables.

A one-hour limit (3600 s) with the default warning fraction 0.8 warns after 48 idle minutes
and stops at 60; T is the last activity.
"""

from __future__ import annotations

import ast
from datetime import UTC, datetime
from pathlib import Path

import pytest

from scheduler.service.hub.idle import parse_time
from scheduler.service.policies import idle_policy
from scheduler.service.policies.idle_policy import (
    GivenWarning,
    Judgement,
    Verdict,
    judge,
    warning_text,
)

pytestmark = pytest.mark.unit

T = datetime(2026, 11, 22, 14, 5, tzinfo=UTC).timestamp()
HOUR = 3600.0
MIN = 60.0


@pytest.mark.parametrize(
    ("now", "last_activity", "warning", "expected"),
    [
        pytest.param(T, T, None, Judgement(Verdict.FINE, T, T + HOUR), id="just-used"),
        pytest.param(
            T + 47 * MIN, T, None, Judgement(Verdict.FINE, T, T + HOUR), id="idle-below-warning"
        ),
        pytest.param(
            T + 48 * MIN, T, None, Judgement(Verdict.WARNED, T, T + HOUR), id="warned-at-80pc"
        ),
        pytest.param(
            T + 59 * MIN,
            T,
            GivenWarning(T, T + HOUR),
            Judgement(Verdict.WARNED, T, T + HOUR),
            id="warned-waits-for-the-promised-stop",
        ),
        pytest.param(
            T + HOUR,
            T,
            GivenWarning(T, T + HOUR),
            Judgement(Verdict.STOP, T, T + HOUR),
            id="stop-at-the-promised-time",
        ),
        pytest.param(
            T + 3 * HOUR,
            T,
            None,
            Judgement(Verdict.WARNED, T, T + 3 * HOUR + 12 * MIN),
            id="never-stopped-unwarned-full-notice-instead",
        ),
        pytest.param(
            T + 50 * MIN,
            T + 49 * MIN,
            GivenWarning(T, T + HOUR),
            Judgement(Verdict.FINE, T + 49 * MIN, T + 49 * MIN + HOUR),
            id="used-again-withdraws-the-warning",
        ),
        pytest.param(
            T + 2 * HOUR,
            T + 49 * MIN,
            GivenWarning(T, T + HOUR),
            Judgement(Verdict.WARNED, T + 49 * MIN, T + 2 * HOUR + 12 * MIN),
            id="used-after-the-warning-then-idle-again-warns-anew",
        ),
        pytest.param(
            T + 61 * MIN,
            T,
            GivenWarning(T, T + 70 * MIN),
            Judgement(Verdict.WARNED, T, T + 70 * MIN),
            id="a-late-warning-keeps-its-later-promise",
        ),
    ],
)
def test_judge(now: float, last_activity: float, warning, expected: Judgement) -> None:
    assert judge(timeout=HOUR, last_activity=last_activity, now=now, warning=warning) == expected


@pytest.mark.parametrize(
    ("fraction", "warned_after"),
    [
        pytest.param(0.5, 30 * MIN, id="half"),
        pytest.param(0.9, 54 * MIN, id="tenth-left"),
    ],
)
def test_warning_fraction_moves_the_warning(fraction: float, warned_after: float) -> None:
    def verdict(now: float) -> Verdict:
        return judge(timeout=HOUR, last_activity=T, now=now, warning_fraction=fraction).verdict

    assert verdict(T + warned_after - 1) is Verdict.FINE
    assert verdict(T + warned_after) is Verdict.WARNED


@pytest.mark.parametrize("fraction", [0, 1, 1.5, -0.2], ids=repr)
def test_warning_fraction_must_leave_room_on_both_sides(fraction: float) -> None:
    with pytest.raises(ValueError, match="warning_fraction"):
        judge(timeout=HOUR, last_activity=T, now=T, warning_fraction=fraction)


def test_a_notebook_walked_through_its_idle_hour_is_warned_once_then_stopped() -> None:
    """A poller checking every minute: fine, then warned (the same promise every round),
    then stopped at the promised time, never before."""
    warning, verdicts = None, []
    for minute in range(0, 62):
        judged = judge(timeout=HOUR, last_activity=T, now=T + minute * MIN, warning=warning)
        if judged.verdict is not Verdict.FINE and warning is None:
            warning = GivenWarning(judged.idle_since, judged.stop_at)
        verdicts.append(judged.verdict)
    assert verdicts.index(Verdict.WARNED) == 48
    assert verdicts.index(Verdict.STOP) == 60
    assert warning == GivenWarning(T, T + HOUR)


@pytest.mark.parametrize(
    ("since", "stop", "share", "text"),
    [
        pytest.param(
            T,
            T + HOUR,
            "0.5 GPU",
            "idle since 14:05 UTC; this notebook's 0.5 GPU will be released and the server "
            "stopped at 15:05 UTC unless it is used",
            id="same-day",
        ),
        pytest.param(
            T,
            T + 12 * HOUR,
            "2 GPUs",
            "idle since 2026-11-22 14:05 UTC; this notebook's 2 GPUs will be released and the "
            "server stopped at 2026-11-23 02:05 UTC unless it is used",
            id="across-midnight",
        ),
    ],
)
def test_warning_text(since: float, stop: float, share: str, text: str) -> None:
    assert warning_text(since, stop, share) == text


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        pytest.param("2026-11-22T14:05:00.000000Z", T, id="hub-utc"),
        pytest.param("2026-11-22T15:05:00+01:00", T, id="offset"),
        pytest.param("2026-11-22T14:05:00", T, id="naive-is-utc"),
        pytest.param(None, None, id="never-active"),
    ],
)
def test_hub_times_are_read_as_utc(raw: str | None, seconds: float | None) -> None:
    assert parse_time(raw) == seconds


def test_the_policy_module_does_no_io_and_reads_no_clock() -> None:
    tree = ast.parse(Path(idle_policy.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported <= {"__future__", "dataclasses", "datetime", "enum"}, imported
    calls = {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert not calls & {"now", "utcnow", "today", "time"}, calls
