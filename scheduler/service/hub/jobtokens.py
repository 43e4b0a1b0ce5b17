"""Every training job's own credentials: a hub token issued when an attempt starts and
revoked when it ends (docs/service.md, "A job's own token").

A job tells the scheduler it checkpointed through the API (``hub_ext.client.checkpointed()``), and
every call to the API is authenticated by the hub. So the service asks the hub, with its own
token (which holds the hub's ``tokens`` scope), for a token of the job's owner that carries
``JOB_TOKEN_SCOPES`` only: ``access:services!service=frachub`` and ``custom:frachub:job``.
The service lets such a token see and checkpoint the one workload it was issued to, which it
knows by the token's id (the hub names it in ``GET /hub/api/user`` since JupyterHub 5), and
nothing else: it cannot submit, cancel, list, or act in the hub.

``CredentialedBackend`` wraps the configured backend, so that every backend gets the same
behaviour: ``start`` issues the token and hands it to the backend in ``JobSpec.credentials``
(the local backend puts it in the process's environment, the Kubernetes backend in a Secret
owned by the Job); the token's id (never the token) is kept in the attempt's handle, which the
service stores with the workload, so a restarted service still knows which token belongs to
which job and revokes it when the job ends. The end is reported first and the token revoked
after, in the background, stored meanwhile so that a restart still revokes it
(``scheduler/service/hub/revocations.py``). A token that cannot be issued (the hub is down,
the owner lacks ``custom:frachub:job``) costs the job its API route only: it starts without
one, and ``checkpointed()`` falls back to the file in ``FRACHUB_CHECKPOINT_DIR``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import quote

from tornado.httpclient import HTTPClientError

from scheduler.backends.base import Backend, Checkpoint, Exit, Handle, JobSpec
from scheduler.common.scopes import JOB_TOKEN_SCOPES
from scheduler.service.hub.hubapi import HubApi
from scheduler.service.hub.revocations import Revocations
from scheduler.service.persistence.store import Store

TOKEN_KEY = "hub_token"
"""The handle's entry for the attempt's token: ``{"id": ..., "user": ...}``."""
URL_ENV = "FRACHUB_URL"
TOKEN_ENV = "JUPYTERHUB_API_TOKEN"  # what hub_ext.client.connect reads inside a job


class HubTokenError(RuntimeError):
    """The hub did not issue or revoke a token; the message says what it answered."""


TOKEN_REQUESTS_AT_ONCE = 8
"""Token issues in flight to the hub at once (``HubApi.at_once``); the service starts 16
jobs side by side (``LAUNCHES_AT_ONCE``), so a burst waits its turn here rather than in a
timed queue. Revocations have connections of their own (``REVOCATIONS_AT_ONCE``)."""
REVOCATIONS_AT_ONCE = 4
"""Revocations in flight at once, on connections of their own (``Revocations``): a burst
of them (a reclaim for a 500-replica gang ends 500 jobs) must not hold up the token of a
job starting, which before waited behind all 500 for a free connection."""
TOKEN_TRIES = 3
"""Tries of a revocation the hub did not answer (or answered 5xx), and of an issue whose
connection failed (an issue that timed out may have made a token: it is not sent twice);
the waits between tries are ``TOKEN_RETRY_SECONDS`` times 1, 2, ..."""
TOKEN_RETRY_SECONDS = 0.5


class HubTokens(HubApi):
    """The hub's token API, as the service uses it: tokens of a user with fixed scopes,
    through its own connections (``TOKEN_REQUESTS_AT_ONCE``), a request the hub did not
    answer tried again (``TOKEN_TRIES``)."""

    def __init__(
        self,
        api_url: str,
        api_token: str,
        timeout: float = 10.0,
        at_once: int = TOKEN_REQUESTS_AT_ONCE,
    ) -> None:
        super().__init__(api_url, api_token, timeout, at_once)

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        for attempt in range(TOKEN_TRIES):
            try:
                response = await self.fetch(method, path, body)
                return json.loads(response.body) if response.body else None
            except (HTTPClientError, OSError) as error:
                if isinstance(error, HTTPClientError):  # an answer, or none in time
                    again = method == "DELETE" and (error.code == 599 or error.code >= 500)
                else:  # the connection failed: nothing reached the hub
                    again = True
                if not again or attempt == TOKEN_TRIES - 1:
                    raise
            await asyncio.sleep(TOKEN_RETRY_SECONDS * (attempt + 1))
        raise AssertionError("unreachable")

    async def issue(self, user: str, note: str, expires_in: int) -> tuple[str, str]:
        """A new token of ``user`` with ``JOB_TOKEN_SCOPES``: (token, its id).

        A hub that caps token lifetimes (``JupyterHub.token_expires_in_max_seconds``) below
        ``expires_in`` is asked again for its own maximum."""
        path = f"/users/{quote(user, safe='')}/tokens"
        body: dict[str, Any] = {
            "scopes": list(JOB_TOKEN_SCOPES),
            "note": note,
            "expires_in": expires_in,
        }
        try:
            try:
                answer = await self._call("POST", path, body)
            except HTTPClientError as error:
                if error.code != 400 or b"must not exceed" not in _body(error):
                    raise
                body.pop("expires_in")
                answer = await self._call("POST", path, body)
        except HTTPClientError as error:
            raise HubTokenError(f"the hub refused a token for {user}: {_message(error)}") from None
        except OSError as error:
            raise HubTokenError(f"the hub is unreachable: {error}") from None
        return answer["token"], str(answer["id"])

    async def revoke(self, user: str, token_id: str) -> None:
        """Delete a token; one the hub no longer has (expired, or its user deleted) is gone
        already, which is what was asked."""
        path = f"/users/{quote(user, safe='')}/tokens/{quote(token_id, safe='')}"
        try:
            await self._call("DELETE", path)
        except HTTPClientError as error:
            if error.code != 404:
                raise HubTokenError(
                    f"the hub refused to revoke a token: {_message(error)}"
                ) from None
        except OSError as error:
            raise HubTokenError(f"the hub is unreachable: {error}") from None


def _body(error: HTTPClientError) -> bytes:
    return (error.response.body or b"") if error.response is not None else b""


def _message(error: HTTPClientError) -> str:
    try:
        return str(json.loads(_body(error))["message"])
    except (ValueError, KeyError, TypeError):
        return str(error)


def token_id_of(handle: Mapping[str, Any] | None) -> str | None:
    """The id of the token issued to the attempt ``handle`` records, if any."""
    entry = (handle or {}).get(TOKEN_KEY)
    return str(entry["id"]) if isinstance(entry, Mapping) and "id" in entry else None


def _inner(handle: Handle) -> Handle:
    return {key: value for key, value in handle.items() if key != TOKEN_KEY}


class CredentialedBackend:
    """A backend whose jobs each get their own hub token (see the module's docstring).

    service_url: the service's URL as jobs reach it (``…/services/frachub/``), their
        ``FRACHUB_URL``.
    lifetime: seconds a token lives at most; it is revoked as soon as the attempt ends, so
        this bounds only a token the service could not revoke (it was down for good).
    store: where the tokens of ended attempts wait for their revocation (``Revocations``);
        None keeps them in memory only.
    Everything else is the wrapped backend's (``connect``, ``read_log``, ...).
    """

    def __init__(
        self,
        backend: Backend,
        tokens: HubTokens,
        service_url: str,
        lifetime: int,
        log: logging.Logger | None = None,
        store: Store | None = None,
    ) -> None:
        self.backend = backend
        self.tokens = tokens
        self.service_url = service_url.rstrip("/") + "/"
        self.lifetime = lifetime
        self.log = log or logging.getLogger("frachub")
        self._issued: dict[int, tuple[str, str]] = {}
        """Workload id -> (user, token id) of the running attempts' tokens."""
        self._gone: list[int] = []
        """Adopted workloads whose attempt was gone: no exit will come, revoke at the next
        poll."""
        revoker = HubTokens(tokens.api_url, tokens.api_token, tokens.timeout, REVOCATIONS_AT_ONCE)
        self.revocations = Revocations(revoker, store, lifetime, self.log)

    def __getattr__(self, name: str) -> Any:
        if name == "backend":  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.backend, name)

    def inventory(self) -> Any:
        return self.backend.inventory()

    def log_path(self, workload_id: int, replica: int = 0) -> str | None:
        return self.backend.log_path(workload_id, replica)

    async def close(self) -> None:
        # running jobs keep their tokens (a restart adopts them); the ended ones' tokens not
        # revoked yet stay stored, and the next start revokes them
        await self.revocations.close()
        await self.backend.close()

    async def start(self, job: JobSpec) -> Handle:
        note = f"frachub job {job.workload_id} ({job.name}), attempt {job.restart_count + 1}"
        try:
            token, token_id = await self.tokens.issue(job.user, note, self.lifetime)
        except HubTokenError as error:
            self.log.warning(
                "workload %d starts without its own API token (checkpoints by file only): %s",
                job.workload_id,
                error,
            )
            return await self.backend.start(job)
        credentials = {URL_ENV: self.service_url, TOKEN_ENV: token}
        try:
            handle = await self.backend.start(_with_credentials(job, credentials))
        except BaseException:
            await self._revoke(job.user, token_id)
            raise
        self._issued[job.workload_id] = (job.user, token_id)
        return {**handle, TOKEN_KEY: {"id": token_id, "user": job.user}}

    async def stop(self, workload_id: int, handle: Handle, grace_seconds: float) -> None:
        await self.backend.stop(workload_id, _inner(handle), grace_seconds)

    def adopt(self, workload_id: int, handle: Handle) -> bool:
        adopted = self.backend.adopt(workload_id, _inner(handle))
        entry = handle.get(TOKEN_KEY)
        if isinstance(entry, Mapping) and "id" in entry and "user" in entry:
            self._issued[workload_id] = (str(entry["user"]), str(entry["id"]))
        if not adopted and workload_id in self._issued:
            self._gone.append(workload_id)
        return adopted

    async def poll(self) -> list[Exit | Checkpoint]:
        self.revocations.poll()
        reports = await self.backend.poll()
        ended = [r.workload_id for r in reports if isinstance(r, Exit)] + self._gone
        self._gone = []
        # stored (committed) before the ends are reported and revoked after, in the
        # background: the ends do not wait for the hub (a reclaim of 500 jobs waited 3-5 s
        # for 500 revocations), and a service that stops in between revokes them at its
        # next start (revocations.py)
        self.revocations.keep(self._issued.pop(w) for w in ended if w in self._issued)
        return reports

    async def _revoke(self, user: str, token_id: str) -> None:
        try:
            await self.tokens.revoke(user, token_id)
        except HubTokenError as error:
            self.log.warning(
                "a job token of %s (id %s) stays valid until it expires: %s", user, token_id, error
            )


def _with_credentials(job: JobSpec, credentials: Mapping[str, str]) -> JobSpec:
    return replace(job, credentials={**job.credentials, **credentials})
