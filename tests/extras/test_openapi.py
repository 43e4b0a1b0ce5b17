"""The OpenAPI document against the code it describes, without a server.

The document (``scheduler/service/openapi.json``) is hand-written, so these tests keep it
honest: it is valid OpenAPI 3.1; its paths and methods are exactly the handlers' routes and
verbs; each operation's scope and status codes are the ones its handler can produce (read off
the handler's source); its request bodies take exactly the fields the validators accept and
agree with them on sample bodies; and what the views and handlers write validates against
its response schemas, which list exactly the keys the views produce.
"""

from __future__ import annotations

import ast
import asyncio
import copy
import functools
import inspect
import json
import re
import textwrap
import types
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonschema
import pytest
from openapi_spec_validator import validate
from referencing import Registry
from referencing.jsonschema import DRAFT202012
from tornado import httputil, web
from tornado.concurrent import Future

from scheduler.backends.base import Gpu, Inventory
from scheduler.engine import Node, Pending, Queue, QueueStatus
from scheduler.fields import QUEUE_FIELDS, InvalidSpec
from scheduler.service import access, requests
from scheduler.service.handlers import allocations, dryrun, history, info, queues, workloads
from scheduler.service.handlers.base import APIHandler
from scheduler.service.persistence.orm import EventRecord, QueueRecord, WorkloadRecord
from scheduler.service.persistence.store import SampleBucket, UsageRow, WorkloadPage
from scheduler.service.views import nodes_json, queue_json, workload_json

pytestmark = pytest.mark.unit

DOCUMENT_PATH = Path(requests.__file__).with_name("openapi.json")
DOCUMENT: dict[str, Any] = json.loads(DOCUMENT_PATH.read_text(encoding="utf-8"))
HANDLER_MODULES = (workloads, allocations, dryrun, queues, info, history)
VERBS = ("get", "post", "put", "patch", "delete", "head", "options")
SCOPE_NAMES = {"READ": access.READ, "SUBMIT": access.SUBMIT, "ADMIN": access.ADMIN}
ACCESS_SCOPE = "access:services!service=frachub"


# -- the document and the routes ---------------------------------------------------------


def operations() -> Iterator[tuple[str, str, dict]]:
    for path, item in DOCUMENT["paths"].items():
        for verb in VERBS:
            if verb in item:
                yield path, verb, item[verb]


def route_shape(pattern: str) -> str:
    """``/api/v1/workloads/([0-9]+)/logs/?`` -> ``/api/v1/workloads/{}/logs``."""
    shape = re.sub(r"\([^)]*\)", "{}", pattern.removesuffix("/?")).replace("\\.", ".")
    assert not set(shape) & set("()[]*+?^$|\\"), f"cannot read route {pattern!r}"
    assert re.fullmatch(pattern, shape.replace("{}", "1")), f"{shape} is not {pattern!r}"
    return shape


def path_shape(path: str) -> str:
    """``/api/v1/workloads/{workload_id}/logs`` -> ``/api/v1/workloads/{}/logs``."""
    return re.sub(r"\{[^}]+\}", "{}", path)


def handler_verbs(cls: type) -> set[str]:
    """The HTTP verbs a handler implements itself, not tornado's 405 defaults."""
    verbs: set[str] = set()
    for klass in cls.__mro__:
        if klass is web.RequestHandler:
            break
        verbs.update(verb for verb in VERBS if verb in vars(klass))
    return verbs


def routes() -> dict[tuple[str, str], type]:
    """(path shape, verb) -> handler class, over every module's ``default_handlers``."""
    found: dict[tuple[str, str], type] = {}
    for module in HANDLER_MODULES:
        for pattern, cls in module.default_handlers:
            for verb in handler_verbs(cls):
                key = (route_shape(pattern), verb)
                assert key not in found, f"{key} is routed twice"
                found[key] = cls
    return found


def documented() -> dict[tuple[str, str], dict]:
    return {(path_shape(path), verb): op for path, verb, op in operations()}


