"""The generated values files: up to date with helm/frachub.yaml, the hub's values valid for
the z2jh chart (merged over its defaults, against its own schema from ../shared/z2jh), the
roles taken from scheduler/common/scopes.py, and the extraConfig snippet doing what it says when run
the way z2jh runs it."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from conftest import REPO, load_yaml, one, render

from hub_ext.cli import helm_values
from scheduler.common.scopes import (
    ADMIN_SCOPES,
    CUSTOM_SCOPES,
    PANEL_SCOPES,
    SERVICE_SCOPES,
    USER_SCOPES,
)
from spawner.profiles import parse_profiles

HELM = REPO / "helm"
DEFINITIONS = load_yaml(HELM / "frachub.yaml")
HUB_VALUES = load_yaml(HELM / "hub-values.yaml")
FRACHUB_VALUES = load_yaml(HELM / "frachub-values.yaml")


def deep_merge(base: Any, override: Any) -> Any:
    """Helm's coalescing of a values file over chart defaults: maps merge, the rest replaces."""
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for key, value in override.items():
            merged[key] = deep_merge(base.get(key), value) if key in base else value
        return merged
    return override


def test_generated_files_are_up_to_date():
    assert helm_values.stale() == [], "run: .venv/bin/python -m hub_ext.cli.helm_values"


def test_hub_values_validate_against_the_z2jh_schema(z2jh: Path):
    schema = load_yaml(z2jh / "values.schema.yaml")
    values = deep_merge(load_yaml(z2jh / "values.yaml"), HUB_VALUES)
    jsonschema.validators.validator_for(schema)(schema).validate(values)


def test_the_z2jh_schema_check_catches_a_misplaced_key(z2jh: Path):
    schema = load_yaml(z2jh / "values.schema.yaml")
    values = deep_merge(load_yaml(z2jh / "values.yaml"), {"hub": {"profileList": []}})
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validators.validator_for(schema)(schema).validate(values)


def test_roles_and_scopes_come_from_scopes_py():
    roles = HUB_VALUES["hub"]["loadRoles"]
    assert roles["user"]["scopes"] == USER_SCOPES
    assert roles["frachub-admin"]["scopes"] == ADMIN_SCOPES
    assert roles["frachub"] == {"scopes": SERVICE_SCOPES, "services": ["frachub"]}
    assert HUB_VALUES["hub"]["config"]["JupyterHub"]["custom_scopes"] == CUSTOM_SCOPES
    service = HUB_VALUES["hub"]["services"]["frachub"]
    assert service["oauth_client_allowed_scopes"] == list(PANEL_SCOPES)
    assert service["oauth_no_confirm"] is True
    assert "apiToken" not in service  # z2jh generates it; nothing secret is committed


def test_the_service_url_is_the_charts_service(chart):
    documents = render(chart, FRACHUB_VALUES, namespace=DEFINITIONS["namespace"])
    service = one(documents, "Service")
    url = f"http://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}"
    assert HUB_VALUES["hub"]["services"]["frachub"]["url"] == url
    assert f"service_url={url!r}" in HUB_VALUES["hub"]["extraConfig"]["frachub.py"]


