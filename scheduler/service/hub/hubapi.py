"""The Hub REST API with the service's own token: the one way the service's hub clients
(group lookups, the idle poller, job tokens) send a request."""

from __future__ import annotations

import json
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPRequest, HTTPResponse


class HubApi:
    """Requests to ``api_url`` (the hub's ``…/hub/api``) as the service."""

    def __init__(self, api_url: str, api_token: str, request_timeout: float = 10.0) -> None:
        self.api_url = api_url.rstrip("/")
        self.api_token = api_token
        self.request_timeout = request_timeout

    async def fetch(
        self, method: str, path: str, body: Any = None, *, accept: str = "application/json"
    ) -> HTTPResponse:
        """``path`` below ``api_url``; ``body`` sent as JSON. Errors are tornado's
        (``HTTPClientError`` for an answer of 4xx/5xx, ``OSError`` for no answer)."""
        headers = {"Authorization": f"token {self.api_token}", "Accept": accept}
        if body is not None:
            headers["Content-Type"] = "application/json"
        request = HTTPRequest(
            f"{self.api_url}{path}",
            method=method,
            headers=headers,
            body=None if body is None else json.dumps(body),
            request_timeout=self.request_timeout,
        )
        return await AsyncHTTPClient().fetch(request)