def resolve(reference: str) -> Any:
    assert reference.startswith("#/"), reference
    node: Any = DOCUMENT
    for part in reference[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def deref(node: Any) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        node = resolve(node["$ref"])
    return node


def schema(name: str) -> dict:
    return DOCUMENT["components"]["schemas"][name]


def test_document_is_valid_openapi_3_1() -> None:
    assert DOCUMENT["openapi"].startswith("3.1.")
    validate(DOCUMENT)


def _unresolved_path_parameter(document: dict) -> None:
    document["paths"]["/api/v1/workloads/{workload_id}"]["parameters"] = []


def _bad_schema_type(document: dict) -> None:
    document["components"]["schemas"]["Error"]["type"] = "nope"


def _bad_parameter_location(document: dict) -> None:
    document["components"]["parameters"]["Offset"]["in"] = "body"


@pytest.mark.parametrize(
    "breakage", [_unresolved_path_parameter, _bad_schema_type, _bad_parameter_location]
)
def test_the_validator_would_notice_a_broken_document(breakage: Callable[[dict], None]) -> None:
    broken = copy.deepcopy(DOCUMENT)
    breakage(broken)
    with pytest.raises(Exception):  # noqa: B017 - the validator's errors share no base class
        validate(broken)


def test_every_reference_resolves() -> None:
    def walk(node: Any) -> Iterator[str]:
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                yield node["$ref"]
            for value in node.values():
                yield from walk(value)
        elif isinstance(node, list):
            for value in node:
                yield from walk(value)

    references = set(walk(DOCUMENT))
    assert references
    for reference in references:
        resolve(reference)


def test_server_is_the_service_prefix() -> None:
    assert [server["url"] for server in DOCUMENT["servers"]] == ["/services/frachub"]


def test_every_route_and_verb_is_documented() -> None:
    missing = sorted(set(routes()) - set(documented()))
    assert not missing, f"handlers without an operation in openapi.json: {missing}"


def test_every_documented_operation_has_a_handler() -> None:
    extra = sorted(set(documented()) - set(routes()))
    assert not extra, f"operations in openapi.json no handler implements: {extra}"


def test_these_are_all_the_api_routes_the_service_serves() -> None:
    """The service also routes the panel's pages (``handlers.pages``): HTML, not part of
    the API. Every other module it routes is checked here, and no page is under /api/."""
    from scheduler.service import app
    from scheduler.service.handlers import pages

    assert app.API_MODULES == HANDLER_MODULES
    assert set(app.HANDLER_MODULES) - set(HANDLER_MODULES) == {pages}
    assert not [pattern for pattern, _ in pages.default_handlers if "api" in pattern]


def test_operation_ids_are_unique() -> None:
    ids = [op["operationId"] for _, _, op in operations()]
    assert len(ids) == len(set(ids))


def test_path_parameters_are_declared() -> None:
    for path, item in DOCUMENT["paths"].items():
        names = set(re.findall(r"\{([^}]+)\}", path))
        declared = {
            deref(parameter)["name"]
            for parameter in item.get("parameters", [])
            if deref(parameter)["in"] == "path"
        }
        assert declared == names, path


# -- what the handlers' source says ------------------------------------------------------


def function_tree(function: Callable) -> ast.AST:
    return ast.parse(textwrap.dedent(inspect.getsource(function)))


def own_method(cls: type, name: str) -> Callable | None:
    """``cls.name`` if a FracHub class defines it (not tornado's RequestHandler)."""
    for klass in cls.__mro__:
        if klass is web.RequestHandler:
            return None
        if name in vars(klass):
            return getattr(cls, name)
    return None


def self_calls(tree: ast.AST) -> Iterator[tuple[str, ast.Call]]:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "self"
        ):
            yield node.func.attr, node


def required_scopes(cls: type, verb: str) -> set[str]:
    scopes = set()
    for name, call in self_calls(function_tree(getattr(cls, verb))):
        if name == "require":
            (argument,) = call.args
            assert isinstance(argument, ast.Name), ast.unparse(call)
            scopes.add(SCOPE_NAMES[argument.id])
    return scopes


def admits_job_token(cls: type, verb: str) -> bool:
    """``self.require(..., job=True)``: a job's own token may act on its own job."""
    return any(
        name == "require" and any(keyword.arg == "job" for keyword in call.keywords)
        for name, call in self_calls(function_tree(getattr(cls, verb)))
    )


def error_statuses(cls: type, function: Callable, seen: set[str] | None = None) -> set[int]:
    """Every error status ``function`` can answer with: ``web.HTTPError(code, ...)``,
    ``InvalidSpec`` (400, like the validators of ``scheduler.service.requests``) and
    ``self.require`` (403), following calls of the handler's own methods."""
    seen = set() if seen is None else seen
    statuses: set[int] = set()
    module_globals = function.__globals__
    for node in ast.walk(function_tree(function)):
        if not isinstance(node, ast.Call):
            continue
        target = node.func
        if isinstance(target, ast.Attribute) and target.attr == "HTTPError":
            code = node.args[0]
            assert isinstance(code, ast.Constant), ast.unparse(node)
            statuses.add(code.value)
        elif isinstance(target, ast.Name):
            called = module_globals.get(target.id)
            if called is InvalidSpec:
                has_hint = len(node.args) > 2 or node.keywords
                assert not has_hint, "an InvalidSpec with a status_hint: read the status here"
                statuses.add(400)
            elif getattr(called, "__module__", None) == requests.__name__:
                statuses.add(400)
    for name, _ in self_calls(function_tree(function)):
        if name == "require":
            statuses.add(403)
        elif name == "list_argument":
            # the hub's proxy answers 431 to a request line over 16 KiB, which only a query
            # naming many long values (beyond the document's bounds) can reach
            statuses.add(431)
        elif name not in seen and (method := own_method(cls, name)) is not None:
            seen.add(name)
            statuses |= error_statuses(cls, method, seen)
    return statuses


def success_statuses(function: Callable) -> set[int]:
    statuses = set()
    for name, call in self_calls(function_tree(function)):
        for keyword in call.keywords:
            if name == "write_json" and keyword.arg == "status":
                statuses.add(keyword.value.value)  # type: ignore[attr-defined]
        if name == "set_status":
            statuses.add(call.args[0].value)  # type: ignore[attr-defined]
    return statuses or {200}


def handler_statuses(cls: type, verb: str) -> set[int]:
    statuses = success_statuses(getattr(cls, verb)) | error_statuses(cls, getattr(cls, verb))
    if issubclass(cls, APIHandler):
        statuses |= error_statuses(cls, APIHandler.prepare)
    return statuses


def reads_body(cls: type, verb: str) -> bool:
    return any(name == "json_body" for name, _ in self_calls(function_tree(getattr(cls, verb))))


@pytest.mark.parametrize("key", sorted(routes()), ids=lambda key: f"{key[1]} {key[0]}")
def test_operation_scope_is_the_one_the_handler_requires(key: tuple[str, str]) -> None:
    cls, operation = routes()[key], documented()[key]
    scopes = required_scopes(cls, key[1])
    assert len(scopes) <= 1, scopes
    scope = next(iter(scopes), None)
    assert "x-frachub-scope" in operation
    assert operation["x-frachub-scope"] == scope
    if scope is None:
        assert "Scope: none" in operation["description"]
        public = not issubclass(cls, APIHandler)
        assert operation.get("security", DOCUMENT["security"]) == (
            [] if public else [{"token": []}]
        )
    else:
        assert f"Scope: `{scope}`" in operation["description"]
        admitted = [scope, access.ADMIN] if scope != access.ADMIN else [access.ADMIN]
        if admits_job_token(cls, key[1]):
            admitted.append(access.JOB)
            assert f"`{access.JOB}`" in operation["description"]
        assert operation["security"] == [{"token": [one]} for one in admitted]


