"""The team mode's check that every account can run the hub's Python, against what the kernel
really lets ``nobody`` do: a layout of symlinks through a root-owned 0700 directory, as with an
interpreter installed in root's own home."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hub_ext.cli.up.reach import PROBE_ACCOUNT, accounts_to_check, check_accounts

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to run as nobody")


def _nobody_runs(path: Path) -> bool:
    """Whether the kernel lets the real, unprivileged ``nobody`` execute path."""
    try:
        account = pwd.getpwnam(PROBE_ACCOUNT)
        result = subprocess.run(
            [str(path)], user=account.pw_uid, group=account.pw_gid, extra_groups=[], timeout=30
        )
    except PermissionError:
        return False
    return result.returncode == 0


@pytest.fixture
def layout() -> Iterator[Path]:
    """/tmp/X (0755) holding hidden/ (root's, 0700) with python3 (a copy of true), a venv
    whose python links into hidden/, and an open venv whose python links to an open copy.
    Under /tmp itself: pytest's own tmp_path is 0700, which nobody could not enter at all."""
    outer = Path(tempfile.mkdtemp(prefix="frachub-reach-", dir="/tmp"))
    try:
        outer.chmod(0o755)
        true = shutil.which("true")
        assert true is not None
        hidden = outer / "hidden"
        hidden.mkdir(mode=0o700)
        shutil.copy(true, hidden / "python3")
        (outer / "open").mkdir(mode=0o755)
        shutil.copy(true, outer / "open" / "python3")
        for venv, target in (
            ("venv", "../../hidden/python3"),  # relative, as venv --symlinks makes them
            ("openvenv", str(outer / "open" / "python3")),
        ):
            (outer / venv / "bin").mkdir(parents=True)
            (outer / venv / "bin" / "python3").symlink_to(target)
            (outer / venv / "bin" / "python").symlink_to("python3")
        yield outer
    finally:
        shutil.rmtree(outer)


def test_an_interpreter_under_a_0700_directory_is_refused_with_the_fix(layout: Path) -> None:
    python = layout / "venv" / "bin" / "python"
    assert not _nobody_runs(python)  # the kernel agrees: Permission denied
    refusal = check_accounts([PROBE_ACCOUNT], [str(python)])
    hidden = layout / "hidden"
    assert refusal == (
        f"python3 lives under {hidden} (mode 0700): user nobody cannot run it ({python} -> "
        f"{hidden / 'python3'}); install Python where every user can read it (e.g. /usr/local "
        "or /opt) and re-run scripts/up.sh (or re-create the virtualenv with that Python), or "
        f"chmod o+x {hidden}"
    )
    hidden.chmod(0o711)  # the fix it names
    assert check_accounts([PROBE_ACCOUNT], [str(python)]) is None
    assert _nobody_runs(python)


def test_an_interpreter_every_user_reaches_passes(layout: Path) -> None:
    python = layout / "openvenv" / "bin" / "python"
    assert _nobody_runs(python)
    assert check_accounts([PROBE_ACCOUNT], [str(python)]) is None
    # root may run anything and is not checked
    assert check_accounts(["root"], [str(layout / "venv" / "bin" / "python")]) is None


def test_a_file_without_the_execute_bit_for_others(layout: Path) -> None:
    python = layout / "open" / "python3"
    python.chmod(0o750)
    assert not _nobody_runs(python)
    refusal = check_accounts([PROBE_ACCOUNT], [str(python)])
    assert refusal is not None
    assert refusal.startswith(f"{python} (mode 0750) is not executable by user nobody")
    assert refusal.endswith(f"chmod o+rx {python}")


def test_which_accounts_are_checked() -> None:
    """The named accounts that exist, root aside; nobody stands in for users added later when
    none is named or a project is open to everybody, and it is said."""
    assert accounts_to_check(["root", "daemon", "no-such-user-x"], False) == (["daemon"], "")
    users, note = accounts_to_check(["root"], False)
    assert users == [PROBE_ACCOUNT]
    assert note.startswith("no other account is named: checked that 'nobody' can run")
    users, note = accounts_to_check(["daemon"], True)
    assert users == ["daemon", PROBE_ACCOUNT]
    assert note.startswith("a project is open to everybody: checked that 'nobody'")
    assert pwd.getpwnam(PROBE_ACCOUNT).pw_uid != 0
