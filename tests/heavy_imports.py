"""What importing a piece of FracHub drags in, measured in a fresh interpreter: the user's
side (the REST client, the CLI, the magics) must load without the engine and its number
crunchers, so a notebook image or a laptop needs only the client's packages."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("scheduler.engine", "numpy", "sortedcontainers")


def heavy_modules_after(code: str) -> list[str]:
    """The engine's and its libraries' modules loaded once ``code`` has run."""
    check = f"{code}\nimport sys\nprint(sorted(m for m in sys.modules if m.startswith({HEAVY})))"
    result = subprocess.run(
        [sys.executable, "-c", check],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
    )
    return ast.literal_eval(result.stdout.strip())
