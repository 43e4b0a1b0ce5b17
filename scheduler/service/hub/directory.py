"""Group membership, asked of the hub with the service's own token.

A user's token may not carry the scope to read its own groups, so the service looks them up
itself (its role grants ``read:users:groups``), caching each answer briefly: adding someone
to a group takes effect within ``ttl`` seconds without a restart.
"""

from __future__ import annotations

import json
import time
from urllib.parse import quote

from tornado.httpclient import HTTPClientError

from scheduler.service.hub.hubapi import HUB_TIMEOUT, HubApi, hub_unavailable


class HubDirectoryError(RuntimeError):
    pass


class HubDirectory(HubApi):
    def __init__(
        self, api_url: str, api_token: str, ttl: float = 30.0, timeout: float = HUB_TIMEOUT
    ) -> None:
        super().__init__(api_url, api_token, timeout)
        self.ttl = ttl
        self._cache: dict[str, tuple[float, frozenset[str]]] = {}

    async def groups_of(self, user: str) -> frozenset[str]:
        cached = self._cache.get(user)
        if cached is not None and time.monotonic() - cached[0] < self.ttl:
            return cached[1]
        try:
            response = await self.fetch("GET", f"/users/{quote(user, safe='')}")
        except (HTTPClientError, OSError) as error:
            if isinstance(error, HTTPClientError) and error.code == 404:
                groups: frozenset[str] = frozenset()
                self._cache[user] = (time.monotonic(), groups)
                return groups
            outage = hub_unavailable(error, self.timeout)
            raise HubDirectoryError(
                outage or f"the hub refused a group lookup for {user}: {error}"
            ) from None
        groups = frozenset(json.loads(response.body).get("groups") or ())
        self._cache[user] = (time.monotonic(), groups)
        return groups
