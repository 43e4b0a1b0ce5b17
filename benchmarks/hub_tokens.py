"""What the hub spends on each job token (docs/benchmarks.md, "KAI's scale tests").

Every job started with ``FracHubService.job_tokens`` on gets a hub token of its own
(``scheduler/service/hub/jobtokens.py``): one ``POST /hub/api/users/<user>/tokens`` by the
service. This issues ``--tokens`` of them as the service does (``HubTokens.issue``, its
own connections, 8 at once) against a real JupyterHub (``tests/hubharness.py``), once per
hub setting below, and reports the hub process's CPU (user and system, from ``/proc``)
and the wall time per token.

    python benchmarks/hub_tokens.py                 # 400 tokens in each of four hubs
    python benchmarks/hub_tokens.py --tokens 1000 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from hubharness import Hub  # noqa: E402

from scheduler.service.hub.jobtokens import HubTokens  # noqa: E402

VARIANTS = {
    "debug": "",
    "info": 'c.JupyterHub.log_level = "INFO"',
    "trusted": "c.JupyterHub.trust_user_provided_tokens = True",
    "info+trusted": 'c.JupyterHub.log_level = "INFO"\n'
    "c.JupyterHub.trust_user_provided_tokens = True",
}
"""The hubs measured: the tests' (DEBUG log; the service's token, given in the config, is
hashed with 16,384 rounds and checked on every request), at INFO, with
``trust_user_provided_tokens`` (a config-given token hashed once), and both."""
AT_ONCE = 8
WARM_UP = 20


def hub_cpu(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


async def issue(hub: Hub, count: int) -> dict[str, float]:
    """``count`` tokens of one user, ``AT_ONCE`` at a time, after ``WARM_UP`` of them."""
    tokens = HubTokens(hub.api_url, hub.frachub_token)
    limit = asyncio.Semaphore(AT_ONCE)

    async def one(i: int) -> None:
        async with limit:
            await tokens.issue("bench", f"job {i}", 3600)

    await asyncio.gather(*(one(i) for i in range(WARM_UP)))
    assert hub.proc is not None
    user, system = hub_cpu(hub.proc.pid)
    began = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(count)))
    wall = time.monotonic() - began
    user_after, system_after = hub_cpu(hub.proc.pid)
    return {
        "hub_user_ms": round((user_after - user) / count * 1000, 2),
        "hub_system_ms": round((system_after - system) / count * 1000, 2),
        "wall_ms": round(wall / count * 1000, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=400, help="tokens per hub")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results: list[dict[str, Any]] = []
    for name in args.variants:
        with Hub(
            Path(tempfile.mkdtemp(prefix="frachub-hubtokens-")), extra_config=VARIANTS[name]
        ) as hub:
            hub.create_user("bench")
            measured = asyncio.run(issue(hub, args.tokens))
        results.append({"hub": name, "tokens": args.tokens, **measured, "load": os.getloadavg()[0]})
        if not args.json:
            r = results[-1]
            print(
                f"{name:<13} hub CPU {r['hub_user_ms'] + r['hub_system_ms']:5.2f} ms per token "
                f"(user {r['hub_user_ms']}, system {r['hub_system_ms']}); wall {r['wall_ms']} ms "
                f"per token, {AT_ONCE} at once; load {r['load']:.2f}",
                flush=True,
            )
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
