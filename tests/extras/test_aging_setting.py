"""``FracHubService.aging_per_hour`` / ``aging_max_priority`` reach the engine's policy, and
nonsense is refused when the configuration is read."""

from __future__ import annotations

import pytest
from traitlets.config import Config

from scheduler.engine import Aging
from scheduler.service.app import FracHubService


def service(**settings) -> FracHubService:
    return FracHubService(config=Config({"FracHubService": settings}))


def test_aging_is_off_by_default_and_on_when_asked() -> None:
    assert service().scheduling_policy().aging is None
    assert service(aging_per_hour=10.0).scheduling_policy().aging == Aging(10.0, None)
    policy = service(aging_per_hour=10.0, aging_max_priority=50.0).scheduling_policy()
    assert policy.aging == Aging(10.0, 50.0)


@pytest.mark.parametrize("settings", [{"aging_per_hour": -1.0}, {"aging_max_priority": -5.0}])
def test_a_negative_rate_or_cap_is_refused(settings) -> None:
    with pytest.raises(ValueError, match="must be a number >= 0"):
        service(**settings)
