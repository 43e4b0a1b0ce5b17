"""The ``FRACHUB_KUBE_REAL=1`` path of these tests, run against a cluster set up as
docs/kubernetes.md's kind walkthrough sets up kind: a control plane without GPUs, workers
``frachub-worker`` and ``frachub-worker2`` labelled with 4 GPUs each, namespace
``frachub-test``, no reservation program, no HAMi. The cluster is the fake API server, whose
kubelet here plays what a kind node does with the tests' commands (``sleep N; exit C`` ends
with C, ``trap '' TERM`` ignores SIGTERM); the tests run in a pytest subprocess that sees only
a kubeconfig, as on kind: GPU nodes read from the labels, objects read through the API server,
the namespace cleaned between tests, fake-only steps skipped. So the path a kind run takes
cannot rot unseen where no Docker is."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from .conftest import REAL
from .fakeapi import FakeKube

REPO = Path(__file__).resolve().parents[2]
ON_KIND = [
    "test_whole_gpus_are_requested_from_the_device_plugin",
    "test_exit_is_reported_once",
    "test_preemption_suspends_and_kills_after_the_grace",
    "test_preempted_job_that_honours_sigterm_ends_early_and_restarts",
    "test_gang_is_an_indexed_job_with_a_headless_service",
    "test_gang_across_nodes_is_one_indexed_job_per_node",
    "test_a_stopped_attempt_is_not_taken_over",
    "test_connect_waits_for_the_lease",
    "test_a_gpu_hami_has_not_registered_is_refused_with_nothing_created",
]
"""What docs/kubernetes.md says passes on kind, a sample of it (the whole list runs ~40 s)."""


def kind_like() -> FakeKube:
    fake = FakeKube().start()

    def run_command(fake: FakeKube, pod: dict[str, Any], devices: list[str]) -> None:
        command = " ".join(pod["spec"]["containers"][0].get("command") or [])
        ends = re.search(r"sleep (\d+); exit (\d+)$", command)
        if ends:
            where = (pod["metadata"]["namespace"], pod["metadata"]["name"], int(ends[2]))
            threading.Timer(int(ends[1]), fake.finish_pod, where).start()

    plain_delete = fake._delete_pod

    def delete_pod(pod: dict[str, Any], grace: Any) -> dict[str, Any]:
        command = " ".join(pod["spec"]["containers"][0].get("command") or [])
        fake.ignore_sigterm = "trap '' TERM" in command
        return plain_delete(pod, grace)

    fake.on_running.append(run_command)
    fake._delete_pod = delete_pod  # type: ignore[method-assign]
    fake.add_node("frachub-control-plane", gpus=0)
    for worker in ("frachub-worker", "frachub-worker2"):
        fake.add_node(worker, gpus=4, memory_mib=81920)
    fake.call(fake._put_namespace, "frachub-test")
    return fake


def test_the_tests_run_on_a_cluster_set_up_as_the_kind_walkthrough(tmp_path: Path) -> None:
    if REAL:
        pytest.skip("on a real cluster already: this runs the real-cluster path on the fake")
    fake = kind_like()
    try:
        env = {
            key: value for key, value in os.environ.items() if not key.startswith("FRACHUB_KUBE_")
        }
        env.update(
            FRACHUB_KUBE_REAL="1",
            KUBECONFIG=fake.kubeconfig(str(tmp_path / "kubeconfig"), namespace="frachub-test"),
            FRACHUB_KUBE_NAMESPACE="frachub-test",
        )
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-rs",
                "-p",
                "no:cacheprovider",
                "tests/kube/test_backend.py",
                "tests/kube/test_hami.py",
                "-k",
                " or ".join(ON_KIND),
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        fake.stop()
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert re.search(r"\b10 passed\b", summary) and "skipped" not in summary, result.stdout
