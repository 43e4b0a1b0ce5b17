"""An in-process fake Kubernetes API server, with a simulated scheduler, kubelet and Job
controller, for tests that talk to it through the real ``kubernetes_asyncio`` client.

``FakeKube`` runs a tornado HTTP server on 127.0.0.1 in a thread of its own (so tests, the
real KubeSpawner and ``frachub service`` subprocesses can all reach it), and keeps every
object as the JSON dict a real API server would return.

What it serves (``/api/v1`` and ``/apis/<group>/<version>``):

- pods, services, configmaps, events, secrets, serviceaccounts, persistentvolumeclaims
  (namespaced), nodes and namespaces (cluster), ``batch/v1`` jobs, ``coordination.k8s.io/v1``
  leases; the ``status`` subresource of each;
- create (409 ``AlreadyExists``; ``generateName``), get (404 ``NotFound``), list with
  ``labelSelector`` (``=``, ``==``, ``!=``, ``in``, ``notin``, ``key``, ``!key``) and
  ``fieldSelector`` (``=``/``!=`` on any dotted path), replace (409 ``Conflict`` on a stale
  ``resourceVersion``), patch, delete (pods gracefully), deletecollection;
- patches: JSON merge patch; *strategic merge patch is applied as a JSON merge patch* (lists
  are replaced whole rather than merged by key), and JSON patch (add/replace/remove);
- watch (``?watch=true``) as chunked JSON lines: ``ADDED``/``MODIFIED``/``DELETED`` from a
  ``resourceVersion`` (or the current objects as ``ADDED`` without one), ending after
  ``timeoutSeconds``; with ``allowWatchBookmarks``, ``BOOKMARK`` events carrying the current
  ``resourceVersion`` every ``bookmark_interval`` and 2 s before the timeout; a
  ``resourceVersion`` older than the retained history (see ``compact()``) gets an ``ERROR``
  event with a 410 ``Expired`` status, as a real server; each event reaches the watchers
  ``watch_lag`` seconds after the change (a loaded server or client: a watch's cache shows
  what a read through the API already shows only later).

The simulation, run after every change:

- *scheduler*: a pending pod goes to the first ready node matching its ``nodeSelector``,
  required node affinity and taints (and ``spec.nodeName`` if set) with enough allocatable
  ``nvidia.com/gpu`` left; otherwise
  it stays pending with a ``FailedScheduling`` event;
- *HAMi* (nodes added with ``hami``): its scheduler (``hami_scheduler_name``) gives a pod its
  ``nvidia.com/gpumem`` share of a GPU and writes ``hami.io/vgpu-devices-allocated``
  (``hami_allocation`` reads it); its device plugin serves only the pods it placed;
- *kubelet*: a scheduled pod becomes Running after ``start_delay`` seconds, with GPUs handed
  out by a simulated device plugin (UUIDs ``GPU-<node>-<i>``); tests end pods with
  ``finish_pod``. A deleted running pod gets SIGTERM: it ends with 143 at once, unless
  ``ignore_sigterm`` is set, in which case it is killed (137) after its grace period; then
  the object goes away;
- *Job controller*: creates pods for un-suspended jobs (Indexed jobs: one per completion
  index, with ``JOB_COMPLETION_INDEX`` and hostname ``<job>-<index>``), deletes them when the
  job is suspended (not counted as failures), counts successes and failures against
  ``completions`` and ``backoffLimit`` and by its ``podFailurePolicy`` rules, and sets
  ``SuccessCriteriaMet``/``FailureTarget`` then, once no pod is left terminating,
  ``Complete``/``Failed`` (``terminal_condition_delay``), and ``Suspended``; deleting a job
  with ``propagationPolicy`` Background/Foreground deletes its pods (the default, as for
  ``batch/v1`` on a real server, orphans them) and, as the garbage collector would, any
  other object all of whose owners are gone (a job's Secret).

Refusing what a real server refuses:

- every object a client writes is validated against the schemas of ``schema_version``
  (kubernetes-validate, unknown fields refused), and Jobs as the API server validates them
  (``job_problems``: restartPolicy, podFailurePolicy): 422 ``Invalid``;
- ``grant(token, user, rules)``: requests bearing that token may do only what the RBAC rules
  allow (``rules_for_service_account`` reads them from rendered Roles and bindings;
  ``Z2JH_HUB_RULES`` is z2jh's hub Role): 403 ``Forbidden`` worded as RBAC words it;
- node taints against pod tolerations, with the ExtendedResourceToleration admission plugin;
- ``pods/log`` (``write_log`` is what a container prints; ``tailLines``, ``follow``), 400 while
  the container waits to start;
- a force-deleted running pod's GPUs stay held for ``force_delete_hold`` seconds, and a pod
  the device plugin cannot serve fails with ``UnexpectedAdmissionError``;
- the Job controller counts a pod that ends Failed as a failure, deleted or not, unless the
  Job is suspended (job-tracking finalizers); ``evict`` gives a pod ``DisruptionTarget`` and
  deletes it, as a drain does;
- a Job's pod template is immutable, except its scheduling directives while the Job is
  suspended and not started (422);
- volumes: a pod whose claim is missing is not scheduled; one needing a ReadWriteOnce volume
  that pods on another node use waits in ContainerCreating with the Multi-Attach
  ``FailedAttachVolume`` event until they end; a pod naming a scheduler that does not run
  here stays unscheduled.

What it leaves out: authentication beyond bearer tokens, other admission plugins (HAMi's
webhook among them: a pod names HAMi's scheduler itself), defaulting beyond the fields
above (a podFailurePolicy's ``onPodConditions`` need their ``status``), quotas, preferred
affinity, storage without attachment (every ReadWriteOnce claim attaches to one node),
``backoffLimitPerIndex``/``FailIndex``, ``successPolicy``, and pod restarts
(``restartPolicy`` is treated as ``Never``).
"""

from __future__ import annotations

import asyncio
import collections
import copy
import functools
import itertools
import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlparse

from tornado import httpserver, netutil, web

Obj = dict[str, Any]
Hook = Callable[["FakeKube", Obj, list[str]], None]

# plural -> (kind, apiVersion, namespaced)
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "pods": ("Pod", "v1", True),
    "services": ("Service", "v1", True),
    "configmaps": ("ConfigMap", "v1", True),
    "events": ("Event", "v1", True),
    "secrets": ("Secret", "v1", True),
    "serviceaccounts": ("ServiceAccount", "v1", True),
    "persistentvolumeclaims": ("PersistentVolumeClaim", "v1", True),
    "nodes": ("Node", "v1", False),
    "namespaces": ("Namespace", "v1", False),
    "jobs": ("Job", "batch/v1", True),
    "leases": ("Lease", "coordination.k8s.io/v1", True),
}
GPU = "nvidia.com/gpu"
TERMINAL = ("Succeeded", "Failed")
GPUMEM, GPUMEM_PERCENT, GPUCORES = (
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
)
HAMI_REGISTER = "hami.io/node-nvidia-register"
HAMI_ALLOCATED = "hami.io/vgpu-devices-allocated"
HAMI_USE_UUID, HAMI_NOUSE_UUID = "nvidia.com/use-gpuuuid", "nvidia.com/nouse-gpuuuid"


def clone(obj: Any) -> Any:
    """A deep copy of a JSON tree (dicts, lists, scalars). ``copy.deepcopy`` keeps a memo
    for shared and cyclic objects a JSON tree never has, and costs three times as much:
    the fake copies every object it writes, 30-odd copies per job at 4,000 jobs
    (benchmarks/kai_scale.py)."""
    if type(obj) is dict:
        return {key: clone(value) for key, value in obj.items()}
    if type(obj) is list:
        return [clone(value) for value in obj]
    if isinstance(obj, dict | list | tuple | set):  # a subclass or a test's own container
        return copy.deepcopy(obj)
    return obj


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def status(self) -> Obj:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


# --- selectors and patches (pure) ---------------------------------------------------------

_SET_RE = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


