"""FracKubeSpawner's pod placement, with the real KubeSpawner building the pod and its real
client creating it on the fake API server: node selection, the environment contract with the
GPU's UUID, GPU resources per sharing mode, the priority class."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from jupyterhub.spawner import SpawnException
from kubernetes_asyncio.client import ApiClient

from scheduler.backends.kubernetes.gpus import (
    GPU,
    GPUCORES,
    GPUMEM,
    GPUMEM_PERCENTAGE,
    HAMI_SCHEDULER,
    HAMI_USE_UUID,
)
from scheduler.backends.kubernetes.labels import (
    COMPONENT,
    GPU_UUID,
    HOSTNAME,
    RESERVATION,
    SHARES,
    TRACKED,
    WORKLOAD,
)
from scheduler.backends.kubernetes.pods import pinned_node
from spawner.kube import FracKubeSpawner

from .conftest import Cluster, eventually, run, unschedulable


def allocation(share: float, gpus: tuple[int, ...] = (1,), node: str = "node-a") -> dict[str, Any]:
    return {
        "id": 41,
        "state": "running",
        "project": "vision",
        "placement": [
            {
                "node": node,
                "gpus": [
                    {
                        "index": i,
                        "uuid": f"GPU-from-inventory-{i}",
                        "share": share,
                        "memory_mib": 81920,
                    }
                    for i in gpus
                ],
            }
        ],
    }


def make_spawner(cluster: Cluster, alloc: dict[str, Any], **traits: Any) -> FracKubeSpawner:
    fake = cluster.require_fake("builds a spawner against the fake server")
    settings: dict[str, Any] = {
        "k8s_api_host": fake.url,
        "namespace": cluster.namespace,
        "frachub_priority_class": "frachub-interactive",
        "frachub_api_url": "http://127.0.0.1:1/services/frachub/api/v1/",
        "frachub_api_token": "unused",
        "frachub_pytorch_hook": False,
    }
    spawner = FracKubeSpawner(_mock=True, **{**settings, **traits})
    spawner.allocation_id = alloc["id"]
    spawner.allocation = alloc
    return spawner


async def create(spawner: FracKubeSpawner) -> dict[str, Any]:
    manifest = await spawner.get_pod_manifest()
    body = ApiClient().sanitize_for_serialization(manifest)
    await spawner.api.create_namespaced_pod(spawner.namespace, body)
    return body


def test_fractional_notebook_is_placed_on_the_reserved_gpu(
    cluster: Cluster, kube_default: None, backend: Any
) -> None:
    async def scenario() -> None:
        scheduler = await backend()  # writes the UUID the reservation pod prints onto it
        try:
            await place(scheduler)
        finally:
            await scheduler.close()

    async def place(scheduler: Any) -> None:
        spawner = make_spawner(cluster, allocation(0.25))
        body = await create(spawner)
        spec = body["spec"]
        assert pinned_node(spec) == "node-a" and HOSTNAME not in spec.get("nodeSelector", {})
        assert spec["priorityClassName"] == "frachub-interactive"
        container = spec["containers"][0]
        assert GPU not in ((container.get("resources") or {}).get("limits") or {})
        env = {e["name"]: e.get("value") for e in container["env"]}
        reservation = cluster.pods(f"{COMPONENT}={RESERVATION}")[0]
        uuid = reservation["metadata"]["annotations"][GPU_UUID]
        assert reservation["metadata"]["name"] == "frachub-gpu-node-a-1"
        assert env["NVIDIA_VISIBLE_DEVICES"] == uuid and uuid.startswith("GPU-node-a-")
        assert env["FRACHUB_GPU_FRACTION"] == "0.25" and env["FRACHUB_GPU_MEMORY_MIB"] == "20480"
        assert "CUDA_VISIBLE_DEVICES" not in env
        labels = body["metadata"]["labels"]
        assert labels[TRACKED] == "true" and labels[WORKLOAD] == "41"
        assert body["metadata"]["annotations"][SHARES] == "node-a:1:250"

        def running() -> bool:
            pod = cluster.fake.get("pods", cluster.namespace, spawner.pod_name)  # type: ignore[union-attr]
            return (
                bool(pod)
                and pod["status"]["phase"] == "Running"
                and pod["spec"]["nodeName"] == "node-a"
            )

        await eventually(running, what="the notebook pod running on node-a")

    run(scenario)


@pytest.mark.parametrize(
    "mode, share, gpus, limits",
    [
        ("hami", 0.5, (1,), {GPU: "1", GPUMEM: "40960"}),
        ("reservation", 1.0, (0, 1), {GPU: "2"}),
        ("hami", 1.0, (2,), {GPU: "1", GPUMEM_PERCENTAGE: "100", GPUCORES: "100"}),
    ],
    ids=["hami-fraction", "reservation-whole", "hami-whole"],
)
def test_gpu_resources_per_sharing_mode(
    cluster: Cluster,
    kube_default: None,
    mode: str,
    share: float,
    gpus: tuple[int, ...],
    limits: dict[str, str],
) -> None:
    async def scenario() -> None:
        spawner = make_spawner(cluster, allocation(share, gpus), frachub_sharing_mode=mode)
        body = await create(spawner)
        container = body["spec"]["containers"][0]
        got = (container.get("resources") or {}).get("limits") or {}
        assert {k: v for k, v in got.items() if k.startswith("nvidia.com/")} == limits
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert "NVIDIA_VISIBLE_DEVICES" not in env  # the device plugin or HAMi sets it
        assert cluster.pods(f"{COMPONENT}={RESERVATION}") == []
        annotations = body["metadata"].get("annotations") or {}
        if mode == "hami":  # HAMi's scheduler, on the GPU the allocation names
            assert body["spec"]["schedulerName"] == HAMI_SCHEDULER
            uuids = ",".join(f"GPU-from-inventory-{i}" for i in gpus)
            assert annotations[HAMI_USE_UUID] == uuids
            if share < 1:  # the one GPU named, the memory HAMi enforces
                assert env["FRACHUB_GPU_UUIDS"] == uuids
                assert env["FRACHUB_GPU_MEMORY_MIB"] == limits[GPUMEM]
                assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "1"  # HAMi shows the share
        else:
            assert body["spec"].get("schedulerName") in (None, "default-scheduler")
            assert HAMI_USE_UUID not in annotations

    run(scenario)


def test_a_hami_notebook_without_its_gpus_uuid_is_refused(
    cluster: Cluster, kube_default: None
) -> None:
    async def scenario() -> None:
        alloc = allocation(0.5)
        alloc["placement"][0]["gpus"][0]["uuid"] = None
        spawner = make_spawner(
            cluster, alloc, frachub_sharing_mode="hami", frachub_hami_scheduler_name="vgpu"
        )
        with pytest.raises(SpawnException, match="HAMi has not registered GPU 1 on node-a"):
            await create(spawner)
        assert cluster.pods() == []

    run(scenario)


def test_notebooks_are_pinned_by_node_name_where_the_hostname_label_differs(
    cluster: Cluster, kube_default: None
) -> None:
    """The Node's name, not its kubernetes.io/hostname label; the profile's own required
    node affinity terms still hold (matchFields is added to each, terms being ORed)."""
    fake = cluster.require_fake("adds a node whose hostname label differs")
    fake.add_node("gpu-1.cluster.internal", gpus=2, hostname="gpu-1", labels={"pool": "a"})

    async def scenario() -> None:
        spawner = make_spawner(
            cluster,
            allocation(1.0, (0,), node="gpu-1.cluster.internal"),
            node_affinity_required=[
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]},
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["b"]}]},
            ],
        )
        body = await create(spawner)
        terms = body["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        name = {"key": "metadata.name", "operator": "In", "values": ["gpu-1.cluster.internal"]}
        assert [t["matchFields"] for t in terms] == [[name], [name]]
        assert [t["matchExpressions"][0]["values"] for t in terms] == [["a"], ["b"]]
        assert HOSTNAME not in (body["spec"].get("nodeSelector") or {})

        def running() -> bool:
            pod = fake.get("pods", cluster.namespace, spawner.pod_name)
            return bool(pod) and pod["status"]["phase"] == "Running"

        await eventually(running, what="the notebook running on gpu-1.cluster.internal")
        pod = fake.get("pods", cluster.namespace, spawner.pod_name)
        assert pod is not None and pod["spec"]["nodeName"] == "gpu-1.cluster.internal"

        # the old way, a nodeSelector on the hostname label, matches no node there
        labelled = make_spawner(
            cluster,
            allocation(1.0, (1,), node="gpu-1.cluster.internal"),
            frachub_node_label=HOSTNAME,
        )
        labelled.pod_name = "jupyter-labelled"
        body = await create(labelled)
        assert body["spec"]["nodeSelector"][HOSTNAME] == "gpu-1.cluster.internal"
        assert "affinity" not in body["spec"] or not body["spec"]["affinity"]
        stuck = await eventually(
            lambda: (
                (pod := fake.get("pods", cluster.namespace, "jupyter-labelled"))
                and unschedulable(pod)
                and pod
            ),
            what="the scheduler to find no node for the labelled notebook",
        )
        assert stuck["status"]["phase"] == "Pending" and not stuck["spec"].get("nodeName")

    run(scenario)


def test_cpu_only_notebook_sees_no_gpu(cluster: Cluster, kube_default: None) -> None:
    async def scenario() -> None:
        spawner = make_spawner(cluster, allocation(0.5))
        spawner.allocation_id = None
        spawner.allocation = None
        body = await create(spawner)
        container = body["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["NVIDIA_VISIBLE_DEVICES"] == "none"
        assert HOSTNAME not in (body["spec"].get("nodeSelector") or {})

    run(scenario)


# -- parity with KubeSpawner: the same configuration resolves the same way ------------------
#
# A KubeSpawner and a FracKubeSpawner (and, for the traits it has, a FracLocalSpawner) built
# from one profile_list, given the same form post or REST user_options, must pick the same
# profile and options and end up with the same traits after the overrides; FracHub's GPU
# fields aside.

IMAGE_OPTION = {
    "display_name": "Image",
    "choices": {
        "base": {
            "display_name": "Base",
            "kubespawner_override": {"image": "jupyter/base:1", "environment": {"IMG": "base"}},
        },
        "scipy": {
            "display_name": "SciPy",
            "default": True,
            "kubespawner_override": {
                "image": "jupyter/scipy:1",
                "environment": {"IMG": "scipy", "DROP": None},  # None deletes the key
            },
        },
    },
    "unlisted_choice": {
        "enabled": True,
        "display_name": "Other image",
        "validation_regex": "^jupyter/.+:.+$",
        "kubespawner_override": {"image": "{value}", "environment": {"IMG": "other-{value}"}},
    },
}
PROFILES = [
    {
        "display_name": "Café GPU",  # no slug: KubeSpawner's is "cafe-gpu"
        "description": "Explorations",
        "kubespawner_override": {
            "default_url": "/lab",
            "cpu_limit": 2.0,
            "node_selector": {"disk": None, "gpu": "yes"},  # deletes the configured "disk"
            "environment": {"DROP": "me", "PROFILE": "cafe"},
        },
        "profile_options": {"image": IMAGE_OPTION},
        "frachub": {"gpu_choices": [0.5, 1]},
    },
    {
        "display_name": "Data -- Science",
        "default": True,
        "kubespawner_override": {"mem_limit": "4G", "extra_labels": {"team": "ds"}},
        "profile_options": {
            "size": {
                "display_name": "Size",
                "choices": {
                    "s": {"display_name": "Small", "kubespawner_override": {"cpu_limit": 1.0}},
                    "l": {
                        "display_name": "Large",
                        "kubespawner_override": {"cpu_limit": lambda s: 8.0},
                    },
                },
            },
        },
    },
]
AS_DICT = {"zz": PROFILES[0], "aa": PROFILES[1]}  # KubeSpawner shows "aa" first


def as_callable(spawner: Any) -> list[dict[str, Any]]:
    assert spawner.user is not None  # called with the spawner, per user
    return PROFILES


async def as_async_callable(spawner: Any) -> list[dict[str, Any]]:
    # a list: KubeSpawner 7.1 orders a dict before calling, so a callable's dict crashes it
    # (FracHub orders what the callable returns too)
    return [PROFILES[1], PROFILES[0]]


CONFIGS = {
    "list": PROFILES,
    "dict": AS_DICT,
    "callable": as_callable,
    "async-callable": as_async_callable,
}
BASE_TRAITS = {
    "node_selector": {"disk": "ssd", "zone": "a"},
    "environment": {"KEEP": "1"},
    "default_url": "/tree",
}
COMPARED = (
    "image",
    "default_url",
    "cpu_limit",
    "mem_limit",
    "node_selector",
    "environment",
    "extra_labels",
)
LOCAL_TRAITS = ("default_url", "cpu_limit", "mem_limit", "environment")

# (KubeSpawner's form post, FracHub's own fields added to it)
FORM_POSTS = [
    ({}, {}),
    ({"profile": ["cafe-gpu"]}, {"gpu-cafe-gpu": ["0.5"]}),
    (
        {"profile": ["cafe-gpu"], "profile-option-cafe-gpu--image": ["base"]},
        {"gpu-cafe-gpu": ["1"], "project": ["vision"]},
    ),
    (
        {
            "profile": ["cafe-gpu"],
            "profile-option-cafe-gpu--image--unlisted-choice": ["jupyter/r:4.4"],
        },
        {"gpu-cafe-gpu": ["0.5"]},
    ),
    ({"profile": ["data-science"], "profile-option-data-science--size": ["l"]}, {}),
    ({"profile": ["data-science"], "profile-option-cafe-gpu--image": ["base"]}, {}),
]
REST_OPTIONS = [
    {},
    {"profile": "cafe-gpu"},
    {"profile": "cafe-gpu", "image": "base"},
    {"profile": "cafe-gpu", "image--unlisted-choice": "jupyter/julia:1.10", "image": "base"},
    {"profile": "data-science", "size": "s", "from-an-old-client": "ignored"},
    {"size": "l"},
]


def traits_of(spawner: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(spawner, name) for name in names}


def kube_pair(cluster: Cluster, profile_list: Any) -> tuple[Any, FracKubeSpawner]:
    from kubespawner import KubeSpawner

    fake = cluster.require_fake("builds spawners against the fake server")
    common = {
        "_mock": True,
        "k8s_api_host": fake.url,
        "namespace": cluster.namespace,
        "profile_list": profile_list,
        **BASE_TRAITS,
    }
    frac = FracKubeSpawner(
        frachub_api_url="http://127.0.0.1:1/services/frachub/api/v1/",
        frachub_api_token="unused",
        **common,
    )
    return KubeSpawner(**common), frac


async def kube_loads(kube: Any, user_options: dict[str, Any]) -> None:
    kube.user_options = user_options
    await kube.load_user_options()


async def frac_loads(frac: Any, user_options: dict[str, Any]) -> Any:
    """What start() does before the GPU request, then KubeSpawner's load step."""
    frac.user_options = user_options
    selection = await frac.frachub_resolve()
    frac.frachub_apply_profile(selection)
    if isinstance(frac, FracKubeSpawner):
        await frac.load_user_options()
    return selection


