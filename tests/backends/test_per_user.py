"""Per-user mode (a root service running each job as its submitter's system account) tells a
user nothing about another user's files: working directories and commands are checked as
the job's user, and a log replaced by a hard link never makes the service write to (or give
away) the file it points to.

Two throwaway system accounts with private (0700) homes, removed afterwards.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from scheduler.backends.base import BackendError, Exit
from scheduler.backends.local import LocalBackend
from scheduler.service.scheduling.joblog import write_milestone
from tests.backends.test_local_backend import exits_of, make_job, run

pytestmark = [
    pytest.mark.backends,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("useradd") is None,
        reason="needs root and useradd (CI runs as root): it creates two system users",
    ),
]


@pytest.fixture
def accounts() -> Iterator[tuple[pwd.struct_passwd, pwd.struct_passwd]]:
    """Alice and Bob, each with a private home; Bob's holds ``private/tool``."""
    tag = uuid.uuid4().hex[:6]
    names = (f"fhgalice{tag}", f"fhgbob{tag}")
    try:
        for name in names:
            subprocess.run(["useradd", "-m", "-s", "/bin/sh", name], check=True)
            os.chmod(pwd.getpwnam(name).pw_dir, 0o700)
        alice, bob = (pwd.getpwnam(name) for name in names)
        private = Path(bob.pw_dir) / "private"
        private.mkdir()
        (private / "tool").write_text("#!/bin/sh\necho tool\n")
        (private / "tool").chmod(0o755)
        for path in (private, private / "tool"):
            os.chown(path, bob.pw_uid, bob.pw_gid)
        yield alice, bob
    finally:
        for name in names:
            subprocess.run(["userdel", "-r", "-f", name], capture_output=True)


@pytest.fixture
def backend() -> Iterator[LocalBackend]:
    data_dir = tempfile.mkdtemp(prefix="frachub-per-user-")  # /tmp/pytest-of-root is 0700
    os.chmod(data_dir, 0o755)
    try:
        yield LocalBackend(data_dir=data_dir, inventory_source="declared")
    finally:
        shutil.rmtree(data_dir)


def refusal(backend: LocalBackend, workload_id: int, user: str, **job: object) -> str:
    """The message a start is refused with, the asked path replaced by ``<path>``."""
    asked = str(job.get("working_dir") or job["command"][0])  # type: ignore[index]
    with pytest.raises(BackendError) as refused:
        run(lambda: backend.start(make_job(workload_id, user=user, **job)))  # type: ignore[arg-type]
    return str(refused.value).replace(asked, "<path>")


def test_another_users_private_paths_answer_alike(
    backend: LocalBackend, accounts: tuple[pwd.struct_passwd, pwd.struct_passwd]
) -> None:
    alice, bob = accounts
    private = f"{bob.pw_dir}/private"
    existing = refusal(backend, 1, alice.pw_name, command="pwd", working_dir=private)
    missing = refusal(backend, 2, alice.pw_name, command="pwd", working_dir=f"{private}-not")
    assert existing == missing == "working directory <path> does not exist or is not yours to enter"
    tool = refusal(backend, 3, alice.pw_name, command=[f"{private}/tool"])
    no_tool = refusal(backend, 4, alice.pw_name, command=[f"{private}/none"])
    assert tool == no_tool == "command not found or not executable: <path>"

    async def own() -> list[Exit]:  # each user's own paths still work
        await backend.start(make_job(5, [f"{private}/tool"], user=bob.pw_name, working_dir=private))
        await backend.start(make_job(6, "pwd", user=alice.pw_name, working_dir=alice.pw_dir))
        return await exits_of(backend, 2)

    assert [end.exit_code for end in run(own)] == [0, 0]


def test_a_hardlinked_log_never_leads_the_service_to_another_file(
    backend: LocalBackend, accounts: tuple[pwd.struct_passwd, pwd.struct_passwd]
) -> None:
    alice, _ = accounts
    victim = Path(backend.data_dir) / "victim"  # a file of root's the user could not write
    victim.write_text("root's\n")

    async def attempt(restart_count: int) -> list[Exit]:
        job = make_job(7, "echo hello", user=alice.pw_name, restart_count=restart_count)
        await backend.start(job)
        return await exits_of(backend, 1)

    run(lambda: attempt(0))
    log = Path(backend.log_path(7) or "")
    log.unlink()
    os.link(victim, log)  # what the user does, where hard links to such a file are allowed
    run(lambda: attempt(1))
    assert victim.read_text() == "root's\n"
    assert victim.stat().st_uid == 0 and victim.stat().st_nlink == 1
    assert "hello" in log.read_text() and log.stat().st_uid == alice.pw_uid


def test_a_milestone_is_never_written_through_a_hard_link(
    backend: LocalBackend, accounts: tuple[pwd.struct_passwd, pwd.struct_passwd]
) -> None:
    alice, _ = accounts
    victim = Path(backend.data_dir) / "victim"
    victim.write_text("root's\n")

    async def attempt() -> list[Exit]:
        await backend.start(make_job(7, "echo hello", user=alice.pw_name))
        return await exits_of(backend, 1)

    run(attempt)
    log = Path(backend.log_path(7) or "")
    log.unlink()
    os.link(victim, log)
    record = SimpleNamespace(id=7, replicas=1, is_allocation=False)
    write_milestone(backend, record, 0.0, "preempted")  # type: ignore[arg-type]
    assert victim.read_text() == "root's\n"
