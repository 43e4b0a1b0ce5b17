"""What a job's own token costs (docs/benchmarks.md, "Job tokens"; docs/service.md, "A job's
own token").

Every attempt of a training job waits, before it starts, for the service to issue its hub
token, and every end is followed by a revocation. This measures both through the service's
own code (``scheduler.service.hub.jobtokens.HubTokens``) against a real JupyterHub (SQLite, as
``frachub up`` runs it) with the ``frachub`` service's role: ``--count`` tokens issued one
after another for ``--users`` users, then revoked one after another. The latency of an issue
is what each launch adds.

    .venv/bin/python benchmarks/job_tokens.py
    .venv/bin/python benchmarks/job_tokens.py --count 500 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from hubharness import Hub  # noqa: E402

from scheduler.service.hub.jobtokens import HubTokens  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


async def measure(hub: Hub, args: argparse.Namespace) -> dict:
    users = [f"bench-{i}" for i in range(args.users)]
    for name in users:
        hub.create_user(name)
    tokens = HubTokens(hub.api_url, hub.frachub_token)
    issued: list[tuple[str, str]] = []
    issue: list[float] = []
    for i in range(args.count):
        user = users[i % len(users)]
        began = time.perf_counter()
        _, token_id = await tokens.issue(user, f"frachub job {i} (bench), attempt 1", 86400)
        issue.append(time.perf_counter() - began)
        issued.append((user, token_id))
    revoke: list[float] = []
    for user, token_id in issued:
        began = time.perf_counter()
        await tokens.revoke(user, token_id)
        revoke.append(time.perf_counter() - began)
    ms = 1000.0
    return {
        "tokens": args.count,
        "users": args.users,
        "issue_ms_p50": round(statistics.median(issue) * ms, 1),
        "issue_ms_p99": round(percentile(issue, 99) * ms, 1),
        "revoke_ms_p50": round(statistics.median(revoke) * ms, 1),
        "revoke_ms_p99": round(percentile(revoke, 99) * ms, 1),
        "issues_per_second": round(args.count / sum(issue), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--users", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="frachub-bench-"))
    print(f"starting JupyterHub in {work}", file=sys.stderr)
    # the test harness's hub logs at DEBUG; a deployed one (frachub up, z2jh) at INFO
    with Hub(work / "hub", extra_config='c.JupyterHub.log_level = "INFO"') as hub:
        result = asyncio.run(measure(hub, args))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        width = max(len(key) for key in result)
        for key, value in result.items():
            print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
