"""The fake API server's Job controller and Job validation, as a real server (1.31+) behaves,
through the real kubernetes_asyncio client: interim conditions before terminal ones, pod
failure policies honoured rule by rule, and the Job validation that refuses what a real
server refuses. (The backend's reactions are in test_backend.py.)"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler.backends.kubernetes.client import Kube, KubeError, load_configuration

from .conftest import Cluster, eventually, run
from .fakeapi import FakeKube


def job_manifest(name: str, **spec: Any) -> dict[str, Any]:
    template_spec = spec.pop("template_spec", {})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",
            "completions": 1,
            "parallelism": 1,
            **spec,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox:1.36"}],
                    **template_spec,
                }
            },
        },
    }


async def connect(cluster: Cluster) -> Kube:
    return Kube(await load_configuration(cluster.kubeconfig), retries=0)


def conditions(fake: FakeKube, name: str) -> list[tuple[str, str]]:
    job = fake.get("jobs", "default", name) or {}
    return [(c["type"], c.get("reason", "")) for c in job.get("status", {}).get("conditions", [])]


async def live_pod(fake: FakeKube, job: str, not_named: str = "") -> dict[str, Any]:
    def find() -> dict[str, Any] | None:
        for pod in fake.objects("pods", "default", f"job-name={job}"):
            if pod["status"].get("phase") == "Running" and pod["metadata"]["name"] != not_named:
                return pod
        return None

    return await eventually(find, what=f"a running pod of {job}")


def test_the_interim_condition_comes_before_the_terminal_one(cluster: Cluster) -> None:
    """Kubernetes 1.31+: FailureTarget before Failed, SuccessCriteriaMet before Complete;
    the terminal condition only once every pod of the Job has terminated."""
    fake = cluster.require_fake("inspects the Job controller")
    fake.terminal_condition_delay = 0.5

    async def scenario() -> None:
        kube = await connect(cluster)
        try:
            for name, code in (("ok", 0), ("bad", 3)):
                manifest = job_manifest(name, backoffLimit=0)
                await kube.call(kube.batch.create_namespaced_job, "default", manifest)
                pod = await live_pod(fake, name)
                fake.finish_pod("default", pod["metadata"]["name"], code)
            await eventually(lambda: conditions(fake, "bad") and conditions(fake, "ok"))
            # A loaded machine may have passed the delay already: the interim comes first.
            assert conditions(fake, "ok")[0] == ("SuccessCriteriaMet", "CompletionsReached")
            assert conditions(fake, "bad")[0] == ("FailureTarget", "BackoffLimitExceeded")
            await eventually(lambda: len(conditions(fake, "bad")) == 2, what="Failed")
            assert conditions(fake, "bad")[1] == ("Failed", "BackoffLimitExceeded")
            await eventually(lambda: len(conditions(fake, "ok")) == 2, what="Complete")
            assert conditions(fake, "ok")[1] == ("Complete", "CompletionsReached")
            assert "completionTime" in (fake.get("jobs", "default", "ok") or {})["status"]
            assert "completionTime" not in (fake.get("jobs", "default", "bad") or {})["status"]
        finally:
            await kube.close()

    run(scenario)


def test_failed_waits_for_the_pods_still_terminating(cluster: Cluster) -> None:
    fake = cluster.require_fake("pods that ignore SIGTERM")
    fake.ignore_sigterm = True

    async def scenario() -> None:
        kube = await connect(cluster)
        try:
            manifest = job_manifest(
                "pair",
                completions=2,
                parallelism=2,
                backoffLimit=0,
                template_spec={"terminationGracePeriodSeconds": 1},
            )
            await kube.call(kube.batch.create_namespaced_job, "default", manifest)
            first = await live_pod(fake, "pair")
            await live_pod(fake, "pair", not_named=first["metadata"]["name"])
            fake.finish_pod("default", first["metadata"]["name"], 1)
            await eventually(lambda: conditions(fake, "pair"), what="FailureTarget")
            job = fake.get("jobs", "default", "pair") or {}
            assert conditions(fake, "pair") == [("FailureTarget", "BackoffLimitExceeded")]
            assert job["status"]["terminating"] == 1  # the other pod gets its grace period
            await eventually(lambda: len(conditions(fake, "pair")) == 2, timeout=5, what="Failed")
        finally:
            await kube.close()

    run(scenario)


def test_pod_failure_policy_rules_are_honoured_in_order(cluster: Cluster) -> None:
    """Ignore on DisruptionTarget: an evicted pod is replaced and not counted. FailJob on
    exit code 42: the Job fails at once despite backoffLimit 6, in the controller's words.
    A failure no rule matches counts towards backoffLimit."""
    fake = cluster.require_fake("evicts pods and ends them with chosen codes")

    async def scenario() -> None:
        kube = await connect(cluster)
        try:
            policy = {
                "rules": [
                    {
                        "action": "FailJob",
                        "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]},
                    },
                    {
                        "action": "Ignore",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                    },
                ]
            }
            manifest = job_manifest("policy", backoffLimit=6, podFailurePolicy=policy)
            await kube.call(kube.batch.create_namespaced_job, "default", manifest)
            evicted = await live_pod(fake, "policy")
            fake.evict("default", evicted["metadata"]["name"])
            replacement = await live_pod(fake, "policy", not_named=evicted["metadata"]["name"])
            assert (fake.get("jobs", "default", "policy") or {})["status"].get("failed", 0) == 0
            fake.finish_pod("default", replacement["metadata"]["name"], 1)  # no rule: counted
            third = await live_pod(fake, "policy", not_named=replacement["metadata"]["name"])
            assert (fake.get("jobs", "default", "policy") or {})["status"]["failed"] == 1
            fake.finish_pod("default", third["metadata"]["name"], 42)
            await eventually(lambda: len(conditions(fake, "policy")) == 2, what="Failed")
            job = fake.get("jobs", "default", "policy") or {}
            target, failed = job["status"]["conditions"]
            assert (target["type"], target["reason"]) == ("FailureTarget", "PodFailurePolicy")
            assert target["message"] == (
                f"Container main for pod default/{third['metadata']['name']} failed with exit "
                "code 42 matching FailJob rule at index 0"
            )
            assert (failed["type"], failed["message"]) == ("Failed", target["message"])
        finally:
            await kube.close()

    run(scenario)


BAD_POLICIES = [
    (
        {"template_spec": {"restartPolicy": "OnFailure"}},
        'restartPolicy: Invalid value: "OnFailure": only "Never" is supported when '
        "podFailurePolicy is specified",
    ),
    (
        {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [0, 1]}}]},
        "values[0]: Invalid value: 0: must not be 0 for the In operator",
    ),
    (
        {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3, 2]}}]},
        "values[1]: Invalid value: 2: must be ordered",
    ),
    (
        {
            "rules": [
                {
                    "action": "Ignore",
                    "onExitCodes": {"containerName": "other", "operator": "In", "values": [1]},
                }
            ]
        },
        'containerName: Invalid value: "other": must be one of the container',
    ),
    (
        {
            "rules": [
                {
                    "action": "FailIndex",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                }
            ]
        },
        'Invalid value: "FailIndex": requires the backoffLimitPerIndex to be set',
    ),
    ({"rules": [{"action": "Ignore"}]}, "specifying one of OnExitCodes and OnPodConditions"),
]


@pytest.mark.parametrize(
    "change,words", BAD_POLICIES, ids=["restart", "in-0", "order", "container", "index", "none"]
)
def test_a_pod_failure_policy_a_real_server_refuses_is_refused(
    cluster: Cluster, change: dict[str, Any], words: str
) -> None:
    cluster.require_fake("checks the fake's validation")

    async def scenario() -> None:
        kube = await connect(cluster)
        try:
            template_spec = change.get("template_spec", {})
            policy = {
                "rules": change.get("rules")
                or [
                    {
                        "action": "Ignore",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                    }
                ]
            }
            manifest = job_manifest("bad", podFailurePolicy=policy, template_spec=template_spec)
            with pytest.raises(KubeError) as refused:
                await kube.call(kube.batch.create_namespaced_job, "default", manifest)
            assert refused.value.status == 422, refused.value
            assert words in refused.value.message, refused.value.message
        finally:
            await kube.close()

    run(scenario)


def test_a_pod_failure_policy_is_immutable(cluster: Cluster) -> None:
    cluster.require_fake("checks the fake's validation")

    async def scenario() -> None:
        kube = await connect(cluster)
        try:
            rule = {
                "action": "Ignore",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            }
            manifest = job_manifest("fixed", suspend=True, podFailurePolicy={"rules": [rule]})
            await kube.call(kube.batch.create_namespaced_job, "default", manifest)
            with pytest.raises(KubeError, match=r"spec\.podFailurePolicy: Invalid value: field is"):
                await kube.call(
                    kube.batch.patch_namespaced_job,
                    "fixed",
                    "default",
                    {"spec": {"podFailurePolicy": {"rules": [{**rule, "action": "FailJob"}]}}},
                    _content_type="application/merge-patch+json",
                )
        finally:
            await kube.close()

    run(scenario)


SCHEMA_ERRORS = [
    (("spec", "template", "spec", "containers", 0, "bogus"), 1, "Additional properties"),
    (("spec", "template", "spec", "containers", 0, "image"), 7, "is not of type"),
    (("spec", "template", "spec", "containers", 0), {"image": "busybox"}, "is a required property"),
    (("spec", "template", "spec", "containers", 0, "resources"), {"limits": {"cpu": [1]}}, ""),
    (("spec", "completions"), 1.5, "is not of type"),
    (("spec", "suspend"), "yes", "is not of type"),
]


@pytest.mark.parametrize(
    "path,value,words", SCHEMA_ERRORS, ids=["field", "type", "required", "quantity", "int", "bool"]
)
def test_a_job_the_schema_refuses_is_refused_naming_the_field(
    cluster: Cluster, path: tuple[Any, ...], value: Any, words: str
) -> None:
    """The fake's quick schema check (``_schema_check``) lets no invalid Job through: each
    of these is refused with 422 and the full validator's words, naming the field."""
    cluster.require_fake("checks the fake's validation")

    async def scenario() -> None:
        kube = await connect(cluster)
        try:
            manifest = job_manifest("bad-schema")
            parent: Any = manifest
            for part in path[:-1]:
                parent = parent[part]
            parent[path[-1]] = value
            with pytest.raises(KubeError) as refused:
                await kube.call(kube.batch.create_namespaced_job, "default", manifest)
            assert refused.value.status == 422, refused.value
            where = ".".join(str(part) for part in path[:-1])  # the field's object
            assert f"is invalid: {where}" in refused.value.message, refused.value.message
            assert words in refused.value.message, refused.value.message
        finally:
            await kube.close()

    run(scenario)


