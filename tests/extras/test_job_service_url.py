"""Where a job reaches the service (its FRACHUB_URL): ``FracHubService.jobs_service_url``."""

from __future__ import annotations

import pytest
from traitlets.config import Config

from scheduler.service.app import FracHubService


def url_for(**settings: str) -> str | None:
    config = Config({"FracHubService": {"service_prefix": "/services/frachub/", **settings}})
    return FracHubService(config=config).jobs_service_url()


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"service_url": "http://127.0.0.1:10101"}, "http://127.0.0.1:10101/services/frachub/"),
        ({"service_url": "http://0.0.0.0:10101"}, None),  # nobody connects to 0.0.0.0
        (
            {"service_url": "http://0.0.0.0:10101", "job_service_url": "http://frachub.hub.svc:80"},
            "http://frachub.hub.svc:80/services/frachub/",
        ),
        (
            {"job_service_url": "https://hub.example.org/services/frachub"},
            "https://hub.example.org/services/frachub/",
        ),
    ],
)
def test_jobs_reach_the_service_where_it_can_be_reached(settings, expected) -> None:
    assert url_for(**settings) == expected
