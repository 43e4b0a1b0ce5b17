"""Keep the garbage collector's full collections off the service's long-lived state.

The service holds every active workload, its life and its row, and the settled session
(ledgers, victim lists, placement columns) between cycles: at 1,000 nodes some hundreds of
thousands of objects that live for hours. CPython's full collections walk them all, and a
cycle allocates enough to trigger some, so they cost a cycle 10-15% of its CPU
(docs/benchmarks.md section 2). ``gc.freeze`` moves every object alive now into a permanent
generation that collections skip.

Why it is safe: reference counting still frees frozen objects the moment nothing points at
them; only garbage *cycles* among frozen objects would wait. So every :data:`FULL_EVERY`-th
freeze first unfreezes and runs a full collection, which frees such cycles, and the first
freeze does too (unless busy, below): what can leak is bounded by what became cyclic garbage
within that many settled runs, and nothing stays frozen past the next full collection.

That full collection walks everything (150-360 ms at 15,000 workloads, measured in
benchmarks/service_api.py), and the event loop answers nothing meanwhile. So while
submissions keep arriving (``busy``) it waits for the first settled run without any, up to
:data:`BUSY_EVERY` runs: a burst of submissions is not stalled by it, and the bound on what
can leak is that many runs instead.
"""

from __future__ import annotations

import gc

FULL_EVERY = 20
"""Settled runs between full collections of everything (frozen objects included)."""
BUSY_EVERY = 100
"""The most settled runs between full collections while submissions keep arriving."""


class Freezer:
    """Freezes the heap after each settled run of cycles (``settled``)."""

    def __init__(self, full_every: int = FULL_EVERY, busy_every: int = BUSY_EVERY) -> None:
        self.full_every = max(1, full_every)
        self.busy_every = max(self.full_every, busy_every)
        self.count = 0
        self._last_full = -self.full_every
        """The run that last collected everything: the first run is due."""

    def settled(self, busy: bool = False) -> None:
        """The cycles settled: what lives now is the standing state; freeze it. ``busy``:
        submissions arrived during the run, so the full collection may wait."""
        since = self.count - self._last_full
        if since >= self.busy_every or (since >= self.full_every and not busy):
            gc.unfreeze()
            gc.collect()
            self._last_full = self.count
        self.count += 1
        gc.freeze()
