"""The service's heap freezer: frozen garbage cycles are freed by the periodic full collection."""

import gc
import weakref

from scheduler.service.heap import Freezer


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


def test_freezer_frees_frozen_cycles_every_nth_run() -> None:
    freezer = Freezer(full_every=2)
    try:
        garbage = _Node()
        gone = weakref.ref(garbage)
        del garbage
        freezer.settled()  # the first run collects everything before it freezes
        assert gone() is None

        alive = _Node()
        held = weakref.ref(alive)
        freezer.settled()  # second run: freezes ``alive`` without a full collection
        assert gc.get_freeze_count() > 0
        del alive
        gc.collect()
        assert held() is not None  # frozen: the collector skips it
        freezer.settled()  # third run (count 2): unfreeze, collect, freeze again
        assert held() is None
    finally:
        gc.unfreeze()
