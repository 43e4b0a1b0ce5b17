"""Start a real JupyterHub (with its real configurable-http-proxy) for the service tests.

Plain classes, no pytest in here: ``tests/service/conftest.py`` wraps them in fixtures.

``Hub`` writes a ``jupyterhub_config.py`` into a work directory and runs
``python -m jupyterhub -f ...`` there (sqlite db, cookie secret, proxy pid file and the log
all live in that directory). Everything binds to 127.0.0.1 on free ports. The hub knows:

* the custom scopes ``custom:frachub:read``, ``custom:frachub:submit``, ``custom:frachub:admin``;
* the ``user`` role (every user): ``self``, ``access:services!service=frachub``, read, submit;
* the ``frachub-admin`` role: the three custom scopes and access to the service. It goes to
  the users named in ``frachub_admins`` (created when the hub starts) and to the members of the
  group ``ADMIN_GROUP``, which is how ``create_user(..., admin=True)`` makes one at run time
  (JupyterHub has no REST API to assign roles, only config and groups);
* a test-only service ``harness`` whose token creates users, groups and tokens;
* the ``frachub`` service, either external (``service_command=None``: the test runs it, e.g.
  with ``ServiceProcess``) or hub-managed (``service_command=[...]``: the hub runs it), with
  a ``frachub`` role that may list and read users and groups.

``ServiceProcess`` runs ``frachub service --config FILE`` in external mode with the same
environment variables that JupyterHub gives a managed service.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from hub_ext.cli.up.options import find_proxy
from scheduler.common.scopes import (  # noqa: F401 (re-exported for the tests)
    ACCESS_SCOPE,
    ADMIN_GROUP,
    ADMIN_SCOPE,
    ADMIN_SCOPES,
    API_PATH,
    CUSTOM_SCOPES,
    READ_SCOPE,
    SERVICE_NAME,
    SERVICE_PREFIX,
    SERVICE_SCOPES,
    SUBMIT_SCOPE,
    USER_SCOPES,
)

REPO = Path(__file__).resolve().parents[1]

PASSWORD = "frachub-test-password"  # SharedPasswordAuthenticator: any user, this password
# what FracHub itself may do in the Hub API (and in its own API, for the spawner)
FRACHUB_SERVICE_SCOPES = SERVICE_SCOPES
# what the test harness may do: set the scene
HARNESS_SCOPES = [
    "admin:users",
    "admin:groups",
    "tokens",
    "list:users",
    "read:users",
    "list:groups",
    "read:groups",
    "read:roles",
    "list:services",
    "read:services",
    "proxy",
]

START_TIMEOUT = float(os.environ.get("FRACHUB_HUB_START_TIMEOUT", "90"))


class HarnessError(RuntimeError):
    """The hub or the service could not be started, or the Hub API refused a harness call."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def log_tail(path: Path, lines: int = 60) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def descendants(pid: int) -> list[int]:
    """Every live descendant of pid (Linux /proc). JupyterHub starts the proxy and managed
    services in new sessions, so killing the hub's process group would miss them."""
    if not os.path.isdir("/proc"):
        return []
    children = _children_map()
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _start_time(pid: int) -> int | None:
    """The start time of a live process (to tell it from a later one with the same pid)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # fields from the 3rd on: state, ppid, ...
    return None if fields[0] == "Z" else int(fields[19])  # a zombie is gone already


def identify(pids: Iterable[int]) -> dict[int, int]:
    """{pid: start time} of those pids that are alive."""
    found = {pid: _start_time(pid) for pid in pids}
    return {pid: started for pid, started in found.items() if started is not None}


def _reap(processes: dict[int, int], grace: float) -> None:
    """SIGTERM what is still alive of processes ({pid: start time}), wait up to grace
    seconds, SIGKILL the rest."""
    left = [pid for pid, started in processes.items() if _start_time(pid) == started]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = [pid for pid in left if _start_time(pid) == processes[pid]]
        if not left:
            return


def _clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """os.environ without the variables of a hub or service this test run may sit inside."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("JUPYTERHUB_", "CONFIGPROXY_"))
    }
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


