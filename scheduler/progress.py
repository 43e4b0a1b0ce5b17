"""One progress bar on stderr for the long simulations (``simulate fleet``, ``simulate
openb``), drawn by tqdm.

The bar is the parent process's alone: workers of a process pool send their steps through a
queue (``StepQueue``) instead of printing, so lines never interleave. It is off when stderr is
not a terminal (a CI log, a pipe) and when the caller asks for JSON.
"""

from __future__ import annotations

import multiprocessing
import queue
import sys
from collections.abc import Iterable
from concurrent.futures import Future, wait
from typing import Any

from tqdm import tqdm


def bar(total: int, label: str, *, enabled: bool = True) -> tqdm:
    """A bar of ``total`` steps on stderr; disabled (drawing nothing) unless ``enabled`` and
    stderr is a terminal."""
    return tqdm(
        total=total,
        desc=label,
        file=sys.stderr,
        disable=not enabled or not sys.stderr.isatty(),
        leave=False,
        dynamic_ncols=True,
        bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining}",
    )


_steps: Any = None  # a worker's end of the queue, set by ``StepQueue.initializer``


def report_step(count: int = 1) -> None:
    """In a pool worker started with ``StepQueue``: one more step done (none elsewhere)."""
    if _steps is not None:
        _steps.put(count)


class StepQueue:
    """Steps from pool workers to the parent's bar: pass ``initializer``/``initargs`` to the
    pool, then ``drain`` while the futures run."""

    def __init__(self) -> None:
        self.queue = multiprocessing.get_context().Queue()
        self.initializer = _set_steps
        self.initargs = (self.queue,)

    def drain(self, futures: Iterable[Future], progress: tqdm) -> None:
        """Move steps to ``progress`` until every future is done."""
        pending = set(futures)
        while pending:
            _done, pending = wait(pending, timeout=0.2)
            self._take(progress)
        self._take(progress)

    def _take(self, progress: tqdm) -> None:
        while True:
            try:
                progress.update(self.queue.get_nowait())
            except queue.Empty:
                return


def _set_steps(steps: Any) -> None:
    global _steps
    _steps = steps
