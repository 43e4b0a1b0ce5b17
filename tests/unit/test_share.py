"""The one rule that turns a placement into memory: never less than a request made in memory,
and the shares that fit on one GPU fit in its memory."""

from __future__ import annotations

import pytest

from scheduler.common.placement import GpuShare, ReplicaPlacement
from scheduler.common.share import MIB, Share, share_of
from scheduler.engine.model import Request

H200_MIB = 143_771


def replica(*shares: int) -> ReplicaPlacement:
    return ReplicaPlacement("n", tuple(GpuShare(i, milli) for i, milli in enumerate(shares)))


@pytest.mark.parametrize("asked_gib", [0.5, 1, 10, 30, 35, 70.3, 139])
def test_a_memory_request_gets_at_least_what_it_asked(asked_gib: float) -> None:
    asked = round(asked_gib * 1024)
    milli = Request(gpu_memory_mib=asked).milli_on(H200_MIB)
    assert share_of(replica(milli), H200_MIB).memory_mib >= asked


def test_shares_that_fill_a_gpu_fit_in_its_memory() -> None:
    for parts in ([250] * 4, [333, 333, 334], [125] * 8, [1, 999]):
        assert sum(share_of(replica(m), H200_MIB).memory_mib for m in parts) <= H200_MIB


def test_whole_gpus_and_no_gpus() -> None:
    assert share_of(replica(1000, 1000), H200_MIB) == Share(1000, H200_MIB)
    assert share_of(replica(), H200_MIB) == Share(0, 0)
    assert not share_of(replica(1000), H200_MIB).is_partial
    assert share_of(replica(250), H200_MIB).is_partial


def test_framework_fraction_is_of_the_total_the_framework_sees() -> None:
    share = share_of(replica(214), H200_MIB)
    seen = 150_109_880_320  # what torch and CUDA report on an H200 (measured)
    assert share.framework_fraction(seen) > share.fraction
    assert Share(1000, H200_MIB).framework_fraction(seen) == 1.0
    assert share.framework_fraction(0) == share.fraction


@pytest.mark.parametrize("seen", [150_109_880_320, 85_031_714_816, 24 * 1024 * MIB + 3])
def test_a_framework_capped_at_the_fraction_allows_the_shares_bytes(seen: int) -> None:
    """torch and XLA take ``int(fraction * total)``: never below the share, at most a few
    hundred bytes above it."""
    memory = seen // MIB
    for milli in range(1, 1000, 7):
        share = share_of(replica(milli), memory)
        allowed = int(share.framework_fraction(seen) * seen)
        assert 0 <= allowed - share.memory_bytes < 1024, milli


def test_thread_percentage_rounds_up() -> None:
    assert Share(250, 1).thread_percentage == 25
    assert Share(333, 1).thread_percentage == 34
    assert Share(1, 1).thread_percentage == 1
    assert Share(1000, 1).thread_percentage == 100