@functools.lru_cache(maxsize=1024)
def _split_selector(text: str) -> tuple[str, ...]:
    """Split on commas outside parentheses (memoised: a list matches one selector against
    every object, and benchmarks/kai_scale.py lists among thousands)."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return tuple(part.strip() for part in parts if part.strip())


@functools.lru_cache(maxsize=1024)
def _label_terms(selector: str) -> tuple[tuple[str, str, Any], ...]:
    """A label selector parsed once into (operator, key, value) terms: every write is
    matched against every watch's selector, and ``/_fake/running`` matches 4,000 pods per
    poll (benchmarks/kai_scale.py)."""
    terms: list[tuple[str, str, Any]] = []
    for term in _split_selector(selector):
        set_match = _SET_RE.match(term)
        if set_match:
            key, op, values = set_match.groups()
            terms.append((op, key, frozenset(value.strip() for value in values.split(","))))
        elif "!=" in term:
            key, value = term.split("!=", 1)
            terms.append(("!=", key.strip(), value.strip()))
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            terms.append(("=", key.strip(), value.strip()))
        elif term.startswith("!"):
            terms.append(("!", term[1:], None))
        else:
            terms.append(("exists", term, None))
    return tuple(terms)


def label_match(selector: str | None, labels: dict[str, str]) -> bool:
    for op, key, value in _label_terms(selector or ""):
        if op == "=":
            if labels.get(key) != value:
                return False
        elif op == "!=":
            if labels.get(key) == value:
                return False
        elif op == "in":
            if labels.get(key) not in value:
                return False
        elif op == "notin":
            if labels.get(key) in value:
                return False
        elif op == "!":
            if key in labels:
                return False
        elif key not in labels:
            return False
    return True


def _path_value(obj: Obj, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def field_match(selector: str | None, obj: Obj) -> bool:
    for term in _split_selector(selector or ""):
        if "!=" in term:
            path, value = term.split("!=", 1)
            if _path_value(obj, path.strip()) == value.strip():
                return False
        else:
            path, value = term.replace("==", "=").split("=", 1)
            if _path_value(obj, path.strip()) != value.strip():
                return False
    return True


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: Obj, operations: list[Obj]) -> Obj:
    """RFC 6902 add/replace/remove (enough for what clients send)."""
    result = clone(target)
    for op in operations:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent: Any = result
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent.setdefault(part, {})
        last = parts[-1]
        if op["op"] in ("add", "replace"):
            if isinstance(parent, list):
                if last == "-":
                    parent.append(op["value"])
                elif op["op"] == "add":
                    parent.insert(int(last), op["value"])
                else:
                    parent[int(last)] = op["value"]
            else:
                parent[last] = op["value"]
        elif op["op"] == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            else:
                parent.pop(last, None)
        else:
            raise ApiError(422, "Invalid", f"unsupported JSON patch op {op['op']}")
    return result


def _tolerates(toleration: Obj, taint: Obj) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint.get("key")
    return toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get(
        "value", ""
    )


SCHEDULING_DIRECTIVES = ("nodeSelector", "affinity", "tolerations", "schedulingGates")


def _job_template_change(current: Obj, new: Obj) -> str:
    """Why a real API server refuses this change of a Job's pod template, or "": the
    template is immutable, except its scheduling directives (and labels, annotations)
    while the Job is suspended and has not started (``status.startTime`` unset;
    JobMutableNodeSchedulingDirectives)."""
    before = (current.get("spec") or {}).get("template") or {}
    after = (new.get("spec") or {}).get("template") or {}
    if before == after:
        return ""
    mutable = bool((current.get("spec") or {}).get("suspend")) and not (
        current.get("status") or {}
    ).get("startTime")
    spec_rest = [
        {k: v for k, v in (t.get("spec") or {}).items() if k not in SCHEDULING_DIRECTIVES}
        for t in (before, after)
    ]
    meta_rest = [
        {k: v for k, v in (t.get("metadata") or {}).items() if k not in ("labels", "annotations")}
        for t in (before, after)
    ]
    if mutable and spec_rest[0] == spec_rest[1] and meta_rest[0] == meta_rest[1]:
        return ""
    return "spec.template: Invalid value: field is immutable" + (
        "" if mutable else " (scheduling directives only while suspended and never started)"
    )


def _requirement(value: str | None, requirement: Obj) -> bool:
    operator, values = requirement.get("operator"), requirement.get("values") or []
    if operator == "In":
        return value in values
    if operator == "NotIn":
        return value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    raise ApiError(422, "Invalid", f"unsupported node selector operator {operator}")


def _affinity_matches(spec: Obj, node: Obj) -> bool:
    """requiredDuringSchedulingIgnoredDuringExecution: any term, all of its requirements
    (``matchExpressions`` on labels, ``matchFields`` on ``metadata.name``)."""
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not required:
        return True
    labels = node["metadata"].get("labels") or {}
    for term in required.get("nodeSelectorTerms") or []:
        if all(
            _requirement(labels.get(r["key"]), r) for r in term.get("matchExpressions") or []
        ) and all(
            _requirement(node["metadata"]["name"] if r["key"] == "metadata.name" else None, r)
            for r in term.get("matchFields") or []
        ):
            return True
    return False


def _pinned_nodes(spec: Obj) -> set[str] | None:
    """The only node names a pod may go to, when ``spec.nodeName`` or its required node
    affinity names them (``matchFields`` ``metadata.name In``, in every term: how FracHub
    pins its pods); None when any node may match. Only a shortcut: ``_schedule`` still
    checks every rule on the nodes named."""
    if spec.get("nodeName"):
        return {spec["nodeName"]}
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    names: set[str] = set()
    for term in (required or {}).get("nodeSelectorTerms") or [None]:
        fields = [
            r
            for r in (term or {}).get("matchFields") or []
            if r.get("key") == "metadata.name" and r.get("operator") == "In"
        ]
        if not fields:
            return None
        names.update(fields[0].get("values") or [])
    return names


def _untolerated(node: Obj, tolerations: list[Obj]) -> str:
    """The first NoSchedule/NoExecute taint of ``node`` no toleration matches, or ""."""
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            return f"{taint.get('key')}={taint.get('value', '')}:{taint.get('effect')}"
    return ""


def _extended_resource_toleration(spec: Obj) -> None:
    """The ExtendedResourceToleration admission plugin: a pod asking an extended resource
    (``nvidia.com/gpu``) tolerates the taint of the same key."""
    names = set()
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        for part in ("limits", "requests"):
            names.update(n for n in (resources.get(part) or {}) if "/" in n)
    for name in sorted(names):
        toleration = {"key": name, "operator": "Exists", "effect": "NoSchedule"}
        if toleration not in (spec.get("tolerations") or []):
            spec.setdefault("tolerations", []).append(toleration)


def _job_condition(status: Obj, kind: str) -> Obj | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition
    return None


def pod_failure_action(rules: list[Obj], pod: Obj) -> tuple[str, str]:
    """(action, message) of the first rule of a Job's ``podFailurePolicy`` that a Failed
    pod matches, as the Job controller words it; ("Count", "") when none does. Exit codes
    of containers that succeeded (0) never match; rules with an unknown action are skipped."""
    meta, pod_status = pod["metadata"], pod.get("status") or {}
    where = f"{meta.get('namespace')}/{meta['name']}"
    statuses = [
        *(pod_status.get("initContainerStatuses") or []),
        *(pod_status.get("containerStatuses") or []),
    ]
    for index, rule in enumerate(rules):
        action = rule.get("action")
        if action not in ("Count", "FailJob", "Ignore", "FailIndex"):
            continue
        on_codes = rule.get("onExitCodes")
        if on_codes:
            for container in statuses:
                if on_codes.get("containerName") not in (None, container.get("name")):
                    continue
                terminated = (container.get("state") or {}).get("terminated") or {}
                code = int(terminated.get("exitCode", 0))
                if not terminated or code == 0:
                    continue
                if (on_codes.get("operator") == "In") == (code in (on_codes.get("values") or [])):
                    return action, (
                        f"Container {container.get('name')} for pod {where} failed with exit "
                        f"code {code} matching {action} rule at index {index}"
                    )
            continue
        for pattern in rule.get("onPodConditions") or []:
            for condition in pod_status.get("conditions") or []:
                if condition.get("type") == pattern.get("type") and condition.get(
                    "status"
                ) == pattern.get("status", "True"):
                    return action, (
                        f"Pod {where} has condition {pattern['type']} matching {action} rule "
                        f"at index {index}"
                    )
    return "Count", ""


def job_problems(job: Obj, current: Obj | None = None) -> list[str]:
    """What the API server's Job validation refuses beyond the schema (field: why), as it
    words it: the pod template's restartPolicy, the ``podFailurePolicy`` rules, and the
    policy's immutability."""
    spec = job.get("spec") or {}
    template = (spec.get("template") or {}).get("spec") or {}
    restart = template.get("restartPolicy", "Always")
    problems = []
    if restart not in ("Never", "OnFailure"):
        problems.append(
            f'spec.template.spec.restartPolicy: Unsupported value: "{restart}": supported '
            'values: "OnFailure", "Never"'
        )
    policy = spec.get("podFailurePolicy")
    if current is not None and policy != (current.get("spec") or {}).get("podFailurePolicy"):
        problems.append("spec.podFailurePolicy: Invalid value: field is immutable")
    if policy is None:
        return problems
    if restart != "Never":
        problems.append(
            f'spec.template.spec.restartPolicy: Invalid value: "{restart}": only "Never" is '
            "supported when podFailurePolicy is specified"
        )
    names = {
        c.get("name")
        for c in [*(template.get("containers") or []), *(template.get("initContainers") or [])]
    }
    for number, rule in enumerate(policy.get("rules") or []):
        at = f"spec.podFailurePolicy.rules[{number}]"
        action = rule.get("action")
        if action not in ("Count", "FailIndex", "FailJob", "Ignore"):
            problems.append(
                f'{at}.action: Unsupported value: "{action}": supported values: "Count", '
                '"FailIndex", "FailJob", "Ignore"'
            )
        if action == "FailIndex" and spec.get("backoffLimitPerIndex") is None:
            problems.append(
                f'{at}.action: Invalid value: "FailIndex": requires the backoffLimitPerIndex '
                "to be set"
            )
        on_codes, on_conditions = rule.get("onExitCodes"), rule.get("onPodConditions")
        if on_codes is not None and on_conditions:
            problems.append(
                f"{at}: Invalid value: specifying both OnExitCodes and OnPodConditions is not "
                "supported"
            )
        elif on_codes is None and not on_conditions:
            problems.append(
                f"{at}: Invalid value: specifying one of OnExitCodes and OnPodConditions is "
                "required"
            )
        if on_codes is not None:
            name = on_codes.get("containerName")
            if name is not None and name not in names:
                problems.append(
                    f'{at}.onExitCodes.containerName: Invalid value: "{name}": must be one of '
                    "the container or initContainer names in the pod template"
                )
            operator = on_codes.get("operator")
            if operator not in ("In", "NotIn"):
                problems.append(
                    f'{at}.onExitCodes.operator: Unsupported value: "{operator}": supported '
                    'values: "In", "NotIn"'
                )
            values = on_codes.get("values") or []
            if not values:
                problems.append(f"{at}.onExitCodes.values: Required value")
            for place, value in enumerate(values):
                where = f"{at}.onExitCodes.values[{place}]"
                if operator == "In" and value == 0:
                    problems.append(f"{where}: Invalid value: 0: must not be 0 for the In operator")
                if value in values[:place]:
                    problems.append(f"{where}: Duplicate value: {value}")
                elif place and value < values[place - 1]:
                    problems.append(f"{where}: Invalid value: {value}: must be ordered")
        for place, pattern in enumerate(on_conditions or []):
            condition_status = pattern.get("status", "True")
            if condition_status not in ("True", "False", "Unknown"):
                problems.append(
                    f"{at}.onPodConditions[{place}].status: Unsupported value: "
                    f'"{condition_status}": supported values: "False", "True", "Unknown"'
                )
    return problems


def hami_allocation(pod: Obj) -> list[tuple[str, int, int]]:
    """(GPU UUID, MiB, cores %) of each share HAMi's scheduler gave a pod, from its
    ``hami.io/vgpu-devices-allocated`` (``uuid,type,mem,cores:`` per device, ``;`` per
    container): what HAMi's device plugin enforces (CUDA_DEVICE_MEMORY_LIMIT_<n>)."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(HAMI_ALLOCATED) or ""
    out = []
    for container in text.split(";"):
        for device in container.split(":"):
            fields = device.split(",")
            if len(fields) == 4:
                out.append((fields[0], int(fields[2]), int(fields[3])))
    return out


def _hami_registered(node: Obj) -> list[Obj]:
    """The GPUs HAMi's device plugin registered on a node: its JSON list (HAMi >= 2.5) or
    ``id,count,devmem,devcore,type,numa,health[,index,mode]:`` per GPU (older)."""
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(HAMI_REGISTER) or ""
    try:
        if text.strip().startswith("["):
            return [{"index": i, **d} for i, d in enumerate(json.loads(text))]
        devices = []
        for position, part in enumerate(p for p in text.split(":") if "," in p):
            fields = part.split(",")
            devices.append(
                {
                    "id": fields[0],
                    "count": int(fields[1]),
                    "devmem": int(fields[2]),
                    "devcore": int(fields[3]),
                    "health": fields[6].strip().lower() == "true",
                    "index": int(fields[7]) if len(fields) > 7 else position,
                }
            )
        return devices
    except (ValueError, IndexError, TypeError):
        return []


def _hami_requests(pod: Obj) -> list[tuple[int, int | None, int | None, int]]:
    """(vGPUs, MiB or None, memory % or None, cores %) per container asking nvidia.com/gpu."""
    out = []
    for container in pod["spec"].get("containers") or []:
        resources = container.get("resources") or {}
        amounts = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        if int(amounts.get(GPU) or 0) <= 0:
            continue
        memory = amounts.get(GPUMEM)
        percent = amounts.get(GPUMEM_PERCENT)
        out.append(
            (
                int(amounts[GPU]),
                int(memory) if memory is not None else None,
                int(percent) if percent is not None else None,
                int(amounts.get(GPUCORES) or 0),
            )
        )
    return out


# --- authorization (RBAC) -------------------------------------------------------------------

# z2jh's hub Role (jupyterhub/zero-to-jupyterhub-k8s, templates/hub/rbac.yaml, 3.x and 4.x):
# what FracKubeSpawner may do in the notebooks' namespace. No patch, no pods/log.
Z2JH_HUB_RULES: list[Obj] = [
    {
        "apiGroups": [""],
        "resources": ["pods", "persistentvolumeclaims", "secrets", "services"],
        "verbs": ["get", "watch", "list", "create", "delete"],
    },
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "watch", "list"]},
]


def rules_for_service_account(
    documents: list[Obj], namespace: str, name: str
) -> list[tuple[str | None, Obj]]:
    """(namespace or None for cluster-wide, rule) of every Role and ClusterRole that the
    RoleBindings and ClusterRoleBindings in ``documents`` (rendered manifests) grant the
    service account ``namespace/name``."""
    roles = {
        (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
        for d in documents
        if d.get("kind") in ("Role", "ClusterRole")
    }
    out: list[tuple[str | None, Obj]] = []
    for binding in documents:
        if binding.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(
            s.get("kind") == "ServiceAccount"
            and s.get("name") == name
            and s.get("namespace") == namespace
            for s in binding.get("subjects") or []
        ):
            continue
        ref = binding["roleRef"]
        bound_ns = (
            binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        )
        role = roles.get(
            (ref["kind"], bound_ns or "" if ref["kind"] == "Role" else "", ref["name"])
        )
        if role is None:
            continue
        out.extend((bound_ns, rule) for rule in role.get("rules") or [])
    return out


def _allowed(
    rules: list[tuple[str | None, Obj]], verb: str, group: str, resource: str, namespace: str
) -> bool:
    for scope, rule in rules:
        if scope is not None and scope != namespace:
            continue
        if (
            group in rule.get("apiGroups", [])
            and resource in rule.get("resources", [])
            and verb in rule.get("verbs", [])
        ):
            return True
    return False


# --- the server ---------------------------------------------------------------------------


class _Watcher:
    def __init__(self, plural: str, namespace: str | None, labels: str, fields: str) -> None:
        self.plural, self.namespace, self.labels, self.fields = plural, namespace, labels, fields
        # (kind, the object as JSON, when it changed), or None to end the watch
        self.queue: asyncio.Queue[tuple[str, str, float] | None] = asyncio.Queue()

    def wants(self, plural: str, obj: Obj) -> bool:
        meta = obj["metadata"]
        return (
            plural == self.plural
            and (self.namespace is None or meta.get("namespace") == self.namespace)
            and label_match(self.labels, meta.get("labels") or {})
            and field_match(self.fields, obj)
        )


@functools.lru_cache(maxsize=64)
def _schema_validator(kind: str, api_version: str, desired: str) -> Any:
    """kubernetes-validate's strict schema of ``kind`` at Kubernetes ``desired``, compiled
    once: ``kubernetes_validate.validate`` reads and compiles the schema and its definitions
    on every call (about 10 ms a Job, which a 4,000-job benchmark cannot afford); the schema
    chosen and the errors raised are the same."""
    import jsonschema
    from kubernetes_validate import utils
    from referencing import Registry, Resource

    version = [
        v for v in utils.all_versions() if utils.major_minor(v) <= utils.major_minor(desired)
    ][-1]
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    folder = f"kubernetes-json-schema/v{version}-local-strict"
    schema = utils.schema_contents(f"{folder}/{kind.lower()}-{group}.json", desired)
    definitions = utils.schema_contents(f"{folder}/_definitions.json", desired)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


Check = Callable[[Any], bool]
_IGNORED_KEYWORDS = frozenset({"description", "format", "$schema", "$id", "$defs"})
"""Keywords that never fail a document here: annotations, and ``format``, which
jsonschema's validators check only with a format checker (``_schema_validator`` has none)."""


