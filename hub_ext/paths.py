"""Where FracHub's non-Python files live, found one way for every process that needs them."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES_DIR = ROOT / "templates"  # Jinja templates extending the hub's page.html
