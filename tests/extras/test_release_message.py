"""What the spawner says when it cannot release a notebook's share: a service that is not
answering (stopped before the hub, restarting) is not a misconfiguration."""

import asyncio
import logging
from typing import Any

import pytest

from hub_ext.client.session import FracHubError
from spawner.mixin import FracSpawnerMixin


class _Unanswered:
    def __init__(self, status: int, message: str) -> None:
        self.error = FracHubError(status, message)

    async def release(self, allocation_id: int) -> Any:
        raise self.error


class _Spawner(FracSpawnerMixin):
    log = logging.getLogger("test-release")

    def __init__(self, client: _Unanswered) -> None:
        super().__init__()
        self._client = client

    @property
    def frachub_client(self) -> Any:  # type: ignore[override]
        return self._client


def test_a_service_that_does_not_answer_is_reported_as_such(
    caplog: pytest.LogCaptureFixture,
) -> None:
    unreachable = "cannot reach the FracHub service at http://x/ (check frachub_api_url)"
    spawner = _Spawner(_Unanswered(0, unreachable))
    with caplog.at_level(logging.WARNING, "test-release"):
        assert asyncio.run(spawner._release_id(2)) is False  # retried later
    text = caplog.text
    assert "check frachub_api_url" not in text
    assert "allocation 2 not released yet" in text
    assert "did not answer" in text and "reconciles" in text


def test_a_refusal_still_names_the_service_s_words(caplog: pytest.LogCaptureFixture) -> None:
    spawner = _Spawner(_Unanswered(403, "the token lacks the scope allocations:write"))
    with caplog.at_level(logging.WARNING, "test-release"):
        assert asyncio.run(spawner._release_id(2)) is True  # a refusal is not retried
    assert "lacks the scope allocations:write" in caplog.text
