"""What the REST API accepts, validated completely before anything is stored.

Pure functions from decoded JSON to typed requests; the first problem raises ``InvalidSpec``
naming the field (``gpus: must be a fraction in (0, 1] ...``), which the handlers turn into a
400 ``{"status", "message"}``. Unknown fields are refused, as in scenario files: a misspelt
``gpu`` silently defaulting would start the wrong job.

Everything is bounded (``scheduler/fields.py`` has the numbers, the OpenAPI document states
them): no string holds a NUL or half a surrogate pair (neither can be stored, nor passed to a
process), strings and lists have sizes, bodies a nesting depth, numbers a range.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from scheduler.common.limits import MAX_ID, MAX_REPLICAS, shown
from scheduler.engine import (
    Kind,
    Queue,
    Request,
    WorkloadRequest,
    default_priority,
)
from scheduler.engine.model import DEFAULT_PREEMPTIBLE
from scheduler.fields import (
    QUEUE_FIELDS,
    InvalidSpec,
    gpu_model_field,
    gpus_field,
    integer_field,
    mapping_field,
    number_field,
    parse_queues,
    priority_field,
    queue_host_dict,
)
from scheduler.service.policies.sweeps import Sweep, parse_sweep

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RESERVED_ENV = ("FRACHUB_", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")

SUBMIT_FIELDS = (
    "name",
    "project",
    "command",
    "working_dir",
    "env",
    "gpus",
    "gpu_memory_gib",
    "gpu_model",
    "replicas",
    "priority",
    "kind",
    "preemptible",
    "max_runtime_seconds",
    "min_runtime_seconds",
    "checkpoint_interval_seconds",
    "sweep",
)
ALLOCATE_FIELDS = (
    "user",
    "server_name",
    "project",
    "gpus",
    "gpu_memory_gib",
    "gpu_model",
    "preemptible",
    "idle_timeout_seconds",
)
DRY_RUN_FIELDS = ("user", "project", "requests")
DRY_RUN_REQUEST_FIELDS = ("gpus", "gpu_memory_gib", "gpu_model", "preemptible")
MAX_DRY_RUN_REQUESTS = 32
"""A spawn form's GPU choices, over all its profiles, with room to spare."""
MAX_IDLE_TIMEOUT = 365 * 24 * 3600
"""A year: longer limits are typos (milliseconds?); null already means "never"."""
MAX_RUNTIME = 10 * 365 * 24 * 3600
"""Ten years, for max_runtime_seconds and min_runtime_seconds."""
MAX_DEPTH = 8
"""Nesting of a request body; the deepest real one is 2 (env, command)."""
MAX_ARGUMENT = 128 * 1024
"""One command line, argument or ``NAME=value``: what Linux passes to a process
(MAX_ARG_STRLEN)."""
MAX_COMMAND_PARTS = 4096
MAX_ENV_VARIABLES = 1024
MAX_ENV_TOTAL = 256 * 1024
MAX_PATH = 4096
MAX_SERVER_NAME = 255
MAX_MEMBERS = 10_000
MAX_USER_NAME = 255
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
"""NUL, and surrogates (decoded JSON holds one only when it was unpaired)."""


@dataclass(frozen=True)
class Submission:
    """A training (or inference) job as submitted: what it asks of the scheduler (``ask``,
    whose project may still be None, to be resolved from the submitter's memberships, and
    whose ``min_runtime`` None means the service's default) and what the backend runs."""

    name: str | None
    ask: WorkloadRequest
    command: str | list[str]
    working_dir: str | None
    env: dict[str, str]
    sweep: Sweep | None = None
    """One job per combination of the sweep's parameters (``service/policies/sweeps.py``)."""


@dataclass(frozen=True)
class AllocationRequest:
    """A notebook server's GPU share, asked for by the spawner on the user's behalf
    (``ask.user``, None for the caller; ``ask.project`` None for the user's only one)."""

    ask: WorkloadRequest
    server_name: str = ""
    idle_timeout: float | None = None
    """Seconds of idleness after which the server is stopped; None: never (the profile's
    limit, which the spawner sends)."""