def local_spawner(profile_list: Any) -> Any:
    from types import SimpleNamespace

    from spawner.local import FracLocalSpawner

    return FracLocalSpawner(
        user=SimpleNamespace(name="ana"),  # a user object without .groups
        profile_list=profile_list,
        frachub_api_url="http://127.0.0.1:1/services/frachub/api/v1/",
        frachub_api_token="unused",
        **{k: v for k, v in BASE_TRAITS.items() if k != "node_selector"},
    )


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("post", range(len(FORM_POSTS)))
def test_form_posts_resolve_as_kubespawner_resolves_them(
    cluster: Cluster, kube_default: None, config: str, post: int
) -> None:
    form, ours = FORM_POSTS[post]

    async def scenario() -> None:
        kube, frac = kube_pair(cluster, CONFIGS[config])
        local = local_spawner(CONFIGS[config])
        expected = kube.options_from_form(form)
        got = frac.options_from_form({**form, **ours})
        assert {k: v for k, v in got.items() if k not in ("gpu", "project")} == expected
        assert got == local.options_from_form({**form, **ours})
        await kube_loads(kube, expected)
        selection = await frac_loads(frac, got)
        await frac_loads(local, got)
        profiles = kube._get_initialized_profile_list(
            kube._sorted_dict_values(await _evaluated(CONFIGS[config], kube))
        )
        assert (
            selection.profile.slug == kube._get_profile(expected.get("profile"), profiles)["slug"]
        )
        assert traits_of(frac, COMPARED) == traits_of(kube, COMPARED)
        assert traits_of(local, LOCAL_TRAITS) == traits_of(kube, LOCAL_TRAITS)
        if ours.get(f"gpu-{selection.profile.slug}"):
            assert selection.gpu.key == ours[f"gpu-{selection.profile.slug}"][0]

    run(scenario)


