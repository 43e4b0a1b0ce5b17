"""The skip policy of tests/conftest.py: in CI a skip whose reason is not on the allow-list
fails the run and is listed; an expected one (no local torch wheel) does not."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT_CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

TESTS = """
import pytest

def test_passes():
    pass

def test_skipped_as_expected():
    pytest.skip("PyTorch is not installed: pip install torch==2.13.0")

def test_skipped_for_no_good_reason():
    if {unexpected}:
        pytest.skip("jupyterhub is not installed")
"""


def run(tmp_path: Path, unexpected: bool, strict: str) -> subprocess.CompletedProcess:
    shutil.copy(ROOT_CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_example.py").write_text(TESTS.format(unexpected=unexpected))
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "FRACHUB_STRICT_SKIPS")}
    env["FRACHUB_STRICT_SKIPS"] = strict
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_unexpected_skip_fails_the_run_and_is_listed(tmp_path: Path) -> None:
    done = run(tmp_path, unexpected=True, strict="1")
    assert done.returncode == 1, done.stdout
    assert "unexpected skips" in done.stdout
    assert "test_skipped_for_no_good_reason: jupyterhub is not installed" in done.stdout
    assert "test_skipped_as_expected" not in done.stdout.split("unexpected skips")[1]


def test_expected_skips_pass(tmp_path: Path) -> None:
    done = run(tmp_path, unexpected=False, strict="1")
    assert done.returncode == 0, done.stdout
    assert "unexpected skips" not in done.stdout


def test_off_the_policy_only_warns(tmp_path: Path) -> None:
    done = run(tmp_path, unexpected=True, strict="0")
    assert done.returncode == 0, done.stdout
    assert "would fail it in CI" in done.stdout
