"""The FracHub REST client, and how its answers are shown to people.

Every caller of the service's API goes through this module: the ``frachub`` CLI
(``hub_ext/jobs_cli.py``) and the ``%frachub`` magics (``hub_ext/magics.py``), which act the
same way and print the same tables, and the spawner (``spawner/mixin.py``).

``connect(url, token)``
    A ``FracHubClient`` from flags, falling back to the environment: ``FRACHUB_URL`` (the
    service's URL, ending in ``/services/frachub/``), ``FRACHUB_TOKEN`` or else
    ``JUPYTERHUB_API_TOKEN`` (inside a notebook server: the server's own token, so the client
    acts as the server's user and never as an admin), and ``FRACHUB_PROJECT`` (the project of
    the notebook's GPU share, the default project for submissions).
``FracHubClient``, ``AsyncFracHubClient``
    The two faces of one client (``ClientCore``: URL, headers, errors) on
    ``/services/frachub/api/v1/``. The synchronous one serves the CLI and the magics: submit,
    list (following the hub's pagination), get, cancel, logs (tail, or follow until the job
    ends), user, queues, quota. The asynchronous one serves the spawner inside the hub:
    allocations, queues, nodes. Every refusal raises ``FracHubError(status, message)`` with
    the service's own message; ``NotConfigured`` and ``Unreachable`` (subclasses, status 0
    when no answer came) say what to set or check.
``checkpointed()``
    Inside a job, after it saved its work: tells the scheduler (``POST
    workloads/{id}/checkpoint`` with the job's own token, or a touched file in
    ``FRACHUB_CHECKPOINT_DIR`` when the job has none), so an eviction loses only the work done
    since.
``Table``, ``Report``
    What the CLI prints and the magics display: aligned plain text from ``str()``/``repr()``
    (``text/plain``) and an HTML table from ``_repr_html_()`` (``text/html`` in notebooks).
``jobs_table``, ``describe_report``, ``quota_report``, ``submitted_text``, ``state_line``
    Pure builders from the API's JSON to those objects; with ``format_duration``,
    ``format_gpus``, ``format_state`` and friends they are tested without a service in
    ``tests/unit/test_client_format.py``.
"""

from __future__ import annotations

import html
import os
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone, tzinfo
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from scheduler import __version__
from scheduler.common.messages import event_line
from scheduler.common.placement import describe_placement, placement_from_api
from scheduler.common.quantities import format_duration, plural
from scheduler.common.quantities import gpus as gpus_in_words
from scheduler.common.scopes import API_PATH, SERVICE_PREFIX
from scheduler.common.states import (
    ACTIVE_STATES,
    FINAL_STATES,
    HOLDING_STATES,
    RELEASING_STATES,
    WorkloadState,
)

URL_ENV = "FRACHUB_URL"
TOKEN_ENV = "FRACHUB_TOKEN"
SERVER_TOKEN_ENV = "JUPYTERHUB_API_TOKEN"  # a notebook server's own token
PROJECT_ENV = "FRACHUB_PROJECT"

PAGINATION_MEDIA_TYPE = "application/jupyterhub-pagination+json"


# --- errors -------------------------------------------------------------------------------------


class FracHubError(Exception):
    """The service refused a request, or could not be asked.

    ``status`` is the HTTP status of the refusal (0 when no answer came) and ``message`` the
    service's own words (``{"status", "message"}``), which name the field or the scope at
    fault; ``str(error)`` is the message alone, ready for a one-line report.
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def __str__(self) -> str:
        return self.message


class NotConfigured(FracHubError):
    """No service URL or no token, or a URL that cannot be one: the message says which
    variable to set; ``flag`` names the CLI flag that would do instead."""

    def __init__(self, message: str, flag: str = "--url") -> None:
        super().__init__(0, message)
        self.flag = flag


class Unreachable(FracHubError):
    """No answer from the service (connection refused, timeout, dropped stream), or an answer
    that is not the service's (an HTML page from the proxy or the hub)."""


# --- connecting ---------------------------------------------------------------------------------