@pytest.mark.parametrize("key", sorted(routes()), ids=lambda key: f"{key[1]} {key[0]}")
def test_operation_statuses_are_the_ones_the_handler_answers(key: tuple[str, str]) -> None:
    cls, operation = routes()[key], documented()[key]
    assert {int(code) for code in operation["responses"]} == handler_statuses(cls, key[1])


@pytest.mark.parametrize("key", sorted(routes()), ids=lambda key: f"{key[1]} {key[0]}")
def test_errors_are_documented_as_the_error_object(key: tuple[str, str]) -> None:
    for code, response in documented()[key]["responses"].items():
        if code == "431":  # the hub's proxy answers it, not the service: no body of ours
            assert "content" not in deref(response)
        elif int(code) >= 400:
            content = deref(response)["content"]
            assert list(content) == ["application/json"]
            assert content["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}


def test_operations_with_a_body_are_the_handlers_that_read_one() -> None:
    with_body = {key for key, op in documented().items() if "requestBody" in op}
    assert with_body == {key for key, cls in routes().items() if reads_body(cls, key[1])}


# -- request bodies ----------------------------------------------------------------------


def body_schema(shape: str, verb: str) -> dict:
    operation = documented()[(shape, verb)]
    return deref(operation["requestBody"]["content"]["application/json"]["schema"])


BODY_FIELDS = {
    ("/api/v1/workloads", "post"): requests.SUBMIT_FIELDS,
    ("/api/v1/allocations", "post"): requests.ALLOCATE_FIELDS,
    ("/api/v1/allocations/dry-run", "post"): requests.DRY_RUN_FIELDS,
    ("/api/v1/queues", "post"): (*QUEUE_FIELDS, *requests.KEPT_BESIDE),
    ("/api/v1/queues/{}", "patch"): (*QUEUE_FIELDS, *requests.KEPT_BESIDE),
}


@pytest.mark.parametrize("key", sorted(BODY_FIELDS), ids=lambda key: f"{key[1]} {key[0]}")
def test_request_body_fields_are_the_ones_the_validator_accepts(key: tuple[str, str]) -> None:
    body = body_schema(*key)
    assert body["type"] == "object"
    assert body["additionalProperties"] is False
    assert sorted(body["properties"]) == sorted(BODY_FIELDS[key])


def test_every_request_body_is_listed_above() -> None:
    assert {key for key, op in documented().items() if "requestBody" in op} == set(BODY_FIELDS)


REGISTRY = Registry().with_resource("urn:frachub:openapi", DRAFT202012.create_resource(DOCUMENT))


def validator(reference: str) -> jsonschema.Draft202012Validator:
    """A validator for the document's schema at ``reference`` (``#/components/...``)."""
    return jsonschema.Draft202012Validator(
        {"$ref": f"urn:frachub:openapi{reference}"}, registry=REGISTRY
    )


def schema_accepts(reference: str, value: Any) -> bool:
    return validator(reference).is_valid(value)


def parser_accepts(parse: Callable[[], Any]) -> bool:
    try:
        parse()
    except InvalidSpec:
        return False
    return True


SUBMISSIONS = [
    {"command": "python train.py", "gpus": 0.5},
    {"command": ["python", "train.py"], "gpus": 2},
    {"command": "x", "gpus": 0.25},
    {"command": "x", "gpus": 1},
    {"command": "x", "gpu_memory_gib": 10},
    {"command": "x", "gpus": 1, "gpu_memory_gib": None},
    {"command": "x", "gpus": None, "gpu_memory_gib": 8.5},
    {
        "name": "my-job.1",
        "project": "vision",
        "command": "x",
        "working_dir": "/tmp",
        "env": {"A_1": "1", "_B": ""},
        "gpus": 1,
        "replicas": 256,
        "priority": -3,
        "kind": "inference",
        "preemptible": False,
        "max_runtime_seconds": 3600,
        "min_runtime_seconds": 0,
    },
    {"command": "x", "gpus": 1, "name": None, "project": None, "working_dir": None},
    {"command": "x", "gpus": 1, "env": None, "max_runtime_seconds": None},
    {"command": "x", "gpus": 1, "time_limit": "2:00:00", "after": 3},
    {"command": "x", "gpus": 1, "time_limit": "1-12", "after_ok": 3, "after": None},
    {"command": "x", "gpus": 1, "time_limit": None, "max_runtime_seconds": 60},
    {"command": "x", "gpus": 1, "time_limit": "2h"},
    {"command": "x", "gpus": 1, "time_limit": 120},
    {"command": "x", "gpus": 1, "time_limit": "30", "max_runtime_seconds": 60},
    {"command": "x", "gpus": 1, "after": 3, "after_ok": 4},
    {"command": "x", "gpus": 1, "after": 0},
    {"command": "x", "gpus": 1, "after_ok": "3"},
    {"command": "x", "gpus": 1, "name": "a" * 63},
    {"command": "x"},
    {"gpus": 1},
    {"command": None, "gpus": 1},
    {"command": "x", "gpus": 1, "gpu_memory_gib": 4},
    {"command": "x", "gpus": None, "gpu_memory_gib": None},
    {"command": "x", "gpus": 1.5},
    {"command": "x", "gpus": 0},
    {"command": "x", "gpus": 0, "cpu": 2},
    {"command": "x", "gpus": 0, "memory_gib": 0.5, "cpu": None},
    {"command": "x", "gpus": 0, "cpu": 0, "memory_gib": 0},
    {"command": "x", "gpus": 0, "cpu": 1, "gpu_memory_gib": 4},
    {"command": "x", "gpus": 1, "cpu": 1.5, "memory_gib": 16},
    {"command": "x", "gpus": 1, "cpu": 0, "memory_gib": None},
    {"command": "x", "gpus": 1, "cpu": -1},
    {"command": "x", "gpus": 1, "cpu": "2"},
    {"command": "x", "gpus": 1, "cpu": 4097},
    {"command": "x", "gpus": 1, "memory_gib": 0.0001},
    {"command": "x", "gpus": 1, "memory_gib": 65537},
    {"command": "x", "gpus": 1, "memory_gib": True},
    {"command": "x", "gpus": -1},
    {"command": "x", "gpus": True},
    {"command": "x", "gpus": "1"},
    {"command": "x", "gpu_memory_gib": 0},
    {"command": "   ", "gpus": 1},
    {"command": [], "gpus": 1},
    {"command": ["", "a"], "gpus": 1},
    {"command": ["a", 1], "gpus": 1},
    {"command": "x", "gpus": 1, "gpu": 1},
    {"command": "x", "gpus": 1, "kind": "interactive"},
    {"command": "x", "gpus": 1, "kind": None},
    {"command": "x", "gpus": 1, "replicas": 0},
    {"command": "x", "gpus": 1, "replicas": 1025},
    {"command": "x", "gpus": 1, "replicas": None},
    {"command": "x", "gpus": 1, "priority": 1.5},
    {"command": "x", "gpus": 1, "priority": True},
    {"command": "x", "gpus": 1, "priority": None},
    {"command": "x", "gpus": 1, "preemptible": "yes"},
    {"command": "x", "gpus": 1, "preemptible": None},
    {"command": "x", "gpus": 1, "env": {"CUDA_VISIBLE_DEVICES": "0"}},
    {"command": "x", "gpus": 1, "env": {"FRACHUB_X": "1"}},
    {"command": "x", "gpus": 1, "env": {"1A": "x"}},
    {"command": "x", "gpus": 1, "env": {"A": 1}},
    {"command": "x", "gpus": 1, "env": ["A=1"]},
    {"command": "x", "gpus": 1, "name": "-bad"},
    {"command": "x", "gpus": 1, "name": "a" * 64},
    {"command": "x", "gpus": 1, "project": "has space"},
    {"command": "x", "gpus": 1, "working_dir": ""},
    {"command": "x", "gpus": 1, "max_runtime_seconds": 0},
    {"command": "x", "gpus": 1, "min_runtime_seconds": -1},
    {"command": "x", "gpus": 1, "min_runtime_seconds": "1"},
    ["command", "x"],
]

ALLOCATIONS = [
    {"gpus": 0.5},
    {"gpus": 0.5, "server_name": "gpu"},
    {"gpus": 1, "server_name": ""},
    {"user": "alice", "project": "vision", "gpu_memory_gib": 4, "preemptible": True},
    {"user": None, "project": None, "gpus": 2},
    {"gpus": 0.5, "cpu": 2, "memory_gib": 8},
    {"gpus": 0.5, "cpu": -2},
    {"gpus": 0.5, "memory_gib": "8G"},
    {"gpus": 0, "cpu": 2},
    {},
    {"server_name": "x"},
    {"gpus": 0.5, "gpu_memory_gib": 1},
    {"gpus": 0.5, "server_name": None},
    {"gpus": 0.5, "server_name": 1},
    {"gpus": 0.5, "command": "x"},
    {"gpus": 0.5, "preemptible": None},
    {"gpus": 0.5, "user": "bad name"},
    {"gpus": 1.25},
    "gpus",
]

EXISTING_QUEUES = (Queue("dept"), Queue("vision", parent="dept", deserved_gpus=2))

NEW_QUEUES = [
    {"name": "nlp"},
    {
        "name": "nlp",
        "parent": "dept",
        "deserved_gpus": 2,
        "over_quota_weight": 0.5,
        "limit_gpus": 4,
        "priority": 3,
        "members": ["alice"],
    },
    {"name": "nlp", "parent": None, "deserved_gpus": None, "limit_gpus": None, "members": None},
    {},
    {"name": None},
    {"name": ""},
    {"name": "-nlp"},
    {"name": "nlp", "deserved_gpus": -1},
    {"name": "nlp", "deserved_gpus": True},
    {"name": "nlp", "over_quota_weight": None},
    {"name": "nlp", "limit_gpus": -0.5},
    {"name": "nlp", "priority": 1.5},
    {"name": "nlp", "priority": None},
    {"name": "nlp", "members": "alice"},
    {"name": "nlp", "members": ["alice", 2]},
    {"name": "nlp", "parent": 3},
    {"name": "nlp", "quota": 1},
    {"name": "nlp", "default_time_limit": "2:00:00", "max_time_limit": "7-00"},
    {"name": "nlp", "default_time_limit": None, "max_time_limit": "30"},
    {"name": "nlp", "max_time_limit": "2h"},
    {"name": "nlp", "default_time_limit": 60},
    [],
]

QUEUE_CHANGES = [
    {},
    {"priority": 2},
    {"name": "vision"},
    {"members": None},
    {"members": []},
    {"deserved_gpus": None, "limit_gpus": 1, "over_quota_weight": 2, "parent": "dept"},
    {"name": "other"},
    {"name": None},
    {"deserved_gpus": -1},
    {"over_quota_weight": None},
    {"members": [None]},
    {"bogus": 1},
    {"max_time_limit": None},
    {"default_time_limit": "1-00:00:00"},
    {"default_time_limit": "soon"},
]


def _queue_accepted(body: Any, name: str | None) -> bool:
    def parse() -> None:
        requests.parse_queue(body, EXISTING_QUEUES, name=name)
        requests.parse_members(body)
        requests.parse_time_limits(body)

    return parser_accepts(parse)


@pytest.mark.parametrize("body", SUBMISSIONS, ids=repr)
def test_submission_schema_agrees_with_the_validator(body: Any) -> None:
    expected = parser_accepts(lambda: requests.parse_submission(body))
    assert schema_accepts("#/components/schemas/Submission", body) is expected


@pytest.mark.parametrize("body", ALLOCATIONS, ids=repr)
def test_allocation_schema_agrees_with_the_validator(body: Any) -> None:
    expected = parser_accepts(lambda: requests.parse_allocation(body))
    assert schema_accepts("#/components/schemas/AllocationRequest", body) is expected


DRY_RUNS = [
    {"requests": [{"gpus": 0.5}]},
    {"user": "alice", "project": "vision", "requests": [{"gpus": 1}, {"gpu_memory_gib": 12}]},
    {"requests": [{"gpus": 2, "preemptible": True}] * 32},
    {"requests": [{"gpus": 0.5}] * 33},
    {"requests": []},
    {"requests": None},
    {},
    {"requests": [{}]},
    {"requests": [{"gpus": 0.5, "gpu_memory_gib": 12}]},
    {"requests": [{"gpus": 1.5}]},
    {"requests": [{"gpus": 0.5, "server_name": ""}]},
    {"requests": [{"gpus": 0.5, "preemptible": "yes"}]},
    {"requests": [7]},
    {"requests": [{"gpus": 0.5}], "kind": "training"},
    {"user": "-x", "requests": [{"gpus": 0.5}]},
    [],
]


@pytest.mark.parametrize("body", DRY_RUNS, ids=repr)
def test_dry_run_schema_agrees_with_the_validator(body: Any) -> None:
    expected = parser_accepts(lambda: requests.parse_dry_run(body))
    assert schema_accepts("#/components/schemas/DryRunRequest", body) is expected


@pytest.mark.parametrize("body", NEW_QUEUES, ids=repr)
def test_queue_create_schema_agrees_with_the_validator(body: Any) -> None:
    expected = _queue_accepted(body, None)
    assert schema_accepts("#/components/schemas/QueueCreate", body) is expected


@pytest.mark.parametrize("body", QUEUE_CHANGES, ids=repr)
def test_queue_update_schema_agrees_with_the_validator(body: Any) -> None:
    expected = _queue_accepted(body, "vision")
    # the one thing a schema cannot say: a name is allowed only if it is the path's
    schema_says = (
        schema_accepts("#/components/schemas/QueueUpdate", body)
        and body.get("name", "vision") == "vision"
    )
    assert schema_says is expected


def test_the_sample_bodies_exercise_both_answers() -> None:
    for bodies, parse in (
        (SUBMISSIONS, requests.parse_submission),
        (ALLOCATIONS, requests.parse_allocation),
        (DRY_RUNS, requests.parse_dry_run),
    ):
        answers = {parser_accepts(functools.partial(parse, body)) for body in bodies}
        assert answers == {True, False}


# -- responses from the views ------------------------------------------------------------

INVENTORY = Inventory(
    nodes=(Node("node-0", gpus=2, gpu_memory_mib=80 * 1024, gpu_model="A100", labels={"a": "b"}),),
    gpus=(
        Gpu("node-0", 0, "GPU-0", "A100", 80 * 1024),
        Gpu("node-0", 1, "GPU-1", "A100", 80 * 1024),
    ),
    source="declared",
)
NOW = 1_790_000_000.0


def job(**overrides: Any) -> WorkloadRecord:
    values: dict[str, Any] = {
        "id": 7,
        "name": "train",
        "user": "alice",
        "project": "vision",
        "kind": "training",
        "state": "running",
        "command": ["python", "train.py"],
        "working_dir": None,
        "env": {"SEED": "1"},
        "server_name": None,
        "gpus": 0.5,
        "gpu_memory_mib": None,
        "replicas": 1,
        "priority": 50,
        "preemptible": True,
        "min_runtime": 0.0,
        "max_runtime": None,
        "submitted_at": NOW,
        "started_at": NOW + 5,
        "finished_at": None,
        "start_seq": 1,
        "placement_json": [{"node": "node-0", "gpus": [[0, 500]]}],
        "handle": None,
        "restart_count": 0,
        "preemptions": 0,
        "stop_reason": None,
        "exit_code": None,
        "message": "",
    }
    values.update(overrides)
    return WorkloadRecord(**values)


def allocation(**overrides: Any) -> WorkloadRecord:
    values: dict[str, Any] = {
        "id": 8,
        "name": "notebook-alice",
        "kind": "interactive",
        "state": "pending",
        "command": None,
        "env": {},
        "server_name": "",
        "gpus": None,
        "gpu_memory_mib": 20 * 1024,
        "priority": 100,
        "preemptible": False,
        "started_at": None,
        "placement_json": [],
    }
    values.update(overrides)
    return job(**values)


FAKE_BACKEND = types.SimpleNamespace(log_path=lambda workload_id, replica: None)


def fake_loop(*records: WorkloadRecord) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        held={},
        pending={8: Pending("project vision is using its deserved 2 GPUs", 1)},
        inventory=INVENTORY,
        records={record.id: record for record in records},
        version=3,
        queue_status={"vision": QueueStatus(2.0, 2.0, 2.0, 1, 1)},
        borrowed={9: "vision is using 2.5 GPUs, beyond its 2 GPUs quota; may be preempted"},
        backend=FAKE_BACKEND,  # no GPU sharing hooks
    )


