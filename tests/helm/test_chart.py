"""The frachub chart rendered by a real Helm engine (helm-python-sdk, Helm 4 as a library),
for several values files: it lints, its values pass values.schema.json, every manifest is a
valid Kubernetes object (kubernetes-validate's offline schemas), and the parts that matter
say what they should: least-privilege RBAC, probes that answer without a token, the projects
in the scheduler's config, the token's three sources, the NetworkPolicy's peers."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest
from conftest import CHART, REPO, VALUES_DIR, by_kind, helm, load_yaml, one, render, values_files

from scheduler.common.scopes import SERVICE_PREFIX
from scheduler.fields import parse_queues
from scheduler.service.handlers import info
from scheduler.service.handlers.base import APIHandler

KUBERNETES_VERSIONS = ("1.32.0", "1.35.0")  # z2jh's minimum, and a current one
CASES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "generated": load_yaml(REPO / "helm" / "frachub-values.yaml"),
    **{path.stem: load_yaml(path) for path in values_files()},
}
IDS = list(CASES)

# What the Kubernetes backend may do (helm/frachub/templates/rbac.yaml says why), exactly.
WORKLOAD_RULES = {
    ("", "pods"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "pods/log"): {"get"},
    ("batch", "jobs"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "services"): {"get", "list", "watch", "create", "delete"},
    ("", "events"): {"get", "list", "watch", "create", "patch"},
    ("", "configmaps"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "persistentvolumeclaims"): {"get"},
    ("", "secrets"): {"create", "patch"},
}
LEADER_RULES = {("coordination.k8s.io", "leases"): {"get", "create", "update"}}
NODE_RULES = {("", "nodes"): {"get", "list", "watch"}, ("", "pods"): {"list", "watch"}}


@pytest.fixture(scope="module", params=IDS)
def case(request, chart) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    values = CASES[request.param]
    return values, render(chart, values)


def merged(chart, values: dict[str, Any]) -> dict[str, Any]:
    return chart.merge_values(values)


def deployment(documents):
    return one(documents, "Deployment")


def container(documents) -> dict[str, Any]:
    (scheduler,) = deployment(documents)["spec"]["template"]["spec"]["containers"]
    return scheduler


def config(documents) -> dict[str, Any]:
    return json.loads(one(documents, "ConfigMap")["data"]["frachub_config.json"])


def rules_of(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    table: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert "resourceNames" not in rule or rule["resourceNames"]
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                table.setdefault((group, resource), set()).update(rule["verbs"])
    return table


# -- the engine's own checks ---------------------------------------------------------------


@pytest.mark.parametrize("name", IDS)
def test_lint_is_clean(name):
    report = helm.lint(str(CHART), CASES[name], strict=True, namespace="jupyterhub")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == [], report


@pytest.mark.parametrize("name", IDS)
def test_values_pass_the_chart_schema(chart, name):
    chart.validate_schema(CASES[name])


@pytest.mark.parametrize(
    "values, message",
    [
        ({"sharing": "mps"}, "sharing"),
        ({"projects": [{"name": "vision", "deserved_gpu": 2}]}, "deserved_gpu"),
        ({"projects": [{"name": "vision", "limit_cpu": -1}]}, "limit_cpu"),
        ({"replicas": "two"}, "replicas"),
        ({"scheduler": {"placement": "random"}}, "placement"),
    ],
    ids=[
        "unknown-sharing",
        "misspelt-quota",
        "negative-cpu-limit",
        "replicas-not-a-number",
        "unknown-placement",
    ],
)
def test_schema_refuses(chart, values, message):
    with pytest.raises(helm.HelmError) as refused:
        chart.validate_schema(values)
    assert message in str(refused.value)


@pytest.mark.parametrize(
    "values, message",
    [
        ({"replicas": 2}, "replicas > 1 needs database.url"),
        (
            {"hubApiToken": {"value": "x", "existingSecret": {"name": "hub", "key": "k"}}},
            "not both",
        ),
        ({"hubApiToken": {"existingSecret": {"name": "hub", "key": ""}}}, "existingSecret.key"),
    ],
    ids=["replicas-without-database", "two-token-sources", "secret-without-key"],
)
def test_render_refuses(chart, values, message):
    with pytest.raises(helm.HelmError) as refused:
        render(chart, values)
    assert message in str(refused.value)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_manifest_is_a_valid_kubernetes_object(case, version):
    _, documents = case
    assert documents
    for document in documents:
        kubernetes_validate.validate(document, version, strict=True)


# -- RBAC ------------------------------------------------------------------------------------


def test_rbac_grants_exactly_the_listed_verbs(case):
    _, documents = case
    roles = {role["metadata"]["name"]: role for role in by_kind(documents, "Role")}
    assert set(roles) == {"frachub", "frachub-leader-election"}
    assert rules_of(roles["frachub"]) == WORKLOAD_RULES
    assert rules_of(roles["frachub-leader-election"]) == LEADER_RULES
    assert rules_of(one(documents, "ClusterRole")) == NODE_RULES
    for role in [*roles.values(), one(documents, "ClusterRole")]:
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], (role["metadata"]["name"], rule)


def test_bindings_name_the_schedulers_service_account(case):
    _, documents = case
    account = one(documents, "ServiceAccount")["metadata"]["name"]
    assert deployment(documents)["spec"]["template"]["spec"]["serviceAccountName"] == account
    bindings = by_kind(documents, "RoleBinding") + by_kind(documents, "ClusterRoleBinding")
    assert len(bindings) == 3
    for binding in bindings:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account, "namespace": "jupyterhub"}
        ]


def test_jobs_in_another_namespace_get_their_role_there(chart):
    documents = render(chart, CASES["hami"])
    roles = {role["metadata"]["name"]: role for role in by_kind(documents, "Role")}
    assert roles["frachub"]["metadata"]["namespace"] == "gpu-work"
    assert roles["frachub-leader-election"]["metadata"]["namespace"] == "jupyterhub"
    assert config(documents)["KubernetesBackend"]["namespace"] == "gpu-work"


# -- the Deployment ----------------------------------------------------------------------------


def test_probes_use_the_service_port_and_a_path_open_without_a_token(case):
    _, documents = case
    scheduler = container(documents)
    assert [port["name"] for port in scheduler["ports"]] == ["http"]
    assert scheduler["livenessProbe"]["tcpSocket"] == {"port": "http"}
    path = scheduler["readinessProbe"]["httpGet"]["path"]
    assert path.startswith(SERVICE_PREFIX)
    # the health handler needs no token (the API answers 403) and answers 503 on a standby
    routes = {pattern: handler for pattern, handler in info.default_handlers}
    assert routes[r"/api/v1/health/?"] is info.HealthHandler
    assert path == f"{SERVICE_PREFIX}api/v1/health"
    assert not issubclass(info.HealthHandler, APIHandler)  # APIHandler authenticates


def test_the_command_runs_the_service_with_the_config_map(case):
    _, documents = case
    scheduler = container(documents)
    assert scheduler["command"][:3] == [
        "frachub",
        "service",
        "--config=/etc/frachub/frachub_config.json",
    ]
    env = {item["name"]: item for item in scheduler["env"]}
    assert env["JUPYTERHUB_SERVICE_PREFIX"]["value"] == SERVICE_PREFIX
    assert env["JUPYTERHUB_SERVICE_NAME"]["value"] == "frachub"
    assert "secretKeyRef" in env["JUPYTERHUB_API_TOKEN"]["valueFrom"]
    labels = deployment(documents)["spec"]["template"]["metadata"]["labels"]
    assert labels["hub.jupyter.org/network-access-hub"] == "true"


def test_the_config_map_holds_the_projects_from_values(case, chart):
    values, documents = case
    settings = config(documents)
    projects = merged(chart, values)["projects"]
    assert settings["FracHubService"]["queues"] == projects
    parse_queues(
        [
            {k: v for k, v in p.items() if k != "members"}
            for p in settings["FracHubService"]["queues"]
        ]
    )
    backend = settings["KubernetesBackend"]
    assert backend["sharing_mode"] == merged(chart, values)["sharing"]
    hami = merged(chart, values)["kubernetes"]["hamiSchedulerName"]
    assert backend["hami_scheduler_name"] == hami
    assert settings["FracHubService"]["backend_class"].endswith(".KubernetesBackend")


def test_the_config_file_loads_into_the_service(case):
    """The rendered JSON is a traitlets config FracHubService accepts (its validators run)."""
    from traitlets.config import Config

    from scheduler.service.app import FracHubService

    _, documents = case
    settings = config(documents)
    settings["FracHubService"].pop("backend_class")  # the backend is written elsewhere
    service = FracHubService(config=Config(settings))
    assert [q["name"] for q in service.queues] == [
        q["name"] for q in settings["FracHubService"]["queues"]
    ]
    assert service.grace_period == settings["FracHubService"]["grace_period"]


def test_custom_projects_and_extra_config_reach_the_config(chart):
    settings = config(render(chart, CASES["custom-projects"]))["FracHubService"]
    assert [q["name"] for q in settings["queues"]] == ["research", "vision", "nlp", "interns"]
    assert settings["queues"][3]["members"] == ["ana", "bo"]
    interns = settings["queues"][3]  # CPU and memory quotas reach the service (rule 3b)
    quotas = (interns["deserved_cpu"], interns["limit_cpu"], interns["limit_memory_gib"])
    assert quotas == (8, 16, 64)
    assert settings["page_max_limit"] == 1000
    assert settings["grace_period"] == 120 and settings["placement"] == "spread"


def test_one_replica_recreates_on_its_sqlite_volume(chart):
    documents = render(chart, {})
    spec = deployment(documents)["spec"]
    assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"
    claim = one(documents, "PersistentVolumeClaim")["metadata"]["name"]
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == claim
    assert one(documents, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


def test_two_replicas_roll_on_a_shared_database(chart):
    documents = render(chart, CASES["two-replicas"])
    spec = deployment(documents)["spec"]
    assert spec["replicas"] == 2 and spec["strategy"]["type"] == "RollingUpdate"
    assert by_kind(documents, "PersistentVolumeClaim") == []
    pod = spec["template"]["spec"]
    assert "podAntiAffinity" in pod["affinity"]
    scheduler = pod["containers"][0]
    assert "--db=$(FRACHUB_DATABASE_URL)" in scheduler["command"]
    env = {item["name"]: item for item in scheduler["env"]}
    assert env["FRACHUB_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "frachub-db",
        "key": "url",
    }
    assert one(documents, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


# -- the hub API token ---------------------------------------------------------------------


def token_ref(documents) -> dict[str, str]:
    env = {item["name"]: item for item in container(documents)["env"]}
    return env["JUPYTERHUB_API_TOKEN"]["valueFrom"]["secretKeyRef"]


def test_token_generated_when_none_is_given(chart):
    documents = render(chart, {})
    secret = one(documents, "Secret")
    assert token_ref(documents) == {"name": secret["metadata"]["name"], "key": "hub-api-token"}
    import base64

    assert len(base64.b64decode(secret["data"]["hub-api-token"])) == 64


def test_token_from_values(chart):
    import base64

    documents = render(chart, CASES["hami"])
    secret = one(documents, "Secret")
    token = base64.b64decode(secret["data"]["hub-api-token"]).decode()
    assert token == CASES["hami"]["hubApiToken"]["value"]


def test_token_from_z2jh_secret_creates_no_secret(chart):
    documents = render(chart, CASES["generated"])
    assert by_kind(documents, "Secret") == []
    assert token_ref(documents) == {"name": "hub", "key": "hub.services.frachub.apiToken"}


# -- network and priorities ------------------------------------------------------------------


def peers(documents) -> list[dict[str, Any]]:
    (rule, *_) = one(documents, "NetworkPolicy")["spec"]["ingress"]
    return [peer["podSelector"]["matchLabels"] for peer in rule["from"]]


def test_network_policy_admits_the_hub_the_proxy_notebooks_and_jobs(chart):
    documents = render(chart, {})
    policy = one(documents, "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert sorted(p["app.kubernetes.io/component"] for p in peers(documents)) == [
        "hub",
        "proxy",
        "singleuser-server",
        "training",  # a job's hub_ext.client.checkpointed()
    ]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    pod_labels = deployment(documents)["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()


def test_network_policy_peers_are_values(chart):
    documents = render(chart, CASES["custom-projects"])
    assert sorted(p["app.kubernetes.io/component"] for p in peers(documents)) == [
        "hub",
        "proxy",
        "training",
    ]
    ingress = one(documents, "NetworkPolicy")["spec"]["ingress"]
    assert ingress[1] == CASES["custom-projects"]["networkPolicy"]["extraIngress"][0]


def test_priority_classes_follow_the_workload_kinds(chart):
    documents = render(chart, {})
    classes = {c["metadata"]["name"]: c["value"] for c in by_kind(documents, "PriorityClass")}
    assert classes == {
        "frachub-notebook": 100,
        "frachub-notebook-preemptible": 75,
        "frachub-inference": 125,
        "frachub-training": 50,
    }
    backend = config(documents)["KubernetesBackend"]
    assert backend["priority_class"] == "frachub-training"
    assert backend["reservation_priority_class"] == "frachub-notebook"


def test_priority_classes_can_be_left_to_another_release(chart):
    documents = render(chart, CASES["custom-projects"])
    assert by_kind(documents, "PriorityClass") == []
    assert config(documents)["KubernetesBackend"]["priority_class"] == "frachub-training"


def test_values_files_directory_is_not_empty():
    assert len(values_files()) >= 3, VALUES_DIR
