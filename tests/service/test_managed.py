"""The hub starts and supervises the service itself (a managed service), with nothing but
the environment JupyterHub gives it and a config file."""

from __future__ import annotations

import sys

import httpx
from hubharness import API_PATH, Hub
from service_client import CHECKED, service_config, submit, wait_state


def test_hub_managed_service_schedules_work(tmp_path) -> None:
    config = tmp_path / "frachub_config.py"
    config.write_text(service_config(gpus=1))
    command = [sys.executable, "-m", "hub_ext.cli", "service", "--config", str(config)]
    with Hub(tmp_path / "hub", service_command=command) as hub:
        hub.create_user("managed-alice", groups=["vision"])
        with httpx.Client(
            base_url=hub.service_url(API_PATH),
            headers={"Authorization": f"token {hub.token_for('managed-alice')}"},
            timeout=30,
            event_hooks=CHECKED,
        ) as alice:
            info = alice.get("").json()
            assert info["inventory"] == "declared" and info["gpus"] == 1
            job = submit(alice, command="echo managed", gpus=0.5)
            assert wait_state(alice, job["id"], "succeeded")["exit_code"] == 0
            assert "managed" in alice.get(f"workloads/{job['id']}/logs").text
        # the hub ran it in its own working directory: the store is there
        assert (tmp_path / "hub" / "frachub-data" / "frachub.sqlite").exists()
