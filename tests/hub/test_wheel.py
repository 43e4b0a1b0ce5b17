"""The wheel works on its own: ``pip wheel`` of the sources, installed (not editable) into a
fresh virtualenv, runs ``frachub up --demo`` on a PATH without Node (the spawn form, the
Training panel and its static files, and in Chromium a notebook cell and a terminal, both
over the WebSockets of the Python proxy the ``hub`` extra brings), and runs the fleet
simulation on the Philly run times it ships, with nothing of the checkout in reach.

The virtualenv gets the ``hub`` extra (what ``scripts/up.sh`` installs: the service, the
spawners with KubeSpawner's profile code, JupyterLab, the proxy), installed from pip's
cache; a second one, without extras, shows the base install is the client and the
simulators, with none of the service's packages. About a minute in all.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from browser.browserharness import browser_page

from hub.upharness import Up, log_in

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "hub_ext", "spawner", "scheduler", "templates")


def run(argv: list[str], cwd: Path, **kwargs) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600, **kwargs)
    assert result.returncode == 0, f"{argv}: {result.stdout}\n{result.stderr}"
    return result


PIP = [sys.executable, "-m", "pip"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``pip wheel`` of a copy of the sources (the build leaves nothing in the checkout); the
    tests below run with nothing on ``PYTHONPATH``."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    source.mkdir()
    for name in SOURCES:
        origin = REPO / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(origin, source / name)
    run([*PIP, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", "dist", str(source)], work)
    (built,) = (work / "dist").glob("frachub-*.whl")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("PYTHONPATH", raising=False)
        yield built


def fresh_venv(wheel: Path, extras: str) -> Path:
    """A new virtualenv beside the wheel with the wheel installed (not editable)."""
    venv = wheel.parent.parent / f"venv-{extras or 'base'}"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], wheel.parent)
    target = f"{wheel}[{extras}]" if extras else str(wheel)
    python = str(venv / "bin" / "python")
    run([*PIP, "--python", python, "install", "-q", "--no-compile", target], wheel.parent)
    return venv


@pytest.fixture(scope="module")
def venv(wheel: Path) -> Path:
    """The wheel with the ``hub`` extra: what ``pip install 'frachub[hub]'`` gives."""
    return fresh_venv(wheel, "hub")


def test_the_base_install_is_the_client_and_the_simulators(wheel: Path, tmp_path: Path) -> None:
    venv = fresh_venv(wheel, "")
    python, frachub = str(venv / "bin" / "python"), str(venv / "bin" / "frachub")
    for absent in ("jupyterhub", "tornado", "sqlalchemy", "kubernetes_asyncio", "IPython"):
        found = run(
            [python, "-I", "-c", f"import importlib.util as u; print(u.find_spec({absent!r}))"],
            tmp_path,
        )
        assert found.stdout.strip() == "None", absent
    fleet = [frachub, "simulate", "fleet", "--preset", "lab", "--days", "1", "--jobs", "1"]
    assert json.loads(run([*fleet, "--json"], tmp_path).stdout)["training_jobs"] > 0
    service = subprocess.run(
        [frachub, "service"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert service.returncode == 2
    assert "pip install 'frachub[service]'" in service.stderr
    assert "Traceback" not in service.stderr


def test_the_install_finds_its_own_files(venv: Path, tmp_path: Path) -> None:
    code = (
        "import scheduler.common.paths as p, scheduler.fleet.runtimes as r; "
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


def without_node(directory: Path) -> str:
    """A PATH with every program of this one but Node's (node, npm, npx and Node's
    configurable-http-proxy): links to them in directory, as on a machine without Node."""
    directory.mkdir()
    node = {"node", "nodejs", "npm", "npx", "corepack", "configurable-http-proxy"}
    for entry in reversed(os.environ.get("PATH", "").split(os.pathsep)):
        if not entry or not os.path.isdir(entry):
            continue
        for program in os.scandir(entry):
            link = directory / program.name
            if program.name not in node and os.access(program.path, os.X_OK):
                link.unlink(missing_ok=True)
                link.symlink_to(program.path)
    assert shutil.which("node", path=str(directory)) is None
    return str(directory)


class InstalledUp(Up):
    """``frachub up --demo`` run by the installed console script, not the checkout, on a
    PATH without Node: the proxy is the Python one the ``hub`` extra installs."""

    def __init__(self, workdir: Path, venv: Path) -> None:
        super().__init__(
            workdir,
            env={
                "FRACHUB_CHP": "",
                "FRACHUB_NPM_PREFIX": str(workdir / "no-npm"),
                "PATH": without_node(workdir / "bin"),
            },
        )
        self.venv = venv

    @property
    def command(self) -> list[str]:
        argv = super().command
        assert argv[1:4] == ["-m", "hub_ext.cli", "up"]
        return [str(self.venv / "bin" / "frachub"), *argv[3:]]


def run_a_cell_in_chromium(page: Page, up: Up) -> None:
    """JupyterLab in Chromium opens a notebook and runs a cell: the kernel's WebSocket."""
    notebook = {
        "type": "notebook",
        "content": {
            "cells": [{"cell_type": "code", "source": "", "metadata": {}, "outputs": []}],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
            "nbformat": 4,
            "nbformat_minor": 5,
        },
    }
    with up.client("alice") as client:
        saved = client.put("/user/alice/api/contents/wheel.ipynb", json=notebook)
        assert saved.status_code == 201, saved.text
    page.goto(f"{up.url}/user/alice/lab/tree/wheel.ipynb")
    page.get_by_text("Python 3 (FracHub) | Idle").wait_for(timeout=60_000)
    page.locator(".jp-Notebook .jp-Cell .cm-content").first.click()
    page.keyboard.type("print(6 * 7, 'from the kernel')")
    page.keyboard.press("Shift+Enter")
    page.locator(".jp-OutputArea-output", has_text="42 from the kernel").wait_for(timeout=60_000)


