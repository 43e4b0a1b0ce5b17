"""The request log line is formatted only when a handler keeps it (``app.kept``): traitlets
leaves the service's logger at DEBUG and puts ``log_level`` on its handler, so the logger's
own ``isEnabledFor`` said yes to every request's line, which was then formatted and
dropped."""

from __future__ import annotations

import logging

from scheduler.service.app import FracHubService, kept


def test_the_services_own_logger_keeps_what_its_log_level_says() -> None:
    service = FracHubService(log_level="WARN")
    log = service.log
    assert log.isEnabledFor(logging.INFO)  # why isEnabledFor alone would not do
    assert not kept(log, logging.INFO) and not kept(log, logging.DEBUG)
    assert kept(log, logging.WARNING)
    service.log_level = "DEBUG"
    assert kept(log, logging.DEBUG)


def test_handlers_up_the_hierarchy_count_and_none_means_the_last_resort() -> None:
    parent = logging.getLogger("frachub-test-kept")
    child = logging.getLogger("frachub-test-kept.child")
    parent.setLevel(logging.DEBUG)
    parent.propagate = False  # apart from the root's handlers (pytest's among them)
    assert kept(child, logging.WARNING) and not kept(child, logging.INFO)  # last resort
    handler = logging.NullHandler()
    handler.setLevel(logging.INFO)
    parent.addHandler(handler)
    try:
        assert kept(child, logging.INFO) and not kept(child, logging.DEBUG)
        child.propagate = False
        assert not kept(child, logging.INFO)
    finally:
        parent.removeHandler(handler)
        child.propagate = parent.propagate = True