EVENTS = [
    EventRecord(id=1, workload_id=7, time=NOW, type="submitted", message="to project vision"),
    EventRecord(id=2, workload_id=7, time=NOW + 5, type="started", message="on node-0 GPU 0"),
]


def properties(name: str) -> set[str]:
    return set(schema(name)["properties"])


def assert_valid(reference: str, value: Any) -> None:
    errors = [error.message for error in validator(reference).iter_errors(value)]
    assert not errors, f"{reference}: {errors}\n{json.dumps(value, indent=1)}"


def test_workload_schema_lists_exactly_the_view_keys() -> None:
    loop = fake_loop()
    job_view = workload_json(job(), loop, EVENTS)
    allocation_view = workload_json(allocation(), loop)
    assert properties("Workload") == set(job_view) | set(allocation_view)
    assert set(schema("Workload")["required"]) == set(job_view) & set(allocation_view)
    for view in (
        job_view,
        workload_json(job(), loop),
        workload_json(job(gpus=None, gpu_memory_mib=4096, command="sh run.sh"), loop),
        workload_json(
            job(state="failed", finished_at=NOW + 9, exit_code=1, message="exit 1"), loop
        ),
        allocation_view,
        workload_json(allocation(), loop, EVENTS),
    ):
        assert_valid("#/components/schemas/Workload", json.loads(json.dumps(view)))