def run_a_command_in_a_terminal(page: Page, up: Up, made: Path) -> None:
    """A JupyterLab terminal in Chromium runs a command: the terminal's WebSocket."""
    page.goto(f"{up.url}/user/alice/lab?reset")  # the launcher, not the restored notebook
    page.locator(".jp-LauncherCard", has_text="Terminal").first.click()
    page.locator(".jp-Terminal").first.wait_for(timeout=60_000)
    deadline = time.monotonic() + 60
    while not made.exists():  # until the shell is up and has run it
        assert time.monotonic() < deadline, "the terminal ran nothing"
        page.locator(".jp-Terminal").first.click()
        page.keyboard.type(f"touch {made}\n")
        time.sleep(2)


def test_the_demo_runs_from_the_install_without_node(
    venv: Path, tmp_path: Path, browser: Browser, request: pytest.FixtureRequest
) -> None:
    """The README's first step on a machine without Node: the hub comes up behind the
    Python proxy, serves the spawn form and the panel, and a notebook's kernel and terminal
    work in Chromium through the proxy's WebSockets."""
    with InstalledUp(tmp_path, venv) as up, contextlib.closing(up.login("alice")) as session:
        proxy = str(venv / "bin" / "configurable-http-proxy")
        assert f"Proxy cmd: ['{proxy}'" in up.log_text()
        spawn = session.get("/hub/spawn")
        assert spawn.status_code == 200, spawn.text
        assert 'id="frachub-form"' in spawn.text
        assert "0.5 GPU" in spawn.text  # a choice of the demo profile list, with its offer
        assert "vision" in spawn.text  # alice's project, from the installed service
        panel = session.get("/services/frachub/")  # through the hub's OAuth
        assert panel.status_code == 200, panel.text
        assert 'id="frachub"' in panel.text
        assert "Training" in panel.text  # the navigation link FracHub's page.html adds
        script = session.get("/services/frachub/static/panel.js")
        assert script.status_code == 200
        assert "frachub" in script.text.lower()
        assert "chart.umd.min.js" in panel.text  # the usage history's charts, shipped
        chart = session.get("/services/frachub/static/chart.umd.min.js")
        assert chart.status_code == 200 and "Chart.js v4" in chart.text[:200]
        licence = session.get("/services/frachub/static/chart.js-LICENSE.md")
        assert licence.status_code == 200 and "MIT License" in licence.text
        started = up.start_server("alice", {"profile": "cpu"})
        assert started.status_code in (201, 202), started.text
        up.wait_ready("alice")
        with browser_page(browser, up.url, request) as page:
            log_in(page, up, "alice")
            run_a_cell_in_chromium(page, up)
            run_a_command_in_a_terminal(page, up, tmp_path / "made-in-the-terminal")
