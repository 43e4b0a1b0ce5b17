"""The I/O edge of the Kubernetes backend: API calls with retries, and watch caches.

- ``load_configuration(kubeconfig)`` builds a ``kubernetes_asyncio`` ``Configuration`` from a
  kubeconfig file, or from the pod's service account when running in a cluster.
- ``Kube`` wraps the client's typed APIs so that calls take and return plain JSON dicts, and
  retries what is worth retrying (timeouts, connection errors, 429 and 5xx) with exponential
  backoff. Every other answer is raised as ``KubeError`` with the server's status and reason,
  so callers can treat 404 (gone) and 409 (``AlreadyExists`` or a stale ``resourceVersion``)
  as the facts they are.
- ``Informer`` keeps a cache of one kind of object: list, then watch from the list's
  ``resourceVersion``; a watch that ends is resumed from the last version seen, and a 410
  ``Gone``/``Expired`` (the server no longer has that history) makes it list again. Errors are
  retried with backoff; the cache is never dropped while the server is unreachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.request import getproxies

import aiohttp
from kubernetes_asyncio import client, config

from scheduler.backends.kubernetes.pods import Obj

RETRIED_STATUS = (429, 500, 502, 503, 504)


class KubeError(Exception):
    """An answer of the API server that is not worth retrying (or retries ran out)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message


async def load_configuration(kubeconfig: str = "", context: str = "") -> client.Configuration:
    """In-cluster credentials when running in a pod without ``kubeconfig``; else the file
    (``kubeconfig``, ``$KUBECONFIG`` or ``~/.kube/config``)."""
    configuration = client.Configuration()
    if not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)
    else:
        path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        await config.load_kube_config(
            config_file=path, context=context or None, client_configuration=configuration
        )
    return configuration


def own_namespace(fallback: str = "default") -> str:
    """The pod's namespace in a cluster (its service account's), else ``fallback``."""
    path = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    if os.path.exists(path):
        with open(path) as f:
            return f.read().strip() or fallback
    return fallback


def environment_proxies_or_netrc() -> bool:
    """Whether aiohttp's ``trust_env`` could find anything here: a proxy variable
    (``HTTPS_PROXY`` and the like, as ``urllib.request.getproxies`` reads them) or a netrc
    file (``$NETRC``, else ``~/.netrc``)."""
    if any(scheme in getproxies() for scheme in ("http", "https", "ws", "wss")):
        return True
    path = os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    return os.path.exists(path)


def backoff(attempt: int, base: float = 0.2, cap: float = 10.0) -> float:
    """Seconds before retry number ``attempt`` (0-based): exponential with jitter."""
    return min(cap, base * 2**attempt) * (0.5 + random.random() / 2)


