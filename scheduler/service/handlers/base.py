"""What every API handler shares: authentication with the hub, scope checks, JSON in and
out, errors as ``{"status", "message"}``, and the hub's pagination convention.

Two kinds of caller reach the API. Programs (the CLI, the magics, the spawner, curl) send a
JupyterHub token in the ``Authorization`` header. The panel's JavaScript sends nothing but
the browser's cookies: the ``HubOAuth`` cookie the service set when the user logged in
through the hub. A cookie is sent by the browser whatever page made the request, so a
cookie-authenticated request must also carry the XSRF token the panel page was rendered with
(header ``X-XSRFToken``); JupyterHub's ``HubOAuth`` checks it (``_xsrf`` cookie against the
header, bound to the login session) before it accepts the cookie at all. A token in a header
cannot be forged across sites, so token requests skip the check.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Awaitable, Sequence
from typing import Any
from urllib.parse import urlencode

import aiohttp
from jupyterhub.services.auth import HubOAuth, HubOAuthenticated
from sqlalchemy.exc import DBAPIError, OperationalError
from tornado import web
from tornado.log import app_log
from traitlets import Float, validate

from scheduler.common.scopes import ADMIN_GROUP, lacking
from scheduler.fields import InvalidSpec
from scheduler.service.access import JOB, Caller
from scheduler.service.hub.directory import HubDirectory, HubDirectoryError
from scheduler.service.hub.hubapi import HUB_TIMEOUT, hub_unavailable
from scheduler.service.persistence.orm import NAME_LENGTH
from scheduler.service.persistence.store import WorkloadPage
from scheduler.service.requests import NAME, PageRequest, cursor_after, parse_page
from scheduler.service.scheduling.loop import SchedulingLoop

PAGINATION_MEDIA_TYPE = "application/jupyterhub-pagination+json"


LIST_LIMITS = {"project": 16, "user": 5, "state": 16, "kind": 3}
"""How many values a list query parameter may name (the OpenAPI document says the same)."""
MAX_LIST_VALUE = 255


class ServiceOAuth(HubOAuth):
    """``HubOAuth`` for a service that may start without the hub's OAuth variables, and
    whose token checks give up on a stalled hub.

    ``HubOAuth`` refuses an empty client id or API token as soon as it is built. The service
    reports a missing token itself, with what to do about it, and its client id is the one
    the hub gives every service (``service-<name>``) when $JUPYTERHUB_CLIENT_ID is not set
    (an external service run by hand).

    ``HubOAuth`` itself waits on the hub as long as its HTTP client does (minutes) and
    answers a hub it cannot reach with a 500 naming the hub's URL and the service's host;
    here each check waits ``hub_timeout`` seconds at most, and an outage answers 503 in
    words that name the hub only."""

    hub_timeout = Float(
        HUB_TIMEOUT, help="Seconds to wait for the hub's answer, connecting included."
    ).tag(config=True)

    @validate("oauth_client_id", "api_token")
    def _ensure_not_empty(self, proposal: Any) -> Any:
        return proposal.value

    async def _api_request(self, method: str, url: str, /, **kwargs: Any) -> Any:
        kwargs.setdefault(
            "timeout",
            aiohttp.ClientTimeout(total=self.hub_timeout),
        )
        try:
            return await super()._api_request(method, url, **kwargs)
        except web.HTTPError as error:
            # HubOAuth raises its own error inside ``except``: the cause is the context
            cause = error.__context__
            if isinstance(cause, aiohttp.ClientConnectorError):
                cause = cause.os_error
            if isinstance(cause, asyncio.TimeoutError | aiohttp.ClientError | OSError):
                outage = hub_unavailable(
                    cause if isinstance(cause, asyncio.TimeoutError | OSError) else OSError(),
                    self.hub_timeout,
                )
            elif error.status_code == 502:  # the hub answered 5xx
                outage = "the hub is unavailable: it answered with an error; try again shortly"
            else:
                outage = None
            if outage is None:
                raise
            raise web.HTTPError(503, outage) from None


def make_hub_auth(parent: object, prefix: str, timeout: float = HUB_TIMEOUT) -> HubOAuth:
    """The service's one ``HubOAuth``: tokens for the API, the OAuth cookie for browsers."""
    name = os.environ.get("JUPYTERHUB_SERVICE_NAME") or "frachub"
    return ServiceOAuth(
        parent=parent,
        base_url=prefix,
        cache_max_age=60,
        oauth_client_id=os.environ.get("JUPYTERHUB_CLIENT_ID") or f"service-{name}",
        hub_timeout=timeout,
    )


