"""Run the real ``frachub up`` for the hub tests, and talk to what it started.

``Up`` runs ``python -m hub_ext.cli up --demo`` (the README's first command) in a work
directory on free ports, with a short preemption grace period, and waits for its banner.
Everything it starts is real: JupyterHub, configurable-http-proxy, the FracHub service, the
FracLocalSpawner's single-user servers (JupyterLab) and the jobs. ``Up.stop()`` ends all of
it, including servers left running on purpose by a restart test.

``Kernel`` runs code in a kernel of a running single-user server through the Jupyter server's
own REST API and kernel WebSocket, as a notebook in the browser does.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
from browser.browserharness import fill_login_form
from hubharness import (
    HarnessError,
    _clean_env,
    _reap,
    descendants,
    find_proxy,
    free_port,
    identify,
    log_tail,
)
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

PASSWORD = "frachub-up-test"
SERVICE_API = "/services/frachub/api/v1/"


def xsrf(client: httpx.Client) -> str | None:
    """The hub's XSRF cookie (a server may set its own under /user/...)."""
    return next(
        (c.value for c in client.cookies.jar if c.name == "_xsrf" and c.path == "/hub/"),
        client.cookies.get("_xsrf", path="/hub/"),
    )


def log_in(page: Any, up: Up, user: str) -> None:
    """Sign ``user`` in on the ``frachub up`` hub's login page."""
    page.goto(f"{up.url}/hub/login")
    fill_login_form(page, user, PASSWORD)


def open_spawn_form(page: Any, up: Up, user: str) -> Any:
    """Sign ``user`` in and open the hub's spawn page; its FracHub form, rendered."""
    log_in(page, up, user)
    page.goto(f"{up.url}/hub/spawn")
    form = page.locator("#frachub-form")
    form.wait_for()
    return form


