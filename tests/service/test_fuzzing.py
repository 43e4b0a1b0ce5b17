"""Schemathesis against the served OpenAPI document, through the hub's proxy with a real hub
token: stateless phases (the document's examples, its boundaries, random data, valid and
not) and a stateful one (sequences that follow the Location of what was created). Every
answer must be below 500, conform to the document (status, content type, headers, body) and
refuse what the document forbids; a request without a token must be refused. Afterwards the
service still serves another user at once.

The run is bounded in time (``--max-time``) and in cases per operation and phase, so that on
a busy machine every phase still gets its turn. The fuzzed service declares no GPUs, so no
generated command ever runs (the token is an admin's, which may submit anywhere); jobs stay
pending, which is what the API does with them anyway.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hubharness import ServiceProcess, module_service
from service_client import wait_for

if not os.environ.get("CI"):  # CI installs it with the test extra, and must run this
    pytest.importorskip("schemathesis")

MAX_SECONDS = int(os.environ.get("FRACHUB_FUZZ_SECONDS", "55"))
MAX_EXAMPLES = os.environ.get("FRACHUB_FUZZ_EXAMPLES", "25")
"""Longer runs for a probe by hand: FRACHUB_FUZZ_SECONDS=600 FRACHUB_FUZZ_EXAMPLES=500."""
CHECKS = ",".join(
    (
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_headers_conformance",
        "response_schema_conformance",
        "negative_data_rejection",
        "unsupported_method",
        "allow_header_conformance",
        "ignored_auth",
    )
)
NEGATIVE_STATUSES = """
[checks.negative_data_rejection]
# schemathesis's list, plus the hub proxy's 431 (the document states it for list queries):
# data beyond the document's bounds can make a request line over the proxy's 16 KiB
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "415", "422", "428",
                     "429", "431", "5xx"]
"""
CONFIG = """
c.FracHubService.queues = [{"name": "vision", "deserved_gpus": 1, "members": ["*"]}]
c.FracHubService.poll_interval = 0.5
c.FracHubService.cycle_interval = 1
c.FracHubService.idle_check_interval = 0
c.LocalBackend.inventory_source = "declared"
c.LocalBackend.declared_inventory = []
c.LocalBackend.run_as_user = False
"""


service = module_service(CONFIG, "fuzzing")


def test_schemathesis_finds_no_server_error_nor_mismatch(
    hub, service: ServiceProcess, make_user, api, tmp_path: Path
) -> None:
    _, admin_token = make_user(admin=True)
    report = tmp_path / "report.ndjson"
    config = tmp_path / "schemathesis.toml"
    config.write_text(NEGATIVE_STATUSES)
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(config),
        "run",
        hub.service_url("api/v1/openapi.json"),
        "--header",
        f"Authorization: token {admin_token}",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--checks",
        CHECKS,
        "--max-time",
        str(MAX_SECONDS),
        "--max-examples",
        MAX_EXAMPLES,
        "--workers",
        "1",
        "--seed",
        "14",
        "--request-timeout",
        "20",
        "--suppress-health-check",
        "all",
        "--report",
        "ndjson",
        "--report-ndjson-path",
        str(report),
        "--output-sanitize",
        "true",
        "--no-color",
    ]
    run = subprocess.run(
        command, capture_output=True, text=True, timeout=MAX_SECONDS + 120, cwd=tmp_path
    )
    summary = run.stdout[-6000:] + run.stderr[-2000:]
    cases, server_errors = tally(report)
    print(f"schemathesis: {cases} cases, {server_errors} answers of 5xx")
    assert cases >= 200, summary  # every operation, many times
    assert server_errors == 0, summary
    assert run.returncode == 0, summary
    # healthy afterwards: another user is served at once, and cycles still run
    _, token = make_user(groups=["vision"])
    user = api(token)
    assert user.get("").status_code == 200
    job = user.post("workloads", json={"command": "true", "gpus": 0.5}).json()
    wait_for(
        lambda: user.get(f"workloads/{job['id']}").json()["pending_reason"],
        10,
        "a cycle to explain why the job waits",
    )
    assert user.delete(f"workloads/{job['id']}").status_code == 200


def tally(report: Path) -> tuple[int, int]:
    """(requests sent, answers of 5xx) from schemathesis' event stream."""
    cases = errors = 0
    for line in report.read_text().splitlines():
        finished = json.loads(line).get("ScenarioFinished")
        if not finished:
            continue
        for interaction in finished["recorder"].get("interactions", {}).values():
            cases += 1
            response = interaction.get("response") or {}
            errors += int(response.get("status_code", 0) >= 500)
    return cases, errors