class Kube:
    """Typed-API calls in and out as dicts, with retries; one per backend."""

    def __init__(
        self,
        configuration: client.Configuration | None = None,
        *,
        api_client: client.ApiClient | None = None,
        request_timeout: float = 30.0,
        retries: int = 5,
        log: logging.Logger | None = None,
    ) -> None:
        """From a ``configuration``, or sharing an existing ``api_client`` (KubeSpawner's)."""
        self._owns_client = api_client is None
        self.api_client = api_client or client.ApiClient(configuration)
        if self._owns_client and not environment_proxies_or_netrc():
            # kubernetes_asyncio's session trusts the environment: aiohttp then looks for a
            # proxy and a netrc file on every request, each in a thread of its own (a tenth
            # of the service's CPU in benchmarks/kai_scale.py's fill). Where there is
            # neither, the look finds nothing: skip it. A proxy in the environment, or a
            # netrc file, keeps it as it was.
            session = self.api_client.rest_client.pool_manager
            session._trust_env = False
        self.core = client.CoreV1Api(self.api_client)
        self.batch = client.BatchV1Api(self.api_client)
        self.coordination = client.CoordinationV1Api(self.api_client)
        self.request_timeout = request_timeout
        self.retries = retries
        self.log = log or logging.getLogger("frachub.kubernetes")

    async def close(self) -> None:
        if self._owns_client:
            await self.api_client.close()

    async def call(self, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Obj:
        """``fn(*args, **kwargs)`` as a dict; retried on timeouts, 429 and 5xx."""
        text = await self.text(fn, *args, **kwargs)
        return json.loads(text) if text else {}

    async def text(self, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> str:
        """The body of ``fn(*args, **kwargs)`` as text (``read_namespaced_pod_log``)."""
        for attempt in range(self.retries + 1):
            try:
                response = await fn(
                    *args, _preload_content=False, _request_timeout=self.request_timeout, **kwargs
                )
                async with response:
                    text = await response.text()
                if response.status < 300:
                    return text
                try:
                    body = json.loads(text) if text else {}
                except ValueError:
                    body = {}
                error = KubeError(
                    response.status,
                    str(body.get("reason") or response.reason),
                    str(body.get("message") or text[:200]),
                )
                if response.status not in RETRIED_STATUS or attempt == self.retries:
                    raise error
                problem: Exception = error
                delay = backoff(attempt)
                retry_after = response.headers.get("Retry-After", "")
                if response.status == 429 and retry_after.isdigit():
                    delay = max(delay, min(float(retry_after), 30.0))
            except (TimeoutError, aiohttp.ClientError) as e:
                if attempt == self.retries:
                    raise KubeError(0, "Unreachable", f"{type(e).__name__}: {e}") from e
                problem = e
                delay = backoff(attempt)
            self.log.warning(
                "Kubernetes API %s failed (%s); retrying in %.1fs", fn.__name__, problem, delay
            )
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")


CALLS_AT_ONCE = 16
"""API calls sent side by side (``scheduler.common.concurrency.side_by_side``): a gang's
Jobs and their admissions (a 500-node gang is 1,000 calls, which one after another cost
1,000 round trips), a poll's confirmations of stopped attempts and their Jobs' deletions."""


class Informer:
    """A watch cache of one kind of object; see the module docstring.

    ``list_fn`` is a typed list function (``core.list_namespaced_pod``); ``args`` its
    positional arguments. ``on_change(kind, obj)`` is called for every event after the first
    list, with ``kind`` one of ADDED, MODIFIED, DELETED, and RELISTED (obj is then empty).
    """

    def __init__(
        self,
        kube: Kube,
        list_fn: Callable[..., Awaitable[Any]],
        *args: Any,
        label_selector: str = "",
        watch_timeout: int = 300,
        on_change: Callable[[str, Obj], None] | None = None,
        field_selector: str = "",
        key: Callable[[Obj], str] | None = None,
    ) -> None:
        """``key`` names an object in ``objects`` (default: its name; a watch across
        namespaces needs ``namespaced_key``)."""
        self.kube = kube
        self.field_selector = field_selector
        self._key = key or _key
        self.list_fn = list_fn
        self.args = args
        self.label_selector = label_selector
        self.watch_timeout = watch_timeout
        self.on_change = on_change
        self.objects: dict[str, Obj] = {}
        self.generation = 0
        """Counts the changes to ``objects`` (each event, each list): what is made from
        them can be kept until it moves."""
        self.resource_version = ""
        self.relists = 0
        self._task: asyncio.Task | None = None
        self._response: aiohttp.ClientResponse | None = None

    async def start(self) -> None:
        """The first list (raises if the server cannot answer), then watch in the background."""
        await self._list()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._response is not None:
            with contextlib.suppress(Exception):
                self._response.close()

    async def _list(self) -> None:
        extra = {"field_selector": self.field_selector} if self.field_selector else {}
        body = await self.kube.call(
            self.list_fn, *self.args, label_selector=self.label_selector, **extra
        )
        self.objects = {self._key(obj): obj for obj in body.get("items", [])}
        self.generation += 1
        self.resource_version = str(body.get("metadata", {}).get("resourceVersion", ""))

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                await self._watch_once()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as e:
                gone = getattr(e, "status", None) == 410 or "410" in str(e)[:4]
                if not gone:
                    self.kube.log.warning(
                        "watch of %s failed (%s); listing again", self.list_fn.__name__, e
                    )
                    await asyncio.sleep(backoff(failures))
                    failures += 1
                try:
                    await self._list()
                except Exception as list_error:  # the server is away: keep the old cache
                    self.kube.log.warning("list %s failed: %s", self.list_fn.__name__, list_error)
                    await asyncio.sleep(backoff(failures))
                    failures += 1
                    continue
                self.relists += 1
                if self.on_change is not None:
                    self.on_change("RELISTED", {})

    async def _watch_once(self) -> None:
        """One watch, from ``resource_version`` until the server ends it. The stream is
        read here, one JSON line per event, each parsed once (``kubernetes_asyncio``'s
        ``Watch`` parses each twice and encodes it once more: a fifth of the backend's CPU
        at 4,000 jobs, benchmarks/kai_scale.py). An ERROR event is raised as ``KubeError``
        with its code (410: the history is gone, list again)."""
        response = await self.list_fn(
            *self.args,
            label_selector=self.label_selector,
            **({"field_selector": self.field_selector} if self.field_selector else {}),
            resource_version=self.resource_version,
            timeout_seconds=self.watch_timeout,
            allow_watch_bookmarks=True,
            watch=True,
            _preload_content=False,
            _request_timeout=self.watch_timeout + 30,
        )
        self._response = response
        try:
            if response.status >= 300:
                text = await response.text()
                try:
                    body = json.loads(text) if text else {}
                except ValueError:
                    body = {}
                raise KubeError(
                    response.status,
                    str(body.get("reason") or response.reason),
                    str(body.get("message") or text[:200]),
                )
            while True:
                line = await response.content.readline()
                if not line:
                    return  # the server ended the watch (its timeout)
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object")
                if kind == "ERROR" or not isinstance(obj, dict) or not kind:
                    status = obj if isinstance(obj, dict) else {}
                    raise KubeError(
                        int(status.get("code") or 0),
                        str(status.get("reason") or "WatchError"),
                        str(status.get("message") or line[:200]),
                    )
                version = obj.get("metadata", {}).get("resourceVersion")
                if version:
                    self.resource_version = str(version)
                if kind == "BOOKMARK":
                    continue
                if kind == "DELETED":
                    self.objects.pop(self._key(obj), None)
                else:
                    self.objects[self._key(obj)] = obj
                self.generation += 1
                if self.on_change is not None:
                    self.on_change(kind, obj)
        finally:
            response.release()
            self._response = None


def _key(obj: Obj) -> str:
    return str(obj["metadata"]["name"])


def namespaced_key(obj: Obj) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"