@functools.lru_cache(maxsize=64)
def _schema_check(kind: str, api_version: str, desired: str) -> Check | None:
    """A quick yes to a valid document: the schema ``_schema_validator`` checks, compiled
    into plain Python checks of the keywords Kubernetes' schemas use (type, enum, properties,
    additionalProperties, items, required, oneOf, $ref). True means valid; False means
    "ask the full validator", which gives the error (the same words as before). None when
    the schema uses a keyword not compiled here: every document then goes to the full
    validator. The full validator costs ~1 ms a Job (22% of the fake's CPU at 4,000 jobs,
    benchmarks/kai_scale.py); this ~0.1 ms."""
    validator = _schema_validator(kind, api_version, desired)
    definitions = validator._resolver.lookup("/api/_definitions.json").contents["$defs"]
    compiled: dict[str, Check] = {}
    unknown: list[str] = []

    def ref(target: str) -> Check:
        name = target.rsplit("/", 1)[-1]
        if name not in compiled:
            compiled[name] = lambda value: compiled[name](value)  # while compiling a cycle
            compiled[name] = compile_schema(definitions[name])
        return lambda value: compiled[name](value)

    def compile_schema(schema: Obj) -> Check:
        checks: list[Check] = []
        for key, value in schema.items():
            if key in _IGNORED_KEYWORDS or key.startswith("x-kubernetes-"):
                continue
            if key == "$ref":
                checks.append(ref(value))
            elif key == "type":
                checks.append(_type_check((value,) if isinstance(value, str) else tuple(value)))
            elif key == "enum" and all(isinstance(v, str) for v in value):
                allowed = frozenset(value)
                checks.append(lambda v, allowed=allowed: type(v) is str and v in allowed)
            elif key == "properties":
                props = {name: compile_schema(sub) for name, sub in value.items()}
                checks.append(
                    lambda v, props=props: (
                        type(v) is not dict or all(props[k](x) for k, x in v.items() if k in props)
                    )
                )
            elif key == "additionalProperties" and value is False:
                known = frozenset(schema.get("properties") or {})
                checks.append(lambda v, known=known: type(v) is not dict or known.issuperset(v))
            elif key == "additionalProperties" and isinstance(value, dict):
                known = frozenset(schema.get("properties") or {})
                sub = compile_schema(value)
                checks.append(
                    lambda v, known=known, sub=sub: (
                        type(v) is not dict or all(sub(x) for k, x in v.items() if k not in known)
                    )
                )
            elif key == "items" and isinstance(value, dict):
                sub = compile_schema(value)
                checks.append(lambda v, sub=sub: type(v) is not list or all(sub(x) for x in v))
            elif key == "required":
                needed = tuple(value)
                checks.append(
                    lambda v, needed=needed: type(v) is not dict or all(k in v for k in needed)
                )
            elif key == "oneOf":
                options = [compile_schema(sub) for sub in value]
                checks.append(lambda v, options=options: sum(o(v) for o in options) == 1)
            else:
                unknown.append(key)
        return lambda v: all(check(v) for check in checks)

    check = compile_schema(validator.schema)
    return None if unknown else check


def _type_check(types: tuple[str, ...]) -> Check:
    """jsonschema's types: an integer may be a float with no fraction; a bool is no number."""
    plain = {"string": str, "object": dict, "array": list, "boolean": bool, "null": type(None)}
    exact = tuple(plain[t] for t in types if t in plain)
    numbers = "number" in types
    integers = "integer" in types

    def check(value: Any) -> bool:
        kind = type(value)
        if kind in exact:
            return True
        if kind is int:
            return numbers or integers
        if kind is float:
            return numbers or (integers and value.is_integer())
        return False

    if set(types) - {*plain, "number", "integer"}:
        return lambda value: False  # a type not known here: the full validator decides
    return check


def _next_bookmark(now: float, deadline: float, interval: float) -> float | None:
    """When a watch with ``allowWatchBookmarks`` gets its next BOOKMARK, as the API server's
    watch cache sends them: every ``interval`` seconds, and 2 s before the watch times out;
    None when neither comes before the end."""
    at = min(now + interval, deadline - 2.0)
    return at if at > now else None


class _Objects(dict):
    """The fake's objects by (plural, namespace, name), with the indexes a large simulated
    cluster needs (benchmarks/kai_scale.py: 500 nodes, 4,000 pods): by plural, and pods by
    uid, owner uid and node. Every write goes through ``__setitem__``/``pop``."""

    def __init__(self) -> None:
        super().__init__()
        self.by_plural: dict[str, dict[tuple[str, str, str], Obj]] = {}
        self.pod_by_uid: dict[str, tuple[str, str, str]] = {}
        self.pods_by_owner: dict[str, set[tuple[str, str, str]]] = {}
        self.pods_by_node: dict[str, set[tuple[str, str, str]]] = {}
        self.pods_pending: set[tuple[str, str, str]] = set()
        """Pods waiting for the scheduler: Pending, on no node, not being deleted."""
        self.pods_running: set[tuple[str, str, str]] = set()
        """Pods Running and not being deleted (``/_fake/running``, polled by benchmarks)."""

    def of(self, plural: str) -> dict[tuple[str, str, str], Obj]:
        return self.by_plural.get(plural, {})

    def _unindex(self, key: tuple[str, str, str], obj: Obj) -> None:
        self.by_plural.get(key[0], {}).pop(key, None)
        if key[0] == "pods":
            meta = obj["metadata"]
            if self.pod_by_uid.get(meta.get("uid", "")) == key:
                del self.pod_by_uid[meta["uid"]]
            for ref in meta.get("ownerReferences") or []:
                self.pods_by_owner.get(ref.get("uid", ""), set()).discard(key)
            self.pods_by_node.get(obj["spec"].get("nodeName") or "", set()).discard(key)
            self.pods_pending.discard(key)
            self.pods_running.discard(key)

    def __setitem__(self, key: tuple[str, str, str], obj: Obj) -> None:
        old = self.get(key)
        if old is not None:
            self._unindex(key, old)
        super().__setitem__(key, obj)
        self.by_plural.setdefault(key[0], {})[key] = obj
        if key[0] == "pods":
            meta = obj["metadata"]
            self.pod_by_uid[meta.get("uid", "")] = key
            for ref in meta.get("ownerReferences") or []:
                self.pods_by_owner.setdefault(ref.get("uid", ""), set()).add(key)
            node = obj["spec"].get("nodeName")
            phase = (obj.get("status") or {}).get("phase")
            if phase == "Running" and not meta.get("deletionTimestamp"):
                self.pods_running.add(key)
            if node:
                self.pods_by_node.setdefault(node, set()).add(key)
            elif (obj.get("status") or {}).get("phase") == "Pending" and not meta.get(
                "deletionTimestamp"
            ):
                self.pods_pending.add(key)

    def pop(self, key: tuple[str, str, str], *default: Any) -> Any:  # type: ignore[override]
        if key in self:
            self._unindex(key, self[key])
        return super().pop(key, *default)

    def __delitem__(self, key: tuple[str, str, str]) -> None:
        self.pop(key)


