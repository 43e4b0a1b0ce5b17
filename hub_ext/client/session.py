"""Talking to the FracHub service: its URL, the request headers, and how an answer becomes a
result or a ``FracHubError`` (the service's own words, or what to check when the answer is
not the service's). Both faces of the client (``hub_ext.client.api``) stand on this."""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from scheduler import __version__
from scheduler.common.scopes import API_PATH, SERVICE_PREFIX

URL_ENV = "FRACHUB_URL"
TOKEN_ENV = "FRACHUB_TOKEN"
SERVER_TOKEN_ENV = "JUPYTERHUB_API_TOKEN"  # a notebook server's own token
PROJECT_ENV = "FRACHUB_PROJECT"

PAGINATION_MEDIA_TYPE = "application/jupyterhub-pagination+json"

RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0)
"""Seconds before each new try of a submission that got no answer: five tries within about
8 s (and the requests' own time), then the last error is the answer."""
RETRY_STATUSES = frozenset({502, 503, 504})
"""A gateway's or the service's "not now" (the proxy while the service restarts, the
service while the hub or the database is away): the request may or may not have been
carried out."""


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


def worth_retrying(error: FracHubError) -> bool:
    """Whether a request that failed with ``error`` may succeed if sent again: no answer
    came (refused, dropped or timed-out connection) or a 502/503/504. A submission is sent
    again only under its idempotency key, so that one that did arrive is stored once."""
    return error.status in RETRY_STATUSES or (isinstance(error, Unreachable) and not error.status)


def new_idempotency_key() -> str:
    """A new ``Idempotency-Key`` value: a random UUID, quoted as the IETF draft writes it."""
    return f'"{uuid.uuid4()}"'


def tell_stderr(message: str) -> None:
    """The default ``notice``: one ``frachub:`` line on stderr (the CLI's stderr, or the
    notebook's, where the magics run)."""
    print(f"frachub: {message}", file=sys.stderr, flush=True)


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
    notice: tells the user what the client is doing while they wait (a submission sent
        again); one line on stderr by default.
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
        notice: Callable[[str], None] = tell_stderr,
    ) -> None:
        self.url = service_url(url)
        self.api_url = self.url + API_PATH
        self.default_project = default_project
        self.timeout = timeout
        self.token_source = token_source
        self.url_source = url_source
        self.notice = notice
        self.retry_delays: tuple[float, ...] = RETRY_DELAYS
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