def test_allocation_schema_lists_exactly_the_view_keys() -> None:
    loop = fake_loop()
    view = {**workload_json(allocation(), loop), "version": loop.version}
    assert properties("Allocation") == set(view)
    assert set(schema("Allocation")["required"]) == set(view)
    assert_valid("#/components/schemas/Allocation", view)
    running = allocation(state="running", started_at=NOW + 1, gpus=0.5, gpu_memory_mib=None)
    running.placement_json = [{"node": "node-0", "gpus": [[1, 500]]}]
    assert_valid("#/components/schemas/Allocation", {**workload_json(running, loop), "version": 4})


def test_a_job_is_not_an_allocation() -> None:
    loop = fake_loop()
    assert not validator("#/components/schemas/Allocation").is_valid(
        {**workload_json(job(), loop), "version": 1}
    )


def test_queue_schema_lists_exactly_the_view_keys() -> None:
    record = QueueRecord(
        name="vision",
        parent="dept",
        deserved_gpus=2.0,
        over_quota_weight=1.0,
        limit_gpus=None,
        priority=0,
        members=["alice"],
        source="api",
        position=1,
    )
    status = QueueStatus(
        allocated_gpus=1.5, fair_share_gpus=2.0, deserved_gpus=2.0, running=2, pending=1
    )
    views = [queue_json(record, status, []), queue_json(record, None, ["child"])]
    decayed = replace(status, usage=0.75, fair_share_without_usage_gpus=4.0)
    views.append(queue_json(record, decayed, []))
    assert views[-1]["fair_share_note"] == (
        "lowered from 4 GPUs by its recent use (75% of the cluster's, decayed)"
    )
    department = QueueRecord(
        name="dept",
        parent=None,
        deserved_gpus=None,
        over_quota_weight=1.0,
        limit_gpus=4.0,
        priority=1,
        members=None,
        source="config",
        position=0,
    )
    views.append(queue_json(department, None, ["vision"]))
    for view in views:
        assert properties("Queue") == set(view)
        assert set(schema("Queue")["required"]) == set(view)
        assert_valid("#/components/schemas/Queue", view)