async def _evaluated(profile_list: Any, spawner: Any) -> Any:
    from jupyterhub.utils import maybe_future

    return await maybe_future(profile_list(spawner)) if callable(profile_list) else profile_list


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("options", REST_OPTIONS, ids=lambda o: "-".join(o) or "empty")
def test_rest_user_options_resolve_as_kubespawner_resolves_them(
    cluster: Cluster, kube_default: None, config: str, options: dict[str, Any]
) -> None:
    async def scenario() -> None:
        kube, frac = kube_pair(cluster, CONFIGS[config])
        local = local_spawner(CONFIGS[config])
        await kube_loads(kube, dict(options))
        selection = await frac_loads(frac, dict(options))
        await frac_loads(local, dict(options))
        assert traits_of(frac, COMPARED) == traits_of(kube, COMPARED)
        assert traits_of(local, LOCAL_TRAITS) == traits_of(kube, LOCAL_TRAITS)
        assert selection.ignored == tuple(k for k in options if k == "from-an-old-client")

    run(scenario)


def test_overrides_delete_keys_and_fill_unlisted_values(
    cluster: Cluster, kube_default: None
) -> None:
    async def scenario() -> None:
        kube, frac = kube_pair(cluster, PROFILES)
        options = {"profile": "cafe-gpu", "image--unlisted-choice": "jupyter/r:4.4"}
        await kube_loads(kube, dict(options))
        await frac_loads(frac, dict(options))
        assert frac.node_selector == kube.node_selector == {"zone": "a", "gpu": "yes"}
        assert frac.image == "jupyter/r:4.4"
        assert frac.environment == {
            "KEEP": "1",
            "DROP": "me",
            "PROFILE": "cafe",
            "IMG": "other-jupyter/r:4.4",
        }
        assert frac.environment == kube.environment

    run(scenario)