DATABASE_UNAVAILABLE = "the database is unavailable; try again shortly"


def database_outage(error: BaseException) -> bool:
    """Whether ``error`` says the database could not be reached or used (refused, down,
    locked, a connection lost mid-request), rather than that a statement was wrong."""
    return isinstance(error, OperationalError) or (
        isinstance(error, DBAPIError) and error.connection_invalidated
    )


def _refuse_constant(name: str) -> None:
    raise json.JSONDecodeError(f"{name} is not a number JSON allows", name, 0)


class JSONErrors(web.RequestHandler):
    """Errors as the hub writes them: ``{"status": N, "message": "..."}``."""

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        if status_code == 405:
            self.set_header("Allow", ", ".join(self.allowed_methods()))
        message = self._reason
        exc_info = kwargs.get("exc_info")
        if exc_info:
            error = exc_info[1]
            if isinstance(error, web.HTTPError) and error.log_message:
                message = error.log_message % error.args if error.args else error.log_message
            elif isinstance(error, InvalidSpec):
                message = str(error)
        self.clear_header("Content-Disposition")
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish(json.dumps({"status": status_code, "message": message}))

    @classmethod
    def allowed_methods(cls) -> list[str]:
        """The verbs this handler implements itself (tornado answers 405 to the others)."""
        verbs = set()
        for klass in cls.__mro__:
            if klass is web.RequestHandler:
                break
            verbs.update(verb for verb in cls.SUPPORTED_METHODS if verb.lower() in vars(klass))
        return sorted(verbs)

    def _handle_request_exception(self, error: BaseException) -> None:
        if isinstance(error, InvalidSpec):
            self.send_error(error.status_hint, exc_info=(type(error), error, error.__traceback__))
            return
        if database_outage(error) and not self._finished:
            # the driver's words name the database's host: the log has them, the caller not
            app_log.warning("%s: the database is unavailable: %s", self._request_summary(), error)
            outage = web.HTTPError(503, DATABASE_UNAVAILABLE)
            self.send_error(503, exc_info=(type(outage), outage, None))
            return
        super()._handle_request_exception(error)


class NotFoundHandler(JSONErrors):
    """Anything under the prefix that matches no route."""

    def prepare(self) -> None:
        raise web.HTTPError(404, f"no such API endpoint: {self.request.path}")