def service_url(url: str) -> str:
    """The service's base URL, ending in ``/``, from what a user may type.

    ``http://hub:8000`` (the hub's address) becomes ``http://hub:8000/services/frachub/``;
    a URL already naming the service, or its ``api/v1/``, is kept (without the ``api/v1/``).
    """
    raw = url.strip()
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise NotConfigured(
            f"{raw!r} is not an http(s) URL; the service's URL looks like "
            f"https://hub.example.org{SERVICE_PREFIX}"
        )
    path = parts.path if parts.path.endswith("/") else parts.path + "/"
    if path.endswith("/" + API_PATH):
        path = path[: -len(API_PATH)]
    if path == "/":
        path = SERVICE_PREFIX
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def connect(
    url: str | None = None,
    token: str | None = None,
    *,
    project: str | None = None,
    environ: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> FracHubClient:
    """A client from flags, which beat the environment.

    Inside a notebook server the spawner sets ``FRACHUB_URL``, ``JUPYTERHUB_API_TOKEN`` and
    ``FRACHUB_PROJECT``, so nothing needs passing there. ``FRACHUB_TOKEN`` wins over
    ``JUPYTERHUB_API_TOKEN`` so that a terminal user can act with a token of their own.
    """
    env = os.environ if environ is None else environ
    url = url or env.get(URL_ENV)
    source = "--token"
    if not token:
        source = TOKEN_ENV if env.get(TOKEN_ENV) else SERVER_TOKEN_ENV
        token = env.get(source)
    if not url:
        raise NotConfigured(
            f"no service URL: set {URL_ENV} to the FracHub service's URL, "
            f"e.g. https://hub.example.org{SERVICE_PREFIX}"
        )
    if not token:
        raise NotConfigured(
            f"no token: set {TOKEN_ENV} to a JupyterHub API token (the hub's Token page "
            f"makes one); inside a notebook server {SERVER_TOKEN_ENV} is used",
            flag="--token",
        )
    return FracHubClient(
        url,
        token,
        default_project=project or env.get(PROJECT_ENV) or None,
        timeout=timeout,
        token_source=source,
    )


# set in every job by the backend (scheduler/common/contract.py)
WORKLOAD_ID_ENV = "FRACHUB_WORKLOAD_ID"
CHECKPOINT_DIR_ENV = "FRACHUB_CHECKPOINT_DIR"
CHECKPOINT_MARK = ".frachub-checkpointed"
"""The file ``checkpointed()`` touches when the job carries no credentials for the API."""


def _own_workload_id(env: Mapping[str, str]) -> int:
    value = env.get(WORKLOAD_ID_ENV, "")
    if not value.isdigit():
        raise NotConfigured(
            f"not inside a FracHub job: {WORKLOAD_ID_ENV} is not set; pass the workload's id",
            flag="workload_id",
        )
    return int(value)


def checkpointed(environ: Mapping[str, str] | None = None) -> None:
    """Inside a job, right after saving a checkpoint: ``hub_ext.client.checkpointed()``.

    Every job finds the service's URL and its own hub token in its environment
    (``FRACHUB_URL``, ``JUPYTERHUB_API_TOKEN``; issued when it starts, revoked when it ends,
    good for this job only: ``scheduler/service/jobtokens.py``), so this tells the service
    through the API on every backend. Without them (the operator turned job tokens off) it
    touches ``$FRACHUB_CHECKPOINT_DIR/.frachub-checkpointed``, which the local backend sees
    on its next poll like any newer file in that directory."""
    env = os.environ if environ is None else environ
    workload_id = _own_workload_id(env)
    if env.get(URL_ENV) and (env.get(TOKEN_ENV) or env.get(SERVER_TOKEN_ENV)):
        with connect(environ=env) as client:
            client.checkpointed(workload_id)
        return
    directory = env.get(CHECKPOINT_DIR_ENV)
    if not directory:
        raise NotConfigured(
            f"no way to reach the service: set {URL_ENV} and {TOKEN_ENV} in the job's "
            f"environment (or run it where {CHECKPOINT_DIR_ENV} is set)"
        )
    mark = os.path.join(directory, CHECKPOINT_MARK)
    with open(mark, "a", encoding="utf-8"):
        pass
    os.utime(mark)


@dataclass(frozen=True)
class Quota:
    """The caller (``GET user``), the queues of their projects (``GET queues``) and their own
    workloads holding GPUs now: everything ``quota`` shows."""

    user: dict[str, Any]
    projects: list[dict[str, Any]]
    holding: list[dict[str, Any]]


class ClientCore:
    """What the synchronous and the asynchronous client share: the service's URL, the
    headers, and how an answer becomes a result or a ``FracHubError``; the faces below only
    send the requests.

    url: the service's URL (``…/services/frachub/``, or its ``api/v1/``; a bare hub URL is
        completed).
    token: a JupyterHub API token with ``access:services!service=frachub`` and the custom
        scopes; it goes in ``Authorization: token …``.
    default_project: where ``submit`` sends work when no project is named and the user is in
        several projects (a notebook passes the project of its own GPU share).
    token_source: where the token came from (a flag, a variable, a setting), named when the
        hub does not accept it.
    url_source: where the URL came from, named when the service cannot be reached.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        default_project: str | None = None,
        timeout: float = 30.0,
        token_source: str = "the token",
        url_source: str = f"{URL_ENV} or --url",
    ) -> None:
        self.url = service_url(url)
        self.api_url = self.url + API_PATH
        self.default_project = default_project
        self.timeout = timeout
        self.token_source = token_source
        self.url_source = url_source
        self.headers = {
            "Authorization": f"token {token}",
            "Accept": "application/json",
            "User-Agent": f"frachub-client/{__version__}",
        }

    def _check(self, response: httpx.Response) -> None:
        try:
            _raise_for_refusal(response, self.url)
        except FracHubError as error:
            # the service's words are for any HTTP client; say which setting to fix
            if error.status == 403 and error.message.startswith("authentication required"):
                error.message = (
                    f"authentication required: the hub does not accept the token in "
                    f"{self.token_source} (unknown, revoked or expired)"
                )
            raise

    def _unreachable(self, error: httpx.HTTPError) -> Unreachable:
        if isinstance(error, httpx.TimeoutException):
            return Unreachable(0, f"the FracHub service at {self.url} did not answer in time")
        if isinstance(error, httpx.ConnectError):
            return Unreachable(
                0,
                f"cannot reach the FracHub service at {self.url} ({_reason(error)}); "
                f"check {self.url_source}",
            )
        return Unreachable(0, f"lost the connection to the FracHub service: {_reason(error)}")

    def _decode(self, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            raise Unreachable(
                response.status_code,
                f"{_plain_url(response)} answered {response.status_code} with something "
                f"other than JSON; {_wrong_url_hint(self.url)}",
            ) from None


class FracHubClient(ClientCore):
    """The service's REST API as the token's owner, synchronously: the CLI and the magics
    (kernels and terminals have no event loop to share)."""

    def __init__(self, url: str, token: str, **options: Any) -> None:
        super().__init__(url, token, **options)
        self._http = httpx.Client(base_url=self.api_url, headers=self.headers, timeout=self.timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> FracHubClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise self._unreachable(error) from None
        self._check(response)
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._decode(self._request(method, path, **kwargs))

    # -- the API ----------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """The service's name, version, backend and GPU inventory."""
        return self._json("GET", "")

    def user(self) -> dict[str, Any]:
        """Who the token belongs to, their projects and what the token may do."""
        return self._json("GET", "user")

    def queues(self) -> list[dict[str, Any]]:
        """Every project and department with its quota, use and fair share."""
        return self._json("GET", "queues")

    def submit(
        self,
        command: str | Sequence[str],
        *,
        gpus: float | None = None,
        gpu_memory_gib: float | None = None,
        replicas: int | None = None,
        name: str | None = None,
        project: str | None = None,
        env: Mapping[str, str] | None = None,
        working_dir: str | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """Submit a job; returns the new workload (pending).

        A string command runs with ``/bin/sh -c``, a list as is. Without ``project`` the
        service picks the user's only project; if they have several it refuses (400 on
        ``project``), and then ``default_project``, when there is one, is used instead.
        ``fields`` pass further Submission fields (``kind``, ``priority``, …) unchanged.
        """
        body: dict[str, Any] = {"command": command if isinstance(command, str) else list(command)}
        optional = {
            "gpus": gpus,
            "gpu_memory_gib": gpu_memory_gib,
            "replicas": replicas,
            "name": name,
            "project": project,
            "env": dict(env) if env else None,
            "working_dir": working_dir,
        }
        body.update({key: value for key, value in optional.items() if value is not None})
        body.update(fields)
        try:
            return self._json("POST", "workloads", json=body)
        except FracHubError as error:
            # "project: is required: alice is in vision, nlp" (400) when none was named
            if (
                project is None
                and self.default_project
                and error.status == 400
                and error.message.startswith("project:")
            ):
                return self._json(
                    "POST", "workloads", json={**body, "project": self.default_project}
                )
            raise

    def iter_workloads(
        self,
        *,
        states: Iterable[str] = (),
        active: bool = False,
        projects: Iterable[str] = (),
        kinds: Iterable[str] = (),
        users: Iterable[str] = (),
        page_size: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Workloads, newest first, page after page (the hub's ``_pagination`` envelope: the
        next page starts at ``next.cursor``, or at ``next.offset`` from a service that gives
        no cursor). A workload seen on an earlier page is not repeated when new submissions
        shift offset pages."""
        params: dict[str, Any] = {
            "state": ",".join(states) or None,
            "project": ",".join(projects) or None,
            "kind": ",".join(kinds) or None,
            "user": ",".join(users) or None,
            "limit": page_size,
        }
        params = {key: value for key, value in params.items() if value is not None}
        if active:
            params["active"] = "1"
        seen: set[int] = set()
        where: dict[str, Any] = {}
        while True:
            page = self._json(
                "GET",
                "workloads",
                params={**params, **where},
                headers={"Accept": PAGINATION_MEDIA_TYPE},
            )
            if isinstance(page, list):  # a service that ignores the envelope: one page
                items, following = page, None
            else:
                items, following = page["items"], page["_pagination"].get("next")
            for item in items:
                if item["id"] not in seen:
                    seen.add(item["id"])
                    yield item
            if not following or not items:
                return
            if following.get("cursor"):
                where = {"cursor": following["cursor"]}
            else:
                where = {"offset": following["offset"]}
            params["limit"] = following.get("limit", params.get("limit"))

    def list_workloads(self, *, limit: int | None = None, **filters: Any) -> list[dict[str, Any]]:
        """``iter_workloads`` collected: every matching workload, or the newest ``limit``;
        in pages of up to 500 (the service's default ``page_max_limit``; it clamps to its
        own), so that a long list takes few requests."""
        found: list[dict[str, Any]] = []
        filters.setdefault("page_size", 500 if limit is None else min(max(limit, 1), 500))
        for item in self.iter_workloads(**filters):
            if limit is not None and len(found) >= limit:
                break
            found.append(item)
        return found

    def get(self, workload_id: int) -> dict[str, Any]:
        """One workload with its placement, pending reason, queue position and events."""
        return self._json("GET", f"workloads/{int(workload_id)}")

    def cancel(self, workload_id: int) -> dict[str, Any]:
        """Cancel a job: a pending one at once, a running one is asked to stop (SIGTERM, then
        SIGKILL after the grace period) and comes back ``cancelling``."""
        return self._json("DELETE", f"workloads/{int(workload_id)}")

    def checkpointed(self, workload_id: int | None = None) -> dict[str, Any]:
        """Tell the scheduler a job has just saved its work (default: the job this runs in,
        ``FRACHUB_WORKLOAD_ID``): an eviction from now on loses only what comes after."""
        if workload_id is None:
            workload_id = _own_workload_id(os.environ)
        return self._json("POST", f"workloads/{int(workload_id)}/checkpoint")

    def cancel_sweep(self, sweep_id: int) -> dict[str, Any]:
        """Cancel every job of a sweep not yet ended; returns the sweep with its members."""
        return self._json("DELETE", f"sweeps/{int(sweep_id)}")

    def logs(self, workload_id: int, *, tail: int | None = None, replica: int = 0) -> str:
        """A replica's output so far (empty before it has started)."""
        params = _log_params(tail, replica)
        return self._request("GET", f"workloads/{int(workload_id)}/logs", params=params).text

    def follow_logs(
        self,
        workload_id: int,
        on_text: Callable[[str], None],
        *,
        tail: int | None = None,
        replica: int = 0,
        on_state: Callable[[dict[str, Any]], None] | None = None,
        poll: float = 1.0,
    ) -> dict[str, Any]:
        """Stream a replica's output to ``on_text`` until the job ends; returns the workload
        as it ended.

        While the job is pending ``on_state`` hears of every change (queue position, reason)
        so that a long wait shows progress; it hears once more when the output starts and
        when the job has ended. Ctrl-C (KeyboardInterrupt) propagates to the caller with the
        stream closed; the job goes on.
        """
        last: tuple[Any, ...] | None = None
        path = f"workloads/{int(workload_id)}/logs"

        def report(workload: dict[str, Any]) -> None:
            nonlocal last
            key = (workload["state"], workload.get("queue_position"), workload["pending_reason"])
            if on_state is not None and key != last:
                on_state(workload)
            last = key

        # Wait while pending, then until the log exists: a follow request that arrives
        # between the start being committed and the process writing its first line would
        # otherwise stream nothing.
        while True:
            workload = self.get(workload_id)
            if replica >= workload["replicas"]:  # as the service would say, but before waiting
                raise FracHubError(
                    400, f"replica: must be below {workload['replicas']}, got {replica}"
                )
            report(workload)
            if workload["state"] not in ACTIVE_STATES:
                break
            pending = workload["state"] == WorkloadState.PENDING
            if not pending and self.logs(workload_id, tail=1, replica=replica):
                break
            time.sleep(poll if pending else min(poll, 0.2))
        params = {**_log_params(tail, replica), "follow": "1"}
        timeout = httpx.Timeout(self._http.timeout.connect, read=None)
        try:
            with self._http.stream("GET", path, params=params, timeout=timeout) as response:
                if response.status_code >= 300:
                    response.read()
                    self._check(response)
                for text in response.iter_text():
                    if text:
                        on_text(text)
        except httpx.HTTPError as error:
            raise self._unreachable(error) from None
        final = self.get(workload_id)
        report(final)
        return final

    def quota(self) -> Quota:
        """The caller's projects with their quotas and use, and the caller's own share."""
        user = self.user()
        queues = {queue["name"]: queue for queue in self.queues()}
        projects = [queues[name] for name in user["projects"] if name in queues]
        holding = self.list_workloads(states=HOLDING_STATES, users=[user["name"]])
        return Quota(user=user, projects=projects, holding=holding)


class AsyncFracHubClient(ClientCore):
    """The same API and errors for code on an event loop: the spawner, inside the hub. It
    acts for users with the service's own token (admin scope): the hub, not the user,
    decides which server asks for which share. A connection per request, so the client may
    outlive any one loop."""

    async def _json(
        self, method: str, path: str, *, timeout: float | None = None, **kwargs: Any
    ) -> Any:
        try:
            async with httpx.AsyncClient(
                base_url=self.api_url, headers=self.headers, timeout=timeout or self.timeout
            ) as http:
                response = await http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise self._unreachable(error) from None
        self._check(response)
        return self._decode(response)

    async def queues(self) -> list[dict[str, Any]]:
        return await self._json("GET", "queues")

    async def nodes(self) -> list[dict[str, Any]]:
        return await self._json("GET", "nodes")

    async def allocate(self, body: dict[str, Any]) -> dict[str, Any]:
        """Ask for a notebook's GPU share; returns the allocation (running or pending)."""
        return await self._json("POST", "allocations", json=body)

    async def dry_run(self, body: dict[str, Any]) -> dict[str, Any]:
        """What the scheduler would do now with each of ``body["requests"]`` (the spawn
        form's hints); stores nothing."""
        return await self._json("POST", "allocations/dry-run", json=body)

    async def allocation(
        self, allocation_id: int, *, wait: float = 0, version: float | None = None
    ) -> dict[str, Any]:
        """One allocation; with ``wait``, the service answers when it changes after
        ``version`` (a long poll) or when ``wait`` seconds have passed."""
        params: dict[str, Any] = {}
        if wait:
            params["wait"] = wait
            if version is not None:
                params["version"] = version
        return await self._json(
            "GET", f"allocations/{int(allocation_id)}", params=params, timeout=self.timeout + wait
        )

    async def allocations_of(self, user: str) -> list[dict[str, Any]]:
        """A user's allocations that are pending or holding GPUs."""
        return await self._json(
            "GET", "allocations", params={"user": user, "state": "pending,running"}
        )

    async def release(self, allocation_id: int) -> dict[str, Any]:
        return await self._json("DELETE", f"allocations/{int(allocation_id)}")


def _log_params(tail: int | None, replica: int) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if tail is not None:
        params["tail"] = tail
    if replica:
        params["replica"] = replica
    return params


def _reason(error: Exception) -> str:
    text = str(error).strip()
    # "[Errno 111] Connection refused" -> "connection refused"
    text = re.sub(r"^\[Errno -?\d+\]\s*", "", text)
    return (text[:1].lower() + text[1:]) if text else type(error).__name__


def _raise_for_refusal(response: httpx.Response, service: str) -> None:
    """A 4xx/5xx answer becomes FracHubError with the service's message. A redirect, or an
    error that is not ``{"status", "message"}``, comes from something else (the hub, the
    proxy, a wrong URL) and says so."""
    if response.is_redirect:
        where = response.headers.get("Location", "elsewhere")
        raise Unreachable(
            response.status_code,
            f"{_plain_url(response)} redirected to {where}; {_wrong_url_hint(service)}",
        )
    if response.status_code < 400:
        return
    try:
        message = response.json()["message"]
        if not isinstance(message, str) or not message:
            raise TypeError
    except (ValueError, KeyError, TypeError):
        hint = (
            "is the FracHub service running?"
            if response.status_code >= 500
            else _wrong_url_hint(service)
        )
        raise Unreachable(
            response.status_code,
            f"{_plain_url(response)} answered {response.status_code} "
            f"{response.reason_phrase}; {hint}",
        ) from None
    raise FracHubError(response.status_code, message)


def _plain_url(response: httpx.Response) -> str:
    return str(response.request.url.copy_with(query=None))


def _wrong_url_hint(service: str) -> str:
    return (
        f"is {service} the FracHub service? Set {URL_ENV} to its URL, which ends in "
        f"{SERVICE_PREFIX}"
    )


# --- formatting: pure functions from the API's JSON to text -------------------------------------


def parse_time(value: str | None) -> datetime | None:
    """The API's ISO 8601 UTC timestamps (``2026-11-22T14:05:00.000Z``), None for null."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def format_time(value: str | None, tz: tzinfo | None = None) -> str:
    """A timestamp in the reader's time zone (``tz``; default: local), to the second."""
    moment = parse_time(value)
    if moment is None:
        return "-"
    return moment.astimezone(tz).strftime("%Y-%m-%d %H:%M:%S")


def format_number(value: float | None) -> str:
    """GPU counts as people write them: 1, 0.5, 0.125, 2.5 (thousandths at most)."""
    if value is None:
        return "-"
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def format_gpus(workload: Mapping[str, Any], *, words: bool = False) -> str:
    """What a workload asked for: ``0.5``, ``20GiB`` (memory), ``2x1`` for a gang; in
    ``words``: ``0.5 GPU``, ``20 GiB of one GPU``, ``1 GPU x 2 replicas (a gang)``."""
    gpus, memory = workload.get("gpus"), workload.get("gpu_memory_gib")
    if gpus is not None:
        each = gpus_in_words(gpus) if words else format_number(gpus)
    elif memory is not None:
        each = f"{format_number(memory)}" + (" GiB of one GPU" if words else "GiB")
    else:
        each = "-"
    replicas = workload.get("replicas") or 1
    if replicas == 1:
        return each
    return f"{each} x {replicas} replicas (a gang)" if words else f"{replicas}x{each}"


def format_state(workload: Mapping[str, Any]) -> str:
    """The state with what matters most about it: the queue position while pending, the
    exit code of a failed job."""
    state = workload["state"]
    if state == WorkloadState.PENDING and workload.get("queue_position"):
        return f"{state} #{workload['queue_position']}"
    if state == WorkloadState.FAILED and workload.get("exit_code") is not None:
        return f"{state} ({workload['exit_code']})"
    return state


def held_gpus(workload: Mapping[str, Any]) -> float:
    """The GPUs a workload holds now: the sum of its placed shares."""
    if workload["state"] not in HOLDING_STATES:
        return 0.0
    return sum(gpu["share"] for replica in workload["placement"] for gpu in replica["gpus"])


def format_placement(workload: Mapping[str, Any]) -> str:
    """Where it runs, worded as the service's events word it (``ws GPU 0 (0.5)``,
    ``ws GPUs 0, 1``); ``-`` if nowhere."""
    return describe_placement(placement_from_api(workload.get("placement"))) or "-"


def runtime_seconds(workload: Mapping[str, Any], now: datetime) -> float | None:
    """How long it has run (or ran): from its last start to its end or now."""
    started = parse_time(workload.get("started_at"))
    if started is None:
        return None
    ended = parse_time(workload.get("finished_at")) or now
    return (ended - started).total_seconds()


def age_seconds(workload: Mapping[str, Any], now: datetime) -> float | None:
    submitted = parse_time(workload.get("submitted_at"))
    return None if submitted is None else (now - submitted).total_seconds()


def format_command(command: str | Sequence[str] | None) -> str:
    """A command as a shell would show it: a string as is, a list quoted where needed."""
    if command is None:
        return "-"
    if isinstance(command, str):
        return command
    import shlex

    return shlex.join(command)


def info_text(workload: Mapping[str, Any]) -> str:
    """One short line of what a reader wants to know next: why it waits (the plain headline;
    ``describe`` has the engine's detail), that it runs on borrowed GPUs, why it ended."""
    state = workload["state"]
    if state == WorkloadState.PENDING:
        return workload.get("pending_headline") or workload.get("pending_reason") or ""
    if state == WorkloadState.RUNNING and workload.get("borrowed"):
        return "borrowed: may be preempted"
    if state in FINAL_STATES or state in RELEASING_STATES:
        return workload.get("message") or ""
    return ""


def now_utc() -> datetime:
    """The one place the formatting layer asks for the time (the builders take ``now``)."""
    return datetime.now(timezone.utc)


# --- display objects ----------------------------------------------------------------------------

_STATE_COLOURS = {
    WorkloadState.RUNNING: "#1a7f37",
    WorkloadState.SUCCEEDED: "#1a7f37",
    WorkloadState.PENDING: "#9a6700",
    WorkloadState.PREEMPTING: "#9a6700",
    WorkloadState.CANCELLING: "#9a6700",
    WorkloadState.STOPPING: "#9a6700",
    WorkloadState.FAILED: "#cf222e",
    WorkloadState.REVOKED: "#cf222e",
    WorkloadState.CANCELLED: "#57606a",
    WorkloadState.RELEASED: "#57606a",
}


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


class Displayed(ABC):
    """Shown as plain text by ``str()``/``repr()`` (terminals, logs) and as HTML by Jupyter's
    ``_repr_html_`` (notebooks); subclasses give ``text()`` and ``html()``."""

    @abstractmethod
    def text(self) -> str: ...

    @abstractmethod
    def html(self) -> str: ...

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        return self.html()


@dataclass(frozen=True, repr=False)
class Table(Displayed):
    """Rows under named columns. ``str()``/``repr()``: aligned plain text (long cells in the
    last column clipped to ``wrap`` characters, or never with ``wrap=None``);
    ``_repr_html_()``: an HTML table."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    title: str = ""
    empty: str = "nothing to show"
    note: str = ""
    wrap: int | None = 60

    def text(self) -> str:
        lines = [self.title] if self.title else []
        if not self.rows:
            lines.append(self.empty)
        else:
            last = len(self.columns) - 1
            rows = [
                tuple(
                    _clip(cell, self.wrap) if i == last and self.wrap else cell
                    for i, cell in enumerate(row)
                )
                for row in self.rows
            ]
            widths = [
                max(len(column), *(len(row[i]) for row in rows))
                for i, column in enumerate(self.columns)
            ]
            for row in (self.columns, *rows):
                cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
                lines.append("  ".join(cells).rstrip())
        if self.note:
            lines.append(self.note)
        return "\n".join(lines)

    def html(self) -> str:
        parts = []
        if self.title:
            parts.append(f"<p><b>{html.escape(self.title)}</b></p>")
        if not self.rows:
            parts.append(f"<p>{html.escape(self.empty)}</p>")
        else:
            head = "".join(
                f'<th style="text-align:left">{html.escape(c)}</th>' for c in self.columns
            )
            body = "".join(
                "<tr>"
                + "".join(
                    f'<td style="text-align:left">{_html_cell(column, cell)}</td>'
                    for column, cell in zip(self.columns, row, strict=True)
                )
                + "</tr>"
                for row in self.rows
            )
            parts.append(
                f'<table class="frachub-table"><thead><tr>{head}</tr></thead>'
                f"<tbody>{body}</tbody></table>"
            )
        if self.note:
            parts.append(f"<p><i>{html.escape(self.note)}</i></p>")
        return "\n".join(parts)


def _html_cell(column: str, cell: str) -> str:
    text = html.escape(cell)
    if column == "STATE":
        colour = _STATE_COLOURS.get(cell.split(" ")[0])
        if colour:
            return f'<span style="color:{colour};font-weight:bold">{text}</span>'
    return text


@dataclass(frozen=True, repr=False)
class Report(Displayed):
    """A titled list of fields followed by tables (``describe``, ``quota``), shown like
    :class:`Table`: plain text from ``str()``/``repr()``, HTML from ``_repr_html_()``."""

    title: str
    fields: tuple[tuple[str, str], ...]
    tables: tuple[Table, ...] = field(default=())

    def text(self) -> str:
        lines = [self.title]
        width = max((len(name) for name, _ in self.fields), default=0) + 1
        lines += [f"  {(name + ':').ljust(width)}  {value}" for name, value in self.fields]
        for table in self.tables:
            lines.append("")
            lines += ["  " + line if line else line for line in table.text().splitlines()]
        return "\n".join(lines)

    def html(self) -> str:
        rows = "".join(
            f'<tr><th style="text-align:left">{html.escape(name)}</th>'
            f'<td style="text-align:left">{_html_cell(name.upper(), value)}</td></tr>'
            for name, value in self.fields
        )
        parts = [
            f"<p><b>{html.escape(self.title)}</b></p>",
            f'<table class="frachub-report">{rows}</table>',
        ]
        parts += [table.html() for table in self.tables]
        return "\n".join(parts)


# --- builders: API answers -> display objects ---------------------------------------------------


def jobs_table(
    workloads: Sequence[Mapping[str, Any]],
    now: datetime,
    *,
    title: str = "",
    note: str = "",
    empty: str = "no jobs",
) -> Table:
    """The ``jobs`` listing; a USER column appears when the rows are not all one user's (an
    admin's view)."""
    show_user = len({w["user"] for w in workloads}) > 1
    columns = ("ID", "NAME", *(("USER",) if show_user else ()), "PROJECT", "KIND", "STATE")
    columns += ("GPUS", "NODE", "AGE", "RUNTIME", "INFO")
    rows = []
    for w in workloads:
        row = (str(w["id"]), w["name"], *((w["user"],) if show_user else ()), w["project"])
        row += (w["kind"], format_state(w), format_gpus(w), format_placement(w))
        row += (
            format_duration(age_seconds(w, now)),
            format_duration(runtime_seconds(w, now)),
            info_text(w),
        )
        rows.append(row)
    return Table(columns, tuple(rows), title=title, note=note, empty=empty)


def describe_report(workload: Mapping[str, Any], now: datetime, tz: tzinfo | None = None) -> Report:
    """Everything about one workload: request, state, placement and history."""
    w = workload
    state = format_state(w)
    waiting = w["state"] == WorkloadState.PENDING
    headline = w.get("pending_headline") or w.get("pending_reason")
    if waiting and headline:
        state += f": {headline}"
    fields: list[tuple[str, str]] = [("State", state)]
    if waiting and w.get("pending_reason") and w["pending_reason"] != headline:
        fields.append(("Why", w["pending_reason"]))  # the engine's detail behind the headline
    if w.get("borrowed"):
        fields.append(("Borrowed", w["borrowed"]))
    fields += [
        ("User", w["user"]),
        ("Project", w["project"]),
        (
            "Kind",
            f"{w['kind']} (priority {w['priority']}, "
            f"{'preemptible' if w['preemptible'] else 'not preemptible'})",
        ),
        ("GPUs", format_gpus(w, words=True)),
    ]
    if "command" in w:
        fields.append(("Command", format_command(w.get("command"))))
        fields.append(("Working dir", w.get("working_dir") or "(home directory)"))
        if w.get("env"):
            fields.append(("Env", " ".join(f"{k}={v}" for k, v in sorted(w["env"].items()))))
        if w.get("max_runtime_seconds"):
            fields.append(("Max runtime", format_duration(w["max_runtime_seconds"])))
        if w.get("checkpoint_interval_seconds"):
            every = format_duration(w["checkpoint_interval_seconds"])
            fields.append(("Checkpoints", f"every {every}"))
        if w.get("checkpointed_at"):
            fields.append(("Last checkpoint", format_time(w["checkpointed_at"], tz)))
    else:
        fields.append(("Server", w.get("server_name") or "(default server)"))
    fields += [
        ("Submitted", format_time(w["submitted_at"], tz)),
        ("Started", format_time(w.get("started_at"), tz)),
        ("Finished", format_time(w.get("finished_at"), tz)),
        ("Runtime", format_duration(runtime_seconds(w, now))),
        ("Restarts", str(w.get("restart_count", 0))),
        ("Preempted", plural(w.get("preemptions", 0), "time")),
    ]
    if w.get("exit_code") is not None:
        fields.append(("Exit code", str(w["exit_code"])))
    if w.get("message"):
        fields.append(("Message", w["message"]))
    placement = Table(
        ("REPLICA", "NODE", "GPU", "SHARE", "UUID"),
        tuple(
            (
                str(rank),
                replica["node"],
                str(gpu["index"]),
                format_number(gpu["share"]),
                gpu.get("uuid") or "-",
            )
            for rank, replica in enumerate(w.get("placement") or [])
            for gpu in replica["gpus"]
        ),
        title="Placement",
        empty="not placed (no GPUs held)",
    )
    events = Table(
        ("TIME", "WHAT HAPPENED"),
        tuple(
            (
                format_time(event["time"], tz),
                event.get("text") or event_line(event["type"], event["message"]),
            )
            for event in w.get("events") or []
        ),
        title="Timeline",
        empty="nothing yet",
        wrap=None,  # the story is read in full: who preempted it, the grace, the work lost
    )
    title = f"{w['kind'].capitalize()} {w['id']}: {w['name']}"
    return Report(title, tuple(fields), (placement, events))


def quota_report(quota: Quota) -> Report:
    """The caller's projects: quota, hard limit, what the project and the caller hold."""
    user = quota.user
    rights = [right for right in ("read", "submit", "admin") if user.get(right)]
    mine: dict[str, float] = {}
    for workload in quota.holding:
        mine[workload["project"]] = mine.get(workload["project"], 0.0) + held_gpus(workload)
    table = Table(
        ("PROJECT", "DESERVED", "LIMIT", "IN USE", "FAIR SHARE", "YOURS", "RUNNING", "PENDING"),
        tuple(
            (
                queue["name"],
                format_number(queue["deserved_gpus"]),
                format_number(queue["limit_gpus"]) if queue["limit_gpus"] is not None else "none",
                format_number(queue["allocated_gpus"]),
                format_number(queue["fair_share_gpus"]),
                format_number(mine.get(queue["name"], 0.0)),
                str(queue["running"]),
                str(queue["pending"]),
            )
            for queue in quota.projects
        ),
        title="Projects (GPUs)",
        empty="not a member of any project: ask an admin to add you to one",
        note=(
            "Within DESERVED your jobs are safe; above it they borrow idle GPUs and may be "
            "preempted when their owners need them."
            if quota.projects
            else ""
        ),
    )
    fields = (
        ("User", user["name"]),
        ("Rights", ", ".join(rights) or "none"),
        ("Projects", ", ".join(user["projects"]) or "none"),
    )
    return Report(f"FracHub quota for {user['name']}", fields, (table,))


def submitted_text(workload: Mapping[str, Any]) -> str:
    """The one line that confirms a submission and gives the id to use next."""
    return (
        f"Submitted job {workload['id']} ({workload['name']}) to project "
        f"{workload['project']}: {format_gpus(workload, words=True)}, {format_state(workload)}"
    )


def state_line(workload: Mapping[str, Any]) -> str:
    """Progress while following a job: where it is and, once it ended, how."""
    w = workload
    head = f"job {w['id']} ({w['name']})"
    state = w["state"]
    if state == WorkloadState.PENDING:
        where = f"#{w['queue_position']} in queue {w['project']}" if w.get("queue_position") else ""
        reason = w.get("pending_headline") or w.get("pending_reason") or ""
        detail = "; ".join(part for part in (where, reason) if part)
        return f"{head} is pending" + (f": {detail}" if detail else "")
    if state in HOLDING_STATES:
        return f"{head} is {state} on {format_placement(w)}"
    if state == WorkloadState.FAILED:
        ending = f"{head} failed"
        if w.get("exit_code") is not None:
            ending += f" with exit code {w['exit_code']}"
        return ending + (f": {w['message']}" if w.get("message") else "")
    return f"{head} {state}" + (f": {w['message']}" if w.get("message") else "")
