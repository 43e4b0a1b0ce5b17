"""`frachub up` and scripts/up.sh (the README's first command) as commands: what they write,
and their refusals as one line without a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FRACHUB = [sys.executable, "-m", "hub_ext.cli"]


def run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_readme_first_command_passes_its_arguments_to_frachub_up() -> None:
    result = run(["bash", "scripts/up.sh", "--help"])
    assert result.returncode == 0, result.stderr
    assert "usage: frachub up" in result.stdout
    assert "--demo" in result.stdout


def test_write_config_only_writes_both_files_from_the_flags(tmp_path: Path) -> None:
    data = tmp_path / "data"
    result = run(
        [
            *FRACHUB,
            "up",
            "--demo",
            "--declared",
            "--gpus",
            "4",
            "--data-dir",
            str(data),
            "--write-config-only",
            "--password",
            "a-long-password",
        ]
    )
    assert result.returncode == 0, result.stderr
    hub = (data / "jupyterhub_config.py").read_text()
    service = (data / "frachub_config.py").read_text()
    compile(hub, "jupyterhub_config.py", "exec")
    compile(service, "frachub_config.py", "exec")
    assert "configure(" in hub and "a-long-password" in hub
    assert "'vision', 'deserved_gpus': 2.0" in service
    assert "'nlp', 'deserved_gpus': 2.0" in service
    assert "'gpus': 4" in service
    assert "jupyterhub -f" in result.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--declared", "--gpus", "0"], "frachub up: --gpus must be at least 1"),
        (["--declared", "--gpu-memory-gib", "-1"], "frachub up: --gpu-memory-gib must be positive"),
        (["--password", "short"], "frachub up: --password must have at least 8 characters"),
        (["--port", "many"], "argument --port: invalid int value: 'many'"),
    ],
)
def test_bad_flags_get_one_line_and_no_traceback(tmp_path: Path, argv, message) -> None:
    result = run([*FRACHUB, "up", "--data-dir", str(tmp_path), "--write-config-only", *argv])
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_proxy_says_how_to_get_it(tmp_path: Path) -> None:
    result = run(
        [*FRACHUB, "up", "--data-dir", str(tmp_path)],
        env={
            "FRACHUB_CHP": "",
            "FRACHUB_NPM_PREFIX": str(tmp_path / "no-npm"),
            "PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin",
        },
    )
    assert result.returncode == 2
    assert "configurable-http-proxy is not installed: run `bash scripts/up.sh`" in result.stderr
    assert "Traceback" not in result.stderr
