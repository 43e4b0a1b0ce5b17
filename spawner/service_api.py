"""The spawner's connection to the FracHub service: allocations, queues and nodes.

The spawner runs inside the hub's event loop, so this is async (the researchers' client in
``hub_ext/client.py`` is synchronous, for kernels and terminals). It acts for users with the
service's own token, which holds ``custom:frachub:admin``: the hub, not the user, decides
which server asks for which share.
"""

from __future__ import annotations

from typing import Any

import httpx


class ServiceError(Exception):
    """The service refused (``status`` >= 400, ``message`` from its JSON body) or could not
    be reached (``status`` 0)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class FracHubAPI:
    def __init__(self, api_url: str, token: str, timeout: float = 30.0) -> None:
        self.api_url = api_url.rstrip("/") + "/"
        self.token = token
        self.timeout = timeout

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Any:
        url = self.api_url + path.lstrip("/")
        try:
            async with httpx.AsyncClient(timeout=timeout or self.timeout) as client:
                response = await client.request(
                    method,
                    url,
                    json=json,
                    params=params,
                    headers={"Authorization": f"token {self.token}"},
                )
        except httpx.HTTPError as error:
            raise ServiceError(
                0, f"the FracHub scheduler is not reachable at {self.api_url} ({error})"
            ) from None
        if response.status_code >= 400:
            try:
                message = response.json()["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text[:300] or response.reason_phrase
            raise ServiceError(response.status_code, message)
        return response.json() if response.content else None

    async def allocate(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", "allocations", json=body)

    async def allocation(
        self, allocation_id: int, *, wait: float = 0, version: float | None = None
    ) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if wait:
            params["wait"] = wait
            if version is not None:
                params["version"] = version
        return await self.request(
            "GET", f"allocations/{allocation_id}", params=params, timeout=self.timeout + wait
        )

    async def allocations_of(self, user: str) -> list[dict[str, Any]]:
        return await self.request(
            "GET", "allocations", params={"user": user, "state": "pending,running"}
        )

    async def release(self, allocation_id: int) -> dict[str, Any]:
        return await self.request("DELETE", f"allocations/{allocation_id}")

    async def queues(self) -> list[dict[str, Any]]:
        return await self.request("GET", "queues")

    async def nodes(self) -> list[dict[str, Any]]:
        return await self.request("GET", "nodes")
