"""The lab admin's path of docs/operations.md, as far as CI allows: ``frachub up`` run as root
with the machine's accounts (PAM, two system users made by the test), projects and members
from a file, an admin from ``--admin``; jobs run as their user in that user's home, where the
documented ``frachub.submit(["python", "train.py"], ...)`` finds its script; one user's job
cannot read another's logs, home, job environment, nor the service token, cookie secret or
databases; then ``frachub backup`` while running and ``frachub restore`` into a new data
directory lose nothing: users, groups, tokens, projects, workloads and job logs.

Notebook servers are not spawned here: a system user cannot run this checkout's Python,
whose interpreter lives in root's 0700 home on the CI machine.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hub.upharness import PASSWORD, Up
from hub_ext.client import FracHubClient

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None,
    reason="needs root and useradd (CI runs as root): it creates two system users",
)


@pytest.fixture
def accounts() -> Iterator[tuple[str, str]]:
    """Two system users with PASSWORD, private homes; removed afterwards."""
    tag = uuid.uuid4().hex[:6]
    names = (f"fhalice{tag}", f"fhbob{tag}")
    try:
        for name in names:
            subprocess.run(["useradd", "-m", "-s", "/bin/sh", name], check=True)
            subprocess.run(["chpasswd"], input=f"{name}:{PASSWORD}\n", text=True, check=True)
            os.chmod(pwd.getpwnam(name).pw_dir, 0o700)
        yield names
    finally:
        for name in names:
            subprocess.run(["userdel", "-r", "-f", name], capture_output=True)


@pytest.fixture
def workroot() -> Iterator[Path]:
    """Under /tmp, traversable by the system users (pytest's tmp_path is root's, 0700)."""
    root = Path(tempfile.mkdtemp(prefix="frachub-lab-"))
    os.chmod(root, 0o711)
    # `python` for the users' jobs: the system's, which every account may run
    bin_dir = root / "bin"
    bin_dir.mkdir()
    os.chmod(bin_dir, 0o755)
    (bin_dir / "python").symlink_to(shutil.which("python3", path="/usr/bin:/bin") or "python3")
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def frachub(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hub_ext.cli", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def wait_ended(api: FracHubClient, workload_id: int, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workload = api.get(workload_id)
        if workload["state"] in ("succeeded", "failed", "cancelled"):
            return workload
        time.sleep(0.2)
    raise AssertionError(f"workload {workload_id} did not end: {api.get(workload_id)}")


def lab(workdir: Path, projects: Path, admin: str, bin_dir: Path) -> Up:
    return Up(
        workdir,
        # no notebook servers here (see above): the interpreter check would refuse the team
        flags=("--declared", "--projects", str(projects), "--admin", admin, "--no-python-check"),
        password=None,
        env={"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"},
    )


def test_a_lab_with_system_accounts_projects_backup_and_restore(
    accounts: tuple[str, str], workroot: Path
) -> None:
    alice, bob = accounts
    projects = workroot / "projects.yaml"
    projects.write_text(
        f"- name: vision\n  deserved_gpus: 1\n  members: [{alice}]\n"
        f"- name: nlp\n  deserved_gpus: 1\n  members: [{bob}]\n"
    )
    home = Path(pwd.getpwnam(alice).pw_dir)
    (home / "train.py").write_text("import os\nprint('trained in', os.getcwd())\n")
    os.chown(home / "train.py", pwd.getpwnam(alice).pw_uid, pwd.getpwnam(alice).pw_gid)

    up = lab(workroot / "run1", projects, alice, workroot / "bin").start()
    try:
        data = up.data
        assert "system accounts (PAM)" in up.log_text()
        assert data.stat().st_mode & 0o777 == 0o711
        for private in ("frachub.sqlite", "jupyterhub.sqlite", "frachub-service-token"):
            assert (data / private).stat().st_mode & 0o777 == 0o600, private
        assert (data / "jupyterhub_cookie_secret").stat().st_mode & 0o077 == 0
        with pytest.raises(Exception, match="log-in as nosuchuser failed"):
            up.login("nosuchuser")

        # the documented snippet, as alice, with no working directory: her home
        with FracHubClient(up.url + "/services/frachub/", up.token(alice)) as frachub_api:
            job = frachub_api.submit(["python", "train.py"], gpus=0.5, name="sweep-1")
            done = wait_ended(frachub_api, job["id"])
            assert done["state"] == "succeeded", frachub_api.logs(job["id"])
            assert f"trained in {home}" in frachub_api.logs(job["id"])
            assert f"as {alice} in {home}" in frachub_api.logs(job["id"])
            assert done["project"] == "vision"
            # a job holding a secret in its environment, running while bob looks
            secret = frachub_api.submit(
                "sleep 120", gpus=0.5, env={"ALICE_SECRET": "s3cr3t"}, name="secret"
            )
        deadline = time.monotonic() + 30
        pid = None
        while pid is None and time.monotonic() < deadline:
            found = subprocess.run(["pgrep", "-u", alice, "-x", "sleep"], capture_output=True)
            pid = int(found.stdout.split()[0]) if found.stdout.split() else None
            time.sleep(0.2)
        assert pid, "alice's job runs as alice"
        assert b"ALICE_SECRET=s3cr3t" in Path(f"/proc/{pid}/environ").read_bytes()

        targets = {
            "alice's log": data / "logs" / str(job["id"]) / "replica-0.log",
            "alice's home": home / "train.py",
            "alice's job environment": Path(f"/proc/{pid}/environ"),
            "the service token": data / "frachub-service-token",
            "the cookie secret": data / "jupyterhub_cookie_secret",
            "the service database": data / "frachub.sqlite",
            "the hub database": data / "jupyterhub.sqlite",
            "the hub config": data / "jupyterhub_config.py",
        }
        for what, path in targets.items():
            assert path.exists(), what  # so a refusal below is a refusal, not a wrong path
        script = "".join(
            f'cat "{path}" >/dev/null 2>&1 && echo "READ {what}" || echo "DENIED {what}"\n'
            for what, path in targets.items()
        )
        with FracHubClient(up.url + "/services/frachub/", up.token(bob)) as bob_api:
            probe = bob_api.submit(script, gpus=0.5, name="probe")
            assert wait_ended(bob_api, probe["id"])["state"] == "succeeded"
            output = bob_api.logs(probe["id"])
            assert f"as {bob} in {pwd.getpwnam(bob).pw_dir}" in output
            for what in targets:
                assert f"DENIED {what}" in output, output
            assert "READ" not in output
            # and through the API: alice's job is not bob's to read
            with pytest.raises(Exception) as refused:
                bob_api.logs(job["id"])
            assert getattr(refused.value, "status", None) in (403, 404)

        # the admin page's data: groups from the file, alice an admin of the hub
        with httpx.Client(
            base_url=up.url, headers={"Authorization": f"token {up.token(alice)}"}
        ) as hub:
            groups = {g["name"]: g["users"] for g in hub.get("/hub/api/groups").json()}
            assert groups["vision"] == [alice] and groups["nlp"] == [bob]
            assert hub.get(f"/hub/api/users/{bob}").status_code == 200  # admin-only read

        # backup while everything runs
        backup_dir = workroot / "backup"
        result = frachub("backup", str(backup_dir), "--data-dir", str(data))
        assert result.returncode == 0, result.stderr
        with up.admin_service() as api:
            before = sorted(
                (w["id"], w["name"], w["user"], w["project"])
                for w in api.get("workloads", params={"limit": 500}).json()
            )
            queues_before = sorted(q["name"] for q in api.get("queues").json())
        tokens = {alice: up.token(alice), bob: up.token(bob)}
        with FracHubClient(up.url + "/services/frachub/", tokens[alice]) as frachub_api:
            frachub_api.cancel(secret["id"])
            wait_ended(frachub_api, secret["id"])
    finally:
        up.stop()

    # restore into a new data directory of a new run
    restored = workroot / "run2" / "data"
    result = frachub("restore", str(backup_dir), "--data-dir", str(restored))
    assert result.returncode == 0, result.stderr
    again = frachub("restore", str(backup_dir), "--data-dir", str(restored))
    assert again.returncode == 2 and "already has" in again.stderr
    up2 = lab(workroot / "run2", projects, alice, workroot / "bin").start()
    try:
        with up2.admin_service() as api:
            after = sorted(
                (w["id"], w["name"], w["user"], w["project"])
                for w in api.get("workloads", params={"limit": 500}).json()
            )
            assert after == before
            assert sorted(q["name"] for q in api.get("queues").json()) == queues_before
        # tokens made before the backup still work: the hub's database came back whole
        with FracHubClient(up2.url + "/services/frachub/", tokens[alice]) as frachub_api:
            assert f"trained in {home}" in frachub_api.logs(job["id"])
        with httpx.Client(
            base_url=up2.url, headers={"Authorization": f"token {tokens[alice]}"}
        ) as hub:
            groups = {g["name"]: g["users"] for g in hub.get("/hub/api/groups").json()}
            assert groups["vision"] == [alice] and groups["nlp"] == [bob]
        assert up2.data.stat().st_mode & 0o777 == 0o711
    finally:
        up2.stop()
