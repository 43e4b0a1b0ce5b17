"""A start released before its turn to launch is never launched (``Effects.launch``): a
burst's starts launch ``LAUNCHES_AT_ONCE`` at a time, and one cancelled (or evicted) while
it waited for its turn ends then and there; it is not launched only to be stopped, which
kept a notebook waiting for the victim's GPUs and ran for a moment what its user cancelled.

The service's starts are made slow (one at a time, each 3 s) by its config file, and each
start the backend is asked for is written to a file: the backend itself is the real one. A
sweep of two is started by one cycle, so its members' launches take turns."""

from __future__ import annotations

from pathlib import Path

from service_client import service_config, wait_state

SLOW_STARTS = """
import asyncio as _asyncio
from scheduler.backends.local import LocalBackend as _Local
from scheduler.service.scheduling import effects as _effects

_effects.LAUNCHES_AT_ONCE = 1
_start = _Local.start


async def _slow_start(self, job):
    with open({launched!r}, "a") as _asked:
        _asked.write(f"{{job.workload_id}}\\n")
    await _asyncio.sleep(3)
    return await _start(self, job)


_Local.start = _slow_start
"""


def test_a_start_cancelled_while_it_waits_for_its_launch_is_never_launched(
    start_service, make_user, api, tmp_path: Path
) -> None:
    launched = tmp_path / "launched"
    start_service(service_config(gpus=2, extra=SLOW_STARTS.format(launched=str(launched))))
    _, token = make_user(groups=["nlp"])
    bob = api(token)
    body = {
        "gpus": 1,
        "command": "sleep 300",
        "name": "turns",
        "sweep": {"parameters": {"k": [1, 2]}},
    }
    created = bob.post("workloads", json=body)
    assert created.status_code == 201, created.text
    first, second = (member["id"] for member in created.json()["workloads"])
    wait_state(bob, second, "running")  # decided and recorded; its launch waits its turn
    assert bob.delete(f"workloads/{second}").status_code in (200, 202)
    cancelled = wait_state(bob, second, "cancelled", timeout=30)
    wait_state(bob, first, "running")
    assert launched.read_text().split() == [str(first)]
    assert [event["type"] for event in cancelled["events"]][-1] == "cancelled"
