"""A job's credentials on Kubernetes: a Secret the pods read, owned by the attempt's Jobs.

``JobSpec.credentials`` (the job's own hub token and the service's URL,
``scheduler/service/hub/jobtokens.py``) never appear in a Job's spec, which anyone who may read
Jobs in the namespace reads: each variable is an ``env`` entry with a ``secretKeyRef`` to
the Secret ``<attempt>-credentials``. The Jobs are created suspended, so their pods do not
exist before the Secret does; it lists the Jobs as its owners, so the garbage collector
deletes it with the last of them (the Jobs of a finished attempt are deleted after
``ttlSecondsAfterFinished``, or at once when FracHub stops them). The backend puts the Secret
(``put_secret``) between creating the suspended Jobs and resuming them.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence

from scheduler.backends.base import JobSpec
from scheduler.backends.kubernetes.client import Kube, KubeError
from scheduler.backends.kubernetes.labels import ATTEMPT_NAME, COMPONENT, MANAGED, MANAGED_BY
from scheduler.backends.kubernetes.labels import WORKLOAD as WORKLOAD_LABEL
from scheduler.backends.kubernetes.pods import Obj

CREDENTIALS = "job-credentials"  # the Secret's component label


def secret_name(base: str) -> str:
    return f"{base}-credentials"


def reference(manifests: Sequence[Obj], name: str, keys: Sequence[str]) -> None:
    """Point every Job's container at the Secret ``name`` for ``keys``, in place of any
    plain value of the same name."""
    for manifest in manifests:
        for container in manifest["spec"]["template"]["spec"]["containers"]:
            env = [entry for entry in container.get("env", []) if entry["name"] not in keys]
            env += [
                {"name": key, "valueFrom": {"secretKeyRef": {"name": name, "key": key}}}
                for key in keys
            ]
            container["env"] = env


def secret_manifest(
    name: str, workload_id: int, base: str, credentials: Mapping[str, str], owners: Sequence[Obj]
) -> Obj:
    """The Secret, owned by the Jobs ``owners`` (as the API returned them: name and uid)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": name,
            "labels": {
                MANAGED_BY: MANAGED,
                COMPONENT: CREDENTIALS,
                WORKLOAD_LABEL: str(workload_id),
                ATTEMPT_NAME: base,
            },
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                }
                for owner in owners
            ],
        },
        "data": {
            key: base64.b64encode(value.encode()).decode() for key, value in credentials.items()
        },
    }


async def put_secret(
    kube: Kube, namespace: str, name: str, job: JobSpec, base: str, owners: list[Obj]
) -> None:
    """The attempt's Secret, before any of its pods exists; a retried start replaces the
    one its first try made (that try's token was never recorded)."""
    manifest = secret_manifest(name, job.workload_id, base, job.credentials, owners)
    try:
        await kube.call(kube.core.create_namespaced_secret, namespace, manifest)
    except KubeError as error:
        if error.status != 409:
            raise
        patch = {"metadata": {"ownerReferences": manifest["metadata"]["ownerReferences"]}}
        await kube.call(
            kube.core.patch_namespaced_secret,
            name,
            namespace,
            {**patch, "data": manifest["data"]},
            _content_type="application/merge-patch+json",
        )
