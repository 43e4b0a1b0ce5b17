"""How long a researcher waits for a notebook on a GPU share, through the real `frachub up`.

Runs `frachub up --demo` (real JupyterHub, proxy, FracHub service, FracLocalSpawner and
JupyterLab servers) and measures, over --rounds rounds:

* **spawn to ready** for a 0.5-GPU notebook when the GPU is free: the REST call
  `POST /hub/api/users/alice/server {"profile": "gpu", "gpus": 0.5}` until the hub reports
  the server ready (JupyterLab's own start-up included);
* **FracHub's part** of it: from the spawner asking for the share to the share granted, read
  from the spawner's log lines;
* **queue to ready**: a notebook waiting behind a full quota, from the moment the quota
  frees (the other notebook's server is stopped) until the waiting one is ready;
* **stop**: `DELETE` of a running notebook until its share is released.

    python benchmarks/notebook_spawn.py [--rounds 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from hub.upharness import Up  # noqa: E402

from scheduler.common.states import WorkloadState  # noqa: E402

GRANT = re.compile(
    r"\[I (\S+ \S+) JupyterHub mixin:\d+\] (\w+): (Asking FracHub|GPU share granted)"
)


def _stamp(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f").timestamp()


def frachub_part(log: str, user: str) -> list[float]:
    """Seconds from "Asking FracHub" to "GPU share granted", per spawn of user."""
    asked, spans = None, []
    for stamp, who, what in GRANT.findall(log):
        if who != user:
            continue
        if what == "Asking FracHub":
            asked = _stamp(stamp)
        elif asked is not None:
            spans.append(_stamp(stamp) - asked)
            asked = None
    return spans


def wait(predicate, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark step timed out")
        time.sleep(0.02)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    spawn, queued, stop = [], [], []
    with tempfile.TemporaryDirectory() as work, Up(Path(work)) as up:
        for _ in range(args.rounds):
            started = time.monotonic()
            up.start_server("alice", {"profile": "gpu", "gpus": 0.5})
            wait(lambda: (up.server("alice") or {}).get("ready"))
            spawn.append(time.monotonic() - started)

            # bob fills vision's quota; alice's second notebook waits for it
            up.start_server("bob", {"profile": "gpu", "gpus": 0.5})
            wait(lambda: (up.server("bob") or {}).get("ready"))
            up.start_server("alice", {"profile": "gpu", "gpus": 0.5}, name="second")
            wait(lambda: up.allocations("alice", [WorkloadState.PENDING]) != [])
            freed = time.monotonic()
            up.stop_server("bob")
            wait(lambda: (up.server("alice", "second") or {}).get("ready"))
            queued.append(time.monotonic() - freed)

            started = time.monotonic()
            up.stop_server("alice")
            wait(lambda: len(up.allocations("alice", [WorkloadState.RUNNING])) == 1)
            stop.append(time.monotonic() - started)
            up.stop_server("alice", "second")
        frachub = frachub_part(up.log_text(), "alice")
    result = {
        "rounds": args.rounds,
        "spawn_to_ready_s": {"p50": statistics.median(spawn), "max": max(spawn)},
        "frachub_part_s": {"p50": statistics.median(frachub), "p90": percentile(frachub, 0.9)},
        "queue_to_ready_s": {"p50": statistics.median(queued), "max": max(queued)},
        "stop_to_released_s": {"p50": statistics.median(stop), "max": max(stop)},
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"notebook spawns through frachub up --demo, {args.rounds} rounds")
        for key, value in result.items():
            if isinstance(value, dict):
                figures = ", ".join(f"{k} {v:.3f}" for k, v in value.items())
                print(f"  {key:22} {figures}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
