"""The memory watchdog's decisions (``scheduler/service/policies/memory_watch.py``) over a
sequence of samples: a 35 GiB share, a 10-second grace period."""

from __future__ import annotations

import pytest

from scheduler.service.policies.memory_watch import (
    Finding,
    Over,
    Verdict,
    Watched,
    gib_words,
    judge,
)

pytestmark = pytest.mark.unit

GIB = 1 << 30
SHARE = 35 * GIB


def samples(
    uses: list[tuple[float, float]], action: str = "stop", grace: float = 10.0, slack: int = 0
):
    """Judge one workload at each (time, GiB on GPU 0); the findings of each sample."""
    over: dict[int, Over] = {}
    out: list[list[Finding]] = []
    for now, gib in uses:
        watched = [Watched(1, SHARE, {"GPU 0": gib * GIB} if gib else {}, action)]
        judgement = judge(watched, over, now, grace, slack)
        over = judgement.over
        out.append(judgement.findings)
    return out


def test_over_its_share_for_the_grace_period_it_is_stopped_once_with_the_reason() -> None:
    found = samples([(0, 52), (2, 52), (8, 52), (10, 52), (12, 52)])
    assert found[:3] == [[], [], []]
    assert found[3] == [
        Finding(1, Verdict.STOP, "uses 52 GiB of its 35 GiB share of GPU 0 for more than 10s")
    ]
    assert found[4] == []  # once


def test_at_or_under_its_share_nothing_happens() -> None:
    assert samples([(t, g) for t, g in [(0, 35), (20, 10), (40, 0), (60, 35)]]) == [[]] * 4


def test_the_slack_covers_a_cuda_context_beyond_a_full_share() -> None:
    """A PyTorch job capped at its 35 GiB holds 35.5 GiB in NVML's eyes (its context): with
    the default 1 GiB slack it is not over; 36.5 GiB is."""
    assert samples([(0, 35.5), (20, 35.5)], slack=GIB) == [[], []]
    found = samples([(0, 36.5), (20, 36.5)], slack=GIB)
    assert found[1] == [
        Finding(1, Verdict.STOP, "uses 36.5 GiB of its 35 GiB share of GPU 0 for more than 10s")
    ]


def test_a_brief_excess_shorter_than_the_grace_period_is_forgiven() -> None:
    """Over at 0 and 8, back under at 9: a later excess starts a new grace period."""
    found = samples([(0, 40), (8, 40), (9, 30), (12, 40), (21, 40), (22, 40)])
    assert [bool(f) for f in found] == [False, False, False, False, False, True]


def test_warned_then_back_within_its_share() -> None:
    found = samples([(0, 40), (10, 40), (11, 41), (12, 34.9)], action="warn")
    assert found[1] == [
        Finding(1, Verdict.WARN, "uses 40 GiB of its 35 GiB share of GPU 0 for more than 10s")
    ]
    assert found[2] == []
    assert found[3] == [
        Finding(1, Verdict.CLEARED, "back within its share: uses 34.9 GiB of its 35 GiB")
    ]


def test_off_judges_nothing_and_the_worst_gpu_is_named() -> None:
    assert samples([(0, 90), (100, 90)], action="off") == [[], []]
    two = Watched(2, SHARE, {"GPU 0": 10 * GIB, "GPU 1": 36 * GIB}, "stop")
    first = judge([two], {}, 0, 0.0)
    assert first.findings[0].words.startswith("uses 36 GiB of its 35 GiB share of GPU 1")
    with pytest.raises(ValueError, match="unknown memory watchdog action 'kill'"):
        judge([Watched(3, SHARE, {}, "kill")], {}, 0, 0)


@pytest.mark.parametrize(
    ("n_bytes", "words"),
    [(52 * GIB, "52 GiB"), (GIB // 2, "0.5 GiB"), (int(34.94 * GIB), "34.9 GiB")],
)
def test_gib_words(n_bytes: int, words: str) -> None:
    assert gib_words(n_bytes) == words
