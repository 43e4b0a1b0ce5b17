"""What the service writes stays inside its bounds and keeps its secrets: derived names fit
their columns, no log line holds a token, and ``frachub backup`` holds every secret a restore
needs."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from hub_ext.cli.backup import backup, restore
from scheduler.common.states import WorkloadState
from scheduler.engine import Kind, Request, WorkloadRequest
from scheduler.engine.lifecycle import Milestone
from scheduler.engine.model import EvictReason
from scheduler.service.app import REDACT_SECRETS, redact, redact_logs
from scheduler.service.handlers.allocations import notebook_name
from scheduler.service.handlers.pages import COOKIE_SECRET_FILE, cookie_secret
from scheduler.service.persistence.orm import NAME_LENGTH, EventRecord, TooLong, WorkloadRecord
from scheduler.service.persistence.store import open_store


def test_a_notebook_name_fits_its_column_and_stays_distinct() -> None:
    assert notebook_name("alice", "") == "notebook-alice"
    assert notebook_name("alice", "gpu") == "notebook-alice-gpu"
    longest_kept = "s" * (NAME_LENGTH - len("notebook-alice-"))
    assert notebook_name("alice", longest_kept) == f"notebook-alice-{longest_kept}"
    names = {
        notebook_name(user, server)
        for user in ("alice", "u" * 255)
        for server in ("s" * 255, "s" * 254 + "t", "")
    }
    assert len(names) == 6
    assert all(len(name) <= NAME_LENGTH for name in names)
    # the same server always gets the same name
    assert notebook_name("alice", "s" * 255) == notebook_name("alice", "s" * 255)


def test_a_string_longer_than_its_column_is_refused_on_sqlite_too(tmp_path: Path) -> None:
    """The store's backstop behind the edge's checks: SQLite would keep a 256-character
    name whole where PostgreSQL refuses it; both refuse it now, in the same words."""
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    ask = WorkloadRequest.of(Kind.TRAINING, Request(gpus=0.25), project="vision", user="alice")
    for name, fits in (("n" * NAME_LENGTH, True), ("n" * (NAME_LENGTH + 1), False)):
        record = WorkloadRecord.asking(
            ask, name=name, state="pending", command="true", env={}, submitted_at=1.0
        )
        store.add(record)
        if fits:
            store.commit()
            continue
        with pytest.raises(TooLong, match=r"workloads\.name: 256 characters, more than the 255"):
            store.commit()
    store.close()


def test_every_word_stored_in_a_short_column_fits_it() -> None:
    """Event types, states, kinds and stop reasons are the code's own words: each fits."""
    words = [
        *(state.value for state in WorkloadState),
        *(milestone.value for milestone in Milestone),
        *(reason.value for reason in EvictReason),
        *(kind.value for kind in Kind),
        "cancel",
        "max-runtime",
        "idle-cleared",
        "idle-warning",
        "idle-stop",
        "server-gone",
    ]
    limit = EventRecord.__table__.c.type.type.length
    assert limit == WorkloadRecord.__table__.c.stop_reason.type.length == 32
    assert [word for word in words if len(word) > limit] == []


TOKEN = "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize(
    "line",
    [
        f"403 GET /services/frachub/api/v1/workloads?token={TOKEN} 1.2ms",
        f"403 GET /services/frachub/api/v1/workloads?limit=5&token={TOKEN}&state=running",
        f"GET /services/frachub/api/v1/user?access_token={TOKEN} (127.0.0.1)",
        f"GET /services/frachub/oauth_callback?code={TOKEN}&state=xyz",
        f"headers: {{'Authorization': 'token {TOKEN}'}}",
        f"Authorization: Bearer {TOKEN}",
    ],
)
def test_tokens_are_redacted(line: str) -> None:
    assert TOKEN not in redact(line)
    assert "[redacted]" in redact(line)


def test_every_log_line_of_the_service_and_tornado_is_redacted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service_log = logging.getLogger("FracHubServiceRedactionTest")
    redact_logs(service_log)
    try:
        with caplog.at_level(logging.INFO):
            service_log.warning("%d %s %s", 403, "GET", f"/api/v1/workloads?token={TOKEN}")
            logging.getLogger("tornado.general").warning(
                "403 GET /api/v1/workloads?token=%s (127.0.0.1): refused", TOKEN
            )
            logging.getLogger("tornado.application").error(
                "Uncaught exception GET /x?access_token=%s", TOKEN
            )
        assert len(caplog.records) == 3
        assert TOKEN not in caplog.text
        assert caplog.text.count("[redacted]") == 3
    finally:
        for name in ("tornado.access", "tornado.application", "tornado.general"):
            logging.getLogger(name).removeFilter(REDACT_SECRETS)


def test_backup_and_restore_keep_the_services_cookie_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a restore the service signs cookies with the same key: nobody is logged out."""
    monkeypatch.delenv("FRACHUB_COOKIE_SECRET", raising=False)
    data = tmp_path / "data"
    data.mkdir()
    sqlite3.connect(data / "frachub.sqlite").execute("CREATE TABLE t (x)").connection.close()
    key = cookie_secret(str(data))
    backup(data, tmp_path / "backup", logs=False)
    restored = tmp_path / "restored"
    restore(tmp_path / "backup", restored)
    assert (restored / COOKIE_SECRET_FILE).stat().st_mode & 0o777 == 0o600
    assert cookie_secret(str(restored)) == key
