"""The FracHub REST API as Python calls, in two faces of one client.

``connect(url, token)``
    A ``FracHubClient`` from flags, falling back to the environment: ``FRACHUB_URL`` (the
    service's URL, ending in ``/services/frachub/``), ``FRACHUB_TOKEN`` or else
    ``JUPYTERHUB_API_TOKEN`` (inside a notebook server: the server's own token, so the client
    acts as the server's user and never as an admin), and ``FRACHUB_PROJECT`` (the project of
    the notebook's GPU share, the default project for submissions).
``FracHubClient``, ``AsyncFracHubClient``
    On ``/services/frachub/api/v1/`` (``ClientCore`` in ``hub_ext.client.session``: URL,
    headers, errors). The synchronous one serves the CLI and the magics: submit, list
    (following the hub's pagination), get, cancel, logs (tail, or follow until the job ends),
    user, queues, quota. The asynchronous one serves the spawner inside the hub: allocations,
    queues, nodes. Every refusal raises ``FracHubError(status, message)`` with the service's
    own message; ``NotConfigured`` and ``Unreachable`` (subclasses, status 0 when no answer
    came) say what to set or check.
``checkpointed()``
    Inside a job, after it saved its work: tells the scheduler (``POST
    workloads/{id}/checkpoint`` with the job's own token, or a touched file in
    ``FRACHUB_CHECKPOINT_DIR`` when the job has none), so an eviction loses only the work done
    since.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from hub_ext.client.session import (
    PAGINATION_MEDIA_TYPE,
    PROJECT_ENV,
    SERVER_TOKEN_ENV,
    TOKEN_ENV,
    URL_ENV,
    ClientCore,
    FracHubError,
    NotConfigured,
    new_idempotency_key,
    worth_retrying,
)
from scheduler.common.contract import CHECKPOINT_MARK
from scheduler.common.scopes import IDEMPOTENCY_HEADER, SERVICE_PREFIX
from scheduler.common.states import (
    ACTIVE_STATES,
    HOLDING_STATES,
    WorkloadState,
)


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
    good for this job only: ``scheduler/service/hub/jobtokens.py``), so this tells the service
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
        A submission that gets no answer is sent again (``_submit``) and stored once.
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
            return self._submit(body)
        except FracHubError as error:
            # "project: is required: alice is in vision, nlp" (400) when none was named
            if (
                project is None
                and self.default_project
                and error.status == 400
                and error.message.startswith("project:")
            ):
                return self._submit({**body, "project": self.default_project})
            raise

    def _submit(self, body: dict[str, Any]) -> Any:
        """``POST workloads`` under a new idempotency key, sent again under the same key
        while no answer comes (``worth_retrying``: a dropped connection, a 503 while the
        service restarts), a few times with growing pauses, telling the user. The service
        stores the job once however many of the tries reached it, and answers each with it.
        """
        headers = {IDEMPOTENCY_HEADER: new_idempotency_key()}
        tries = len(self.retry_delays) + 1
        for attempt, delay in enumerate(self.retry_delays, start=1):
            try:
                return self._json("POST", "workloads", json=body, headers=headers)
            except FracHubError as error:
                if not worth_retrying(error):
                    raise
                self.notice(
                    f"submitting: {error}; trying again in {delay:g} s (try {attempt + 1} of "
                    f"{tries}; the job is stored once however many tries arrive)"
                )
            time.sleep(delay)
        try:
            return self._json("POST", "workloads", json=body, headers=headers)
        except FracHubError as error:
            if worth_retrying(error) and tries > 1:
                error.message += (
                    f" (sent {tries} times; should one of them have arrived, the job is stored "
                    "once: list your jobs before submitting it again)"
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