class FakeKube:
    """The fake cluster; see the module docstring. Test-facing methods are thread-safe."""

    def __init__(
        self, *, start_delay: float = 0.02, history: int = 10_000, schema_version: str = "1.32.0"
    ) -> None:
        self.start_delay = start_delay
        self.schema_version = schema_version
        """Objects clients write are validated against this Kubernetes version's schemas."""
        self.hami_scheduler_name = "hami-scheduler"
        """schedulerName of HAMi's scheduler: it places pods on nodes added with ``hami``,
        a GPU share by memory (``nvidia.com/gpumem``); pods naming any other scheduler than
        the default are served by none and stay Pending, as on a real cluster."""
        self.bookmark_interval = 60.0
        """Seconds between BOOKMARK events of a watch that allows them (the API server's
        watch cache: about a minute, and 2 s before the watch's timeout)."""
        self.ignore_sigterm = False
        """True: running pods ignore SIGTERM and are killed after their grace period."""
        self.on_running: list[Hook] = []
        """Called with (fake, pod, gpu uuids) when a pod starts: simulated programs."""
        self.requests: list[tuple[str, str]] = []
        """(method, path) of every request, for assertions."""
        self._objects = _Objects()
        self._rv = itertools.count(1)
        self._last_rv = 0
        # (resourceVersion, plural, event type, the object as JSON)
        self._history: collections.deque[tuple[int, str, str, str]] = collections.deque()
        self._history_limit = history
        self._oldest_rv = 0
        self._watchers: set[_Watcher] = set()
        self._faults: list[dict[str, Any]] = []
        self._devices: dict[str, list[str]] = {}  # pod uid -> GPU uuids
        self.force_delete_hold = 0.5
        """Seconds a force-deleted (grace 0) running pod's GPUs stay in use: the API forgets
        the pod at once, the container on the node is still stopping."""
        self._held: dict[str, list[str]] = {}  # uid of a force-deleted pod -> its GPUs
        self._logs: dict[str, list[str]] = {}  # pod uid -> lines its container printed
        self._tokens: dict[str, tuple[str, list[tuple[str | None, Obj]]]] = {}
        self._job_counted: dict[str, set[str]] = {}  # job uid -> pod uids counted
        self._attach_waiting: set[tuple[str, str]] = set()  # pods waiting for a volume
        self._interim_at: dict[str, float] = {}  # job uid -> when its interim condition came
        self.terminal_condition_delay = 0.0
        """Seconds the Job controller takes from an interim condition (FailureTarget,
        SuccessCriteriaMet) to the terminal one (Failed, Complete) once no pod of the Job is
        left terminating: a busy controller, whose next sync of the Job comes later."""
        self.pod_creation_delay = 0.0
        """Seconds the Job controller takes to create the pods of a Job once it runs (not
        suspended): a busy controller, so a client sees the Job well before its pods."""
        self.watch_lag = 0.0
        """Seconds each watch event is sent after the change (read when it is sent): a
        loaded server or client, so a watch's cache lags what a read through the API shows."""
        self._admitted_at: dict[str, float] = {}  # job uid -> when it was first seen running
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._reconcile_pending = False
        self._reconcile_all = True
        """The next reconcile looks at every Job (a node, a claim or a timer changed)."""
        self._dirty_jobs: set[tuple[str, str]] = set()
        """(namespace, name) of the Jobs whose object or pods changed since the last one."""
        self._maybe_dead: set[str] = set()
        """uids of pods that ended or went since the last reconcile (their GPUs free up)."""
        self._devices_on: dict[str, set[str]] = {}  # node -> uids of pods holding its GPUs
        self._device_node: dict[str, str] = {}  # pod uid -> the node of its GPUs
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: httpserver.HTTPServer | None = None
        self.port = 0
        """The port to listen on (0: any free one, set by ``start``)."""

    # -- life ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeKube:
        ready: Future[None] = Future()

        def main() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            sockets = netutil.bind_sockets(self.port, "127.0.0.1")
            self.port = sockets[0].getsockname()[1]
            app = web.Application(
                [
                    (r"/_fake/running", _RunningHandler, {"fake": self}),
                    (r"(/.*)", _Handler, {"fake": self}),
                ],
                log_function=lambda handler: None,
            )
            self._server = httpserver.HTTPServer(app)
            self._server.add_sockets(sockets)
            loop.call_soon(ready.set_result, None)
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=main, name="fake-kube", daemon=True)
        self._thread.start()
        ready.result(10)
        self.call(self._put_namespace, "default")
        return self

    def stop(self) -> None:
        if self._loop is None:
            return

        def shutdown() -> None:
            assert self._server is not None and self._loop is not None
            self._server.stop()
            for watcher in self._watchers:
                watcher.queue.put_nowait(None)
            for timer in self._timers.values():
                timer.cancel()
            self._loop.call_later(0.05, self._loop.stop)

        self._loop.call_soon_threadsafe(shutdown)
        assert self._thread is not None
        self._thread.join(5)
        self._loop = None

    def kubeconfig(self, path: str, namespace: str = "default", token: str = "fake-token") -> str:
        """Write a kubeconfig for this server to ``path`` and return the path; ``token`` is
        the bearer token (an admin unless ``grant`` limited it)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": token}}],
            "contexts": [
                {
                    "name": "fake",
                    "context": {"cluster": "fake", "user": "fake", "namespace": namespace},
                }
            ],
            "current-context": "fake",
        }
        with open(path, "w") as f:
            json.dump(config, f)
        return path

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` on the server's loop and return its result (thread-safe)."""
        assert self._loop is not None, "the fake API server is not running"
        if threading.current_thread() is self._thread:
            return fn(*args, **kwargs)
        done: Future[Any] = Future()

        def run() -> None:
            try:
                done.set_result(fn(*args, **kwargs))
            except BaseException as e:  # handed to the caller
                done.set_exception(e)

        self._loop.call_soon_threadsafe(run)
        return done.result(10)

    # -- test controls -------------------------------------------------------------------

    def add_node(
        self,
        name: str,
        gpus: int = 4,
        memory_mib: int = 81920,
        product: str = "NVIDIA-A100-SXM4-80GB",
        labels: dict[str, str] | None = None,
        gfd: bool = True,
        taints: list[Obj] | None = None,
        hostname: str = "",
        hami: bool = False,
        split: int = 10,
    ) -> None:
        """A Ready node with ``gpus`` GPUs, labelled as NVIDIA GPU feature discovery does;
        ``hostname``: its kubernetes.io/hostname label where that differs from its name
        (hostname-override, FQDN node names); ``hami``: its GPUs are HAMi's (its device
        plugin registers each GPU in ``hami.io/node-nvidia-register`` and ``split`` times in
        allocatable ``nvidia.com/gpu``)."""
        all_labels = {"kubernetes.io/hostname": hostname or name, "kubernetes.io/os": "linux"}
        if gfd and gpus:
            all_labels.update(
                {
                    "nvidia.com/gpu.count": str(gpus),
                    "nvidia.com/gpu.memory": str(memory_mib),
                    "nvidia.com/gpu.product": product,
                    "nvidia.com/gpu.present": "true",
                }
            )
        all_labels.update(labels or {})
        resources = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(gpus)}
        annotations = {}
        if hami:
            all_labels["gpu"] = "on"  # HAMi's device plugin runs on nodes labelled so
            resources[GPU] = str(gpus * split)
            annotations[HAMI_REGISTER] = json.dumps(
                [
                    {
                        "id": f"GPU-{name}-{index}",
                        "index": index,
                        "count": split,
                        "devmem": memory_mib,
                        "devcore": 100,
                        "type": f"NVIDIA-{product}",
                        "numa": 0,
                        "mode": "hami-core",
                        "health": True,
                    }
                    for index in range(gpus)
                ]
            )
        node = {
            "metadata": {"name": name, "labels": all_labels, "annotations": annotations},
            "spec": {"taints": list(taints)} if taints else {},
            "status": {
                "capacity": dict(resources),
                "allocatable": dict(resources),
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        self.call(self._create, "nodes", "", node)

    def set_node_ready(self, name: str, ready: bool) -> None:
        def change() -> None:
            node = clone(self._get("nodes", "", name))
            node["status"]["conditions"] = [{"type": "Ready", "status": str(ready)}]
            self._set_status("nodes", node)

        self.call(change)

    def remove_node(self, name: str) -> None:
        self.call(self._delete_now, "nodes", "", name)

    def finish_pod(self, namespace: str, name: str, exit_code: int = 0) -> None:
        """The pod's process exits with ``exit_code`` (Succeeded when 0, else Failed)."""
        self.call(self._terminate, namespace, name, exit_code, "exited")

    def evict(self, namespace: str, name: str, reason: str = "EvictionByEvictionAPI") -> None:
        """A drain or eviction: the pod gets the DisruptionTarget condition, then is deleted
        (its container gets SIGTERM), as the Eviction API and the taint manager do."""

        def run() -> None:
            pod = clone(self._get("pods", namespace, name))
            pod["status"]["conditions"] = [
                *(pod["status"].get("conditions") or []),
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": reason,
                    "message": "Eviction API: evicting",
                },
            ]
            pod = self._set_status("pods", pod)
            self._delete_pod(pod, None)

        self.call(run)

    def exit_on_sigterm(self, namespace: str, name: str) -> None:
        """A pod that is being deleted ends now, as a process that handles SIGTERM would."""
        self.call(self._terminate, namespace, name, 143, "SIGTERM")

    def validate(self, plural: str, obj: Obj, current: Obj | None = None) -> None:
        """What a client writes must be a valid object of the pinned Kubernetes version
        (kubernetes-validate's schemas), unknown fields refused (as ``fieldValidation=Strict``
        does), and a Job must pass the API server's own Job validation (``job_problems``;
        ``current``: the Job it replaces): 422 Invalid naming the field."""
        kind, api_version, _ = RESOURCES[plural]
        if plural == "jobs":
            problems = job_problems(obj, current)
            if problems:
                detail = problems[0] if len(problems) == 1 else f"[{', '.join(problems)}]"
                name = (obj.get("metadata") or {}).get("name", "")
                raise ApiError(422, "Invalid", f'Job.batch "{name}" is invalid: {detail}')
        if not self.schema_version:
            return
        import jsonschema

        document = {**obj, "kind": kind, "apiVersion": api_version}
        quick = _schema_check(kind, api_version, self.schema_version)
        if quick is not None and quick(document):
            return
        try:
            _schema_validator(kind, api_version, self.schema_version).validate(document)
        except jsonschema.ValidationError as error:
            where = ".".join(str(part) for part in error.path) or "(root)"
            raise ApiError(
                422,
                "Invalid",
                f'{kind} "{(obj.get("metadata") or {}).get("name", "")}" is invalid: '
                f"{where}: {error.message}",
            ) from None

    def grant(self, token: str, user: str, rules: list[tuple[str | None, Obj]]) -> None:
        """Requests with ``token`` may do only what ``rules`` allow ((namespace or None for
        cluster-wide, PolicyRule)); anything else is 403 Forbidden, worded as RBAC words it.
        Tokens never granted are cluster admins."""
        self.call(self._tokens.__setitem__, token, (user, list(rules)))

    def write_log(self, namespace: str, name: str, text: str) -> None:
        """What the pod's container prints (read back through ``pods/log``)."""

        def run() -> None:
            uid = self._get("pods", namespace, name)["metadata"]["uid"]
            self._logs.setdefault(uid, []).extend(text.splitlines())

        self.call(run)

    def compact(self) -> None:
        """Forget the watch history, so a watch from any older resourceVersion gets 410."""

        def run() -> None:
            self._history.clear()
            self._oldest_rv = self._last_rv + 1

        self.call(run)

    def drop_watches(self) -> None:
        """End every open watch stream (as an API server restart or a proxy timeout does)."""

        def run() -> None:
            for watcher in self._watchers:
                watcher.queue.put_nowait(None)

        self.call(run)

    def fail_next(
        self, method: str, path_re: str, code: int, *, times: int = 1, reason: str = ""
    ) -> None:
        """The next ``times`` requests matching ``method`` and ``path_re`` get ``code``
        (``code=0`` makes them hang for 60 s, a timeout for the client)."""
        self.call(
            self._faults.append,
            {
                "method": method,
                "path": re.compile(path_re),
                "code": code,
                "times": times,
                "reason": reason
                or {409: "Conflict", 429: "TooManyRequests", 500: "InternalError"}.get(
                    code, "Error"
                ),
            },
        )

    def objects(self, plural: str, namespace: str | None = None, labels: str = "") -> list[Obj]:
        def run() -> list[Obj]:
            return [
                clone(obj)
                for (p, ns, _), obj in sorted(self._objects.items())
                if p == plural
                and (namespace is None or ns == namespace)
                and label_match(labels, obj["metadata"].get("labels") or {})
            ]

        return self.call(run)

    def get(self, plural: str, namespace: str, name: str) -> Obj | None:
        return self.call(lambda: clone(self._objects.get((plural, namespace, name))))

    def devices(self, pod_uid: str) -> list[str]:
        return self.call(lambda: list(self._devices.get(pod_uid, [])))

    def patch_object(self, plural: str, namespace: str, name: str, patch: Obj) -> Obj:
        def run() -> Obj:
            obj = merge_patch(self._get(plural, namespace, name), patch)
            return self._update(plural, obj)

        return self.call(run)

    # -- storage ---------------------------------------------------------------------------

    def _get(self, plural: str, namespace: str, name: str) -> Obj:
        obj = self._objects.get((plural, namespace, name))
        if obj is None:
            kind = RESOURCES[plural][0].lower()
            raise ApiError(404, "NotFound", f'{plural} "{name}" not found ({kind})')
        return obj

    def _bump(self, obj: Obj) -> int:
        rv = next(self._rv)
        self._last_rv = rv
        obj["metadata"]["resourceVersion"] = str(rv)
        return rv

    def _record(self, plural: str, kind: str, obj: Obj, rv: int) -> None:
        """The change as every watch will send it: encoded once, here, as the API server's
        watch cache serializes an event once for all its watchers (the encoding is the
        snapshot: later writes to ``obj`` do not reach it)."""
        text = json.dumps(obj)
        self._history.append((rv, plural, kind, text))
        if len(self._history) > self._history_limit:
            dropped = self._history.popleft()
            self._oldest_rv = dropped[0] + 1
        now = time.monotonic()
        for watcher in list(self._watchers):
            if watcher.wants(plural, obj):
                watcher.queue.put_nowait((kind, text, now))
        self._changed(plural, kind, obj)

    def _changed(self, plural: str, kind: str, obj: Obj) -> None:
        """Mark what the simulation must look at again after this change, and schedule it:
        a Job, the Jobs owning a pod, or (nodes, claims) everything. Events, Secrets,
        Leases and the like change nothing the simulation reads. Reconciling only what
        changed keeps a 4,000-job cluster linear (benchmarks/kai_scale.py)."""
        meta = obj["metadata"]
        if plural == "jobs":
            self._dirty_jobs.add((meta.get("namespace", ""), meta["name"]))
        elif plural == "pods":
            for ref in meta.get("ownerReferences") or []:
                if ref.get("kind") == "Job":
                    self._dirty_jobs.add((meta.get("namespace", ""), ref["name"]))
            if kind == "DELETED" or obj["status"].get("phase") in TERMINAL:
                self._maybe_dead.add(meta["uid"])
        elif plural in ("nodes", "persistentvolumeclaims"):
            self._reconcile_all = True
        else:
            return
        self._schedule_reconcile(everything=False)

    def _put_namespace(self, name: str) -> None:
        if ("namespaces", "", name) not in self._objects:
            self._create(
                "namespaces", "", {"metadata": {"name": name}, "status": {"phase": "Active"}}
            )

    def _create(self, plural: str, namespace: str, body: Obj) -> Obj:
        kind, api_version, namespaced = RESOURCES[plural]
        obj = clone(body)
        obj["kind"], obj["apiVersion"] = kind, api_version
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiError(422, "Invalid", "metadata.name: Required value")
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if namespaced:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
            namespace = ""
        key = (plural, namespace, meta["name"])
        if key in self._objects:
            raise ApiError(409, "AlreadyExists", f'{plural} "{meta["name"]}" already exists')
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_iso()
        meta["generation"] = 1
        meta.setdefault("labels", {})
        self._defaults(plural, obj)
        rv = self._bump(obj)
        self._objects[key] = obj
        self._record(plural, "ADDED", obj, rv)
        return obj

    def _defaults(self, plural: str, obj: Obj) -> None:
        spec = obj.setdefault("spec", {}) if plural in ("pods", "jobs", "services") else None
        if plural == "pods":
            assert spec is not None
            _extended_resource_toleration(spec)
            spec.setdefault("terminationGracePeriodSeconds", 30)
            spec.setdefault("restartPolicy", "Always")
            obj.setdefault("status", {})["phase"] = "Pending"
        elif plural == "jobs":
            assert spec is not None
            spec.setdefault("suspend", False)
            spec.setdefault("parallelism", 1)
            spec.setdefault("completions", 1)
            spec.setdefault("backoffLimit", 6)
            spec.setdefault("completionMode", "NonIndexed")
            obj["status"] = {}
        elif plural == "services":
            assert spec is not None
            spec.setdefault("clusterIP", f"10.96.0.{len(self._objects) % 250 + 1}")
        elif plural == "persistentvolumeclaims":
            # provisioned and bound at once (a StorageClass with Immediate binding)
            claim_spec = obj.setdefault("spec", {})
            claim_spec.setdefault("volumeName", f"pvc-{obj['metadata']['uid']}")
            obj["status"] = {
                "phase": "Bound",
                "accessModes": list(claim_spec.get("accessModes") or ["ReadWriteOnce"]),
            }

    def _update(
        self, plural: str, obj: Obj, *, check_rv: str | None = None, status: bool = False
    ) -> Obj:
        meta = obj["metadata"]
        namespace = meta.get("namespace", "") if RESOURCES[plural][2] else ""
        key = (plural, namespace, meta["name"])
        current = self._objects.get(key)
        if current is None:
            raise ApiError(404, "NotFound", f'{plural} "{meta["name"]}" not found')
        if check_rv and check_rv != current["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {plural} "{meta["name"]}": the object has '
                "been modified; please apply your changes to the latest version and try again",
            )
        new = clone(obj)
        for field in ("uid", "creationTimestamp", "namespace", "deletionTimestamp"):
            if field in current["metadata"]:
                new["metadata"][field] = current["metadata"][field]
        new["kind"], new["apiVersion"] = current["kind"], current["apiVersion"]
        if status:
            kept = clone(current)
            kept["status"] = new.get("status", {})
            new = kept
        elif "status" in current and plural in ("pods", "jobs", "nodes"):
            new["status"] = current["status"]  # the main resource does not change status
        if new.get("spec") != current.get("spec"):
            new["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
        rv = self._bump(new)
        self._objects[key] = new
        self._record(plural, "MODIFIED", new, rv)
        return new

    def _set_status(self, plural: str, obj: Obj) -> Obj:
        return self._update(plural, obj, status=True)

    def _delete_now(self, plural: str, namespace: str, name: str) -> Obj:
        obj = self._objects.pop((plural, namespace, name), None)
        if obj is None:
            raise ApiError(404, "NotFound", f'{plural} "{name}" not found')
        timer = self._timers.pop(obj["metadata"]["uid"], None)
        if timer is not None:
            timer.cancel()
        rv = self._bump(obj)
        self._record(plural, "DELETED", obj, rv)
        return obj

    def _delete(self, plural: str, namespace: str, name: str, options: Obj) -> Obj:
        obj = self._get(plural, namespace, name)
        if plural == "pods":
            return self._delete_pod(obj, options.get("gracePeriodSeconds"))
        if plural == "jobs" and options.get("propagationPolicy") in ("Background", "Foreground"):
            for pod in self._owned_pods(obj):
                self._delete_pod(pod, None)
            deleted = self._delete_now(plural, namespace, name)
            self._collect_orphans()
            return deleted
        return self._delete_now(plural, namespace, name)

    def _collect_orphans(self) -> None:
        """The garbage collector, for what a deleted Job owned besides its pods (a job's
        credentials Secret): an object none of whose owners exists any more goes too."""
        plural_of = {kind: plural for plural, (kind, _, _) in RESOURCES.items()}

        def exists(namespace: str, ref: Obj) -> bool:
            plural = plural_of.get(ref.get("kind", ""))
            if plural is None:
                return False  # a kind the fake does not keep: no such owner here
            owner = self._objects.get(
                (plural, namespace if RESOURCES[plural][2] else "", ref["name"])
            )
            return owner is not None and owner["metadata"]["uid"] == ref.get("uid")

        for plural in RESOURCES:
            if plural in ("pods", "events"):
                continue
            for (_, namespace, name), obj in list(self._objects.of(plural).items()):
                owners = obj["metadata"].get("ownerReferences") or []
                if owners and not any(exists(namespace, ref) for ref in owners):
                    self._delete_now(plural, namespace, name)

    # -- simulation: pods ------------------------------------------------------------------

    def _delete_pod(self, pod: Obj, grace: Any) -> Obj:
        meta, status = pod["metadata"], pod.get("status", {})
        if status.get("phase") == "Running" and grace == 0 and self._devices.get(meta["uid"]):
            uid = meta["uid"]
            self._held[uid] = list(self._devices[uid])
            assert self._loop is not None
            self._loop.call_later(self.force_delete_hold, self._release_held, uid)
        if status.get("phase") != "Running" or grace == 0:
            return self._delete_now("pods", meta["namespace"], meta["name"])
        if meta.get("deletionTimestamp"):
            return pod
        seconds = pod["spec"].get("terminationGracePeriodSeconds", 30) if grace is None else grace
        pod = clone(pod)
        pod["metadata"]["deletionTimestamp"] = now_iso()
        pod["metadata"]["deletionGracePeriodSeconds"] = int(seconds)
        rv = self._bump(pod)
        self._objects[("pods", meta["namespace"], meta["name"])] = pod
        self._record("pods", "MODIFIED", pod, rv)
        self._event(pod, "Killing", f"Stopping container {self._container_name(pod)}")
        assert self._loop is not None
        if self.ignore_sigterm:
            self._timers[meta["uid"]] = self._loop.call_later(
                float(seconds), self._terminate, meta["namespace"], meta["name"], 137, "SIGKILL"
            )
        else:
            self._timers[meta["uid"]] = self._loop.call_later(
                0.01, self._terminate, meta["namespace"], meta["name"], 143, "SIGTERM"
            )
        return pod

    def _release_held(self, uid: str) -> None:
        self._held.pop(uid, None)
        self._schedule_reconcile()

    @staticmethod
    def _container_name(pod: Obj) -> str:
        containers = pod["spec"].get("containers") or [{"name": "main"}]
        return containers[0].get("name", "main")

    def _terminate(self, namespace: str, name: str, code: int, why: str) -> None:
        pod = self._objects.get(("pods", namespace, name))
        if pod is None or pod["status"].get("phase") in TERMINAL:
            return
        self._timers.pop(pod["metadata"]["uid"], None)
        pod = clone(pod)
        pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
        pod["status"]["containerStatuses"] = [
            {
                "name": self._container_name(pod),
                "ready": False,
                "restartCount": 0,
                "image": "fake",
                "imageID": "fake",
                "state": {
                    "terminated": {
                        "exitCode": code,
                        "reason": "Completed" if code == 0 else "Error",
                        "message": why,
                        "finishedAt": now_iso(),
                    }
                },
            }
        ]
        pod["status"]["conditions"] = [  # DisruptionTarget and the like stay
            *(
                c
                for c in pod["status"].get("conditions") or []
                if c.get("type") not in ("Ready", "ContainersReady")
            ),
            {"type": "Ready", "status": "False"},
        ]
        self._set_status("pods", pod)
        if pod["metadata"].get("deletionTimestamp"):
            assert self._loop is not None
            self._loop.call_soon(self._remove_if_present, namespace, name)

    def _remove_if_present(self, namespace: str, name: str) -> None:
        if ("pods", namespace, name) in self._objects:
            self._delete_now("pods", namespace, name)

    def _event(self, obj: Obj, reason: str, message: str, kind: str = "Normal") -> None:
        meta = obj["metadata"]
        self._create(
            "events",
            meta.get("namespace", "default"),
            {
                "metadata": {"generateName": f"{meta['name']}."},
                "involvedObject": {
                    "kind": obj["kind"],
                    "name": meta["name"],
                    "namespace": meta.get("namespace"),
                    "uid": meta["uid"],
                    "apiVersion": obj["apiVersion"],
                },
                "reason": reason,
                "message": message,
                "type": kind,
                "count": 1,
                "firstTimestamp": now_iso(),
                "lastTimestamp": now_iso(),
                "source": {"component": "fake-kube"},
            },
        )

    @staticmethod
    def _gpu_request(pod: Obj) -> int:
        total = 0
        for container in pod["spec"].get("containers", []):
            resources = container.get("resources") or {}
            amount = (resources.get("limits") or {}).get(GPU) or (
                resources.get("requests") or {}
            ).get(GPU)
            total += int(amount or 0)
        return total

    def _claims(self, pod: Obj) -> list[tuple[str, Obj | None]]:
        """(claim name, the PersistentVolumeClaim or None) of each claim volume of a pod."""
        namespace = pod["metadata"].get("namespace", "")
        names = [
            (v.get("persistentVolumeClaim") or {}).get("claimName")
            for v in pod["spec"].get("volumes") or []
        ]
        return [
            (name, self._objects.get(("persistentvolumeclaims", namespace, name)))
            for name in names
            if name
        ]

    def _claim_users(self, pod: Obj, claim: str) -> list[Obj]:
        """The other pods of the namespace with ``claim`` mounted: running, or terminating
        (their volumes stay until their containers have stopped)."""
        meta = pod["metadata"]
        return [
            other
            for (p, ns, _), other in sorted(self._objects.items())
            if p == "pods"
            and ns == meta.get("namespace")
            and other["metadata"]["uid"] != meta["uid"]
            and other["status"].get("phase") == "Running"
            and any(name == claim for name, _ in self._claims(other))
        ]

    def _volume_problem(self, pod: Obj) -> str:
        """Why the scheduler's volume plugins (VolumeBinding, VolumeRestrictions) place the
        pod on no node, or ""."""
        for name, claim in self._claims(pod):
            if claim is None:
                return f'persistentvolumeclaim "{name}" not found'
            modes = (claim.get("spec") or {}).get("accessModes") or []
            if "ReadWriteOncePod" in modes and self._claim_users(pod, name):
                return (
                    "node has pod using PersistentVolumeClaim with the same name and "
                    "ReadWriteOncePod access mode"
                )
        return ""

    def _multi_attach(self, pod: Obj) -> str:
        """The attach/detach controller's FailedAttachVolume words when a ReadWriteOnce
        volume the pod needs is attached to another node (its pods use it), or ""."""
        node = pod["spec"].get("nodeName")
        for name, claim in self._claims(pod):
            modes = set(((claim or {}).get("spec") or {}).get("accessModes") or [])
            if claim is None or modes & {"ReadWriteMany", "ReadOnlyMany"}:
                continue
            elsewhere = [
                other["metadata"]["name"]
                for other in self._claim_users(pod, name)
                if other["spec"].get("nodeName") != node
            ]
            if elsewhere:
                volume = claim["spec"].get("volumeName") or name
                return (
                    f'Multi-Attach error for volume "{volume}" Volume is already used by '
                    f"pod(s) {', '.join(elsewhere)}"
                )
        return ""

    def _hami_usage(self, node: str) -> dict[str, tuple[int, int, int]]:
        """GPU UUID -> (shares, MiB, cores %) HAMi has given the live pods on ``node``."""
        usage: dict[str, tuple[int, int, int]] = {}
        for (p, _, _), other in self._objects.items():
            if (
                p == "pods"
                and other["spec"].get("nodeName") == node
                and other["status"].get("phase") not in TERMINAL
            ):
                for uuid_, memory, cores in hami_allocation(other):
                    count, used, busy = usage.get(uuid_, (0, 0, 0))
                    usage[uuid_] = (count + 1, used + memory, busy + cores)
        return usage

    def _hami_fit(self, pod: Obj, node: Obj) -> tuple[str, str]:
        """HAMi's scheduler's filter on one node: (the ``vgpu-devices-allocated`` text, "")
        when the pod's shares fit on its GPUs (spread: the least used GPU first; only those
        ``nvidia.com/use-gpuuuid`` names), else ("", why)."""
        devices = _hami_registered(node)
        if not devices:
            return "", "no GPU registered by HAMi"
        pod_annotations = pod["metadata"].get("annotations") or {}
        allowed = {u for u in (pod_annotations.get(HAMI_USE_UUID) or "").split(",") if u}
        excluded = {u for u in (pod_annotations.get(HAMI_NOUSE_UUID) or "").split(",") if u}
        usage = self._hami_usage(node["metadata"]["name"])
        containers = []
        for count, memory, percent, cores in _hami_requests(pod):
            chosen, why = [], "CardInsufficientMemory"
            candidates = [
                d
                for d in devices
                if d.get("health", True)
                and (not allowed or d["id"] in allowed)
                and d["id"] not in excluded
            ]
            if not candidates:
                why = "CardUuidMismatch"
            for device in sorted(
                candidates, key=lambda d: (usage.get(d["id"], (0, 0, 0))[1], d["index"])
            ):
                shares, used, busy = usage.get(device["id"], (0, 0, 0))
                need = memory if memory is not None else device["devmem"] * (percent or 100) // 100
                if shares >= int(device.get("count", 1)):
                    why = "CardTimeSlicingExhausted"
                elif used + need > int(device["devmem"]):
                    why = "CardInsufficientMemory"
                elif busy + cores > int(device.get("devcore", 100)):
                    why = "CardInsufficientCore"
                else:
                    chosen.append(f"{device['id']},NVIDIA,{need},{cores}:")
                    usage[device["id"]] = (shares + 1, used + need, busy + cores)
                    if len(chosen) == count:
                        break
            if len(chosen) < count:
                return "", why
            containers.append("".join(chosen))
        return ";".join(containers) + ";", ""

    def _schedule(self, pod: Obj) -> None:
        spec = pod["spec"]
        wanted = self._gpu_request(pod)
        reasons = []
        volume_problem = self._volume_problem(pod)
        scheduler = spec.get("schedulerName") or "default-scheduler"
        if scheduler not in ("default-scheduler", self.hami_scheduler_name):
            return  # no such scheduler here: the pod waits, unscheduled, without a word
        hami = scheduler == self.hami_scheduler_name
        pinned = _pinned_nodes(spec)
        nodes = self._objects.of("nodes")
        candidates = (
            sorted(nodes.items())
            if pinned is None
            else sorted(
                (key, nodes[key]) for key in (("nodes", "", n) for n in pinned) if key in nodes
            )
        )
        for (plural, _, name), node in candidates:
            if plural != "nodes" or volume_problem:
                continue
            labels = node["metadata"].get("labels") or {}
            ready = any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in node["status"].get("conditions", [])
            )
            if spec.get("nodeName") and spec["nodeName"] != name:
                continue
            if not ready or any(
                labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()
            ):
                continue
            if not _affinity_matches(spec, node):
                continue
            untolerated = _untolerated(node, spec.get("tolerations") or [])
            if untolerated:
                reasons.append(f"node {name}: untolerated taint {untolerated}")
                continue
            used = sum(
                self._gpu_request(other)
                for (p, _, _), other in (
                    (key, self._objects[key])
                    for key in sorted(self._objects.pods_by_node.get(name, ()))
                )
                if p == "pods"
                and other["spec"].get("nodeName") == name
                and other["status"].get("phase") not in TERMINAL
            )
            if used + wanted > int(node["status"]["allocatable"].get(GPU, 0)):
                reasons.append(f"node {name}: insufficient {GPU}")
                continue
            allocated, why = self._hami_fit(pod, node) if hami and wanted else ("", "")
            if why:
                reasons.append(f"node {name}: {why}")
                continue
            pod = clone(pod)
            pod["spec"]["nodeName"] = name
            if allocated:  # HAMi's scheduler writes its decision for its device plugin
                pod["metadata"].setdefault("annotations", {}).update(
                    {
                        HAMI_ALLOCATED: allocated,
                        "hami.io/vgpu-node": name,
                        "hami.io/bind-phase": "success",
                    }
                )
            self._update("pods", pod)
            pod = self._objects[("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])]
            pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
            self._set_status("pods", clone(pod))
            self._event(
                pod, "Scheduled", f"Successfully assigned {pod['metadata']['name']} to {name}"
            )
            assert self._loop is not None
            self._loop.call_later(
                self.start_delay,
                self._run_pod,
                pod["metadata"]["namespace"],
                pod["metadata"]["name"],
            )
            return
        conditions = pod["status"].get("conditions") or []
        if not any(c.get("reason") == "Unschedulable" for c in conditions):
            pod = clone(pod)
            message = "0/N nodes are available: " + (
                volume_problem or "; ".join(reasons) or "no node matches"
            )
            pod["status"]["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                }
            ]
            self._set_status("pods", pod)
            self._event(pod, "FailedScheduling", message, "Warning")

    def _run_pod(self, namespace: str, name: str) -> None:
        pod = self._objects.get(("pods", namespace, name))
        if (
            pod is None
            or pod["status"].get("phase") != "Pending"
            or pod["metadata"].get("deletionTimestamp")
        ):
            return
        multi_attach = self._multi_attach(pod)
        if multi_attach:
            if (namespace, name) not in self._attach_waiting:  # retried as pods change
                self._attach_waiting.add((namespace, name))
                pod = clone(pod)
                pod["status"]["containerStatuses"] = [
                    {
                        "name": c.get("name", "main"),
                        "ready": False,
                        "restartCount": 0,
                        "image": c.get("image", ""),
                        "imageID": "",
                        "state": {"waiting": {"reason": "ContainerCreating"}},
                    }
                    for c in pod["spec"].get("containers", [])
                ]
                pod = self._set_status("pods", pod)
                self._event(pod, "FailedAttachVolume", multi_attach, "Warning")
            return
        self._attach_waiting.discard((namespace, name))
        node = pod["spec"]["nodeName"]
        node_obj = self._objects.get(("nodes", "", node))
        if node_obj and HAMI_REGISTER in (node_obj["metadata"].get("annotations") or {}):
            if self._gpu_request(pod) and not hami_allocation(pod):
                # HAMi's device plugin serves the pods its scheduler placed, no other
                self._admission_failed(pod, f"no binding pod found on node {node}")
                return
            self._start(pod, [uuid_ for uuid_, _, _ in hami_allocation(pod)])
            return
        taken = {
            uuid_
            for devices in (
                *(self._devices[uid] for uid in self._devices_on.get(node, ())),
                *self._held.values(),
            )
            for uuid_ in devices
        }
        count = int(node_obj["status"]["allocatable"].get(GPU, 0)) if node_obj else 0
        free = [f"GPU-{node}-{i}" for i in range(count) if f"GPU-{node}-{i}" not in taken]
        wanted = self._gpu_request(pod)
        if len(free) < wanted:
            # the kubelet's device manager: the scheduler counted the API's pods, the node
            # still has a force-deleted container on the device
            self._admission_failed(
                pod,
                "Allocate failed due to requested number of devices unavailable "
                f"for {GPU}. Requested: {wanted}, Available: {len(free)}",
            )
            return
        self._start(pod, free[:wanted])

    def _admission_failed(self, pod: Obj, message: str) -> None:
        pod = clone(pod)
        pod["status"].update(
            {"phase": "Failed", "reason": "UnexpectedAdmissionError", "message": message}
        )
        self._set_status("pods", pod)

    def _start(self, pod: Obj, devices: list[str]) -> None:
        """The pod's containers run, with ``devices`` (GPU UUIDs) from the device plugin."""
        self._devices[pod["metadata"]["uid"]] = devices
        self._devices_on.setdefault(pod["spec"]["nodeName"], set()).add(pod["metadata"]["uid"])
        self._device_node[pod["metadata"]["uid"]] = pod["spec"]["nodeName"]
        pod = clone(pod)
        pod["status"].update(
            {
                "phase": "Running",
                "podIP": f"10.1.{len(self._devices) // 250}.{len(self._devices) % 250 + 1}",
                "hostIP": "10.0.0.1",
                "startTime": now_iso(),
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True"},
                    {"type": "ContainersReady", "status": "True"},
                ],
                "containerStatuses": [
                    {
                        "name": c.get("name", "main"),
                        "ready": True,
                        "started": True,
                        "restartCount": 0,
                        "image": c.get("image", ""),
                        "imageID": "fake",
                        "state": {"running": {"startedAt": now_iso()}},
                    }
                    for c in pod["spec"].get("containers", [])
                ],
            }
        )
        pod = self._set_status("pods", pod)
        self._event(pod, "Started", f"Started container {self._container_name(pod)}")
        for hook in self.on_running:
            hook(self, pod, devices)

    # -- simulation: the Job controller ----------------------------------------------------

    def _owned_pods(self, job: Obj) -> list[Obj]:
        uid = job["metadata"]["uid"]
        keys = sorted(self._objects.pods_by_owner.get(uid, ()))
        return [self._objects[key] for key in keys if key in self._objects]

    def _job_pod(self, job: Obj, index: int | None) -> None:
        meta = job["metadata"]
        template = clone(job["spec"].get("template") or {})
        pod_meta = template.get("metadata") or {}
        labels = dict(pod_meta.get("labels") or {})
        labels.update(
            {
                "batch.kubernetes.io/controller-uid": meta["uid"],
                "batch.kubernetes.io/job-name": meta["name"],
                "controller-uid": meta["uid"],
                "job-name": meta["name"],
            }
        )
        annotations = dict(pod_meta.get("annotations") or {})
        spec = template.get("spec") or {}
        stem = meta["name"]
        if index is not None:
            labels["batch.kubernetes.io/job-completion-index"] = str(index)
            annotations["batch.kubernetes.io/job-completion-index"] = str(index)
            spec["hostname"] = f"{meta['name']}-{index}"
            stem = f"{meta['name']}-{index}"
            for container in spec.get("containers", []):
                container.setdefault("env", []).append(
                    {"name": "JOB_COMPLETION_INDEX", "value": str(index)}
                )
        pod = {
            "metadata": {
                "name": f"{stem}-{uuid.uuid4().hex[:5]}",
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": spec,
        }
        self._create("pods", meta["namespace"], pod)

    def _reconcile_job(self, job: Obj) -> None:
        spec = job["spec"]
        status = clone(job.get("status") or {})
        if _job_condition(status, "Complete") or _job_condition(status, "Failed"):
            return
        uid = job["metadata"]["uid"]
        pods = self._owned_pods(job)
        counted = self._job_counted.setdefault(uid, set())
        indexed = spec.get("completionMode") == "Indexed"
        completions = int(spec.get("completions") or 1)
        rules = (spec.get("podFailurePolicy") or {}).get("rules") or []
        done_indexes = {int(i) for i in str(status.get("completedIndexes") or "").split(",") if i}
        fail_job: tuple[str, str] | None = None
        for pod in pods:
            pod_uid = pod["metadata"]["uid"]
            phase = pod["status"].get("phase")
            if pod_uid in counted or phase not in TERMINAL:
                continue
            counted.add(pod_uid)
            if phase == "Succeeded":
                status["succeeded"] = status.get("succeeded", 0) + 1
                if indexed:
                    done_indexes.add(
                        int(pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])
                    )
            elif not (pod["metadata"].get("deletionTimestamp") and spec.get("suspend")):
                # isPodFailed with job-tracking finalizers: a pod that ends Failed counts,
                # deleted or not (an eviction, FracHub's own short-grace delete), unless the
                # Job is suspended (the controller removed it) or a rule of its
                # podFailurePolicy says otherwise
                action, message = pod_failure_action(rules, pod)
                if action == "Ignore":
                    continue
                status["failed"] = status.get("failed", 0) + 1
                if action == "FailJob" and fail_job is None:
                    fail_job = ("PodFailurePolicy", message)
        if indexed:
            status["completedIndexes"] = ",".join(str(i) for i in sorted(done_indexes))
        new_conditions = [c for c in status.get("conditions", []) if c["type"] != "Suspended"]
        interim = _job_condition(status, "FailureTarget") or _job_condition(
            status, "SuccessCriteriaMet"
        )
        fresh = interim is None
        if interim is None:
            # Kubernetes 1.31+: the interim condition first, the terminal one once every pod
            # has terminated
            reached: tuple[str, str, str] | None = None
            if fail_job is not None:
                reached = ("FailureTarget", *fail_job)
            elif status.get("failed", 0) > int(spec.get("backoffLimit", 6)):
                reached = (
                    "FailureTarget",
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                )
            elif (len(done_indexes) if indexed else status.get("succeeded", 0)) >= completions:
                reached = (
                    "SuccessCriteriaMet",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                )
            if reached is not None:
                interim = {
                    "type": reached[0],
                    "status": "True",
                    "reason": reached[1],
                    "message": reached[2],
                    "lastTransitionTime": now_iso(),
                }
                new_conditions.append(interim)
                self._interim_at[uid] = time.monotonic()
        if interim is not None:
            for pod in pods:
                if pod["status"].get("phase") not in TERMINAL:
                    self._delete_pod(pod, None)
            terminating = [
                p for p in self._owned_pods(job) if p["status"].get("phase") not in TERMINAL
            ]
            wait = self.terminal_condition_delay - (
                time.monotonic() - self._interim_at.get(uid, 0.0)
            )
            if not terminating and wait > 0 and self._loop is not None:
                self._sync_later(wait, job)
            elif not terminating and not fresh:  # a later sync than the interim condition's
                terminal = "Failed" if interim["type"] == "FailureTarget" else "Complete"
                new_conditions.append(
                    {**interim, "type": terminal, "lastTransitionTime": now_iso()}
                )
                if terminal == "Complete":
                    status["completionTime"] = now_iso()
            running: list[Obj] = []
            status["terminating"] = len(terminating)
        elif spec.get("suspend"):
            for pod in pods:
                if pod["status"].get("phase") not in TERMINAL:
                    self._delete_pod(pod, None)
            new_conditions.append({"type": "Suspended", "status": "True", "reason": "JobSuspended"})
            status.pop("startTime", None)
            running = []
        elif (
            wait := self.pod_creation_delay
            - (time.monotonic() - self._admitted_at.setdefault(uid, time.monotonic()))
        ) > 0 and self.pod_creation_delay:
            # (the first sight of a Job is "now" itself: with no delay, no wait at all)
            if self._loop is not None:
                self._sync_later(wait, job)
            running = []
        else:
            status.setdefault("startTime", now_iso())
            parallelism = int(spec.get("parallelism", 1))
            live = [p for p in pods if p["status"].get("phase") not in TERMINAL]
            # podReplacementPolicy: Failed (the default with a podFailurePolicy) replaces a
            # pod once it has terminated, TerminatingOrFailed as soon as it is deleted
            replace_terminating = (
                spec.get("podReplacementPolicy") or ("Failed" if rules else "TerminatingOrFailed")
            ) == "TerminatingOrFailed"
            occupying = [
                p
                for p in live
                if not (replace_terminating and p["metadata"].get("deletionTimestamp"))
            ]
            if indexed:
                busy = {
                    int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])
                    for p in occupying
                }
                for index in range(completions):
                    if len(busy) >= parallelism:
                        break
                    if index not in done_indexes and index not in busy:
                        self._job_pod(job, index)
                        busy.add(index)
            else:
                wanted = min(parallelism, completions - status.get("succeeded", 0))
                for _ in range(max(wanted - len(occupying), 0)):
                    self._job_pod(job, None)
            running = [
                p
                for p in self._owned_pods(job)
                if p["status"].get("phase") not in TERMINAL
                and not p["metadata"].get("deletionTimestamp")
            ]
        status["active"] = len(running)
        status["ready"] = len([p for p in running if p["status"].get("phase") == "Running"])
        status["conditions"] = new_conditions
        if status != job.get("status"):
            new = clone(job)
            new["status"] = status
            self._set_status("jobs", new)

    def _sync_later(self, wait: float, job: Obj) -> None:
        """The Job controller's next sync of ``job``, in ``wait`` seconds: that Job alone is
        looked at again (a timer once reconciled every Job: 4,000 of them, per Job
        admitted, in benchmarks/kai_scale.py)."""
        key = (job["metadata"]["namespace"], job["metadata"]["name"])

        def due() -> None:
            self._dirty_jobs.add(key)
            self._schedule_reconcile(everything=False)

        assert self._loop is not None
        self._loop.call_later(wait, due)

    def _schedule_reconcile(self, everything: bool = True) -> None:
        """Reconcile soon; ``everything``: every Job (a timer, GPUs released), else only
        those ``_changed`` marked."""
        self._reconcile_all = self._reconcile_all or everything
        if not self._reconcile_pending and self._loop is not None:
            self._reconcile_pending = True
            self._loop.call_soon(self._reconcile)

    def _reconcile(self) -> None:
        self._reconcile_pending = False
        if self._reconcile_all:
            keys = [(ns, name) for (_, ns, name) in self._objects.of("jobs")]
        else:
            keys = sorted(self._dirty_jobs)
        self._reconcile_all = False
        self._dirty_jobs = set()
        for namespace, name in keys:
            current = self._objects.get(("jobs", namespace, name))
            if current is not None:
                self._reconcile_job(current)
        for key in sorted(self._objects.pods_pending):
            pod = self._objects.get(key)
            if pod is not None and key in self._objects.pods_pending:
                self._schedule(pod)
        for namespace, name in sorted(self._attach_waiting):
            self._run_pod(namespace, name)
        self._attach_waiting = {
            key
            for key in self._attach_waiting
            if (pod := self._objects.get(("pods", *key))) is not None
            and pod["status"].get("phase") == "Pending"
            and not pod["metadata"].get("deletionTimestamp")
        }
        dead, self._maybe_dead = self._maybe_dead, set()
        for uid in dead:
            if uid in self._devices and not self._pod_alive(uid):
                del self._devices[uid]
                self._devices_on.get(self._device_node.pop(uid, ""), set()).discard(uid)

    def _pod_alive(self, uid: str) -> bool:
        key = self._objects.pod_by_uid.get(uid)
        pod = self._objects.get(key) if key is not None else None
        return pod is not None and pod["status"].get("phase") not in TERMINAL


