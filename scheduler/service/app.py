"""``frachub service``: the scheduler as a JupyterHub service.

``FracHubService`` is a traitlets ``Application`` like JupyterHub itself: every knob is a
documented trait, loadable from a Python config file (``--config``) or the command line
(``--FracHubService.grace_period=60``); ``frachub service --help-all`` lists them. It binds
to ``JUPYTERHUB_SERVICE_URL`` under ``JUPYTERHUB_SERVICE_PREFIX`` and authenticates every
request with the hub (``HubOAuth``: API tokens, and the Training panel's OAuth cookie with
XSRF checks), so it runs the same whether the hub starts it (a managed
service) or an operator does (an external one).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import re
import signal
import time
from dataclasses import replace
from typing import Any, ClassVar
from urllib.parse import urlparse

from jupyterhub.services.auth import HubAuth
from tornado import httputil, web
from tornado.httpserver import HTTPServer
from traitlets import (
    Bool,
    Dict,
    Float,
    Instance,
    Integer,
    List,
    TraitError,
    Type,
    Unicode,
    default,
    validate,
)
from traitlets.config import Application

from scheduler import __version__
from scheduler.backends.local import LocalBackend
from scheduler.common.scopes import CUSTOM_SCOPES
from scheduler.fields import TIME_LIMIT_FIELDS, InvalidSpec, parse_queues, time_limit_fields
from scheduler.service.handlers import allocations, dryrun, history, info, pages, queues, workloads
from scheduler.service.handlers.base import NotFoundHandler, make_hub_auth
from scheduler.service.hub.directory import HubDirectory
from scheduler.service.hub.hubapi import HUB_TIMEOUT
from scheduler.service.hub.idle import HubServers, IdlePoller, IdleSettings
from scheduler.service.hub.jobtokens import CredentialedBackend, HubTokens
from scheduler.service.persistence import datalock
from scheduler.service.persistence.orm import QueueRecord
from scheduler.service.persistence.retention import Retention, purge
from scheduler.service.persistence.store import Store, StoreError, open_store
from scheduler.service.policy_settings import PolicySettings
from scheduler.service.requests import resource_defaults
from scheduler.service.runtime.gpu_watch import GpuMetrics, GpuUsageCollector, GpuWatch
from scheduler.service.runtime.memory_watch import MemoryWatch, MemoryWatchdog
from scheduler.service.runtime.metrics import Metrics
from scheduler.service.runtime.sampler import sample_every
from scheduler.service.runtime.usage_decay import UsageDecaySettings, usage_source
from scheduler.service.scheduling.loop import SchedulingLoop, Settings
from scheduler.service.server import ProxiedHTTPServer

LOCK_FILE = datalock.SERVICE_LOCK_FILE
API_MODULES = (workloads, allocations, dryrun, queues, info, history)  # what openapi.json describes
HANDLER_MODULES = (*API_MODULES, pages)


SERVICE_QUEUE_FIELDS = ("members", *TIME_LIMIT_FIELDS)
"""Fields of a queue entry the service keeps beside the engine's queue (``parse_queues``)."""


def check_queues(entries: object, where: str) -> list[dict]:
    """``queues`` as configured (and as ``frachub up --projects`` reads them): a list of
    dicts, each a queue spec plus an optional list of member names; ValueError names the
    entry at fault."""
    if not isinstance(entries, list):
        raise ValueError(f"{where} must be a list of projects")
    stripped = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ValueError(f"{where}[{i}] must be a dict")
        members = entry.get("members", [])
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            raise ValueError(f"{where}[{i}].members must be a list of names")
        stripped.append({k: v for k, v in entry.items() if k not in SERVICE_QUEUE_FIELDS})
        try:
            time_limit_fields(entry, f"{where}[{i}] ({entry.get('name')})")
        except InvalidSpec as error:
            raise ValueError(str(error)) from None
    try:
        parse_queues(stripped, where)
    except InvalidSpec as error:
        raise ValueError(str(error)) from None
    return entries


def _optional_backends() -> list[type]:
    """The backends whose packages are installed, so ``--help-all`` lists their settings too
    (the Kubernetes backend needs the ``kubernetes`` extra)."""
    try:
        from scheduler.backends.kubernetes import KubernetesBackend
    except ImportError:
        return []
    return [KubernetesBackend]


