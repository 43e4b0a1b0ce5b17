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

ROOT = Path(__file__).resolve().parents[2]  # scheduler/common/paths.py -> the checkout
SHARE = Path("share") / "frachub"


def in_checkout() -> bool:
    """Whether FracHub runs from its repository (editable install or ``PYTHONPATH``)."""
    return (ROOT / "pyproject.toml").is_file() and (ROOT / "templates").is_dir()


def _prefixes() -> list[Path]:
    # <prefix>/lib/pythonX.Y/site-packages/scheduler/common/paths.py -> <prefix> (a checkout
    # near the file system's root has fewer parents than that)
    parents = Path(__file__).resolve().parents
    installed_under = [parents[5]] if len(parents) > 5 else []
    return [Path(sys.prefix), Path(site.getuserbase()), *installed_under]


def data_dir() -> Path:
    """``share/frachub`` of the installation: the repository in a checkout, else the first
    install prefix holding it (the interpreter's, the user's, or the one this package was
    installed under, as with ``pip install --prefix``); the interpreter's when none does
    (``check_data_files`` then says so)."""
    if in_checkout():
        return ROOT
    for prefix in _prefixes():
        if (prefix / SHARE / "templates").is_dir():
            return prefix / SHARE
    return Path(sys.prefix) / SHARE


TEMPLATES_DIR = data_dir() / "templates"  # Jinja templates extending the hub's page.html


def check_data_files() -> None:
    """Stop a hub from starting without FracHub's templates (an install that dropped its data
    files, as ``pip install --target`` does), naming where they were looked for."""
    if not (TEMPLATES_DIR / "spawn_form.html").is_file():
        places = ", ".join(str(prefix / SHARE) for prefix in _prefixes())
        raise FileNotFoundError(
            f"FracHub's templates are missing: none in {places}; install the frachub wheel "
            "with pip into an environment (not --target), or run from a checkout"
        )


HOOK_DIR = str(Path(__file__).resolve().parents[1] / "backends" / "pyhook")
"""The start-up hook for user Python processes (its ``sitecustomize`` applies the PyTorch
memory cap): the local backend and the notebook spawner put it first on ``PYTHONPATH``."""