def _event_line(kind: str, text: str) -> str:
    """One watch event, as ``json.dumps({"type": kind, "object": obj})`` writes it, from
    the object already encoded (``_record``)."""
    return f'{{"type": "{kind}", "object": {text}}}\n'


class _RunningHandler(web.RequestHandler):
    """``GET /_fake/running?namespace=&labelSelector=&label=``: the pods Running and not
    being deleted, as ``[node, value of the label]`` pairs. Not a Kubernetes API: a cheap
    read for a benchmark that polls the fake from another process (a pod list through the
    API would copy thousands of pods per poll and load the server it measures)."""

    def initialize(self, fake: FakeKube) -> None:
        self.fake = fake

    def get(self) -> None:
        namespace = self.get_query_argument("namespace", "")
        labels = self.get_query_argument("labelSelector", "")
        label = self.get_query_argument("label", "")
        found = []
        objects = self.fake._objects
        for key in list(objects.pods_running):
            pod, ns = objects[key], key[1]
            meta = pod["metadata"]
            if (
                (not namespace or ns == namespace)
                and pod["status"].get("phase") == "Running"
                and not meta.get("deletionTimestamp")
                and label_match(labels, meta.get("labels") or {})
            ):
                found.append([pod["spec"].get("nodeName"), (meta.get("labels") or {}).get(label)])
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"running": found}))