@pytest.mark.parametrize(
    "options, field",
    [
        ({"profile": "cafe-gpu", "image--unlisted-choice": "evil/x:1"}, "image--unlisted-choice"),
        ({"profile": "cafe-gpu", "image": "nope"}, "user_options.image"),
        ({"profile": "cafe-gpu", "gpus": 0.3}, "user_options.gpus"),
    ],
)
def test_what_kubespawner_refuses_or_crashes_on_is_a_400_naming_the_field(
    cluster: Cluster, kube_default: None, options: dict[str, Any], field: str
) -> None:
    from jupyterhub.spawner import SpawnException

    async def scenario() -> None:
        _, frac = kube_pair(cluster, PROFILES)
        frac.user_options = options
        with pytest.raises(SpawnException) as error:
            await frac.frachub_resolve()
        assert error.value.status_code == 400
        assert field in str(error.value)

    run(scenario)


# What KubeSpawner's own tests expect of bad profile input (pytest.raises(ValueError) around
# load_user_options), with the type KubeSpawner raises there; FracHub refuses the same input
# earlier, as an HTTP 400, whose class is that type too.
KUBESPAWNER_REFUSES = [
    ({"profile": "cafe-gpu", "image--unlisted-choice": "evil/x:1"}, ValueError),  # regex
    ({"profile": "no-such-profile"}, ValueError),
    ({"profile": "data-science", "image--unlisted-choice": "jupyter/r:4"}, None),  # no option
    ({"profile": "cafe-gpu", "image": "nope"}, KeyError),  # a choice the option does not list
    ({"profile": "cafe-gpu", "image--unlisted-choice": 5}, TypeError),  # not text
    ({"profile": "cafe-gpu", "image--unlisted-choice": "jupyter/r:4", "gpus": 0.3}, None),
]


