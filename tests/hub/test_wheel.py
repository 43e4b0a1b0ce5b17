"""The wheel works on its own: ``pip wheel`` of the sources, installed (not editable) into a
fresh virtualenv, serves the spawn form, the Training panel and its static files, and runs
the fleet simulation on the Philly run times it ships, with nothing of the checkout in reach.

The virtualenv gets the ``service`` extra only (the spawn form and the panel need JupyterHub,
not JupyterLab), installed from pip's cache, which keeps this to about half a minute.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hub.upharness import Up

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "hub_ext", "spawner", "scheduler", "templates")


def run(argv: list[str], cwd: Path, **kwargs) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600, **kwargs)
    assert result.returncode == 0, f"{argv}: {result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh virtualenv holding FracHub's wheel and the ``service`` extra, and nothing on
    ``PYTHONPATH``: what a user gets from ``pip install``."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    source.mkdir()
    for name in SOURCES:  # a copy, so the build leaves nothing in the checkout
        origin = REPO / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(origin, source / name)
    pip = [sys.executable, "-m", "pip"]
    run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", "dist", str(source)], work)
    (wheel,) = (work / "dist").glob("frachub-*.whl")
    run([sys.executable, "-m", "venv", "--without-pip", "venv"], work)
    python = work / "venv" / "bin" / "python"
    run([*pip, "--python", str(python), "install", "-q", "--no-compile", f"{wheel}[service]"], work)
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("PYTHONPATH", raising=False)
        yield work / "venv"


def test_the_install_finds_its_own_files(venv: Path, tmp_path: Path) -> None:
    code = (
        "import hub_ext.paths as p, scheduler.fleet.runtimes as r; "
        "print(p.TEMPLATES_DIR); print(r.DEFAULT_PHILLY)"
    )
    found = run([str(venv / "bin" / "python"), "-I", "-c", code], tmp_path).stdout.split()
    assert found == [
        str(venv / "share" / "frachub" / "templates"),
        str(
            next(venv.glob("lib/python*/site-packages/scheduler/fleet/traces"))
            / "philly_runtime_from_pai_repo.csv"
        ),
    ]
    notice = Path(found[1]).with_name("PHILLY-NOTICE.md").read_text()
    assert "ATC 2019" in notice
    version = run([str(venv / "bin" / "frachub"), "--version"], tmp_path).stdout
    assert version.startswith("frachub ") and "unknown" not in version


def test_the_fleet_simulation_runs_on_the_shipped_trace(venv: Path, tmp_path: Path) -> None:
    frachub = str(venv / "bin" / "frachub")
    assert "../shared" not in run([frachub, "simulate", "fleet", "--help"], tmp_path).stdout
    argv = [frachub, "simulate", "fleet", "--preset", "lab", "--days", "1", "--jobs", "1"]
    result = json.loads(run([*argv, "--json"], tmp_path).stdout)
    assert result["training_jobs"] > 0
    assert {variant["variant"] for variant in result["variants"]} >= {"static", "frachub"}


class InstalledUp(Up):
    """``frachub up --demo`` run by the installed console script, not the checkout."""

    def __init__(self, workdir: Path, venv: Path) -> None:
        super().__init__(workdir)
        self.venv = venv

    @property
    def command(self) -> list[str]:
        argv = super().command
        assert argv[1:4] == ["-m", "hub_ext.cli", "up"]
        return [str(self.venv / "bin" / "frachub"), *argv[3:]]


def test_spawn_form_and_panel_render_from_the_install(venv: Path, tmp_path: Path) -> None:
    with InstalledUp(tmp_path, venv) as up, contextlib.closing(up.login("alice")) as browser:
        spawn = browser.get("/hub/spawn")
        assert spawn.status_code == 200, spawn.text
        assert 'id="frachub-form"' in spawn.text
        assert "0.5 GPU" in spawn.text  # a choice of the demo profile list, with its offer
        assert "vision" in spawn.text  # alice's project, from the installed service
        panel = browser.get("/services/frachub/")  # through the hub's OAuth
        assert panel.status_code == 200, panel.text
        assert 'id="frachub"' in panel.text
        assert "Training" in panel.text  # the navigation link FracHub's page.html adds
        script = browser.get("/services/frachub/static/panel.js")
        assert script.status_code == 200
        assert "frachub" in script.text.lower()