@pytest.mark.parametrize("admin", [False, True])
def test_node_schema_lists_exactly_the_view_keys(admin: bool) -> None:
    loop = fake_loop(
        job(), job(id=9, user="bob", placement_json=[{"node": "node-0", "gpus": [[0, 250]]}])
    )
    nodes = nodes_json(loop, "alice", admin)
    assert nodes
    for node in nodes:
        assert properties("Node") == set(node)
        for gpu in node["gpus"]:
            assert properties("NodeGpu") == set(gpu)
            for holder in gpu["holders"]:
                assert properties("GpuHolder") == set(holder)
        assert_valid("#/components/schemas/Node", node)
    holders = [holder for gpu in nodes[0]["gpus"] for holder in gpu["holders"]]
    assert len(holders) == 2


# -- responses from the handlers, through tornado without a socket -----------------------


class RecordingConnection:
    """Stands in for tornado's HTTP connection: keeps what the handler writes."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.headers: httputil.HTTPHeaders | None = None
        self.body = b""

    def set_close_callback(self, callback: Any) -> None:
        pass

    def write_headers(self, start_line: Any, headers: Any, chunk: bytes | None = None) -> Future:
        self.status, self.headers = start_line.code, headers
        return self.write(chunk or b"")

    def write(self, chunk: bytes) -> Future:
        self.body += chunk
        done: Future = Future()
        done.set_result(None)
        return done

    def finish(self) -> None:
        pass


class FakeHubAuth:
    access_scopes = frozenset({ACCESS_SCOPE})

    def __init__(self, model: dict | None) -> None:
        self.model = model

    async def get_user(self, handler: Any, sync: bool = True) -> dict | None:
        return self.model

    def check_scopes(self, required: Any, model: dict) -> set[str]:
        return set(required) & set(model.get("scopes", ()))


class FakeStore:
    def __init__(self, records: list[WorkloadRecord], queues: list[QueueRecord]) -> None:
        self.records = records
        self.queue_records = queues

    def workloads(
        self,
        *,
        offset: int,
        limit: int,
        before: int | None = None,
        allocations: bool | None = None,
        count: bool = False,
        **_: Any,
    ) -> WorkloadPage:
        rows = [r for r in self.records if allocations is None or r.is_allocation == allocations]
        rows.sort(key=lambda r: -r.id)
        total = len(rows) if count else None
        rows = [r for r in rows if before is None or r.id < before][offset:]
        return WorkloadPage(rows[:limit], len(rows) > limit, total)

    def workload(self, workload_id: int) -> WorkloadRecord | None:
        return next((r for r in self.records if r.id == workload_id), None)

    def events(self, workload_id: int) -> list[EventRecord]:
        return [event for event in EVENTS if event.workload_id == workload_id]

    def queues(self) -> list[QueueRecord]:
        return self.queue_records

    def end(self, *, failed: bool) -> None:
        pass

    def usage(self, start: float, end: float, now: float, projects: Any, users: Any) -> list:
        row = UsageRow("vision", "alice", 1.2345678, 2.5, 8.25)
        return [row]

    def sample_buckets(self, start: float, end: float, step: float, projects: Any) -> list:
        rows = [
            SampleBucket(project, end - age, 1.5, 2.5, 2.0, 2, 1, 4.0, 2.0, 5)
            for age in (600.0, 60.0)
            for project in ("", "vision")
        ]
        return [row for row in rows if projects is None or row.project in projects]

    def first_sample_time(self) -> float | None:
        return NOW - 3600.0


def service_loop() -> types.SimpleNamespace:
    records = [job(id=n) for n in (5, 6, 7)] + [
        allocation(id=8),
        allocation(id=9, server_name="b", state="running", started_at=NOW + 1),
    ]
    queue_records = [
        QueueRecord(
            name=name,
            parent=parent,
            deserved_gpus=deserved,
            over_quota_weight=1.0,
            limit_gpus=None,
            priority=0,
            members=[],
            source="config",
            position=position,
        )
        for position, (name, parent, deserved) in enumerate(
            [("dept", None, None), ("vision", "dept", 2.0)]
        )
    ]
    return types.SimpleNamespace(
        **{**vars(fake_loop(*records)), "backend": FAKE_BACKEND},
        store=FakeStore(records, queue_records),
        queues=EXISTING_QUEUES,
        members={"vision": ("alice",)},
    )


def call(
    uri: str,
    *,
    scopes: tuple[str, ...] | None = (access.READ, access.SUBMIT),
    accept: str = "application/json",
) -> tuple[int, str, Any, dict]:
    """``call_with_headers`` without the headers."""
    status, content_type, body, _, operation = call_with_headers(uri, scopes=scopes, accept=accept)
    return status, content_type, body, operation


def call_with_headers(
    uri: str,
    *,
    scopes: tuple[str, ...] | None = (access.READ, access.SUBMIT),
    accept: str = "application/json",
) -> tuple[int, str, Any, httputil.HTTPHeaders, dict]:
    """Route ``uri`` (below the prefix) as the app would and run its handler's GET as alice
    with a token holding ``scopes`` (None: no valid token); returns the status, the content
    type, the body (decoded if JSON), the headers and the matched operation."""
    path = urlsplit(uri).path
    found = [
        (pattern, cls, match)
        for module in HANDLER_MODULES
        for pattern, cls in module.default_handlers
        if (match := re.fullmatch(pattern, path))
    ]
    assert len(found) == 1, f"{uri} matches {len(found)} routes"
    ((pattern, cls, match),) = found
    key = (route_shape(pattern), "get")
    model = None
    if scopes is not None:
        model = {
            "name": "alice",
            "kind": "user",
            "groups": ["vision"],
            "scopes": [ACCESS_SCOPE, *scopes],
        }
    settings = {
        "hub_auth": FakeHubAuth(model),
        "scheduling_loop": service_loop(),
        "resource_defaults": requests.NO_DEFAULTS,
        "directory": None,
        "backend_name": "LocalBackend",
        "metrics": types.SimpleNamespace(render=lambda: "# no metrics yet\n"),
        "page_default_limit": 2,
        "page_max_limit": 500,
        "log_function": lambda handler: None,
    }
    connection = RecordingConnection()
    request = httputil.HTTPServerRequest(
        start_line=httputil.RequestStartLine("GET", "/services/frachub" + uri, "HTTP/1.1"),
        headers=httputil.HTTPHeaders({"Host": "127.0.0.1:10101", "Accept": accept}),
        connection=connection,  # type: ignore[arg-type]
    )
    handler = cls(web.Application([], **settings), request)
    args = [group.encode() for group in match.groups()]

    async def run() -> None:
        await handler._execute([], *args)

    asyncio.run(run())
    assert connection.headers is not None and connection.status is not None
    content_type = connection.headers["Content-Type"].split(";")[0]
    body = json.loads(connection.body) if content_type == "application/json" else connection.body
    return connection.status, content_type, body, connection.headers, documented()[key]


def _absolute(node: Any) -> Any:
    """A schema from the document with its ``#/...`` references pointed into the registry."""
    if isinstance(node, dict):
        return {
            key: ("urn:frachub:openapi" + value if key == "$ref" else _absolute(value))
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_absolute(value) for value in node]
    return node


