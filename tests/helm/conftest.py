"""Shared fixtures for the Helm chart tests: the chart, a renderer and the z2jh data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "frachub"
VALUES_DIR = Path(__file__).resolve().parent / "values"
# the z2jh chart's schema and defaults live outside the repository (../shared/z2jh)
Z2JH = REPO.parent / "shared" / "z2jh"

helm = pytest.importorskip(
    "helm_python", reason="helm-python-sdk (the Helm engine) is not installed: pip install .[test]"
)


def values_files() -> list[Path]:
    return sorted(VALUES_DIR.glob("*.yaml"))


def load_yaml(path: Path) -> Any:
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


@pytest.fixture(scope="session")
def chart():
    with helm.Chart.load(str(CHART)) as loaded:
        yield loaded


def render(chart, values: dict[str, Any], namespace: str = "jupyterhub") -> list[dict[str, Any]]:
    """Every manifest the chart renders for these values, as dicts."""
    rendered = chart.render(values, name="frachub", namespace=namespace, is_install=True)
    documents = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        for document in yaml.safe_load_all(text):
            if document:
                documents.append(document)
    return documents


def by_kind(documents: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in documents if d["kind"] == kind]


def one(documents: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(documents, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


@pytest.fixture(scope="session")
def z2jh() -> Path:
    if not (Z2JH / "values.schema.yaml").exists():
        pytest.skip(f"the z2jh chart's schema is not at {Z2JH} (CI has it at ../shared/z2jh)")
    return Z2JH
