"""Docs are code: the commands and config snippets of README.md and docs/ that can run in CI
are run (or loaded) here, so a doc that drifts from the product fails.

A block is runnable when an HTML comment, invisible to readers, stands right before it:

    <!-- doctest: bash -->            run with bash -euo pipefail (as root: CI is root)
    <!-- doctest: bash-syntax -->     commands CI cannot run (they need Docker, kind, a
                                      cluster): parsed by ``bash -n``, and every
                                      ``FRACHUB_*`` variable they set is one a test reads
    <!-- doctest: file PATH -->       write the block to PATH (a later bash block uses it)
    <!-- doctest: hub-config -->      load as a jupyterhub_config.py: every section must be a
                                      JupyterHub, spawner, authenticator or proxy class and
                                      every setting one of its configurable traits
    <!-- doctest: service-config -->  the same for frachub_config.py, then the service and
                                      the local backend are built from it (their checks run)

Blocks of one file run in order in one scratch directory, with the paths an operator would
use (``/etc/frachub``, ``/var/lib/frachub``, ``/var/backups``) moved under it and the
repository as the working directory.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from traitlets.config import Config

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
MARKER = "<!-- doctest:"
BLOCK = re.compile(
    r"<!-- doctest: (?P<kind>[a-z-]+)(?: (?P<arg>\S+))? -->\n```[^\n]*\n(?P<body>.*?)^```",
    re.S | re.M,
)
MOVED = ("/etc/frachub", "/var/lib/frachub", "/var/backups")


def blocks(path: Path) -> list[tuple[str, str | None, str]]:
    text = path.read_text()
    found = [(m["kind"], m["arg"], m["body"]) for m in BLOCK.finditer(text)]
    assert len(found) == text.count(MARKER), f"{path.name}: a doctest marker not before a block"
    return found


def moved(text: str, scratch: Path) -> str:
    for path in MOVED:
        text = text.replace(path, str(scratch / path.strip("/").replace("/", "-")))
    return text


def configurable_classes() -> dict[str, type]:
    from jupyterhub.app import JupyterHub
    from jupyterhub.auth import Authenticator, PAMAuthenticator
    from jupyterhub.authenticators.shared import SharedPasswordAuthenticator
    from jupyterhub.proxy import ConfigurableHTTPProxy
    from jupyterhub.spawner import LocalProcessSpawner, Spawner
    from traitlets.config import Application

    from scheduler.backends.kubernetes import KubernetesBackend
    from scheduler.backends.local import LocalBackend
    from scheduler.service.app import FracHubService
    from scheduler.service.runtime.gpu_watch import GpuMetrics
    from scheduler.service.runtime.memory_watch import MemoryWatchdog
    from spawner.local import FracLocalSpawner

    classes: list[type] = [
        Application,
        JupyterHub,
        Spawner,
        LocalProcessSpawner,
        FracLocalSpawner,
        Authenticator,
        PAMAuthenticator,
        SharedPasswordAuthenticator,
        ConfigurableHTTPProxy,
        FracHubService,
        LocalBackend,
        MemoryWatchdog,
        GpuMetrics,
        KubernetesBackend,
    ]
    return {cls.__name__: cls for cls in classes}


def load(body: str, where: str) -> Config:
    config = Config()
    exec(compile(body, where, "exec"), {"c": config, "get_config": lambda: config})
    known = configurable_classes()
    for section, settings in config.items():
        assert section in known, f"{where}: no configurable class {section}"
        traits = known[section].class_traits(config=True)
        for name in settings:
            assert name in traits, f"{where}: {section}.{name} is not a setting"
    return config


def run_block(kind: str, arg: str | None, body: str, where: str, scratch: Path) -> None:
    if kind == "file":
        assert arg, f"{where}: file needs a path"
        target = Path(moved(arg, scratch))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body)
    elif kind == "bash":
        from hubharness import find_proxy

        env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        proxy = find_proxy()
        if proxy:
            env["FRACHUB_CHP"] = proxy
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", moved(body, scratch)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, (
            f"{where} failed ({result.returncode}):\n{body}\n{result.stdout}\n{result.stderr}"
        )
    elif kind == "bash-syntax":
        parsed = subprocess.run(["bash", "-n"], input=body, capture_output=True, text=True)
        assert parsed.returncode == 0, f"{where} is not valid bash:\n{parsed.stderr}"
        read = "".join(path.read_text() for path in (REPO / "tests").rglob("*.py"))
        for name in sorted(set(re.findall(r"\b(FRACHUB_[A-Z0-9_]+)=", body))):
            assert f'"{name}"' in read, f"{where} sets {name}, which no test reads"
    elif kind == "hub-config":
        from jupyterhub.app import JupyterHub

        JupyterHub(config=load(body, where))
    elif kind == "service-config":
        from scheduler.backends.local import LocalBackend
        from scheduler.service.app import FracHubService
        from scheduler.service.runtime.gpu_watch import GpuMetrics
        from scheduler.service.runtime.memory_watch import MemoryWatchdog

        config = load(body, where)
        FracHubService(config=config)
        LocalBackend(config=config)
        MemoryWatchdog(config=config)
        GpuMetrics(config=config)
        if "KubernetesBackend" in config:
            from scheduler.backends.kubernetes import KubernetesBackend

            KubernetesBackend(config=config)
    else:
        raise AssertionError(f"{where}: unknown doctest kind {kind!r}")


@pytest.mark.parametrize("doc", [d for d in DOCS if MARKER in d.read_text()], ids=lambda d: d.name)
def test_runnable_blocks_run(doc: Path, tmp_path: Path) -> None:
    if os.geteuid() != 0 and any(kind == "bash" for kind, _, _ in blocks(doc)):
        pytest.skip("the operators' commands run as root (CI does)")
    for index, (kind, arg, body) in enumerate(blocks(doc), 1):
        run_block(kind, arg, body, f"{doc.name} block {index} ({kind})", tmp_path)


def test_the_runnable_docs_are_found() -> None:
    """A renamed marker must not silently turn the doc test into nothing."""
    runnable = {d.name: len(blocks(d)) for d in DOCS if MARKER in d.read_text()}
    assert runnable.get("operations.md", 0) >= 4, runnable
    assert {"README.md", "service.md", "panel.md", "kubernetes.md"} <= set(runnable), runnable


def test_what_the_docs_say_up_sh_help_does() -> None:
    """`scripts/up.sh --help` prints the flags with the system's Python and installs nothing
    (tests/hub/test_up_command.py runs it): no doc may say it sets anything up."""
    claims = re.compile(r"\b(makes|installs|creates|sets up)\b(?! nothing)")
    wrong = [
        f"{doc.name}: {line.strip()}"
        for doc in DOCS
        for line in doc.read_text().splitlines()
        if "up.sh --help" in line and claims.search(line.split("up.sh --help", 1)[1])
    ]
    assert not wrong, wrong