class APIHandler(HubOAuthenticated, JSONErrors):
    """Token- or cookie-authenticated JSON API. ``prepare`` asks the hub who the token (from
    the header, else from the ``HubOAuth`` cookie) belongs to, cached by ``HubAuth``, so by
    the time a verb runs ``self.caller`` is known.

    ``HubOAuthenticated`` contributes the hub's XSRF rules (``xsrf_token``,
    ``check_xsrf_cookie``); nothing else of it is used: the API never redirects to a login
    page, it answers 403."""

    caller: Caller
    as_job = False
    """The request came with a job's own token, admitted by ``require(..., job=True)``: it
    may reach that one job only (``WorkloadAccess.find``)."""
    _xsrf_refusal: str | None = None

    @property
    def hub_auth(self) -> HubOAuth:
        return self.settings["hub_auth"]

    @property
    def loop(self) -> SchedulingLoop:
        return self.settings["scheduling_loop"]

    @property
    def directory(self) -> HubDirectory:
        return self.settings["directory"]

    def set_default_headers(self) -> None:
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.set_header("Cache-Control", "no-store")

    # -- one transaction per request ------------------------------------------------------

    def _handle_request_exception(self, error: BaseException) -> None:
        # before the error is written: the answer must not wait on a session left broken
        self._end_transaction(failed=True)
        super()._handle_request_exception(error)

    def on_finish(self) -> None:
        self._end_transaction(failed=self.get_status() >= 400)

    def _end_transaction(self, failed: bool) -> None:
        """Commit or roll back; a database that is down fails the rollback too, and the
        caller is still answered (503, by ``_handle_request_exception``)."""
        try:
            self.loop.store.end(failed=failed)
        except DBAPIError as error:
            if not database_outage(error):
                raise
            app_log.warning("the database is unavailable: %s", error)
            with contextlib.suppress(DBAPIError):
                self.loop.store.session.rollback()

    # -- streams end with their client -----------------------------------------------------

    _gone: asyncio.Event | None = None

    def on_connection_close(self) -> None:
        self.gone_event.set()
        super().on_connection_close()

    @property
    def gone_event(self) -> asyncio.Event:
        if self._gone is None:
            self._gone = asyncio.Event()
        return self._gone

    @property
    def client_gone(self) -> bool:
        stream = getattr(self.request.connection, "stream", None)
        return self.gone_event.is_set() or (stream is not None and stream.closed())

    async def wait_unless_gone(self, waiting: Awaitable[Any], timeout: float) -> None:
        """Wait for ``waiting`` (news for a stream or long poll) at most ``timeout`` seconds,
        and no longer once the client has gone: an abandoned request ends at once rather
        than polling on until its workload ends."""
        tasks = {
            asyncio.ensure_future(waiting),
            asyncio.ensure_future(self.gone_event.wait()),
        }
        try:
            await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def check_xsrf_cookie(self) -> None:
        """Called by ``HubOAuth`` before it accepts a session cookie on a request that needs
        the check (not for token requests, nor plain page navigation). A refusal there only
        makes the request anonymous; remember why, so that the 403 can say so."""
        try:
            super().check_xsrf_cookie()
        except web.HTTPError as error:
            self._xsrf_refusal = error.log_message
            raise

    async def prepare(self) -> None:
        model = await self.hub_auth.get_user(self, sync=False)
        if not model:
            if self._xsrf_refusal:
                raise web.HTTPError(
                    403,
                    f"XSRF check failed ({self._xsrf_refusal}): a browser session must send "
                    "the X-XSRFToken header the FracHub page gives it; reload the page",
                )
            raise web.HTTPError(
                403, "authentication required: send a JupyterHub token as 'Authorization: token …'"
            )
        if not self.hub_auth.check_scopes(self.hub_auth.access_scopes, model):
            raise web.HTTPError(
                403, f"this token lacks {' or '.join(sorted(self.hub_auth.access_scopes))}"
            )
        if len(model["name"]) > NAME_LENGTH:
            raise web.HTTPError(
                403, f"user names longer than {NAME_LENGTH} characters cannot use FracHub"
            )
        kind = model.get("kind", "user")
        groups = model.get("groups")
        if groups is None and kind == "user":
            try:
                groups = await self.directory.groups_of(model["name"])
            except HubDirectoryError as error:
                raise web.HTTPError(503, str(error)) from None
        self.caller = Caller(
            name=model["name"],
            scopes=frozenset(model.get("scopes") or ()),
            groups=frozenset(groups or ()),
            kind=kind,
            token_id=model.get("token_id"),
        )

    def require(self, scope: str, *, job: bool = False) -> None:
        """403 unless the caller holds ``scope``; ``job``: a job's own token
        (``custom:frachub:job``) will do instead, for its own job."""
        if self.caller.has(scope):
            return
        if job and JOB in self.caller.scopes:
            self.as_job = True
            return
        raise web.HTTPError(403, f"this action needs the scope {scope}: {self.lacks(scope)}")

    def lacks(self, scope: str) -> str:
        """A refusal's reason when the caller's credential lacks ``scope``: it names the
        credential (a token, a job's token, the panel's login) and who the hub grants the
        scope to, never the user as the one lacking it."""
        if JOB in self.caller.scopes:
            credential = "this job's own token"
        elif self.request.headers.get("Authorization"):
            credential = "this token"
        else:
            credential = "your login to FracHub (the panel's session)"
        return lacking(scope, credential, admin_group=ADMIN_GROUP in self.caller.groups)

    # -- bodies and replies ---------------------------------------------------------------

    def json_body(self) -> Any:
        if not self.request.body:
            return {}
        try:
            return json.loads(self.request.body, parse_constant=_refuse_constant)
        except RecursionError:
            raise web.HTTPError(400, "body: nested too deeply") from None
        except ValueError as error:  # also a number of more digits than Python converts
            raise web.HTTPError(400, f"body: not valid JSON ({error})") from None

    def write_json(self, value: Any, status: int = 200) -> None:
        self.set_status(status)
        self.finish(json.dumps(value))

    # -- lists ----------------------------------------------------------------------------

    def page(self) -> PageRequest:
        settings = self.settings
        arguments = {
            key: self.get_argument(key)
            for key in ("offset", "limit", "cursor")
            if key in self.request.arguments
        }
        return parse_page(arguments, settings["page_default_limit"], settings["page_max_limit"])

    def write_page(self, items: Sequence[Any], asked: PageRequest, page: WorkloadPage) -> None:
        """A bare list, or with ``Accept: application/jupyterhub-pagination+json`` the hub's
        ``{"items", "_pagination"}`` envelope. Either way the next page, when there is one,
        is named by a cursor after this page's last id: in the envelope's ``next`` (its
        ``url`` uses the cursor; its ``offset`` still works for clients that count), and for
        the bare list in a ``Link: <…>; rel="next"`` header. A client that ignores both
        reads the first page, as before."""
        following = None
        if page.more and page.records:
            position = asked.position + len(items)
            cursor = cursor_after(page.records[-1].id, position)
            arguments = {k: self.get_arguments(k) for k in self.request.arguments if k != "offset"}
            arguments.update(cursor=[cursor], limit=[str(asked.limit)])
            url = f"{self.request.path}?{urlencode(arguments, doseq=True)}"
            following = {"offset": position, "limit": asked.limit, "cursor": cursor, "url": url}
        if not self.paginated():
            if following is not None:
                self.set_header("Link", f'<{following["url"]}>; rel="next"')
            self.write_json(list(items))
            return
        self.write_json(
            {
                "items": list(items),
                "_pagination": {
                    "offset": asked.position,
                    "limit": asked.limit,
                    "total": page.total,
                    "next": following,
                },
            }
        )

    def paginated(self) -> bool:
        """Whether the answer is the envelope, whose ``total`` costs a count."""
        return PAGINATION_MEDIA_TYPE in self.request.headers.get("Accept", "")

    def flag_argument(self, name: str) -> bool:
        """``?active``, ``?active=1``/``true``/``yes`` are on; ``0``/``false``/``no`` are off."""
        if name not in self.request.arguments:
            return False
        raw = self.get_argument(name).lower()
        if raw in ("", "1", "true", "yes"):
            return True
        if raw in ("0", "false", "no"):
            return False
        raise InvalidSpec(name, f"must be true or false, got {raw!r}")

    def list_argument(self, name: str) -> list[str]:
        """``?state=running&state=pending`` or ``?state=running,pending``; at most
        ``LIST_LIMITS[name]`` values of at most ``MAX_LIST_VALUE`` characters each, so that no
        query outgrows what the hub's proxy accepts (16 KiB of request line and headers)."""
        values = []
        for raw in self.get_arguments(name):
            if not raw:
                raise InvalidSpec(name, "must not be empty (leave it out to mean any)")
            values.extend(part for part in raw.split(",") if part)
        most = LIST_LIMITS.get(name, 16)
        if len(values) > most:
            raise InvalidSpec(name, f"may name at most {most} values, got {len(values)}")
        if any(len(value) > MAX_LIST_VALUE for value in values):
            raise InvalidSpec(name, f"each value must be at most {MAX_LIST_VALUE} characters")
        if name == "project" and not all(NAME.fullmatch(value) for value in values):
            raise InvalidSpec(name, "must name projects (letters, digits, '.', '_', '-'; 1-63)")
        return values
