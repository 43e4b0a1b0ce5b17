"""``frachub service`` on the command line: settings listed, bad settings refused with the
field named and no traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def frachub_service(*args: str, env: dict[str, str] | None = None, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "hub_ext.cli", "service", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def test_help_all_lists_every_setting() -> None:
    result = frachub_service("--help-all")
    assert result.returncode == 0
    for trait in (
        "--FracHubService.queues",
        "--FracHubService.grace_period",
        "--FracHubService.db_url",
        "--FracHubService.cycle_interval",
        "--FracHubService.backend_class",
        "--LocalBackend.declared_inventory",
        "--LocalBackend.inventory_source",
        "--KubernetesBackend.namespace",
        "--KubernetesBackend.prometheus_url",
        "--MemoryWatchdog.jobs",
        "--MemoryWatchdog.grace_seconds",
    ):
        assert trait in result.stdout, trait


@pytest.mark.parametrize(
    "config, words",
    [
        (
            'c.FracHubService.queues = [{"name": "a"}, {"name": "b", "parent": "nope"}]',
            "FracHubService.queues[1] (b).parent: unknown queue 'nope'",
        ),
        ('c.FracHubService.placement = "best"', "placement must be one of"),
        (
            'c.LocalBackend.declared_inventory = [{"name": "x", "gpus": 0}]',
            "inventory[0].gpus must be a positive integer",
        ),
        ('c.MemoryWatchdog.notebooks = "stop"', "MemoryWatchdog: The 'notebooks' trait"),
        ("c.MemoryWatchdog.grace_seconds = -1", "MemoryWatchdog.grace_seconds must be >= 0"),
        (
            "c.FracHubService.interactive_reserve_gpus = -0.5",
            "FracHubService.interactive_reserve_gpus must be a number of GPUs >= 0, got -0.5",
        ),
    ],
    ids=["queue-parent", "placement", "inventory", "watchdog-action", "watchdog-grace", "reserve"],
)
def test_bad_settings_stop_start_up_with_the_field_named(tmp_path, config, words) -> None:
    path = tmp_path / "frachub_config.py"
    path.write_text(config + "\n")
    result = frachub_service("--config", str(path), env={"JUPYTERHUB_API_TOKEN": "x"}, cwd=tmp_path)
    assert result.returncode != 0
    assert words in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_bad_setting_on_the_command_line_stops_start_up_in_one_line(tmp_path) -> None:
    result = frachub_service(
        "--FracHubService.interactive_reserve_gpus=-1", env={"JUPYTERHUB_API_TOKEN": "x"}
    )
    assert result.returncode == 2
    assert "interactive_reserve_gpus must be a number of GPUs >= 0, got -1.0" in result.stderr
    assert "Traceback" not in result.stderr


def test_without_a_hub_token_it_says_what_to_do(tmp_path) -> None:
    env = {key: "" for key in ("JUPYTERHUB_API_TOKEN", "JPY_API_TOKEN")}
    result = frachub_service(env=env, cwd=tmp_path)
    assert result.returncode == 2
    assert "JUPYTERHUB_API_TOKEN" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_yaml_config_is_refused(tmp_path) -> None:
    path = tmp_path / "frachub.yaml"
    path.write_text("queues: []\n")
    result = frachub_service("--config", str(path), env={"JUPYTERHUB_API_TOKEN": "x"})
    assert result.returncode == 2
    assert "use a Python (.py) or JSON (.json) file" in result.stderr