class Up:
    """``frachub up --demo`` in workdir. extra_hub_config / extra_service_config are written to
    the data directory's ``*_extra.py`` files, which ``frachub up`` loads last."""

    def __init__(
        self,
        workdir: Path,
        *,
        grace_period: float = 2.0,
        extra_hub_config: str = "",
        extra_service_config: str = "",
        start_timeout: float = 120,
        flags: tuple[str, ...] = ("--demo", "--declared"),
        password: str | None = PASSWORD,
        env: dict[str, str] | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.flags = flags
        self.password = password
        self.env = env or {}
        self.data = self.workdir / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.ports = {
            "--port": self.port,
            "--hub-port": free_port(),
            "--proxy-api-port": free_port(),
            "--service-port": free_port(),
        }
        self.url = f"http://127.0.0.1:{self.port}"
        self.grace_period = grace_period
        self.start_timeout = start_timeout
        self.log_path = self.workdir / "frachub-up.log"
        (self.data / "jupyterhub_config_extra.py").write_text(
            "c = get_config()  # noqa\nc.JupyterHub.log_level = 'DEBUG'\n" + extra_hub_config
            # the tests poll the hub themselves; the spawner's poll keeps its default
        )
        (self.data / "frachub_config_extra.py").write_text(
            "c = get_config()  # noqa\n" + extra_service_config
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self._family: dict[int, int] = {}
        self._tokens: dict[str, str] = {}

    @property
    def command(self) -> list[str]:
        argv = [sys.executable, "-m", "hub_ext.cli", "up", *self.flags]
        argv += ["--data-dir", str(self.data)]
        if self.password is not None:
            argv += ["--password", self.password]
        argv += ["--grace-period", str(self.grace_period)]
        for flag, port in self.ports.items():
            argv += [flag, str(port)]
        return argv

    def start(self) -> Up:
        proxy = find_proxy()
        if proxy is None:
            raise HarnessError("configurable-http-proxy not found: source scripts/proxy.sh")
        mark = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command,
                cwd=self.workdir,
                env=_clean_env({"FRACHUB_CHP": proxy, **self.env}),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        atexit.register(self.stop)
        deadline = time.monotonic() + self.start_timeout
        while "FracHub is running." not in self.log_text()[mark:]:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                status = self.proc.poll()
                self.stop()
                raise HarnessError(
                    f"frachub up did not start (status {status}); "
                    f"log {self.log_path}:\n{log_tail(self.log_path, 80)}"
                )
            time.sleep(0.1)
        self._remember_family()
        return self

    def _remember_family(self) -> None:
        if self.proc is not None:
            self._family.update(identify(descendants(self.proc.pid)))

    def remember_servers(self) -> None:
        """Note the single-user servers (in sessions of their own) so stop() ends them."""
        self._remember_family()

    def stop(self, *, reap: bool = True) -> None:
        """SIGTERM ``frachub up`` (it stops the hub, which stops the proxy, the service and,
        unless cleanup_servers is off, the servers). reap=False leaves alive what the hub
        left alive, for a restart."""
        atexit.unregister(self.stop)
        proc = self.proc
        if proc is None:
            return
        self._remember_family()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.proc = None
        if reap:
            family, self._family = self._family, {}
            _reap(family, grace=5)

    def restart(self) -> Up:
        self.stop(reap=False)
        return self.start()  # API tokens live in the hub's database: they still work

    def __enter__(self) -> Up:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    # -- as a user -------------------------------------------------------------------------

    def login(self, user: str) -> httpx.Client:
        """A browser-like session: the hub's login form with the shared password."""
        client = httpx.Client(base_url=self.url, follow_redirects=True, timeout=60)
        client.get("/hub/login")
        response = client.post(
            "/hub/login",
            data={"username": user, "password": PASSWORD, "_xsrf": xsrf(client)},
        )
        if response.status_code != 200 or "/hub/login" in str(response.url):
            raise HarnessError(f"log-in as {user} failed: {response.status_code}")
        return client

    def token(self, user: str) -> str:
        """An API token of user's own (all their scopes), made the way a user makes one."""
        if user not in self._tokens:
            session = self.login(user)
            try:
                response = session.post(
                    f"/hub/api/users/{user}/tokens",
                    json={"note": "hub tests"},
                    headers={"X-XSRFToken": xsrf(session)},
                )
            finally:
                session.close()
            if response.status_code != 201:
                raise HarnessError(f"token for {user}: {response.status_code} {response.text}")
            self._tokens[user] = response.json()["token"]
        return self._tokens[user]

    def client(self, user: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"token {self.token(user)}"},
            timeout=60,
        )

    def service_token(self) -> str:
        return (self.data / "frachub-service-token").read_text().strip()

    def admin_service(self) -> httpx.Client:
        """The FracHub API with the service's own (admin) token: to observe, never to act
        for the users under test."""
        return httpx.Client(
            base_url=f"{self.url}{SERVICE_API}",
            headers={"Authorization": f"token {self.service_token()}"},
            timeout=60,
        )

    def allocations(self, user: str, states: Iterable[str] = ()) -> list[dict[str, Any]]:
        params = {"user": user}
        if states:
            params["state"] = ",".join(states)
        with self.admin_service() as api:
            response = api.get("allocations", params=params)
            response.raise_for_status()
            return response.json()

    def start_server(
        self, user: str, options: dict[str, Any] | None = None, name: str = ""
    ) -> httpx.Response:
        path = f"/hub/api/users/{user}/server" + (f"s/{name}" if name else "")
        with self.client(user) as client:
            return client.post(path, json=options or {})

    def stop_server(self, user: str, name: str = "") -> httpx.Response:
        path = f"/hub/api/users/{user}/server" + (f"s/{name}" if name else "")
        with self.client(user) as client:
            response = client.delete(path)
            deadline = time.monotonic() + 60
            while response.status_code == 202 and time.monotonic() < deadline:
                time.sleep(0.2)
                if self.server(user, name) is None:
                    break
            return response

    def server(self, user: str, name: str = "") -> dict[str, Any] | None:
        with self.client(user) as client:
            model = client.get(f"/hub/api/users/{user}").json()
        return model.get("servers", {}).get(name)

    def wait_ready(self, user: str, name: str = "", timeout: float = 90) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            server = self.server(user, name)
            if server and server.get("ready"):
                self.remember_servers()
                return server
            time.sleep(0.2)
        raise HarnessError(
            f"{user}'s server {name!r} not ready in {timeout:.0f} s: {self.server(user, name)}\n"
            f"{log_tail(self.log_path, 60)}"
        )

    def progress(self, user: str, name: str = "", until: str = "", timeout: float = 30) -> list:
        """The spawn progress events the spawn page shows, read from the hub's event stream
        until one contains ``until`` (or the stream ends, or timeout)."""
        path = f"/hub/api/users/{user}/server" + (f"s/{name}" if name else "") + "/progress"
        events: list[dict[str, Any]] = []
        try:
            with (
                self.client(user) as client,
                client.stream("GET", path, timeout=httpx.Timeout(timeout)) as stream,
            ):
                deadline = time.monotonic() + timeout
                for line in stream.iter_lines():
                    if line.startswith("data:"):
                        events.append(json.loads(line[5:]))
                        if until and until in events[-1].get("message", ""):
                            break
                    if time.monotonic() > deadline:
                        break
        except httpx.ReadTimeout:
            pass
        return events


class Kernel:
    """A Python kernel in a running single-user server, driven over the Jupyter server's REST
    API and kernel WebSocket with the user's token."""

    def __init__(self, up: Up, user: str, server_name: str = "") -> None:
        self.up = up
        self.user = user
        prefix = f"/user/{user}/" + (f"{server_name}/" if server_name else "")
        self.base = f"{up.url}{prefix}"
        self.headers = {"Authorization": f"token {up.token(user)}"}
        response = httpx.post(f"{self.base}api/kernels", json={}, headers=self.headers, timeout=60)
        if response.status_code != 201:
            raise HarnessError(f"starting a kernel: {response.status_code} {response.text}")
        self.kernel = response.json()
        self.session = uuid.uuid4().hex

    def execute(self, code: str, timeout: float = 60) -> list[dict[str, Any]]:
        """Run code; return its iopub outputs (stream, display_data, execute_result, error)."""
        return asyncio.run(self._execute(code, timeout))

    async def _execute(self, code: str, timeout: float) -> list[dict[str, Any]]:
        url = self.base.replace("http://", "ws://") + f"api/kernels/{self.kernel['id']}/channels"
        connection = await websocket_connect(HTTPRequest(url, headers=self.headers))
        msg_id = uuid.uuid4().hex
        connection.write_message(
            json.dumps(
                {
                    "header": {
                        "msg_id": msg_id,
                        "username": self.user,
                        "session": self.session,
                        "msg_type": "execute_request",
                        "version": "5.3",
                    },
                    "parent_header": {},
                    "metadata": {},
                    "content": {
                        "code": code,
                        "silent": False,
                        "store_history": True,
                        "user_expressions": {},
                        "allow_stdin": False,
                        "stop_on_error": True,
                    },
                    "channel": "shell",
                    "buffers": [],
                }
            )
        )
        outputs: list[dict[str, Any]] = []
        try:
            async with asyncio.timeout(timeout):
                while True:
                    raw = await connection.read_message()
                    if raw is None:
                        raise HarnessError("the kernel WebSocket closed")
                    message = json.loads(raw)
                    if message.get("parent_header", {}).get("msg_id") != msg_id:
                        continue
                    kind = message["msg_type"]
                    if kind in ("stream", "display_data", "execute_result", "error"):
                        outputs.append({"type": kind, **message["content"]})
                    elif kind == "status" and message["content"]["execution_state"] == "idle":
                        return outputs
        finally:
            connection.close()

    def text(self, code: str, timeout: float = 60) -> str:
        """Run code; everything it printed or displayed as plain text, errors included."""
        parts = []
        for output in self.execute(code, timeout):
            if output["type"] == "stream":
                parts.append(output["text"])
            elif output["type"] == "error":
                parts.append(f"{output['ename']}: {output['evalue']}")
            else:
                parts.append(output.get("data", {}).get("text/plain", ""))
        return "".join(parts)

    def html(self, code: str, timeout: float = 60) -> str:
        return "".join(
            output.get("data", {}).get("text/html", "") for output in self.execute(code, timeout)
        )

    def shutdown(self) -> None:
        httpx.delete(f"{self.base}api/kernels/{self.kernel['id']}", headers=self.headers)