def test_notebooks_may_reach_the_scheduler_pods(chart):
    documents = render(chart, FRACHUB_VALUES)
    pod_labels = one(documents, "Deployment")["spec"]["template"]["metadata"]["labels"]
    (rule,) = HUB_VALUES["singleuser"]["networkPolicy"]["egress"]
    (peer,) = rule["to"]
    assert peer["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert rule["ports"][0]["port"] == FRACHUB_VALUES.get("service", {}).get("port", 10101)


def test_projects_and_profiles_are_the_definitions():
    assert FRACHUB_VALUES["projects"] == DEFINITIONS["projects"]
    assert FRACHUB_VALUES["sharing"] == DEFINITIONS["sharing"]
    assert HUB_VALUES["singleuser"]["profileList"] == DEFINITIONS["profiles"]
    assert HUB_VALUES["hub"]["image"] == DEFINITIONS["image"]
    assert FRACHUB_VALUES["image"] == {
        "repository": DEFINITIONS["image"]["name"],
        "tag": DEFINITIONS["image"]["tag"],
    }
    parse_profiles(HUB_VALUES["singleuser"]["profileList"])
    # configure() sets Spawner.start_timeout, but z2jh's KubeSpawner.start_timeout wins
    assert HUB_VALUES["singleuser"]["startTimeout"] >= 900


def test_extra_config_configures_the_hub_as_z2jh_runs_it(monkeypatch):
    """Run the snippet the way z2jh's jupyterhub_config.py does: exec'd after z2jh has loaded
    hub.services and hub.loadRoles into c, with the token from z2jh's Secret."""
    from traitlets.config import Config

    import hub_ext.configure

    monkeypatch.setattr(hub_ext.configure, "service_token", lambda data_dir: "token-on-disk")
    z2jh = types.ModuleType("z2jh")
    z2jh.get_secret_value = {"hub.services.frachub.apiToken": "token-in-secret"}.__getitem__
    monkeypatch.setitem(sys.modules, "z2jh", z2jh)
    c = Config()
    c.JupyterHub.services = [
        {
            **HUB_VALUES["hub"]["services"]["frachub"],
            "name": "frachub",
            "api_token": "token-in-secret",
        }
    ]
    c.JupyterHub.load_roles = [
        {"name": name, **role} for name, role in HUB_VALUES["hub"]["loadRoles"].items()
    ]
    exec(HUB_VALUES["hub"]["extraConfig"]["frachub.py"], {"c": c})

    (service,) = c.JupyterHub.services
    assert service["api_token"] == "token-in-secret"
    assert service["url"] == HUB_VALUES["hub"]["services"]["frachub"]["url"]
    assert "command" not in service  # external: the chart runs it
    assert c.JupyterHub.spawner_class == "spawner.kube.FracKubeSpawner"
    assert c.FracKubeSpawner.frachub_api_token == "token-in-secret"
    assert c.FracKubeSpawner.frachub_api_url.startswith(service["url"] + "/services/frachub/")
    assert "profile_list" not in c.FracKubeSpawner  # singleuser.profileList applies
    assert sorted(role["name"] for role in c.JupyterHub.load_roles) == [
        "frachub",
        "frachub-admin",
        "user",
    ]
    assert "frachub-admins" in c.JupyterHub.load_groups


@pytest.mark.parametrize(
    "change, message",
    [
        ({"colour": "blue"}, "colour: unknown key"),
        ({"sharing": "mps"}, "sharing: must be one of"),
        ({"projects": [{"name": "vision", "parent": "nowhere"}]}, "parent"),
        ({"projects": []}, "projects: must be a non-empty list"),
        (
            {"profiles": [{"display_name": "x", "frachub": {"allowed_groups": ["robotics"]}}]},
            "'robotics' is not a project",
        ),
        ({"profiles": [{"display_name": "x", "frachub": {"gpu_choices": [1.5]}}]}, "gpu_choices"),
        ({"names": {"frachub": "frachub"}}, "names:"),
    ],
    ids=[
        "unknown-key",
        "unknown-sharing",
        "unknown-parent",
        "no-projects",
        "profile-for-unknown-group",
        "bad-gpu-choice",
        "names-incomplete",
    ],
)
def test_definitions_are_checked(change, message):
    with pytest.raises(helm_values.DefinitionError) as refused:
        helm_values.generate({**DEFINITIONS, **change})
    assert message in str(refused.value)


def test_main_writes_and_checks(tmp_path, capsys):
    definitions = tmp_path / "frachub.yaml"
    definitions.write_text((HELM / "frachub.yaml").read_text())
    assert helm_values.main([str(definitions), "--check"]) == 1  # nothing written yet
    assert helm_values.main([str(definitions)]) == 0
    assert helm_values.main([str(definitions), "--check"]) == 0
    for name in helm_values.OUTPUTS:
        assert (tmp_path / name).read_text() == (HELM / name).read_text()
    definitions.write_text(definitions.read_text().replace("sharing: reservation", "sharing: hami"))
    assert helm_values.main([str(definitions), "--check"]) == 1
    assert "frachub-values.yaml is out of date" in capsys.readouterr().err
    definitions.write_text("sharing: [")
    assert helm_values.main([str(definitions)]) == 2


def test_notebooks_share_gpus_the_way_the_scheduler_does():
    """Both releases get the definitions' sharing mode: a hub left in reservation mode with
    a scheduler in hami mode would give notebooks no HAMi memory limit."""
    for sharing in ("reservation", "hami"):
        generated = helm_values.generate({**DEFINITIONS, "sharing": sharing})
        hub = yaml.safe_load(generated["hub-values.yaml"])
        frachub = yaml.safe_load(generated["frachub-values.yaml"])
        assert hub["hub"]["config"]["FracKubeSpawner"]["frachub_sharing_mode"] == sharing
        assert frachub["sharing"] == sharing
