"""The Hub REST API with the service's own token: the one way the service's hub clients
(group lookups, the idle poller, job tokens) send a request, and the one way an outage of the
hub is put in words."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest, HTTPResponse

HUB_TIMEOUT = 5.0
"""Seconds the service waits for the hub's answer, connecting included, before it calls the
hub unavailable: a request to the service never hangs on a stalled hub."""


def hub_unavailable(error: BaseException, timeout: float) -> str | None:
    """What a caller is told when the hub could not answer (refused, timed out, or a 5xx),
    or None when ``error`` is not an outage. The words name the hub only: never its URL or
    host, which are the deployment's internals."""
    if (isinstance(error, HTTPClientError) and error.code == 599) or isinstance(
        error, asyncio.TimeoutError | TimeoutError
    ):
        return f"the hub is unavailable: it did not answer within {timeout:g} s; try again shortly"
    if isinstance(error, HTTPClientError) and error.code >= 500:
        return f"the hub is unavailable: it answered {error.code}; try again shortly"
    if isinstance(error, ConnectionRefusedError):
        return "the hub is unavailable: it refused the connection; try again shortly"
    if isinstance(error, OSError):
        return "the hub is unavailable: the connection to it failed; try again shortly"
    return None


class HubApi:
    """Requests to ``api_url`` (the hub's ``…/hub/api``) as the service.

    By default through tornado's shared ``AsyncHTTPClient``, which sends 10 requests at once
    and queues the rest, the queue's wait counting against ``timeout``. ``at_once``: this
    client's own connections instead, at most that many requests in flight and the others
    waiting, untimed, for a free one, so that a burst (a cycle starting hundreds of jobs,
    each asking for a token) or the service's other hub calls filling the shared client
    never time a request out before it is sent: ``timeout`` is the hub's answer time."""

    def __init__(
        self, api_url: str, api_token: str, timeout: float = HUB_TIMEOUT, at_once: int = 0
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self.api_token = api_token
        self.timeout = timeout
        self.at_once = at_once
        self._own: tuple[asyncio.AbstractEventLoop, AsyncHTTPClient, asyncio.Semaphore] | None = (
            None
        )

    async def fetch(
        self, method: str, path: str, body: Any = None, *, accept: str = "application/json"
    ) -> HTTPResponse:
        """``path`` below ``api_url``; ``body`` sent as JSON. Errors are tornado's
        (``HTTPClientError`` for an answer of 4xx/5xx or none within ``timeout``, code 599,
        ``OSError`` for a refused connection)."""
        headers = {"Authorization": f"token {self.api_token}", "Accept": accept}
        if body is not None:
            headers["Content-Type"] = "application/json"
        request = HTTPRequest(
            f"{self.api_url}{path}",
            method=method,
            headers=headers,
            body=None if body is None else json.dumps(body),
            connect_timeout=self.timeout,
            request_timeout=self.timeout,
        )
        if not self.at_once:
            return await AsyncHTTPClient().fetch(request)
        loop = asyncio.get_running_loop()
        if self._own is None or self._own[0] is not loop:  # one client per event loop
            client = AsyncHTTPClient(force_instance=True, max_clients=self.at_once)
            self._own = (loop, client, asyncio.Semaphore(self.at_once))
        _, client, free = self._own
        async with free:
            return await client.fetch(request)