class Hub:
    """A real JupyterHub with its proxy, in workdir. Use start()/stop() or ``with Hub(...)``.

    service_command: None registers frachub as an external service (the test starts it);
        a command list makes the hub start and watch it (hub-managed mode).
    service_environment: extra environment for a hub-managed service.
    service_timeout: seconds the hub gives a managed service to answer before it gives up.
    frachub_admins: user names given the frachub-admin role in the config (created at start).
    groups: {group: [users]} created at start (JupyterHub.load_groups).
    extra_config: text appended to jupyterhub_config.py.
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        *,
        service_command: Sequence[str] | None = None,
        service_environment: dict[str, str] | None = None,
        service_port: int | None = None,
        frachub_admins: Sequence[str] = (),
        groups: dict[str, list[str]] | None = None,
        service_timeout: int = 30,
        extra_config: str = "",
        start_timeout: float = START_TIMEOUT,
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.service_command = list(service_command) if service_command else None
        self.service_environment = dict(service_environment or {})
        self.frachub_admins = list(frachub_admins)
        self.groups = dict(groups or {})
        self.service_timeout = service_timeout
        self.extra_config = extra_config
        self.start_timeout = start_timeout

        self.public_port = free_port()
        self.proxy_api_port = free_port()
        self.hub_port = free_port()
        self.service_port = service_port or free_port()
        self.harness_token = secrets.token_hex(32)
        self.frachub_token = secrets.token_hex(32)

        self.url = f"http://127.0.0.1:{self.public_port}"  # public, through the proxy
        self.api_url = f"http://127.0.0.1:{self.hub_port}/hub/api"  # the hub itself
        self.service_bind_url = f"http://127.0.0.1:{self.service_port}"  # where frachub listens
        self.config_file = self.workdir / "jupyterhub_config.py"
        self.log_path = self.workdir / "jupyterhub.log"

        self.proc: subprocess.Popen[bytes] | None = None
        self._client: httpx.Client | None = None
        self._family: dict[int, int] = {}  # processes the hub started: {pid: start time}

    # -- config ---------------------------------------------------------------------------

    def service_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "name": SERVICE_NAME,
            "url": self.service_bind_url,
            "api_token": self.frachub_token,
            "display": False,
            # JupyterHub 6: the hub's startup waits up to `timeout` s (default 30) for every
            # service to answer GET /services/frachub/ with a non-5xx status. An external
            # frachub is started by the test after the hub, so don't wait for it.
            "timeout": 1,
        }
        if self.service_command:
            spec["command"] = self.service_command
            spec["environment"] = self.service_environment
            # a managed service that does not answer in time makes the hub exit(1)
            spec["timeout"] = self.service_timeout
        return spec

    def settings(self, proxy_command: str) -> dict[str, Any]:
        """Every ``c.Class.trait = value`` line of the config, as {"Class.trait": value}."""
        work = self.workdir
        return {
            "JupyterHub.bind_url": f"{self.url}/",
            "JupyterHub.hub_ip": "127.0.0.1",
            "JupyterHub.hub_port": self.hub_port,
            "JupyterHub.db_url": f"sqlite:///{work / 'jupyterhub.sqlite'}",
            "JupyterHub.cookie_secret_file": str(work / "jupyterhub_cookie_secret"),
            "JupyterHub.pid_file": str(work / "jupyterhub.pid"),
            "JupyterHub.log_level": "DEBUG",
            # DummyAuthenticator.password is deprecated since JupyterHub 5.3
            "JupyterHub.authenticator_class": "shared-password",
            "SharedPasswordAuthenticator.user_password": PASSWORD,
            "Authenticator.allow_all": True,
            "ConfigurableHTTPProxy.command": [proxy_command],
            "ConfigurableHTTPProxy.api_url": f"http://127.0.0.1:{self.proxy_api_port}",
            "ConfigurableHTTPProxy.pid_file": str(work / "jupyterhub-proxy.pid"),
            "JupyterHub.custom_scopes": CUSTOM_SCOPES,
            "JupyterHub.load_groups": {
                ADMIN_GROUP: {"users": []},
                **{name: {"users": users} for name, users in self.groups.items()},
            },
            "JupyterHub.services": [
                self.service_spec(),
                {"name": "harness", "api_token": self.harness_token, "display": False},
            ],
            "JupyterHub.load_roles": [
                # override of the default role every user has
                {"name": "user", "scopes": USER_SCOPES},
                {
                    "name": "frachub-admin",
                    "scopes": ADMIN_SCOPES,
                    "users": self.frachub_admins,
                    "groups": [ADMIN_GROUP],
                },
                # since JupyterHub 2 a service has no permissions unless a role gives them
                {"name": "frachub", "scopes": FRACHUB_SERVICE_SCOPES, "services": [SERVICE_NAME]},
                {"name": "harness", "scopes": HARNESS_SCOPES, "services": ["harness"]},
            ],
        }

    def write_config(self, proxy_command: str) -> Path:
        lines = ["# Written by tests/hubharness.py", "c = get_config()  # noqa", ""]
        lines += [f"c.{key} = {value!r}" for key, value in self.settings(proxy_command).items()]
        if self.extra_config:
            lines += ["", self.extra_config]
        self.config_file.write_text("\n".join(lines) + "\n")
        return self.config_file

    # -- life cycle -----------------------------------------------------------------------

    def start(self) -> Hub:
        proxy = find_proxy()
        if proxy is None:
            raise HarnessError(
                "configurable-http-proxy not found: source scripts/proxy.sh (it installs it "
                "into .cache/npm) or set FRACHUB_CHP"
            )
        self.write_config(proxy)
        env = _clean_env({"PATH": f"{Path(proxy).parent}{os.pathsep}{os.environ['PATH']}"})
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jupyterhub", "-f", str(self.config_file)],
                cwd=self.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C in the terminal goes to pytest only
            )
        atexit.register(self.stop)
        try:
            self._wait_running()
        except BaseException:
            self.stop()
            raise
        self._remember_family()
        return self

    def _remember_family(self) -> None:
        """Note the proxy, a managed service and their children, so that stop() ends them
        even if the hub is gone by then (a hub that dies leaves them running)."""
        if self.proc is not None:
            self._family.update(identify(descendants(self.proc.pid)))
        pid_file = self.workdir / "jupyterhub-proxy.pid"
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text().strip())
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if f"{self.proxy_api_port}".encode() in argv and any(
                arg.endswith(b"configurable-http-proxy") for arg in argv
            ):
                self._family.update(identify([pid]))

    def _wait_running(self) -> None:
        """Until the hub has logged that it is running (which it does once the service
        routes are in the proxy) and answers /hub/api/ through the proxy."""
        deadline = time.monotonic() + self.start_timeout
        with httpx.Client(timeout=2) as client:
            while True:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise HarnessError(
                        f"JupyterHub exited with status {self.proc.returncode} while starting; "
                        f"log {self.log_path}:\n{log_tail(self.log_path)}"
                    )
                if "JupyterHub is now running" in self.log_text():
                    with contextlib.suppress(httpx.HTTPError):
                        if client.get(f"{self.url}/hub/api/").status_code == 200:
                            return
                if time.monotonic() > deadline:
                    raise HarnessError(
                        f"JupyterHub did not start within {self.start_timeout:.0f} s; "
                        f"log {self.log_path}:\n{log_tail(self.log_path)}"
                    )
                time.sleep(0.05)

    def stop(self, timeout: float = 20) -> None:
        """Stop the hub, its proxy and a hub-managed service; leaves no process behind."""
        atexit.unregister(self.stop)
        if self._client is not None:
            self._client.close()
            self._client = None
        proc = self.proc
        if proc is None:
            return
        self._remember_family()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # the hub stops the proxy and services itself
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.proc = None
        family, self._family = self._family, {}
        _reap(family, grace=5)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self) -> Hub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    # -- Hub API --------------------------------------------------------------------------

    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(
                base_url=self.api_url,
                headers={"Authorization": f"token {self.harness_token}"},
                timeout=30,
            )
        return self._client

    def harness_request(
        self, method: str, path: str, json: Any = None, **kwargs: Any
    ) -> httpx.Response:
        """A Hub API request (path relative to /hub/api, e.g. "/users") with the harness
        token. Returns the response whatever its status."""
        return self.client.request(method, path.lstrip("/"), json=json, **kwargs)

    def _ok(self, method: str, path: str, json: Any = None, ok: Iterable[int] = ()) -> Any:
        response = self.harness_request(method, path, json=json)
        if response.status_code >= 400 and response.status_code not in set(ok):
            raise HarnessError(f"{method} {path} -> {response.status_code}: {response.text[:500]}")
        return response.json() if response.content else None

    def whoami(self, token: str) -> dict[str, Any]:
        """GET /hub/api/user with token: the model HubAuth hands to our service."""
        response = httpx.get(
            f"{self.api_url}/user", headers={"Authorization": f"token {token}"}, timeout=30
        )
        if response.status_code != 200:
            raise HarnessError(f"GET /user -> {response.status_code}: {response.text[:500]}")
        return response.json()

    def create_user(
        self,
        name: str,
        admin: bool = False,
        groups: Iterable[str] = (),
        *,
        hub_admin: bool = False,
    ) -> dict[str, Any]:
        """Create a user and put them in groups (created as needed).

        admin: a FracHub admin (member of ADMIN_GROUP, hence the frachub-admin role).
        hub_admin: a JupyterHub admin (the hub's own admin role: no custom scopes).
        """
        model = self._ok("POST", f"/users/{name}", json={"admin": hub_admin})
        groups = list(groups) + ([ADMIN_GROUP] if admin else [])
        for group in groups:
            self.add_to_group(group, [name])
        if groups:
            model = self._ok("GET", f"/users/{name}")
        return model

    def delete_user(self, name: str) -> None:
        self._ok("DELETE", f"/users/{name}")

    def create_group(self, name: str, users: Iterable[str] = ()) -> dict[str, Any]:
        return self._ok("POST", f"/groups/{name}", json={"users": list(users)})

    def ensure_group(self, name: str) -> None:
        self._ok("POST", f"/groups/{name}", json={"users": []}, ok={409})

    def add_to_group(self, group: str, users: Iterable[str]) -> dict[str, Any]:
        """Add users to group, creating the group if it does not exist."""
        self.ensure_group(group)
        return self._ok("POST", f"/groups/{group}/users", json={"users": list(users)})

    def remove_from_group(self, group: str, users: Iterable[str]) -> dict[str, Any]:
        return self._ok("DELETE", f"/groups/{group}/users", json={"users": list(users)})

    def token_for(
        self,
        user: str,
        scopes: Sequence[str] | None = None,
        *,
        note: str = "hubharness",
        expires_in: int | None = None,
    ) -> str:
        """A new API token for user. scopes=None: all of the user's permissions.

        A token can only hold scopes its owner has (the hub answers 400 otherwise). For
        refusal tests: scopes=[ACCESS_SCOPE] (reaches the service, no custom scopes) or
        scopes=[f"read:users!user={user}"] (cannot even reach the service).
        """
        body: dict[str, Any] = {"note": note}
        if scopes is not None:
            body["scopes"] = list(scopes)
        if expires_in is not None:
            body["expires_in"] = expires_in
        return self._ok("POST", f"/users/{user}/tokens", json=body)["token"]

    # -- the frachub service --------------------------------------------------------------

    def service_url(self, path: str = "") -> str:
        """Public URL (through the proxy) of path under /services/frachub/."""
        return f"{self.url}{SERVICE_PREFIX}{path.lstrip('/')}"

    def service_env(self) -> dict[str, str]:
        """The JUPYTERHUB_* environment JupyterHub 6 gives a managed frachub service
        (test_harness checks that it is the same, key for key)."""
        access = json.dumps(["access:services", ACCESS_SCOPE])
        return {
            "JUPYTERHUB_API_TOKEN": self.frachub_token,
            "JUPYTERHUB_API_URL": self.api_url,
            "JUPYTERHUB_BASE_URL": "/",
            "JUPYTERHUB_SERVICE_NAME": SERVICE_NAME,
            "JUPYTERHUB_SERVICE_URL": self.service_bind_url,
            "JUPYTERHUB_SERVICE_PREFIX": SERVICE_PREFIX,
            "JUPYTERHUB_CLIENT_ID": f"service-{SERVICE_NAME}",
            "JUPYTERHUB_OAUTH_CALLBACK_URL": f"{SERVICE_PREFIX}oauth_callback",
            "JUPYTERHUB_OAUTH_ACCESS_SCOPES": access,
            "JUPYTERHUB_OAUTH_SCOPES": access,  # deprecated name of the above
            "JUPYTERHUB_OAUTH_CLIENT_ALLOWED_SCOPES": "[]",
            "JUPYTERHUB_COOKIE_HOST_PREFIX_ENABLED": "0",
            "JUPYTERHUB_HOST": "",
            "JUPYTERHUB_PUBLIC_URL": "",  # set only when JupyterHub.public_url is
            "JUPYTERHUB_PUBLIC_HUB_URL": "",
            "JUPYTERHUB_SERVER_NAME": "",
            "JUPYTERHUB_USER": "",
        }


@contextlib.contextmanager
def running_hub(workdir: Path, extra_config: str = "") -> Iterator[Hub]:
    """A started :class:`Hub` in ``workdir``, for fixtures. Outside CI a machine without
    JupyterHub or the proxy skips; in CI scripts/test.sh installs both, so a missing part
    fails instead of skipping silently."""
    import importlib.util

    import pytest

    if not os.environ.get("CI"):
        if importlib.util.find_spec("jupyterhub") is None:
            pytest.skip("jupyterhub is not installed")
        if find_proxy() is None:
            pytest.skip("configurable-http-proxy not installed: source scripts/proxy.sh")
    with Hub(workdir, extra_config=extra_config) as hub:
        yield hub


class ServiceProcess:
    """Our service, run by the test (external mode) against hub.

    config_text is written to workdir/frachub_config.py (name it with config_name) and passed
    as --config. command defaults to ``python -m hub_ext.cli service --config FILE``.
    """

    def __init__(
        self,
        hub: Hub,
        config_text: str,
        workdir: str | os.PathLike[str],
        *,
        command: Sequence[str] | None = None,
        env: dict[str, str] | None = None,
        config_name: str = "frachub_config.py",
        start_timeout: float = 30,
    ) -> None:
        self.hub = hub
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = self.workdir / config_name
        self.config_path.write_text(config_text)
        self.log_path = self.workdir / "frachub-service.log"
        self.command = (
            list(command)
            if command
            else [
                sys.executable,
                "-m",
                "hub_ext.cli",
                "service",
                "--config",
                str(self.config_path),
            ]
        )
        self.env = _clean_env({**hub.service_env(), **(env or {})})
        self.start_timeout = start_timeout
        self.url = hub.service_bind_url  # direct, not through the proxy
        self.api_url = f"{self.url}{SERVICE_PREFIX}{API_PATH}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._leftovers: dict[int, int] = {}  # what it started: {pid: start time}

    def start(self) -> ServiceProcess:
        if self.running:
            raise HarnessError("service already running")
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n--- hubharness: start {self.starts}: {self.command}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.command,
                cwd=self.workdir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: kill() reaches its children
            )
        atexit.register(self.stop)
        try:
            self._wait_up()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_up(self) -> None:
        """Until the API answers with any HTTP status but 503: a Kubernetes replica answers
        503 while it waits for the leader Lease and then while it recovers its workloads
        (scheduler/service/app.py, ``Switchboard``), and is ready only after both. (A test
        that wants a standby reads the replica's own address; see test_failover.py.)"""
        deadline = time.monotonic() + self.start_timeout
        with httpx.Client(timeout=2) as client:
            while True:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise HarnessError(
                        f"service exited with status {self.proc.returncode} while starting; "
                        f"log {self.log_path}:\n{log_tail(self.log_path)}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(self.api_url).status_code != 503:
                        return
                if time.monotonic() > deadline:
                    raise HarnessError(
                        f"service did not answer {self.api_url} within "
                        f"{self.start_timeout:.0f} s; log {self.log_path}:\n"
                        f"{log_tail(self.log_path)}"
                    )
                time.sleep(0.05)

    def kill(
        self, sig: int = signal.SIGTERM, timeout: float = 15, *, group: bool = False
    ) -> int | None:
        """Send sig to the service process and wait until it has exited.

        SIGKILL for a crash test, SIGTERM for a clean stop (SIGKILL after timeout).
        Only the service process gets the signal, as in a real crash: processes it
        started (workloads) live on, until stop(). group=True signals its whole process
        group instead. Returns the exit status (negative: killed by that signal), None if
        it was not running.
        """
        proc = self.proc
        if proc is None:
            return None
        self._leftovers.update(identify(descendants(proc.pid)))
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if group:
                os.killpg(proc.pid, sig)  # its own group: started with start_new_session
            else:
                proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self.proc = None
        return proc.returncode

    def stop(self) -> int | None:
        """SIGTERM the service, then end whatever it started, now or before a kill()."""
        status = self.kill(signal.SIGTERM)
        leftovers, self._leftovers = self._leftovers, {}
        _reap(leftovers, grace=5)
        atexit.unregister(self.stop)
        return status

    def restart(self, sig: int = signal.SIGTERM) -> ServiceProcess:
        """kill(sig) then start(); what the service started lives on."""
        self.kill(sig)
        return self.start()

    @property
    def leftovers(self) -> list[int]:
        """Pids, still alive, that the service had started before it was killed."""
        return sorted(identify(self._leftovers))

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def __enter__(self) -> ServiceProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def module_service(config: str, name: str) -> Any:
    """A module-scoped ``service`` fixture: one :class:`ServiceProcess` on ``config`` (bound
    where the session's ``hub`` expects frachub) for the test module, in a fresh directory
    named after ``name``; stopped after the module. Use as ``service = module_service(...)``."""
    import pytest

    @pytest.fixture(scope="module")
    def service(hub: Hub, tmp_path_factory: Any) -> Iterator[ServiceProcess]:
        process = ServiceProcess(hub, config, tmp_path_factory.mktemp(name)).start()
        yield process
        process.stop()

    return service