def _body(document: Any, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(document, Mapping):
        raise InvalidSpec("body", "must be a JSON object")
    check_strings(document)
    return mapping_field(document, "", allowed)


def check_strings(value: Any, where: str = "", depth: int = 0) -> None:
    """Refuse a body nested deeper than MAX_DEPTH, or holding a string (key or value) with a
    NUL or an unpaired surrogate, naming the field."""
    if depth > MAX_DEPTH:
        raise InvalidSpec(where or "body", f"is nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        found = UNSTORABLE.search(value)
        if found:
            what = "a NUL character" if found.group() == "\x00" else "an unpaired surrogate"
            raise InvalidSpec(where or "body", f"must not contain {what}")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            path = f"{where}.{key}" if where else str(key)
            check_strings(key, f"{where or 'body'} (a key)", depth + 1)
            check_strings(item, path, depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_strings(item, f"{where or 'body'}[{i}]", depth + 1)


def _sized(value: str, key: str, limit: int) -> str:
    if len(value) > limit:
        raise InvalidSpec(key, f"must be at most {limit} characters, got {len(value)}")
    return value


def _optional_name(body: Mapping, key: str) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise InvalidSpec(
            key,
            "must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit, "
            f"got {shown(value)}",
        )
    return value


def _notebook(
    request: Request, preemptible: bool, project: str | None = None, user: str | None = None
) -> WorkloadRequest:
    """A notebook's share as asked: interactive, never protected by a minimum run time."""
    return WorkloadRequest.of(
        Kind.INTERACTIVE,
        request,
        preemptible=preemptible,
        project=project,
        user=user,
        min_runtime=0.0,
    )


def _bool(body: Mapping, key: str, default: bool) -> bool:
    value = body.get(key, default)
    if not isinstance(value, bool):
        raise InvalidSpec(key, f"must be true or false, got {shown(value)}")
    return value


def _command(value: Any) -> str | list[str]:
    if isinstance(value, str) and value.strip():
        return _sized(value, "command", MAX_ARGUMENT)
    if (
        isinstance(value, list)
        and value
        and all(isinstance(part, str) for part in value)
        and value[0]
    ):
        if len(value) > MAX_COMMAND_PARTS:
            raise InvalidSpec("command", f"must have at most {MAX_COMMAND_PARTS} parts")
        for i, part in enumerate(value):
            _sized(part, f"command[{i}]", MAX_ARGUMENT)
        return list(value)
    raise InvalidSpec(
        "command",
        "is required: a shell command line (string) or a list of program and arguments",
    )


def _env(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidSpec("env", "must be an object of variable names to string values")
    if len(value) > MAX_ENV_VARIABLES:
        raise InvalidSpec("env", f"must hold at most {MAX_ENV_VARIABLES} variables")
    env: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not ENV_NAME.fullmatch(key):
            raise InvalidSpec(f"env.{shown(key)}", "is not a valid environment variable name")
        if key.startswith(RESERVED_ENV):
            raise InvalidSpec(f"env.{key}", "is set by FracHub from the GPU share")
        if not isinstance(item, str):
            raise InvalidSpec(f"env.{key}", f"must be a string, got {shown(item)}")
        env[key] = _sized(item, f"env.{key}", MAX_ARGUMENT)
    total = sum(len(key) + len(item) + 1 for key, item in env.items())
    if total > MAX_ENV_TOTAL:
        raise InvalidSpec("env", f"must be at most {MAX_ENV_TOTAL} characters in all, got {total}")
    return env


def parse_submission(document: Any) -> Submission:
    body = _body(document, SUBMIT_FIELDS)
    kind_name = body.get("kind", "training")
    if kind_name not in (Kind.TRAINING.value, Kind.INFERENCE.value):
        raise InvalidSpec(
            "kind",
            f"must be 'training' or 'inference', got {kind_name!r} "
            "(notebooks get their GPUs through allocations)",
        )
    kind = Kind(kind_name)
    working_dir = body.get("working_dir")
    if working_dir is not None and (not isinstance(working_dir, str) or not working_dir):
        raise InvalidSpec("working_dir", "must be a directory path")
    if working_dir is not None:
        _sized(working_dir, "working_dir", MAX_PATH)
    gpus, memory_mib = gpus_field(body, "")
    preemptible = _bool(body, "preemptible", DEFAULT_PREEMPTIBLE[kind])
    priority = priority_field(body, "priority", "", default_priority(kind, preemptible))
    replicas = integer_field(body, "replicas", "", 1, 1, MAX_REPLICAS)
    name = _optional_name(body, "name")
    project = _optional_name(body, "project")
    command = _command(body.get("command"))
    env = _env(body.get("env"))
    max_runtime = number_field(
        body,
        "max_runtime_seconds",
        "",
        None,
        optional=True,
        strictly_positive=True,
        maximum=MAX_RUNTIME,
    )
    min_runtime = number_field(
        body, "min_runtime_seconds", "", None, optional=True, maximum=MAX_RUNTIME
    )
    request = Request(gpus, memory_mib, replicas, gpu_models=gpu_model_field(body, ""))
    checkpoint_interval = number_field(
        body,
        "checkpoint_interval_seconds",
        "",
        None,
        optional=True,
        strictly_positive=True,
        maximum=MAX_RUNTIME,
    )
    ask = WorkloadRequest(
        kind,
        request,
        priority,
        preemptible,
        project=project,
        min_runtime=min_runtime,
        max_runtime=max_runtime,
        checkpoint_interval=checkpoint_interval,
    )
    return Submission(
        name=name,
        ask=ask,
        command=command,
        working_dir=working_dir,
        env=env,
        sweep=parse_sweep(body.get("sweep")),
    )


def parse_allocation(document: Any) -> AllocationRequest:
    body = _body(document, ALLOCATE_FIELDS)
    server_name = body.get("server_name", "")
    if not isinstance(server_name, str) or "/" in server_name:
        raise InvalidSpec(
            "server_name", "must be a server's name without '/' ('' for the default server)"
        )
    _sized(server_name, "server_name", MAX_SERVER_NAME)
    gpus, memory_mib = gpus_field(body, "")
    user = _optional_name(body, "user")
    project = _optional_name(body, "project")
    preemptible = _bool(body, "preemptible", False)
    idle_timeout = _idle_timeout(body)
    request = Request(gpus, memory_mib, gpu_models=gpu_model_field(body, ""))
    return AllocationRequest(
        ask=_notebook(request, preemptible, project, user),
        server_name=server_name,
        idle_timeout=idle_timeout,
    )


@dataclass(frozen=True)
class DryRun:
    """Notebook shares to try, each as if it were asked for alone now (their project and
    user are the dry run's)."""

    user: str | None
    project: str | None
    requests: tuple[WorkloadRequest, ...]


def parse_dry_run(document: Any) -> DryRun:
    body = _body(document, DRY_RUN_FIELDS)
    items = body.get("requests")
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_DRY_RUN_REQUESTS:
        raise InvalidSpec(
            "requests",
            f"must be a list of 1 to {MAX_DRY_RUN_REQUESTS} GPU requests "
            '({"gpus": 0.5} or {"gpu_memory_gib": 12}, with "preemptible")',
        )
    requests = []
    for i, item in enumerate(items):
        where = f"requests[{i}]"
        if not isinstance(item, Mapping):
            raise InvalidSpec(where, "must be a JSON object")
        for key in item:
            if key not in DRY_RUN_REQUEST_FIELDS:
                raise InvalidSpec(
                    f"{where}.{shown(key)}",
                    f"is not a field; one of {', '.join(DRY_RUN_REQUEST_FIELDS)}",
                )
        try:
            gpus, memory_mib = gpus_field(item, "")
            preemptible = _bool(item, "preemptible", False)
        except InvalidSpec as error:
            raise InvalidSpec(f"{where}.{error.where}", error.message) from None
        request = Request(gpus, memory_mib, gpu_models=gpu_model_field(item, where))
        requests.append(_notebook(request, preemptible))
    return DryRun(
        user=_optional_name(body, "user"),
        project=_optional_name(body, "project"),
        requests=tuple(requests),
    )


def _idle_timeout(body: Mapping) -> float | None:
    value = number_field(
        body, "idle_timeout_seconds", "", None, optional=True, strictly_positive=True
    )
    if value is not None and value > MAX_IDLE_TIMEOUT:
        raise InvalidSpec(
            "idle_timeout_seconds",
            f"must be at most {MAX_IDLE_TIMEOUT} (a year), got {value!r}; null means never",
        )
    return None if value is None else float(value)


def parse_queue(document: Any, existing: tuple[Queue, ...], name: str | None = None) -> Queue:
    """A queue created (``name`` None, taken from the body) or changed (``name`` given, the
    body holds only the fields to change) through the API, checked against the others."""
    body = _body(document, (*QUEUE_FIELDS, "members"))
    if name is not None:
        if "name" in body and body["name"] != name:
            raise InvalidSpec("name", "cannot be changed; create a new queue instead")
        current = next(queue for queue in existing if queue.name == name)
        merged = {
            "name": name,
            "parent": current.parent,
            "deserved_gpus": current.deserved_gpus,
            "over_quota_weight": current.over_quota_weight,
            "limit_gpus": current.limit_gpus,
            "priority": current.priority,
            **queue_host_dict(current),
        }
        merged.update({k: v for k, v in body.items() if k != "members"})
        others = [queue for queue in existing if queue.name != name]
    else:
        merged = {k: v for k, v in body.items() if k != "members"}
        others = list(existing)
        _optional_name(merged, "name")
    if any(queue.name == merged.get("name") for queue in others):
        raise InvalidSpec("name", f"a queue named {merged['name']!r} exists")
    entries = [_queue_dict(queue) for queue in others] + [merged]
    try:
        parsed = parse_queues(entries, "queues")
    except InvalidSpec as error:
        # name the field of the new entry without the list index the client never sent
        prefix = f"queues[{len(others)}] ({merged.get('name')})."
        if error.where.startswith(prefix):
            raise InvalidSpec(error.where.removeprefix(prefix), error.message) from None
        raise InvalidSpec("body", error.message) from None
    # parse_queues reads a missing quota on a leaf as 0; stored, None keeps meaning "what my
    # children deserve" once the queue gets children, and 0 while it has none
    return replace(parsed[-1], deserved_gpus=merged.get("deserved_gpus"))


def parse_members(document: Mapping[str, Any]) -> list[str] | None:
    members = document.get("members")
    if members is None:
        return None
    if not isinstance(members, list) or not all(
        isinstance(m, str) and 0 < len(m) <= MAX_USER_NAME for m in members
    ):
        raise InvalidSpec(
            "members", f"must be a list of user names (1 to {MAX_USER_NAME} characters each)"
        )
    if len(members) > MAX_MEMBERS:
        raise InvalidSpec("members", f"must list at most {MAX_MEMBERS} users")
    return list(members)


def _queue_dict(queue: Queue) -> dict[str, Any]:
    return {
        "name": queue.name,
        "parent": queue.parent,
        "deserved_gpus": queue.deserved_gpus,
        "over_quota_weight": queue.over_quota_weight,
        "limit_gpus": queue.limit_gpus,
        "priority": queue.priority,
        **queue_host_dict(queue),
    }


def parse_count(raw: str | None, name: str, default: int) -> int:
    """A whole number in [0, 2^63-1] from a query argument; absent gives ``default``."""
    if raw is None:
        return default
    if not re.fullmatch("-?[0-9]{1,20}", raw):
        raise InvalidSpec(name, f"must be a whole number up to {MAX_ID}, got {shown(raw)}")
    value = int(raw)
    if value < 0:
        raise InvalidSpec(name, f"must be >= 0, got {value}")
    if value > MAX_ID:
        raise InvalidSpec(name, f"must be at most {MAX_ID}, got {value}")
    return value


@dataclass(frozen=True)
class PageRequest:
    """Which page of a list a request asks for."""

    limit: int
    offset: int = 0
    """Rows to skip (the hub's ``offset``; 0 with a cursor)."""
    before: int | None = None
    """With a cursor: only ids below this one (the last id of the page before)."""
    position: int = 0
    """How many rows came before this page (``offset``, or what the cursor carried)."""


CURSOR = re.compile(r"([0-9]{1,19})\.([0-9]{1,19})")
"""A cursor: the last id of the page it follows and how many rows came before the next one.
Clients treat it as opaque; the service checks it like any other input."""


def cursor_after(last_id: int, position: int) -> str:
    return f"{last_id}.{position}"


def parse_page(arguments: Mapping[str, str], default_limit: int, max_limit: int) -> PageRequest:
    """``offset`` and ``limit`` the way the hub's API takes them, or ``cursor`` (from a
    page's ``next``), which reads a deep page as fast as the first."""
    limit = max(1, min(parse_count(arguments.get("limit"), "limit", default_limit), max_limit))
    raw = arguments.get("cursor")
    if raw is None:
        offset = parse_count(arguments.get("offset"), "offset", 0)
        return PageRequest(limit, offset=offset, position=offset)
    if "offset" in arguments:
        raise InvalidSpec("offset", "cannot be combined with cursor (the cursor says where)")
    match = CURSOR.fullmatch(raw)
    if match is None:
        raise InvalidSpec(
            "cursor",
            f"is not one this service gave ({shown(raw)}): use the one in the last page's "
            "next, or leave it out to start from the newest",
        )
    # beyond the largest id the database holds: every id is below it
    before, position = (min(int(part), MAX_ID) for part in match.groups())
    return PageRequest(limit, before=before, position=position)
