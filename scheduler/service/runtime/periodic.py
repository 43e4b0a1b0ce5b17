"""A step the service runs again and again on a timer of its own (the memory watchdog, the
GPU use sampler): started as a task of the event loop, stopped by cancelling it. A step that
fails is logged with ``what`` and tried again an interval later: one bad sample must not end
the loop for the life of the service."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable


class Periodic:
    """``step`` every ``interval()`` seconds, the first at once (``start``/``stop``)."""

    def __init__(
        self,
        step: Callable[[], Awaitable[None]],
        interval: Callable[[], float],
        log: logging.Logger,
        what: str,
        on_error: Callable[[], None] = lambda: None,
    ) -> None:
        self.step = step
        self.interval = interval
        self.log = log
        self.what = what
        self.on_error = on_error
        """Called after a failed step, before it is logged (the watchdog rolls back its
        store transaction)."""
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.step()
            except Exception:
                self.on_error()
                self.log.exception("%s failed; trying again", self.what)
            await asyncio.sleep(self.interval())
