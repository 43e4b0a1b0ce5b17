"""``FracHubService.interactive_reserve_gpus`` reaches the engine's policy in milli-GPUs, and
nonsense is refused when the configuration is read."""

from __future__ import annotations

import pytest
from traitlets.config import Config

from scheduler.service.app import FracHubService


def service(**settings) -> FracHubService:
    return FracHubService(config=Config({"FracHubService": settings}))


def test_the_reserve_is_off_by_default_and_counted_in_milli_gpus() -> None:
    assert service().scheduling_policy().interactive_reserve == 0
    assert service(interactive_reserve_gpus=1.5).scheduling_policy().interactive_reserve == 1500


@pytest.mark.parametrize("value", [-1.0, float("inf"), float("nan")])
def test_a_negative_or_endless_reserve_is_refused(value) -> None:
    with pytest.raises(ValueError, match="interactive_reserve_gpus must be a number of GPUs >= 0"):
        service(interactive_reserve_gpus=value)