class Switchboard(httputil.HTTPServerConnectionDelegate):
    """One listening socket for the process's life: the standby application answers until
    the real one is ready, so a caller never finds the port closed between the two (a
    restarted replica used to refuse connections while it recovered)."""

    def __init__(self, app: httputil.HTTPServerConnectionDelegate) -> None:
        self.app = app

    def start_request(
        self, server_conn: object, request_conn: httputil.HTTPConnection
    ) -> httputil.HTTPMessageDelegate:
        return self.app.start_request(server_conn, request_conn)

    def on_close(self, server_conn: object) -> None:
        self.app.on_close(server_conn)


def kept(logger: logging.Logger, level: int) -> bool:
    """Whether a record of ``level`` would be written by a handler of ``logger`` or of the
    loggers it propagates to. traitlets leaves its application's logger at DEBUG and sets
    ``log_level`` on the handler, so ``isEnabledFor`` alone says yes to every line."""
    if not logger.isEnabledFor(level):
        return False
    found = False
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            found = True
            if level >= handler.level:
                return True
        current = current.parent if current.propagate else None
    return not found and logging.lastResort is not None and level >= logging.lastResort.level


SECRET_IN_URL = re.compile(r"(?i)([?&;](?:token|access_token|code|state|_xsrf)=)[^&;\s\"'#]+")
"""A credential in a query string: a hub token (``?token=``, ``?access_token=``), and the
OAuth callback's one-time code and state."""
SECRET_IN_HEADER = re.compile(
    r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?(?:token|bearer|basic)\s+)[^\s\"',;}]+"
)
REDACTED = "[redacted]"


def redact(text: str) -> str:
    """``text`` with the credentials a URL or an ``Authorization`` header may carry replaced
    by ``[redacted]``."""
    return SECRET_IN_HEADER.sub(rf"\1{REDACTED}", SECRET_IN_URL.sub(rf"\1{REDACTED}", text))


class RedactSecrets(logging.Filter):
    """Rewrites a log record so no token reaches a log file: tornado's own lines (an
    uncaught exception, a refused request) and ours name the request's URL, whose query
    string may hold the caller's token."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


REDACT_SECRETS = RedactSecrets()
LOGGERS_TO_REDACT = ("tornado.access", "tornado.application", "tornado.general")


def redact_logs(service_log: logging.Logger) -> None:
    """Put ``REDACT_SECRETS`` on every logger the service's requests are logged by (ours,
    tornado's, which HubAuth writes to as well) and on the handlers that write what reaches
    the root logger, Python's last-resort handler included."""
    for logger in (service_log, *map(logging.getLogger, LOGGERS_TO_REDACT)):
        logger.addFilter(REDACT_SECRETS)
        for handler in logger.handlers:
            handler.addFilter(REDACT_SECRETS)
    for handler in [*logging.getLogger().handlers, logging.lastResort]:
        if handler is not None:
            handler.addFilter(REDACT_SECRETS)