@pytest.mark.parametrize(
    "options, kube_raises",
    KUBESPAWNER_REFUSES,
    ids=["regex", "profile", "ignored", "choice", "type", "frachub-only"],
)
def test_bad_profile_input_raises_kubespawners_exception_type_and_is_a_400(
    cluster: Cluster, kube_default: None, options: dict[str, Any], kube_raises: type | None
) -> None:
    from tornado.web import HTTPError

    async def scenario() -> None:
        kube, frac = kube_pair(cluster, PROFILES)
        if kube_raises is None:  # KubeSpawner takes it: FracHub ignores it or refuses a GPU
            await kube_loads(kube, dict(options))
            if "gpus" not in options:
                await frac_loads(frac, dict(options))
                return
            frac.user_options = dict(options)
            with pytest.raises(ValueError) as refused:  # FracHub's own field: a ValueError
                await frac.load_user_options()
            assert refused.value.status_code == 400
            return
        with pytest.raises(kube_raises):
            await kube_loads(kube, dict(options))
        frac.user_options = dict(options)
        with pytest.raises(kube_raises) as error:
            await frac.load_user_options()  # what KubeSpawner's tests call
        assert isinstance(error.value, ValueError)  # every refusal, as KubeSpawner's tests catch
        assert isinstance(error.value, HTTPError)
        assert error.value.status_code == 400
        assert error.value.jupyterhub_message == str(error.value.log_message)

    run(scenario)