class _Handler(web.RequestHandler):
    """One handler for every path: parses the REST path and dispatches."""

    def initialize(self, fake: FakeKube) -> None:
        self.fake = fake

    def check_xsrf_cookie(self) -> None:
        pass

    def _parse(self) -> tuple[str, str, str | None, str | None]:
        parts = [p for p in urlparse(self.request.path).path.split("/") if p]
        if parts[:1] == ["api"]:
            rest = parts[2:]
        elif parts[:1] == ["apis"]:
            rest = parts[3:]
        else:
            raise ApiError(404, "NotFound", f"the server could not find {self.request.path}")
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or rest[0] not in RESOURCES:
            raise ApiError(404, "NotFound", f"the server could not find {self.request.path}")
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        return plural, namespace, name, sub

    def _query(self) -> dict[str, str]:
        return {k: v[-1] for k, v in parse_qs(self.request.query).items()}

    def _body(self) -> Any:
        return json.loads(self.request.body or b"{}")

    def _send(self, obj: Any, code: int = 200) -> None:
        self.set_status(code)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(obj))

    async def _dispatch(self, method: str) -> None:
        self.fake.requests.append((method, self.request.path))
        for fault in self.fake._faults:
            if (
                fault["times"] > 0
                and fault["method"] == method
                and fault["path"].search(self.request.path)
            ):
                fault["times"] -= 1
                if fault["code"] == 0:
                    await asyncio.sleep(60)
                    return
                error = ApiError(fault["code"], fault["reason"], f"injected {fault['code']}")
                if fault["code"] == 429:  # API priority and fairness says when to come back
                    self.set_header("Retry-After", str(fault.get("retry_after", 1)))
                self._send(error.status(), fault["code"])
                return
        try:
            plural, namespace, name, sub = self._parse()
            self._authorize(method, plural, namespace, name, sub)
            await getattr(self, f"_{method.lower()}")(plural, namespace, name, sub)
        except ApiError as error:
            self._send(error.status(), error.code)

    def _authorize(
        self, method: str, plural: str, namespace: str, name: str | None, sub: str | None
    ) -> None:
        header = self.request.headers.get("Authorization", "")
        token = header.removeprefix("Bearer ").strip()
        if token not in self.fake._tokens:
            return
        user, rules = self.fake._tokens[token]
        parts = [p for p in urlparse(self.request.path).path.split("/") if p]
        group = "" if parts[0] == "api" else parts[1]
        if method == "GET":
            watching = self._query().get("watch", "").lower() in ("true", "1")
            verb = "get" if name is not None else ("watch" if watching else "list")
        else:
            verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, "")
            verb = verb or ("delete" if name is not None else "deletecollection")
        resource = f"{plural}/{sub}" if sub else plural
        if not _allowed(rules, verb, group, resource, namespace):
            where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
            target = f'{plural} "{name}"' if name else plural
            raise ApiError(
                403,
                "Forbidden",
                f'{target} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
                f'in API group "{group}"{where}',
            )

    async def get(self, _path: str) -> None:
        await self._dispatch("GET")

    async def post(self, _path: str) -> None:
        await self._dispatch("POST")

    async def put(self, _path: str) -> None:
        await self._dispatch("PUT")

    async def patch(self, _path: str) -> None:
        await self._dispatch("PATCH")

    async def delete(self, _path: str) -> None:
        await self._dispatch("DELETE")

    async def _get(self, plural: str, namespace: str, name: str | None, sub: str | None) -> None:
        fake = self.fake
        if plural == "pods" and sub == "log" and name is not None:
            await self._pod_log(namespace, name)
            return
        if name is not None:
            self._send(fake._get(plural, namespace, name))
            return
        query = self._query()
        labels, fields = query.get("labelSelector", ""), query.get("fieldSelector", "")
        if query.get("watch", "").lower() in ("true", "1"):
            await self._watch(plural, namespace or None, labels, fields, query)
            return
        # filter, then sort only what matched (thousands of objects of other kinds)
        items = [
            obj
            for _, obj in sorted(
                (key, obj)
                for key, obj in fake._objects.of(plural).items()
                if key[0] == plural
                and (not namespace or key[1] == namespace)
                and label_match(labels, obj["metadata"].get("labels") or {})
                and field_match(fields, obj)
            )
        ]
        kind, api_version, _ = RESOURCES[plural]
        self._send(
            {
                "kind": f"{kind}List",
                "apiVersion": api_version,
                "metadata": {"resourceVersion": str(fake._last_rv)},
                "items": items,
            }
        )

    def _check_immutable(
        self, plural: str, namespace: str, name: str, new: Obj, sub: str | None
    ) -> None:
        if plural != "jobs" or sub == "status":
            return
        why = _job_template_change(self.fake._get(plural, namespace, name), new)
        if why:
            raise ApiError(422, "Invalid", f'Job.batch "{name}" is invalid: {why}')

    async def _pod_log(self, namespace: str, name: str) -> None:
        """``pods/log``: text; ``tailLines``; ``follow`` streams until the pod ends."""
        fake = self.fake
        pod = fake._get("pods", namespace, name)
        if not pod["spec"].get("nodeName") or (
            pod["status"].get("phase") == "Pending" and not fake._logs.get(pod["metadata"]["uid"])
        ):
            raise ApiError(
                400,
                "BadRequest",
                f'container "{fake._container_name(pod)}" in pod "{name}" is waiting to start',
            )
        query = self._query()
        uid = pod["metadata"]["uid"]
        lines = list(fake._logs.get(uid, []))
        if query.get("tailLines"):
            lines = lines[-int(query["tailLines"]) :] if int(query["tailLines"]) else []
        self.set_header("Content-Type", "text/plain")
        self.write("".join(line + "\n" for line in lines))
        if query.get("follow", "").lower() in ("true", "1"):
            sent = len(fake._logs.get(uid, []))
            while True:
                await self.flush()
                current = fake._objects.get(("pods", namespace, name))
                new = fake._logs.get(uid, [])[sent:]
                sent += len(new)
                self.write("".join(line + "\n" for line in new))
                if current is None or current["status"].get("phase") in TERMINAL:
                    break
                await asyncio.sleep(0.05)
        self.finish()

    async def _watch(
        self, plural: str, namespace: str | None, labels: str, fields: str, query: dict[str, str]
    ) -> None:
        fake = self.fake
        watcher = _Watcher(plural, namespace, labels, fields)
        since = query.get("resourceVersion", "")
        self.set_header("Content-Type", "application/json")
        if since not in ("", "0") and int(since) < fake._oldest_rv - 1:
            expired = ApiError(
                410, "Expired", f"too old resource version: {since} ({fake._oldest_rv})"
            )
            self.finish(json.dumps({"type": "ERROR", "object": expired.status()}) + "\n")
            return
        if since in ("", "0"):
            for (p, _, _), obj in sorted(fake._objects.items()):
                if watcher.wants(p, obj):
                    watcher.queue.put_nowait(("ADDED", json.dumps(obj), time.monotonic()))
        else:
            for rv, p, kind, text in fake._history:
                if rv > int(since) and watcher.wants(p, json.loads(text)):
                    watcher.queue.put_nowait((kind, text, time.monotonic()))
        fake._watchers.add(watcher)
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        bookmarks = query.get("allowWatchBookmarks", "").lower() in ("true", "1")
        next_bookmark = _next_bookmark(time.monotonic(), deadline, fake.bookmark_interval)
        kind, api_version, _ = RESOURCES[plural]
        try:
            while True:
                now = time.monotonic()
                left = deadline - now
                if left <= 0:
                    break
                wait = left if not bookmarks or next_bookmark is None else next_bookmark - now
                try:
                    item = await asyncio.wait_for(watcher.queue.get(), max(wait, 0))
                except TimeoutError:
                    if wait >= left:
                        break
                    # the queue is empty: every event up to the current version is sent
                    item = (
                        "BOOKMARK",
                        json.dumps(
                            {
                                "kind": kind,
                                "apiVersion": api_version,
                                "metadata": {"resourceVersion": str(fake._last_rv)},
                            }
                        ),
                        now,
                    )
                    next_bookmark = _next_bookmark(
                        time.monotonic(), deadline, fake.bookmark_interval
                    )
                if item is None:
                    break
                late = item[2] + fake.watch_lag - time.monotonic()
                if late > 0 and item[0] != "BOOKMARK":
                    await asyncio.sleep(late)
                self.write(_event_line(*item[:2]))
                # what else is waiting goes in the same write, one line per event, as the
                # API server's watch writes what it has (a lagging watch sends each alone)
                while not fake.watch_lag and not watcher.queue.empty():
                    more = watcher.queue.get_nowait()
                    if more is None:
                        watcher.queue.put_nowait(None)
                        break
                    self.write(_event_line(*more[:2]))
                await self.flush()
        except Exception:  # the client went away
            pass
        finally:
            fake._watchers.discard(watcher)
        if not self._finished:
            self.finish()

    async def _post(self, plural: str, namespace: str, name: str | None, sub: str | None) -> None:
        body = self._body()
        self.fake.validate(plural, body)
        self._send(self.fake._create(plural, namespace, body), 201)

    async def _put(self, plural: str, namespace: str, name: str | None, sub: str | None) -> None:
        if name is None:
            raise ApiError(405, "MethodNotAllowed", "PUT needs a name")
        body = self._body()
        body.setdefault("metadata", {})["name"] = name
        if RESOURCES[plural][2]:
            body["metadata"]["namespace"] = namespace
        rv = body["metadata"].get("resourceVersion")
        self.fake.validate(plural, body, self.fake._get(plural, namespace, name))
        self._check_immutable(plural, namespace, name, body, sub)
        self._send(self.fake._update(plural, body, check_rv=rv, status=sub == "status"))

    async def _patch(self, plural: str, namespace: str, name: str | None, sub: str | None) -> None:
        if name is None:
            raise ApiError(405, "MethodNotAllowed", "PATCH needs a name")
        current = self.fake._get(plural, namespace, name)
        patch = self._body()
        content_type = self.request.headers.get("Content-Type", "")
        if "json-patch" in content_type:
            new = json_patch(current, patch)
            rv = None
        else:
            rv = (patch.get("metadata") or {}).get("resourceVersion")
            new = merge_patch(current, patch)
            if sub != "status" and "status" in current:  # Secrets, ConfigMaps have none
                new["status"] = current["status"]
        new["metadata"]["name"] = name
        self.fake.validate(plural, new, current)
        self._check_immutable(plural, namespace, name, new, sub)
        self._send(self.fake._update(plural, new, check_rv=rv, status=sub == "status"))

    async def _delete(self, plural: str, namespace: str, name: str | None, sub: str | None) -> None:
        query = self._query()
        options = self._body() if self.request.body else {}
        if "gracePeriodSeconds" in query:
            options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
        if "propagationPolicy" in query:
            options["propagationPolicy"] = query["propagationPolicy"]
        if name is not None:
            self._send(self.fake._delete(plural, namespace, name, options))
            return
        labels = query.get("labelSelector", "")
        for (p, ns, n), obj in list(self.fake._objects.items()):
            if (
                p == plural
                and ns == namespace
                and label_match(labels, obj["metadata"].get("labels") or {})
            ):
                self.fake._delete(p, ns, n, options)
        self._send({"kind": "Status", "apiVersion": "v1", "status": "Success", "metadata": {}})
