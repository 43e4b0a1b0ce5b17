"""What the MPS daemons' logs say about GPU faults, and who was the victim of whose: the
patterns (``scheduler/backends/mps_faults.py``: ``FAULT_PATTERNS``) on log lines seen from real
daemons, and the rule that tells the faulting client from those it took down."""

from __future__ import annotations

import pytest

from scheduler.backends.mps_faults import EndedClient, MpsFault, blame, fault_in, victim_message

pytestmark = pytest.mark.unit

# lines of real control.log / server.log files (from NVIDIA's k8s device plugin's issues,
# and the lead's H200 during a fault, where they were no fault line of their own; spacing
# shortened), and one invented fault line that names its client
QUIET = """\
[2026-02-06 09:34:17.770 Control   261] Starting control daemon using socket /mps/pipe/control
[2026-02-06 09:34 Control 261] NEW CLIENT 0 from user 0: Server is not ready, push client to pending
[2026-02-06 09:34:36.381 Control   261] Starting new server 337 for user 0
[2026-04-28 18:20:41.986 Server 4428] Active Threads Percentage set to 33.0
[2026-04-28 18:20:41 Server 4428] Device pinned memory limit for device 0 set to 0x140000000 bytes
[2026-04-28 18:20:41.986 Server 4428] Client {PID: 4267, Context ID: 0} connected
[2026-04-28 18:21:00.000 Control   261] Server 337 exited with status 0
[2026-11-28 15:29:00.402 Server   596] Server failed to recevie command with status 806, \
assuming client {PID: 654, Context ID: 1} exit
[2026-11-28 15:29:00.433 Server   596] Client process 654 disconnected
[2026-04-28 18:21:00.000 Control   261] set_default_active_thread_percentage 100
"""
FAULTS = """\
[2024-04-29 11:22:10.441 Control    73] Server encountered a fatal exception. Shutting down
[2024-04-29 11:22:10.446 Control    73] Server 95 exited with status 1
[2024-04-29 11:22:10 Server 95] Client {PID: 4267, Context ID: 0} hit an illegal memory access
"""


def test_ordinary_lines_are_no_fault() -> None:
    assert [fault_in(line, 0, 1.0) for line in QUIET.splitlines()] == [None] * 10


def test_fault_lines_and_the_pid_they_name() -> None:
    found = [fault_in(line, 2, 5.0) for line in FAULTS.splitlines()]
    assert all(isinstance(fault, MpsFault) and fault.gpu == 2 for fault in found)
    assert [fault.pid for fault in found] == [None, None, 4267]  # type: ignore[union-attr]


def ended(workload: int, at: float, code: int | None = 1, output: str = "", pids=()) -> EndedClient:
    return EndedClient(workload, 0, at, code, frozenset(pids), output)


FAULT = MpsFault(0, 100.0, "Server 95 exited with status 1")


def test_without_a_name_the_first_to_end_faulted_and_the_rest_are_its_victims() -> None:
    clients = [ended(12, 100.2), ended(13, 100.9), ended(14, 101.5, code=0)]
    assert blame([FAULT], clients) == {13: 12}  # 14 ended well: no victim


def test_the_one_whose_output_names_a_fault_faulted_even_if_it_ended_later() -> None:
    clients = [
        ended(12, 100.1, code=137),
        ended(
            13, 100.4, output="RuntimeError: CUDA error: an illegal memory access was encountered"
        ),
    ]
    assert blame([FAULT], clients) == {12: 13}


def test_a_pid_the_log_names_wins() -> None:
    named = MpsFault(0, 100.0, "Client {PID: 77} fault", pid=77)
    clients = [ended(12, 100.1, output="illegal address"), ended(13, 100.2, pids=[77])]
    assert blame([named], clients) == {12: 13}


def test_no_victims_alone_on_another_gpu_or_outside_the_window() -> None:
    assert blame([FAULT], [ended(12, 100.1)]) == {}
    other_gpu = EndedClient(13, 1, 100.1, 1)
    assert blame([FAULT], [ended(12, 100.1), other_gpu]) == {}
    assert blame([FAULT], [ended(12, 100.1), ended(13, 120.0)], window=5.0) == {}
    assert blame([], [ended(12, 100.1), ended(13, 100.2)]) == {}


def test_the_victim_s_event_names_the_faulting_workload() -> None:
    assert victim_message(12, 0) == (
        "Stopped by a GPU fault of workload 12 sharing GPU 0; requeued in its place"
    )