def test_the_forms_post_kubespawners_field_names(cluster: Cluster, kube_default: None) -> None:
    """FracHub's form draws the same profile and option fields as KubeSpawner's, in the same
    order, unlisted choice included, so the same posts come back."""
    import re

    names = re.compile(r'(?:name|data-name)="((?:profile-option-)[^"]+)"|value="([a-z-]+)"')

    async def scenario() -> None:
        kube, frac = kube_pair(cluster, AS_DICT)
        kube_form = await kube.get_options_form()
        frac_form = await frac.get_options_form()
        kube_fields = {m.group(1) for m in names.finditer(kube_form) if m.group(1)}
        frac_fields = {m.group(1) for m in names.finditer(frac_form) if m.group(1)}
        assert kube_fields == frac_fields
        assert "profile-option-cafe-gpu--image--unlisted-choice" in frac_fields
        slugs = re.compile(r'name="profile"[^>]*value="([^"]+)"', re.S)
        assert slugs.findall(frac_form) == ["data-science", "cafe-gpu"]
        assert 'data-validation-regex="^jupyter/.+:.+$"' in frac_form

    run(scenario)


CUSTOM_FORM = """<ul id="custom">{% for profile in profile_list %}
<li><input type="radio" name="profile" value="{{ profile.slug }}"> {{ profile.display_name }}
{% include "frachub_gpus.html" %}</li>{% endfor %}</ul>{% include "frachub_quota.html" %}
<script>const userOptions = {{ user_options|tojson }};</script>"""


