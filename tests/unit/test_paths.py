"""Where FracHub finds its templates: the checkout's here (an installed wheel's are found by
tests/hub/test_wheel.py), and a clear refusal when an install has none."""

from __future__ import annotations

import pytest

from scheduler.common import paths


def test_a_checkout_uses_its_own_templates() -> None:
    assert paths.in_checkout()
    assert paths.TEMPLATES_DIR == paths.ROOT / "templates"
    paths.check_data_files()


def test_an_install_without_its_data_files_says_so(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(paths, "TEMPLATES_DIR", tmp_path / "templates")
    with pytest.raises(FileNotFoundError, match="FracHub's templates are missing: none in "):
        paths.check_data_files()
