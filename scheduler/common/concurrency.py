"""Calls sent side by side, a bounded number at a time.

One helper for every place that sends many independent calls to something slow (the
Kubernetes API, a backend): a gang's Jobs and their admissions, a cycle's stops. One after
another, 500 calls cost 500 round trips; all at once, they swamp the server and time out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


async def side_by_side(
    call: Callable[[T], Awaitable[R]], items: Iterable[T], at_once: int
) -> list[R]:
    """``call(item)`` for every item, at most ``at_once`` in flight; the results in order.
    If any fails, the first failure is raised once all have ended, so nothing is still
    under way while the caller cleans up (a caller that must hear of every failure catches
    them inside ``call``)."""
    limit = asyncio.Semaphore(at_once)

    async def one(item: T) -> R:
        async with limit:
            return await call(item)

    results = await asyncio.gather(*(one(item) for item in items), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]