@pytest.mark.parametrize("where", ["profile_form_template", "additional_paths"])
def test_a_custom_form_template_is_honoured_with_frachubs_includes(
    tmp_path: Any, where: str
) -> None:
    """As in KubeSpawner, the admin's template draws the form from profile_list and
    user_options; FracHub's GPU choices and quota line are includes it can use. The user
    object here has no .groups: the form must not need them."""
    spawner = local_spawner(AS_DICT)
    if where == "profile_form_template":
        spawner.profile_form_template = CUSTOM_FORM
    else:
        (tmp_path / "form.html").write_text(CUSTOM_FORM)
        spawner.additional_profile_form_template_paths = [str(tmp_path)]
    spawner.user_options = {"profile": "cafe-gpu", "image": "base", "gpu": "1"}
    form = asyncio.run(spawner.get_options_form())
    assert '<ul id="custom">' in form
    assert re.findall(r'name="profile" value="([^"]+)"', form) == ["data-science", "cafe-gpu"]
    gpus = re.findall(r'name="(gpu-[^"]+)"\s+value="([^"]+)"', form)
    assert gpus == [("gpu-cafe-gpu", "0.5"), ("gpu-cafe-gpu", "1")]
    assert "GPU availability is unknown right now" in form  # the service is not running
    assert 'const userOptions = {"profile": "cafe-gpu", "image": "base", "gpu": "1"};' in form


def test_without_a_custom_template_the_form_is_frachubs(tmp_path: Any) -> None:
    spawner = local_spawner(PROFILES)
    spawner.additional_profile_form_template_paths = [str(tmp_path)]  # holds no form.html
    form = asyncio.run(spawner.get_options_form())
    assert 'id="frachub-form"' in form


def test_start_applies_the_profile_kubespawner_would(cluster: Cluster, kube_default: None) -> None:
    """The whole start of a CPU profile from a callable list: FracHub resolves it once and
    KubeSpawner's start, through load_user_options, builds the pod from its overrides."""
    calls: list[str] = []

    def per_user(spawner: Any) -> list[dict[str, Any]]:
        calls.append(spawner.user.name)
        return PROFILES

    async def scenario() -> None:
        _, frac = kube_pair(cluster, per_user)
        frac.user_options = {"profile": "data-science", "size": "l", "old-client-key": 1}
        frac.start_timeout = 20
        frac.node_selector = {}  # the fake's nodes carry no "disk" or "zone" label
        await asyncio.wait_for(frac.start(), 25)
        pod = cluster.fake.get("pods", cluster.namespace, frac.pod_name)  # type: ignore[union-attr]
        container = pod["spec"]["containers"][0]
        assert float(container["resources"]["limits"]["cpu"]) == 8.0
        assert int(container["resources"]["limits"]["memory"]) == 4 * 1024**3  # "4G"
        assert pod["metadata"]["labels"]["team"] == "ds"
        assert frac.allocation_id is None  # a CPU profile asks FracHub for nothing
        assert calls == [frac.user.name]  # evaluated once for this start
        await frac.stop(now=True)

    run(scenario, timeout=40)


def test_a_copy_of_kubespawners_form_html_works_as_a_custom_template(tmp_path: Any) -> None:
    import kubespawner

    shipped = Path(kubespawner.__file__).parent / "templates" / "form.html"
    (tmp_path / "form.html").write_text(shipped.read_text())
    spawner = local_spawner(AS_DICT)
    spawner.additional_profile_form_template_paths = [str(tmp_path)]
    form = asyncio.run(spawner.get_options_form())
    assert 'id="kubespawner-profiles-list"' in form
    assert ".profile" in form.split("</style>")[0]  # its include of style.css was found
    assert 'name="profile-option-cafe-gpu--image"' in form


def test_user_options_are_declared_handled_so_the_hub_logs_none_unhandled(
    cluster: Cluster, kube_default: None, caplog: pytest.LogCaptureFixture
) -> None:
    """JupyterHub warns "Received unhandled user_options" unless an ``apply_user_options``
    hook takes them; FracHub's start() reads them, so every spawn warned for nothing."""
    import logging

    async def scenario() -> None:
        _, frac = kube_pair(cluster, PROFILES)
        for spawner in (frac, local_spawner(PROFILES)):
            spawner.log = logging.getLogger("frachub-test-spawner")
            with caplog.at_level(logging.WARNING, "frachub-test-spawner"):
                await spawner._run_apply_user_options({"profile": "cafe-gpu", "gpu": "0.5"})

    run(scenario)
    assert not [r for r in caplog.records if "unhandled" in r.getMessage()]
