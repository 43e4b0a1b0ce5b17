"""A throwaway PostgreSQL server for the tests: Debian's binaries (scripts/postgres.sh installs
them), a cluster made by ``initdb`` in a temporary directory and run by ``pg_ctl`` on a free
loopback port, as an unprivileged user (``nobody`` when the tests run as root: PostgreSQL
refuses to run as root). ``database()`` hands out a fresh, empty database per test.

Without the binaries the PostgreSQL tests skip, unless FRACHUB_REQUIRE_POSTGRES=1 (set by
scripts/postgres.sh, so CI fails rather than skips).
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest


def server_bin() -> Path | None:
    """The directory of initdb and pg_ctl: $FRACHUB_PG_BIN, else the newest Debian one."""
    given = os.environ.get("FRACHUB_PG_BIN")
    candidates = [given] if given else sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for candidate in candidates:
        if candidate and all(os.access(Path(candidate) / t, os.X_OK) for t in ("initdb", "pg_ctl")):
            return Path(candidate)
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    """One cluster; ``url(name)`` is a SQLAlchemy URL with the psycopg (3) driver."""

    def __init__(self) -> None:
        found = server_bin()
        if found is None:
            message = "PostgreSQL's initdb/pg_ctl are not installed (source scripts/postgres.sh)"
            if os.environ.get("FRACHUB_REQUIRE_POSTGRES") == "1":
                pytest.fail(message)
            pytest.skip(message)
        pytest.importorskip("psycopg", reason="psycopg is not installed: pip install .[test]")
        self.bin = found
        self.root = Path(tempfile.mkdtemp(prefix="frachub-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.user, self.group = None, None
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            self.user, self.group = nobody.pw_uid, nobody.pw_gid
            os.chown(self.root, nobody.pw_uid, nobody.pw_gid)
        self._names = itertools.count(1)

    def _run(self, *argv: str, timeout: float = 60) -> None:
        result = subprocess.run(
            argv,
            user=self.user,
            group=self.group,
            cwd=self.root,
            env={"PATH": os.environ.get("PATH", ""), "LC_ALL": "C.UTF-8", "TZ": "UTC"},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed:\n{result.stdout}\n{result.stderr}")

    def start(self) -> PostgresServer:
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "frachub",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=100 -c shared_buffers=32MB"
        )
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.root / "server.log"),
            "-o",
            options,
            "-w",
            "start",
        )
        return self

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://frachub@127.0.0.1:{self.port}/{database}"

    def database(self) -> str:
        """A new empty database; its URL."""
        import psycopg

        name = f"test_{os.getpid()}_{next(self._names)}"
        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=frachub dbname=postgres", autocommit=True
        ) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)
