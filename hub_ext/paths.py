"""Where FracHub's non-Python files live, found one way for every process that needs them.

The Jinja templates stay at the top of the repository (``templates/``) and a wheel installs
them as data files under ``<prefix>/share/frachub/templates``, as JupyterHub ships its own
under ``share/jupyterhub``. A checkout (editable install or plain ``PYTHONPATH``) uses the
repository's copy, so an edit shows at once; an installed wheel uses the shared one.
"""

from __future__ import annotations

import site
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARE = Path("share") / "frachub"


def in_checkout() -> bool:
    """Whether FracHub runs from its repository (editable install or ``PYTHONPATH``)."""
    return (ROOT / "pyproject.toml").is_file() and (ROOT / "templates").is_dir()


def data_dir() -> Path:
    """``share/frachub`` of the installation: the repository in a checkout, else the first
    install prefix holding it (the interpreter's, the user's, or the one this package was
    installed under, as with ``pip install --prefix``)."""
    if in_checkout():
        return ROOT
    # <prefix>/lib/pythonX.Y/site-packages/hub_ext/paths.py -> <prefix>
    prefixes = [sys.prefix, site.getuserbase(), str(Path(__file__).resolve().parents[4])]
    for prefix in prefixes:
        candidate = Path(prefix) / SHARE
        if (candidate / "templates").is_dir():
            return candidate
    raise FileNotFoundError(
        f"FracHub's data files are missing: no {SHARE}/templates under "
        f"{', '.join(prefixes)} (reinstall the frachub package)"
    )


TEMPLATES_DIR = data_dir() / "templates"  # Jinja templates extending the hub's page.html