def assert_documented(operation: dict, status: int, media_type: str, body: Any) -> None:
    """``body`` is what ``operation`` documents for ``status`` and ``media_type``."""
    response = deref(operation["responses"][str(status)])
    checker = jsonschema.Draft202012Validator(
        _absolute(response["content"][media_type]["schema"]), registry=REGISTRY
    )
    errors = [error.message for error in checker.iter_errors(body)]
    assert not errors, f"{operation['operationId']} {status}: {errors}"


@pytest.mark.parametrize(
    "uri",
    [
        "/api/v1",
        "/api/v1/",
        "/api/v1/user",
        "/api/v1/nodes",
        "/api/v1/usage?start=2026-11-01T00:00:00Z&end=2026-11-02T00:00:00%2B01:00",
        "/api/v1/history",
        "/api/v1/history?project=vision&points=1&start=2026-11-01T00:00:00Z&end=2026-11-02T00:00:00Z",
        "/api/v1/workloads",
        "/api/v1/workloads/?state=running,pending&kind=training",
        "/api/v1/workloads/7",
        "/api/v1/allocations",
        "/api/v1/allocations/8?wait=0",
        "/api/v1/queues",
        "/api/v1/queues/vision",
    ],
)
def test_handler_answers_validate_against_the_document(uri: str) -> None:
    status, content_type, body, operation = call(uri)
    assert (status, content_type) == (200, "application/json")
    assert_documented(operation, status, content_type, body)


