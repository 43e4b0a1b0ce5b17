"""The root of the tests: it puts tests/ on the import path (the shared harnesses,
hubharness.py and service_client.py, import as top-level modules) and imports nothing but
pytest and the standard library, so every level loads only what its own folder's conftest
needs: tests/unit runs on the base install alone.

It also holds the skip policy. A skipped test proves nothing, so where every part is
installed (CI: ``CI`` set, or ``FRACHUB_STRICT_SKIPS=1``) a skip whose reason is not on
``EXPECTED_SKIPS`` fails the run, listing each such skip. ``FRACHUB_STRICT_SKIPS=0`` turns
the policy off (a machine without a part the tests need, where skipping says why).
"""

from __future__ import annotations

import os
import re

import pytest

EXPECTED_SKIPS: tuple[tuple[str, str, str], ...] = (
    # (a pattern the reason matches, the environment variable that must be "1" for it to be
    # expected ("" for always), why that skip is expected even in CI)
    (
        r"PyTorch is not installed|torch is not installed \(set FRACHUB_TEST_TORCH_PYTHON",
        "",
        "the real torch.distributed tests need torch 2.13.0 from a local wheel "
        "(scripts/torch.sh): PyPI's is a CUDA build of several GB that CI does not download",
    ),
    (
        r"fake-only step on a real cluster|on a real cluster already|needs \d+ GPU node\(s\)",
        "FRACHUB_KUBE_REAL",
        "tests/kube on a real cluster skip the fake API's own steps and what needs more GPU "
        "nodes than the cluster has; on the fake (CI) nothing in tests/kube skips",
    ),
)


def _strict() -> bool:
    default = "1" if os.environ.get("CI", "").lower() not in ("", "0", "false") else "0"
    return os.environ.get("FRACHUB_STRICT_SKIPS", default) == "1"


def _reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


def expected_skip(reason: str) -> bool:
    """Whether a skip with this reason is on the allow-list (and its condition holds)."""
    return any(
        re.search(pattern, reason) and (not when or os.environ.get(when) == "1")
        for pattern, when, _ in EXPECTED_SKIPS
    )


_unexpected: list[str] = []


def _note(report: pytest.CollectReport | pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = _reason(report)
        if not expected_skip(reason):
            _unexpected.append(f"{report.nodeid}: {reason}")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _note(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    _note(report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _strict() and _unexpected and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not _unexpected:
        return
    verdict = "fail the run" if _strict() else "would fail it in CI (FRACHUB_STRICT_SKIPS=1)"
    terminalreporter.section("unexpected skips", sep="=", red=_strict(), bold=True)
    terminalreporter.line(
        f"{len(_unexpected)} test(s) skipped for a reason not on EXPECTED_SKIPS "
        f"(tests/conftest.py); they {verdict}:"
    )
    for line in _unexpected:
        terminalreporter.line(f"  {line}")
