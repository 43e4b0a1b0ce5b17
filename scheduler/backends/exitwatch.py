"""Exit notification for the local backend: the service hears of a replica's end at once.

Without it an end waits for the service's next poll (``FracHubService.poll_interval``, 0.5 s),
and an attempt whose group still held a process when the poll killed it waited for the poll
after that: a stopped victim that exits on SIGTERM at once was reported gone 0.5-1 s later,
which a notebook waiting for its GPUs sat through (docs/benchmarks.md section 3, "Notebooks
while batch fills the cluster").

Each watched replica has a pidfd (``os.pidfd_open``, Linux 5.3) read by the event loop: it
becomes readable when the process ends, whether it is the service's child or a process a
restarted service adopted, and the start time read after opening it tells the job from a
later process that reuses its pid. Its end sets a flag that ``wait`` returns on, and the
service polls then (``SchedulingLoop._every``). Where pidfds are missing (an older kernel,
another system, or ``limit`` of them open) an end waits for the poll interval, as before;
the reports themselves still come from ``poll`` alone, so nothing is reported twice.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource

from scheduler.backends import processes

MIN_SPACING = 0.005
"""Seconds at least between two polls an end brought: with thousands of attempts, a poll
costs milliseconds, and a burst of ends must not keep the loop polling."""


def default_limit() -> int:
    """Pidfds to hold at most: a quarter of the open-file limit, so that the watch never takes
    the descriptors the service's connections and the jobs' logs need."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 256 if soft == resource.RLIM_INFINITY else max(soft // 4, 0)


class ExitWatch:
    """Pidfds of running replicas on the event loop, and the flag their ends set.

    ``watch`` and ``forget`` run on the event loop (``add_reader``); ``wait`` is what the
    service awaits between polls.
    """

    def __init__(self, log: logging.Logger, limit: int | None = None) -> None:
        self.log = log
        self.limit = default_limit() if limit is None else limit
        self._fds: dict[int, tuple[int, asyncio.AbstractEventLoop]] = {}
        """pid -> (its pidfd, the loop that reads it)."""
        self._woken = False
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None
        self._unavailable = "" if hasattr(os, "pidfd_open") else "no os.pidfd_open here"
        self._warned = False
        self._last_wait: float | None = None
        """When ``wait`` last returned: the poll after it ran since."""

    @property
    def watched(self) -> int:
        """How many processes are watched now."""
        return len(self._fds)

    def watch(self, pid: int, start_time: int) -> bool:
        """Wake ``wait`` when ``pid`` (started at ``start_time``, ``processes.proc_stat``)
        ends; True when it will, False when only the poll interval will tell (logged once)."""
        if pid in self._fds:
            return True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        if self._unavailable or len(self._fds) >= self.limit:
            self._fallback(self._unavailable or f"{self.limit} processes watched already")
            return False
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            self.wake()  # gone already: the next poll reports it
            return True
        except OSError as error:
            if error.errno in (errno.ENOSYS, errno.EOPNOTSUPP):  # never here: stop trying
                self._unavailable = f"pidfd_open: {error.strerror}"
            self._fallback(f"pidfd_open: {error.strerror}")
            return False
        stat = processes.proc_stat(pid)
        if stat is None or stat[1] != start_time:
            os.close(fd)  # the job is gone and the pid is another process's now
            self.wake()
            return True
        self._fds[pid] = (fd, loop)
        loop.add_reader(fd, self._ended, pid)
        return True

    def forget(self, pid: int) -> None:
        """Stop watching ``pid`` (its end was seen, or it is no longer this backend's)."""
        entry = self._fds.pop(pid, None)
        if entry is None:
            return
        fd, loop = entry
        if not loop.is_closed():
            loop.remove_reader(fd)
        os.close(fd)

    def wake(self) -> None:
        """Have ``wait`` return now (or at once when it is next called)."""
        self._woken = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def wake_later(self, delay: float) -> None:
        """``wake`` after ``delay`` seconds: an ended attempt whose killed processes are
        still going (a group is empty only once they are). One timer at a time, the
        earliest asked for, so that many such attempts cost one wake."""
        loop = asyncio.get_running_loop()
        at = loop.time() + delay
        if self._timer is not None:
            if self._timer.when() <= at and self._timer_loop is loop:
                return
            self._timer.cancel()
        self._timer, self._timer_loop = loop.call_at(at, self._timed), loop

    async def wait(self, timeout: float) -> None:
        """Return when a watched process ended (or ``wake`` was called) since the last
        return, else after ``timeout`` seconds; the service's poll comes after it."""
        loop = asyncio.get_running_loop()
        if self._woken:
            # spaced by the poll that just ran at least: a burst of ends costs half the loop
            ran = loop.time() - self._last_wait if self._last_wait is not None else 0.0
            await asyncio.sleep(max(MIN_SPACING, min(ran, timeout)))
        else:
            self._waiter = loop.create_future()
            try:
                await asyncio.wait_for(self._waiter, timeout)
            except TimeoutError:
                pass
            finally:
                self._waiter = None
        self._woken = False
        self._last_wait = loop.time()

    def close(self) -> None:
        """Stop watching everything (the backend is closing; the jobs run on)."""
        for pid in list(self._fds):
            self.forget(pid)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed(self) -> None:
        self._timer = None
        self.wake()

    def _ended(self, pid: int) -> None:
        self.forget(pid)
        self.wake()

    def _fallback(self, why: str) -> None:
        if not self._warned:
            self._warned = True
            self.log.warning("Replica ends are noticed at the poll interval, not at once (%s)", why)