def json_paths(node: Any, at: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
    """Every path in a JSON tree, ``at`` first."""
    yield at
    if isinstance(node, dict):
        for key, child in node.items():
            yield from json_paths(child, (*at, key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from json_paths(child, (*at, index))


def test_the_quick_schema_check_never_passes_what_the_validator_refuses() -> None:
    """``_schema_check`` against the full validator on a FracHub Job and its Secret, each
    mutated 1,500 times (a value replaced by another type, a key dropped, an unknown key
    added): where the quick check says valid, so does the validator. Its False only sends
    a document on to the validator, so it may be wrong that way; never this one."""
    import random

    from .fakeapi import _schema_check, _schema_validator

    secret = {
        "metadata": {
            "name": "s",
            "labels": {"a": "b"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u"}],
        },
        "type": "Opaque",
        "data": {"T": "eA=="},
    }
    job = job_manifest("good", suspend=True, backoffLimit=0, ttlSecondsAfterFinished=60)
    container = job["spec"]["template"]["spec"]["containers"][0]
    container.update(
        env=[
            {"name": "A", "value": "b"},
            {"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": "T"}}},
        ],
        resources={"limits": {"nvidia.com/gpu": "1", "cpu": 2}},
        command=["/bin/sh", "-c", "sleep 1"],
    )
    values = [None, 1, 1.5, 2.0, True, "x", [], {}, [1], {"a": 1}, "Never", -1]
    rng = random.Random(29)
    for kind, api_version, document in (("Job", "batch/v1", job), ("Secret", "v1", secret)):
        document = {**document, "kind": kind, "apiVersion": api_version}
        quick = _schema_check(kind, api_version, "1.32.0")
        full = _schema_validator(kind, api_version, "1.32.0")
        assert quick is not None and quick(document) and full.is_valid(document)
        paths = list(json_paths(document, ()))
        for trial in range(1500):
            mutated = copy.deepcopy(document)
            path = rng.choice(paths[1:])
            parent = mutated
            for part in path[:-1]:
                parent = parent[part]
            roll = rng.random()
            if roll < 0.6 or not isinstance(parent, dict):
                parent[path[-1]] = rng.choice(values)
            elif roll < 0.8:
                del parent[path[-1]]
            else:
                parent[f"bogus{trial % 3}"] = rng.choice(values)
            if quick(mutated):
                assert full.is_valid(mutated), (kind, path, mutated)
