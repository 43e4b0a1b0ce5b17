"""The list benchmark (benchmarks/store_query.py) fills the store it describes, and the pages
it compares are the same rows: each case's page by cursor is its page by offset, before and
after migration 0008 (behaviour only, no timing)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections import Counter
from pathlib import Path

import pytest

from scheduler.service.persistence.orm import ACTIVE_STATES

pytestmark = pytest.mark.unit

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "store_query.py"


def _load():
    spec = importlib.util.spec_from_file_location("store_query_bench", _PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


bench = _load()
ARGS = argparse.Namespace(workloads=3000, active=200, users=20, projects=5, seed=1, repeat=1)


def test_pages_by_cursor_are_the_pages_by_offset_before_and_after_0008(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'bench.sqlite'}"
    names = bench.fill(url, ARGS)
    before = bench.store_at(url)
    records = before.workloads(limit=ARGS.workloads).records
    assert len(records) == ARGS.workloads
    assert Counter(r.state in ACTIVE_STATES for r in records)[True] == ARGS.active
    users = Counter(r.user for r in records)
    assert users.most_common(1)[0] == (names["heavy"], int(names["heavy_rows"]))
    assert users[names["light"]] == int(names["light_rows"])

    def pages(store, cursor: bool) -> list[list[int]]:
        found = []
        for _, filters, position in bench.cases(names):
            filters = {"limit": 50, **filters}
            if cursor:
                after = bench.cursor_at(store, filters, position)
                page = store.workloads(**filters, before=after)
            else:
                page = store.workloads(**filters, offset=position, count=True)
            found.append([record.id for record in page.records])
        return found

    offsets = pages(before, cursor=False)
    before.close()
    bench.upgrade(url)
    after = bench.store_at(url)
    assert pages(after, cursor=True) == offsets
    assert all(offsets)  # every case reads a page of something
    after.close()