@pytest.mark.parametrize(
    ("uri", "media_type"),
    [
        ("/api/v1/workloads/7/logs?tail=10", "text/plain"),
        ("/metrics", "text/plain"),
        ("/api/v1/allocations/9/events", "text/event-stream"),
        ("/api/v1/usage.csv?start=2026-11-01T00:00:00Z&end=2026-11-02T00:00:00Z", "text/csv"),
    ],
)
def test_text_answers_have_the_documented_media_type(uri: str, media_type: str) -> None:
    status, content_type, body, operation = call(uri)
    assert status == 200
    assert list(operation["responses"]["200"]["content"]) == [media_type]
    assert content_type == media_type
    assert isinstance(body, bytes)


def test_allocation_events_carry_the_allocation() -> None:
    _, _, body, _ = call("/api/v1/allocations/9/events")
    (line,) = body.decode().strip().splitlines()
    event = json.loads(line.removeprefix("data: "))
    assert event["id"] == 9
    assert_valid("#/components/schemas/Allocation", event)


def test_the_service_serves_this_document() -> None:
    status, content_type, body, operation = call("/api/v1/openapi.json", scopes=None)
    assert (status, content_type) == (200, "application/json")
    assert body == DOCUMENT
    assert operation["security"] == []


@pytest.mark.parametrize("uri", ["/api/v1/workloads?offset=1", "/api/v1/allocations?limit=1"])
def test_paginated_answers_validate_against_the_document(uri: str) -> None:
    media_type = "application/jupyterhub-pagination+json"
    status, _, body, operation = call(uri, accept=media_type)
    assert status == 200
    assert_documented(operation, status, media_type, body)
    following = body["_pagination"]["next"]
    assert following is not None
    query = parse_qs(urlsplit(following["url"]).query)
    assert query["cursor"] == [following["cursor"]] and "offset" not in query
    assert following["offset"] == body["_pagination"]["offset"] + len(body["items"])
    # the next page, by its cursor: what follows the last item, and the same page size
    _, _, after, _ = call(following["url"].removeprefix("/services/frachub"), accept=media_type)
    assert after["_pagination"]["offset"] == following["offset"]
    assert after["items"][0]["id"] < body["items"][-1]["id"]


def test_a_bare_list_names_its_next_page_in_a_link_header() -> None:
    status, _, body, headers, operation = call_with_headers("/api/v1/workloads")
    assert status == 200 and [item["id"] for item in body] == [9, 8]  # page_default_limit 2
    assert "Link" in deref(operation["responses"]["200"])["headers"]
    link = re.fullmatch(
        r'<(/services/frachub/api/v1/workloads\?[^>]+)>; rel="next"', headers["Link"]
    )
    assert link is not None, headers["Link"]
    assert parse_qs(urlsplit(link[1]).query)["cursor"] == ["8.2"]
    _, _, rest, headers, _ = call_with_headers(link[1].removeprefix("/services/frachub"))
    assert [item["id"] for item in rest] == [7, 6] and "Link" in headers


@pytest.mark.parametrize(
    ("uri", "scopes", "status"),
    [
        ("/api/v1/workloads?state=bogus", (access.READ,), 400),
        ("/api/v1/workloads?limit=-1", (access.READ,), 400),
        ("/api/v1/workloads?cursor=abc", (access.READ,), 400),
        ("/api/v1/workloads?cursor=7.1&offset=1", (access.READ,), 400),
        ("/api/v1/allocations?cursor=9", (access.READ,), 400),
        ("/api/v1/usage?start=yesterday", (access.READ,), 400),
        ("/api/v1/usage.csv?start=2020-01-01T00:00:00Z", (access.READ,), 400),
        ("/api/v1/usage.csv?user=bob", (access.READ,), 403),
        ("/api/v1/history?points=0", (access.READ,), 400),
        ("/api/v1/history?start=2020-01-01T00:00:00Z", (access.READ,), 400),
        ("/api/v1/history?project=nlp", (access.READ,), 403),
        ("/api/v1/allocations/8?wait=soon", (access.READ,), 400),
        ("/api/v1/workloads/7/logs?replica=3", (access.READ,), 400),
        ("/api/v1", None, 403),
        ("/api/v1/workloads", None, 403),
        ("/api/v1/workloads", (), 403),
        ("/api/v1/workloads?user=bob", (access.READ,), 403),
        ("/api/v1/workloads/404", (access.READ,), 404),
        ("/api/v1/allocations/7", (access.READ,), 404),
        ("/api/v1/workloads/8/logs", (access.READ,), 404),
        ("/api/v1/queues/nope", (access.READ,), 404),
    ],
)
def test_errors_are_the_documented_error_object(
    uri: str, scopes: tuple[str, ...] | None, status: int
) -> None:
    answered, content_type, body, operation = call(uri, scopes=scopes)
    assert (answered, content_type) == (status, "application/json")
    assert body["status"] == status
    assert_documented(operation, status, content_type, body)