class FracHubService(PolicySettings, Application):
    name = "frachub-service"
    version = __version__
    description = "The FracHub scheduler: GPU quotas, fair share and preemption for JupyterHub."

    aliases: ClassVar[dict] = {
        "config": "FracHubService.config_file",
        "db": "FracHubService.db_url",
        "data-dir": "FracHubService.data_dir",
        "log-level": "Application.log_level",
    }
    classes: ClassVar[list] = [LocalBackend, MemoryWatchdog, GpuMetrics, *_optional_backends()]

    config_file = Unicode(
        "",
        help="A Python config file (like jupyterhub_config.py) setting these traits.",
    ).tag(config=True)

    service_url = Unicode(
        help="""URL to listen on, e.g. http://127.0.0.1:10101.
        Default: $JUPYTERHUB_SERVICE_URL (set by the hub for managed services)."""
    ).tag(config=True)

    @default("service_url")
    def _service_url(self) -> str:
        return os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101")

    service_prefix = Unicode(
        help="""URL prefix the hub's proxy routes to this service.
        Default: $JUPYTERHUB_SERVICE_PREFIX, else /services/frachub/."""
    ).tag(config=True)

    @default("service_prefix")
    def _service_prefix(self) -> str:
        return os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/frachub/")

    data_dir = Unicode(
        help="""Where the service keeps its SQLite database, job logs and checkpoints.
        Default: $FRACHUB_DATA_DIR, else ./frachub-data in the working directory."""
    ).tag(config=True)

    @default("data_dir")
    def _data_dir(self) -> str:
        return os.path.abspath(os.environ.get("FRACHUB_DATA_DIR", "frachub-data"))

    db_url = Unicode(
        help="""SQLAlchemy URL of the store, e.g. postgresql://frachub@db/frachub.
        Default: sqlite:///<data_dir>/frachub.sqlite (WAL mode)."""
    ).tag(config=True)

    @default("db_url")
    def _db_url(self) -> str:
        return f"sqlite:///{os.path.join(self.data_dir, 'frachub.sqlite')}"

    queues = List(
        Dict(),
        help="""Projects and departments, each a dict with name, and optionally parent,
        deserved_gpus (guaranteed quota), over_quota_weight (share of idle GPUs, default 1),
        limit_gpus (hard cap) and priority (who borrows idle GPUs first), plus members (user
        names that belong to the project besides its JupyterHub group of the same name;
        "*" for every user).
        Queues defined here are managed here: the REST API cannot change them. Example:
        [{"name": "vision", "deserved_gpus": 2}, {"name": "nlp", "deserved_gpus": 1}].""",
    ).tag(config=True)

    @validate("queues")
    def _validate_queues(self, proposal):
        return check_queues(proposal.value, "FracHubService.queues")

    grace_period = Float(
        30.0,
        help="""Seconds a preempted or cancelled job gets between SIGTERM and SIGKILL to save a
        checkpoint (terminationGracePeriodSeconds on Kubernetes).""",
    ).tag(config=True)

    default_min_runtime = Float(
        0.0,
        help="""Seconds a started training job is protected from preemption unless its
        submission says otherwise (Run:ai's min-runtime), so short jobs are not churned.""",
    ).tag(config=True)

    cluster_may_grow = Bool(
        False,
        help="""Accept jobs and notebooks that fit no node of the cluster as it is now (a
        gang larger than all its GPUs, 8 GPUs on one node of 4-GPU nodes): they wait for nodes
        an autoscaler adds. Off: they are refused at once (409) with the reason, as a request
        that can never start. A notebook beyond its deserved quota is refused either way.""",
    ).tag(config=True)

    cycle_interval = Float(
        5.0,
        help="""Seconds between timer-driven scheduling cycles. Cycles also run at once on
        every change (submit, cancel, exit, queue edit); the timer catches min_runtime and
        max_runtime deadlines.""",
    ).tag(config=True)

    poll_interval = Float(0.5, help="Seconds between checks of the backend for finished jobs.").tag(
        config=True
    )

    idle_check_interval = Float(
        60.0,
        help="""Seconds between checks of idle GPU notebooks: the servers of allocations with
        an idle limit (idle_timeout_seconds, sent by the spawner from the profile) are warned,
        then stopped through the hub when unused for that long. 0 disables the checks.""",
    ).tag(config=True)

    idle_warning_fraction = Float(
        0.8,
        help="""How far into its idle limit a notebook is warned (in the panel and its events)
        before its server is stopped: 0.8 warns with a fifth of the limit left, 12 minutes
        before a one-hour limit stops it. Between 0 and 1.""",
    ).tag(config=True)

    idle_by_gpu = Bool(
        True,
        help="""Judge an idle notebook by its GPU when the GPU use sampler has figures for it
        (GpuMetrics): its activity is then the last sample in which it kept its GPU at least
        GpuMetrics.busy_percent busy, whatever the hub says of its kernels; a notebook whose
        kernels are busy but whose GPU is idle is idle, and one whose user is away while its
        GPU works is not. False: the hub's activity only.""",
    ).tag(config=True)

    @validate("idle_check_interval", "idle_warning_fraction")
    def _validate_idle(self, proposal):
        name, value = proposal.trait.name, proposal.value
        if name == "idle_check_interval" and value < 0:
            raise ValueError(f"FracHubService.{name} must be >= 0 (0 disables), got {value}")
        if name == "idle_warning_fraction" and not 0 < value < 1:
            raise ValueError(f"FracHubService.{name} must be between 0 and 1, got {value}")
        return value

    backend_class = Type(
        LocalBackend,
        klass=object,  # any class with the Backend protocol (scheduler/backends/base.py)
        help="""The backend that runs jobs: LocalBackend (subprocesses on this machine, the
        default) or scheduler.backends.kubernetes.KubernetesBackend (needs
        pip install 'frachub[kubernetes]').""",
    ).tag(config=True)

    workload_retention_days = Float(
        90.0,
        help="""Days a finished workload (its record, events and usage intervals) is kept after
        it ends; older ones are deleted, so usage reports reach back this far. 0 keeps them
        forever.""",
    ).tag(config=True)

    log_retention_days = Float(
        30.0,
        help="""Days the logs of a finished job are kept after it ends (local backend:
        <data_dir>/logs/<id>). 0 keeps them as long as the workload. Checkpoints are never
        deleted by the service.""",
    ).tag(config=True)

    usage_sample_interval = Float(
        60.0,
        help="""Seconds between usage samples: each project's GPUs in use, quota, fair share
        and queue lengths, stored for the panel's history charts. 0 takes none.""",
    ).tag(config=True)

    usage_sample_retention_days = Float(
        35.0,
        help="""Days usage samples are kept (the history charts reach back this far). 0 keeps
        them forever.""",
    ).tag(config=True)

    retention_check_interval = Float(
        3600.0, help="Seconds between retention passes (the first runs at start-up)."
    ).tag(config=True)

    @validate(
        "workload_retention_days",
        "log_retention_days",
        "retention_check_interval",
        "usage_sample_interval",
        "usage_sample_retention_days",
    )
    def _validate_retention(self, proposal):
        name, value = proposal.trait.name, proposal.value
        if name == "retention_check_interval" and value <= 0:
            raise ValueError(f"FracHubService.{name} must be > 0, got {value}")
        if value < 0:
            raise ValueError(f"FracHubService.{name} must be >= 0 (0 keeps forever), got {value}")
        return value

    page_default_limit = Integer(50, help="List size when a request names no limit.").tag(
        config=True
    )
    page_max_limit = Integer(500, help="Largest list a request may ask for.").tag(config=True)

    job_tokens = Bool(
        True,
        help="""Give every training job its own hub token (issued when it starts, revoked when
        it ends), so that ``hub_ext.client.checkpointed()`` reaches the API from inside the job on
        every backend. Needs the hub's ``tokens`` scope in the service's role
        (docs/service.md, "A job's own token").""",
    ).tag(config=True)

    job_token_seconds = Integer(
        30 * 24 * 3600,
        help="""Seconds a job's token lives at most. It is revoked when the job ends; this
        bounds only a token the service never got to revoke.""",
    ).tag(config=True)

    job_service_url = Unicode(
        help="""The service's URL as jobs reach it (their FRACHUB_URL, completed with
        service_prefix), e.g. http://frachub.jupyterhub.svc:10101 on Kubernetes. Default:
        service_url, unless that listens on every interface (0.0.0.0), which no job can
        connect to: then jobs get no token.""",
    ).tag(config=True)

    @validate("job_token_seconds")
    def _validate_job_token_seconds(self, proposal):
        if proposal.value < 60:
            raise ValueError(
                f"FracHubService.job_token_seconds must be >= 60, got {proposal.value}"
            )
        return proposal.value

    def jobs_service_url(self) -> str | None:
        """``FRACHUB_URL`` for jobs: the service's API root under its prefix, or None when
        nothing says where jobs can reach it."""
        base = self.job_service_url or self.service_url
        parts = urlparse(base)
        if not self.job_service_url and (parts.hostname or "") in ("0.0.0.0", "::", ""):
            return None
        prefix = "/" + self.service_prefix.strip("/")
        if parts.path.rstrip("/").endswith(prefix):  # a job_service_url naming the service
            return base.rstrip("/") + "/"
        return base.rstrip("/") + prefix + "/"

    hub_timeout = Float(
        HUB_TIMEOUT,
        help="""Seconds the service waits for the hub's answer, connecting included (token
        checks, group lookups, job tokens, idle checks): past it a request answers 503 "the
        hub is unavailable" rather than hanging.""",
    ).tag(config=True)

    group_cache_seconds = Float(
        30.0, help="How long the hub's answer about a user's groups is reused."
    ).tag(config=True)

    _lock_fd: int | None = None
    hub_auth = Instance(HubAuth)
    store = Instance(Store, allow_none=True)
    scheduling_loop = Instance(SchedulingLoop, allow_none=True)
    print_scopes = Bool(False, help="Print the custom scopes for jupyterhub_config.py.").tag(
        config=True
    )
    extra_settings = Dict(help="Extra tornado settings (for tests and reverse proxies).").tag(
        config=True
    )

    @default("hub_auth")
    def _hub_auth(self) -> HubAuth:
        prefix = self.service_prefix
        # HubOAuth: tokens, and the panel's cookie
        return make_hub_auth(self, prefix, self.hub_timeout)

    # -- start-up -------------------------------------------------------------------------

    def initialize(self, argv=None) -> None:
        try:
            super().initialize(argv)
        except (TraitError, ValueError) as error:  # a setting on the command line
            self.log.critical("%s", error)
            self.exit(2)
        if self.config_file:
            if not os.path.exists(self.config_file):
                self.log.critical("config file %s does not exist", self.config_file)
                self.exit(2)
            if not self.config_file.endswith((".py", ".json")):
                self.log.critical(
                    "config file %s: use a Python (.py) or JSON (.json) file", self.config_file
                )
                self.exit(2)
            try:
                self.load_config_file(self.config_file)
                self.update_config(self.cli_config)  # the command line wins over the file
            except (TraitError, ValueError) as error:
                self.log.critical("%s: %s", self.config_file, error)
                self.exit(2)
        if not self.hub_auth.api_token:
            self.log.critical(
                "no hub API token: run this as a JupyterHub service, or set "
                "JUPYTERHUB_API_TOKEN and JUPYTERHUB_API_URL"
            )
            self.exit(2)
        redact_logs(self.log)

    def _sync_config_queues(self, store: Store) -> None:
        """Make the database's config-managed queues match ``queues``."""
        configured = {entry["name"]: (i, entry) for i, entry in enumerate(self.queues)}
        parsed = {
            queue.name: queue
            for queue in parse_queues(
                [
                    {k: v for k, v in entry.items() if k not in SERVICE_QUEUE_FIELDS}
                    for entry in self.queues
                ]
            )
        }
        # a missing quota stays None: "what my children deserve" for departments, 0 for leaves
        existing = {record.name: record for record in store.queues()}
        for name, (position, entry) in configured.items():
            queue = parsed[name]
            record = existing.get(name) or QueueRecord(name=name)
            record.set_quota(replace(queue, deserved_gpus=entry.get("deserved_gpus")))
            record.members = list(entry.get("members", []))
            record.default_time_limit, record.max_time_limit = time_limit_fields(entry, name)
            record.source = "config"
            record.position = position
            store.add(record)
        for name, record in existing.items():
            if record.source == "config" and name not in configured:
                self.log.warning(
                    "queue %s was removed from the config; keeping it as an API-managed queue",
                    name,
                )
                record.source = "api"
        store.commit()

    def make_app(self, loop: SchedulingLoop, metrics: Metrics) -> web.Application:
        prefix = "/" + self.service_prefix.strip("/")
        handlers = []
        for module in HANDLER_MODULES:
            for pattern, handler in module.default_handlers:
                handlers.append((prefix + pattern, handler))
        settings = {
            "hub_auth": self.hub_auth,
            "scheduling_loop": loop,
            "directory": HubDirectory(
                self.hub_auth.api_url,
                self.hub_auth.api_token,
                self.group_cache_seconds,
                self.hub_timeout,
            ),
            "metrics": metrics,
            "backend_name": self.backend_class.__name__,
            "gpu_sharing": getattr(loop.backend, "gpu_sharing_health", None),
            "default_min_runtime": self.default_min_runtime,
            "resource_defaults": resource_defaults(self.default_cpu, self.default_memory_gib),
            "cluster_may_grow": self.cluster_may_grow,
            "page_default_limit": self.page_default_limit,
            "page_max_limit": self.page_max_limit,
            "usage_sample_interval": self.usage_sample_interval,
            "log_function": self._log_request,
            "standby_reason": lambda: (
                "this replica lost the leader Lease and is shutting down"
                if getattr(loop.backend, "leadership_lost", None) is not None
                and loop.backend.leadership_lost.is_set()
                else ""
            ),
            **pages.page_settings(self.data_dir),
            **self.extra_settings,
        }
        return web.Application(handlers, default_handler_class=NotFoundHandler, **settings)

    def _standby_app(self) -> web.Application:
        """While ``connect()`` waits for the leader Lease (a standby replica) and the workloads
        are recovered, every request answers 503 JSON, ``api/v1/health`` included: the chart's
        readinessProbe keeps the standby out of the Service's endpoints, and a caller is told
        why."""
        prefix = "/" + self.service_prefix.strip("/")
        return web.Application(
            [(prefix + r"/api/v1/health/?", info.HealthHandler)],
            default_handler_class=info.StandbyHandler,
            standby_reason=lambda: self._standby_reason,
            log_function=lambda handler: None,
        )

    def _listen(self, app: httputil.HTTPServerConnectionDelegate) -> HTTPServer:
        url = urlparse(self.service_url)
        server = ProxiedHTTPServer(app, xheaders=True)
        server.listen(url.port or 80, url.hostname or "127.0.0.1")
        return server

    def _log_request(self, handler: web.RequestHandler) -> None:
        status = handler.get_status()
        level = logging.INFO if status < 400 else logging.WARNING
        if status < 300 and handler.request.method == "GET":
            level = logging.DEBUG
        if not kept(self.log, level):
            return  # a line no one keeps is not worth formatting, every request
        self.log.log(
            level,
            "%d %s %s %.1fms",
            status,
            handler.request.method,
            handler.request.uri,
            1000 * handler.request.request_time(),
        )

    def _hold_data_dir(self) -> None:
        """One service per data directory: a second one would run every job twice."""
        os.makedirs(self.data_dir, exist_ok=True)
        try:
            self._lock_fd = datalock.hold(os.path.join(self.data_dir, LOCK_FILE))
        except datalock.Held as held:
            self.log.critical(
                "another FracHub service (pid %s) is using %s; stop it first",
                held.pid,
                self.data_dir,
            )
            self.exit(2)

    def _private_database(self) -> None:
        """The database holds users' job environments: readable by the service alone."""
        if not self.db_url.startswith("sqlite:///"):
            return
        path = self.db_url.removeprefix("sqlite:///")
        for name in (path, f"{path}-wal", f"{path}-shm"):
            if os.path.exists(name):
                os.chmod(name, 0o600)

    async def _retention(self) -> None:
        assert self.store is not None
        retention = Retention(
            self.workload_retention_days, self.log_retention_days, self.usage_sample_retention_days
        )
        running = asyncio.get_running_loop()
        while True:
            try:
                await running.run_in_executor(
                    None, purge, self.store.engine, self.data_dir, retention, time.time(), self.log
                )
            except Exception:  # the next pass tries again; the service goes on
                self.log.exception("retention pass failed")
            await asyncio.sleep(self.retention_check_interval)

    def _credentialed(self, backend: Any) -> Any:
        """The backend, wrapped so that every job gets its own token (``job_tokens``)."""
        if not self.job_tokens:
            return backend
        url = self.jobs_service_url()
        if url is None:
            self.log.warning(
                "jobs get no API token: service_url %s listens everywhere; set "
                "FracHubService.job_service_url to the URL jobs reach the service at",
                self.service_url,
            )
            return backend
        tokens = HubTokens(self.hub_auth.api_url, self.hub_auth.api_token, self.hub_timeout)
        return CredentialedBackend(
            backend, tokens, url, self.job_token_seconds, log=self.log, store=self.store
        )

    async def serve(self) -> None:
        made: dict[type, Any] = {}
        for settings in (MemoryWatchdog, GpuMetrics):  # a bad value stops start-up, named
            try:
                made[settings] = settings(parent=self)
            except (TraitError, ValueError) as error:
                self.log.critical("%s: %s", settings.__name__, error)
                self.exit(2)
        watchdog, gpu_metrics = made[MemoryWatchdog], made[GpuMetrics]
        self._hold_data_dir()
        try:
            self.store = open_store(self.db_url)
        except StoreError as error:
            self.log.critical("%s", error)
            self.exit(2)
        assert self.store is not None
        self._private_database()
        self._sync_config_queues(self.store)
        try:
            backend = self.backend_class(parent=self, data_dir=self.data_dir)
        except (TraitError, ValueError, RuntimeError) as error:
            self.log.critical("%s: %s", self.backend_class.__name__, error)
            self.exit(2)
        begin = getattr(backend, "begin", None)
        if begin is not None:  # the local backend's MPS daemons; a refusal when MPS cannot run
            try:
                await begin()
            except RuntimeError as error:
                self.log.critical("%s", error)
                self.exit(2)
        connect = getattr(backend, "connect", None)
        switch: Switchboard | None = None
        server: HTTPServer | None = None
        if connect is not None:  # Kubernetes: waits for the leader Lease, lists, starts watches
            self._standby_reason = "standby: waiting for the leader Lease"
            switch = Switchboard(self._standby_app())
            server = self._listen(switch)
            try:
                await connect()
            except BaseException:
                server.stop()
                raise
            self._standby_reason = "starting: recovering workloads from the store and cluster"
        backend = self._credentialed(backend)
        metrics = Metrics()
        sharing = getattr(backend, "gpu_sharing_health", None)
        if sharing is not None:
            metrics.watch_gpu_sharing(sharing)
        policy = self.scheduling_policy()
        loop = SchedulingLoop(
            self.store,
            backend,
            policy,
            Settings(
                grace_seconds=self.grace_period,
                cycle_interval=self.cycle_interval,
                poll_interval=self.poll_interval,
            ),
            metrics,
            log=self.log,
        )
        self.scheduling_loop = loop
        loop.usage_source = usage_source(
            self.store,
            self.fair_share_usage,
            self.usage_sample_interval,
            UsageDecaySettings.of_hours(
                self.fair_share_usage_half_life_hours,
                self.fair_share_usage_window_days,
                self.fair_share_usage_k,
                self.fair_share_usage_refresh_seconds,
            ),
            self.log,
        )
        inventory = loop.inventory
        self.log.info(
            "FracHub %s: %d GPUs on %d nodes from %s inventory; store %s",
            __version__,
            len(inventory.gpus),
            len(inventory.nodes),
            inventory.source,
            self.db_url,
        )
        await loop.recover()
        loop.start()
        idle = None
        if self.idle_check_interval > 0:
            idle = IdlePoller(
                loop,
                HubServers(self.hub_auth.api_url, self.hub_auth.api_token, self.hub_timeout),
                IdleSettings(
                    self.idle_check_interval, self.idle_warning_fraction, self.idle_by_gpu
                ),
                log=self.log,
            )
            idle.start()
        retention = None
        if (
            self.workload_retention_days > 0
            or self.log_retention_days > 0
            or self.usage_sample_retention_days > 0
        ):
            retention = asyncio.create_task(self._retention())
        sampler = None
        if self.usage_sample_interval > 0:
            sampler = asyncio.create_task(sample_every(loop, self.usage_sample_interval, self.log))
        watch = MemoryWatch(loop, watchdog, log=self.log)
        watch.start()
        gpu_watch = GpuWatch(loop, gpu_metrics, log=self.log)
        gpu_watch.start()
        metrics.registry.register(GpuUsageCollector(loop))
        app = self.make_app(loop, metrics)
        if switch is None:
            server = self._listen(app)
        else:
            switch.app = app
        assert server is not None
        self.log.info(
            "listening on %s/%s", self.service_url.rstrip("/"), self.service_prefix.lstrip("/")
        )
        stopped = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stopped.set)
        gc.freeze()
        await stopped.wait()
        self.log.info("shutting down; running jobs keep running and are re-adopted on restart")
        server.stop()
        if retention is not None:
            retention.cancel()
        if sampler is not None:
            sampler.cancel()
        if idle is not None:
            await idle.stop()
        await watch.stop()
        await gpu_watch.stop()
        await loop.stop()
        self.store.close()

    def start(self) -> None:
        if self.print_scopes:
            for scope, spec in CUSTOM_SCOPES.items():
                print(f"{scope}: {spec['description']}")
            return
        asyncio.run(self.serve())


main = FracHubService.launch_instance
