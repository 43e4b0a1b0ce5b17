"""The service's heap freezer: frozen garbage cycles are freed by the periodic full collection."""

import gc
import weakref

from scheduler.service.runtime.heap import Freezer


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


def test_while_busy_the_full_collection_waits_for_a_quiet_run_at_most_busy_every() -> None:
    freezer = Freezer(full_every=2, busy_every=4)
    try:
        garbage = _Node()
        gone = weakref.ref(garbage)
        del garbage
        freezer.settled(busy=True)  # the first run is due, but busy: it freezes the garbage
        assert gone() is not None
        freezer.settled(busy=False)  # the first quiet run collects everything
        assert gone() is None
        frozen = _Node()
        held = weakref.ref(frozen)
        freezer.settled(busy=True)  # freezes ``frozen``
        del frozen
        freezer.settled(busy=True)  # due (2 runs since), but busy: waits
        assert held() is not None
        freezer.settled(busy=False)  # the first quiet run collects
        assert held() is None

        frozen = _Node()
        held = weakref.ref(frozen)
        freezer.settled(busy=True)  # freezes it
        del frozen
        for _ in range(2):  # due after the first, but busy: the collection waits
            freezer.settled(busy=True)
            assert held() is not None
        freezer.settled(busy=True)  # busy_every runs since the last one: collects anyway
        assert held() is None
    finally:
        gc.unfreeze()
