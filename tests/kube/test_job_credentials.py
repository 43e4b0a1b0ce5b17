"""A job's own credentials on Kubernetes: the hub token the service issues
each job reaches its pods from a Secret, never as a plain value in the Job's spec; the Secret
is owned by the attempt's Jobs, so it goes when they go; a retried start replaces it."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from typing import Any

from scheduler.backends.kubernetes import credentials
from scheduler.backends.kubernetes.labels import WORKLOAD, attempt_name

from .conftest import Cluster, eventually, run
from .test_backend import exits_of, make_job, pods_of

TOKEN = "job-token-6f1c0ffee"
CREDENTIALS = {
    "FRACHUB_URL": "http://frachub.jupyterhub.svc:10101/services/frachub/",
    "JUPYTERHUB_API_TOKEN": TOKEN,
}


def secrets(cluster: Cluster, labels: str = "") -> list[dict[str, Any]]:
    fake = cluster.require_fake("reads Secrets directly")
    return fake.objects("secrets", cluster.namespace, labels)


def test_the_token_reaches_the_pod_from_a_secret_the_job_owns(
    cluster: Cluster, backend: Any
) -> None:
    async def scenario() -> None:
        made = await backend()
        try:
            job = replace(make_job(31, [("node-a", [0], 0.5)]), credentials=CREDENTIALS)
            handle = await made.start(job)
            [pod] = await pods_of(cluster, 31)
            [kube_job] = cluster.jobs(f"{WORKLOAD}=31")
            assert TOKEN not in json.dumps(kube_job) and TOKEN not in json.dumps(pod)
            env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
            name = credentials.secret_name(attempt_name(31, 0))
            for key in CREDENTIALS:
                assert env[key] == {
                    "name": key,
                    "valueFrom": {"secretKeyRef": {"name": name, "key": key}},
                }
            assert env["EPOCHS"]["value"] == "3"  # the job's own variables stay plain
            [secret] = secrets(cluster, f"{WORKLOAD}=31")
            assert secret["metadata"]["name"] == name
            data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
            assert data == CREDENTIALS
            [owner] = secret["metadata"]["ownerReferences"]
            assert (owner["kind"], owner["name"], owner["uid"]) == (
                "Job",
                kube_job["metadata"]["name"],
                kube_job["metadata"]["uid"],
            )
            await made.stop(31, handle, 0)
            assert [e.workload_id for e in await exits_of(made)] == [31]
            await eventually(lambda: cluster.jobs(f"{WORKLOAD}=31") == [], what="job deleted")
            assert secrets(cluster, f"{WORKLOAD}=31") == []  # collected with its owner
        finally:
            await made.close()

    run(scenario)


def test_a_gang_across_nodes_shares_one_secret_owned_by_every_job(
    cluster: Cluster, backend: Any
) -> None:
    async def scenario() -> None:
        made = await backend()
        try:
            job = replace(
                make_job(32, [("node-a", [1], 1.0), ("node-b", [0], 1.0)]),
                credentials=CREDENTIALS,
            )
            handle = await made.start(job)
            pods = await pods_of(cluster, 32, count=2)
            assert all(TOKEN not in json.dumps(pod) for pod in pods)
            jobs = cluster.jobs(f"{WORKLOAD}=32")
            [secret] = secrets(cluster, f"{WORKLOAD}=32")
            owners = {ref["uid"] for ref in secret["metadata"]["ownerReferences"]}
            assert owners == {j["metadata"]["uid"] for j in jobs} and len(owners) == 2
            await made.stop(32, handle, 0)
            await exits_of(made)
            await eventually(lambda: cluster.jobs(f"{WORKLOAD}=32") == [], what="jobs deleted")
            assert secrets(cluster, f"{WORKLOAD}=32") == []
        finally:
            await made.close()

    run(scenario)


def test_a_retried_start_replaces_the_secret_of_the_first_try(
    cluster: Cluster, backend: Any
) -> None:
    """The service died between creating the attempt and recording it: its token was never
    recorded, so the retried start's new token replaces it in the Secret."""

    async def scenario() -> None:
        made = await backend()
        try:
            job = replace(make_job(33, [("node-a", [2], 0.5)]), credentials=CREDENTIALS)
            await made.start(job)
            again = replace(job, credentials={**CREDENTIALS, "JUPYTERHUB_API_TOKEN": "second"})
            handle = await made.start(again)
            [secret] = secrets(cluster, f"{WORKLOAD}=33")
            token = base64.b64decode(secret["data"]["JUPYTERHUB_API_TOKEN"]).decode()
            assert token == "second"
            [kube_job] = cluster.jobs(f"{WORKLOAD}=33")
            assert [r["uid"] for r in secret["metadata"]["ownerReferences"]] == [
                kube_job["metadata"]["uid"]
            ]
            await made.stop(33, handle, 0)
            await exits_of(made)
        finally:
            await made.close()

    run(scenario)


def test_a_job_without_credentials_has_no_secret(cluster: Cluster, backend: Any) -> None:
    async def scenario() -> None:
        made = await backend()
        try:
            handle = await made.start(make_job(34, [("node-a", [3], 0.5)]))
            await pods_of(cluster, 34)
            assert secrets(cluster, f"{WORKLOAD}=34") == []
            await made.stop(34, handle, 0)
            await exits_of(made)
        finally:
            await made.close()

    run(scenario)
