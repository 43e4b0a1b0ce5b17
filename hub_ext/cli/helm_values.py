"""``frachub helm-values``: both Helm releases' values from one definitions file.

FracHub on Kubernetes is two releases that must agree: the ``frachub`` chart (the scheduler,
which enforces the projects) and the Zero to JupyterHub release (the hub, whose spawn page
offers the profiles, whose roles grant FracHub's scopes, and whose service entry and token
point at the scheduler). ``helm/frachub.yaml`` says everything they share once;
``generate(definitions)`` turns it into

- ``frachub-values.yaml``: values for ``helm/frachub`` (projects, sharing, image, names),
- ``hub-values.yaml``: values for the z2jh chart (``hub.image``, ``hub.config``,
  ``hub.services.frachub``, ``hub.loadRoles``, ``hub.extraConfig``, ``singleuser.*``).

The roles and custom scopes come from ``scheduler/common/scopes.py``, the same lists ``configure()``
uses, never copied by hand. ``check_definitions`` validates the projects and profiles with
the scheduler's and the spawner's own parsers, so a typo fails here and not at a user's
spawn. ``main`` writes (or with ``--check`` compares) the files next to the definitions.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from scheduler.common.paths import ROOT, in_checkout
from scheduler.common.scopes import (
    ADMIN_GROUP,
    ADMIN_SCOPES,
    CUSTOM_SCOPES,
    PANEL_SCOPES,
    SERVICE_NAME,
    SERVICE_SCOPES,
    USER_SCOPES,
)
from spawner.profiles import InvalidOption, parse_profiles

# the repository's, or (from an installed wheel) helm/frachub.yaml under the current directory
DEFINITIONS = (ROOT if in_checkout() else Path()) / "helm" / "frachub.yaml"
OUTPUTS = ("frachub-values.yaml", "hub-values.yaml")
SERVICE_PORT = 10101  # the frachub chart's service.port default
HUB_API_PORT = 8081  # the z2jh hub Service's port
HUB_DATA_DIR = "/srv/jupyterhub/frachub"  # on the z2jh hub's own volume
START_TIMEOUT = 900  # configure()'s default: a spawn's wait for a GPU share counts against it
SHARING_MODES = ("reservation", "hami")
KEYS = {
    "namespace",
    "names",
    "image",
    "sharing",
    "jobImage",
    "admins",
    "projects",
    "profiles",
}
HEADER = (
    "# GENERATED from helm/frachub.yaml by `python -m hub_ext.cli.helm_values` "
    "(frachub helm-values): do not edit.\n"
    "# {purpose}\n"
)


class DefinitionError(ValueError):
    """A definitions file that cannot be used, naming the key."""


def load_definitions(path: Path = DEFINITIONS) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        definitions = yaml.safe_load(handle)
    check_definitions(definitions)
    return definitions


def check_definitions(definitions: Any) -> None:
    """Raise ``DefinitionError`` naming the first key that is wrong."""
    if not isinstance(definitions, Mapping):
        raise DefinitionError("definitions: must be a mapping")
    unknown = sorted(set(definitions) - KEYS)
    if unknown:
        raise DefinitionError(f"{unknown[0]}: unknown key; use {', '.join(sorted(KEYS))}")
    missing = sorted(KEYS - set(definitions) - {"admins"})
    if missing:
        raise DefinitionError(f"{missing[0]}: missing")
    names = definitions["names"]
    if not isinstance(names, Mapping) or set(names) != {"frachub", "hub"}:
        raise DefinitionError("names: must have exactly the keys frachub and hub")
    image = definitions["image"]
    if not isinstance(image, Mapping) or set(image) != {"name", "tag"}:
        raise DefinitionError("image: must have exactly the keys name and tag")
    if definitions["sharing"] not in SHARING_MODES:
        raise DefinitionError(
            f"sharing: must be one of {', '.join(SHARING_MODES)}, got {definitions['sharing']!r}"
        )
    projects = definitions["projects"]
    if not isinstance(projects, list) or not projects:
        raise DefinitionError("projects: must be a non-empty list")
    from scheduler.fields import (  # the service's own queue rules
        TIME_LIMIT_FIELDS,
        InvalidSpec,
        parse_queues,
        time_limit_fields,
    )

    kept = ("members", *TIME_LIMIT_FIELDS)
    try:
        parse_queues([{k: v for k, v in p.items() if k not in kept} for p in projects], "projects")
        for i, project in enumerate(projects):
            time_limit_fields(project, f"projects[{i}]")
        parse_profiles(definitions["profiles"])
    except (InvalidSpec, InvalidOption) as error:
        raise DefinitionError(str(error)) from None
    project_names = {p["name"] for p in projects}
    for index, profile in enumerate(definitions["profiles"]):
        for group in (profile.get("frachub") or {}).get("allowed_groups") or []:
            if group not in project_names and group != ADMIN_GROUP:
                raise DefinitionError(
                    f"profiles[{index}].frachub.allowed_groups: {group!r} is not a project; "
                    f"projects are {', '.join(sorted(project_names))}"
                )


def service_url(definitions: Mapping[str, Any]) -> str:
    """The scheduler's Service as the hub and notebooks reach it (same namespace)."""
    return f"http://{definitions['names']['frachub']}:{SERVICE_PORT}"


def frachub_values(definitions: Mapping[str, Any]) -> dict[str, Any]:
    names = definitions["names"]
    return {
        "fullnameOverride": names["frachub"],
        "image": {"repository": definitions["image"]["name"], "tag": definitions["image"]["tag"]},
        "hub": {"apiUrl": f"http://{names['hub']}:{HUB_API_PORT}/hub/api/"},
        # z2jh keeps the service's token in its own Secret: read it from there, so no token
        # is ever written into a values file
        "hubApiToken": {
            "existingSecret": {
                "name": names["hub"],
                "key": f"hub.services.{SERVICE_NAME}.apiToken",
            }
        },
        "sharing": definitions["sharing"],
        "kubernetes": {"jobImage": definitions["jobImage"]},
        "projects": [dict(project) for project in definitions["projects"]],
    }


def extra_config(definitions: Mapping[str, Any]) -> str:
    """The hub.extraConfig snippet: ``configure()`` for an external scheduler on Kubernetes."""
    admins = list(definitions.get("admins") or [])
    return f"""\
# FracHub: scopes, roles, the frachub service, FracKubeSpawner (hub_ext.configure).
from hub_ext.configure import configure
from z2jh import get_secret_value

configure(
    c,
    managed=False,  # the frachub chart runs the scheduler
    spawner="kubernetes",
    service_url={service_url(definitions)!r},
    data_dir={HUB_DATA_DIR!r},
    profile_list=None,  # singleuser.profileList is the spawner's profile_list
    admin_users={admins!r},
    # the token z2jh keeps for hub.services.{SERVICE_NAME}: the scheduler authenticates with it
    api_token=get_secret_value("hub.services.{SERVICE_NAME}.apiToken"),
)
"""


def hub_values(definitions: Mapping[str, Any]) -> dict[str, Any]:
    admins = list(definitions.get("admins") or [])
    frachub_pods = {
        "app.kubernetes.io/name": "frachub",
        "app.kubernetes.io/component": "scheduler",
    }
    return {
        "hub": {
            "image": dict(definitions["image"]),
            "config": {
                "JupyterHub": {"custom_scopes": dict(CUSTOM_SCOPES)},
                # notebooks share GPUs the way the scheduler's jobs do (frachub-values' sharing)
                "FracKubeSpawner": {"frachub_sharing_mode": definitions["sharing"]},
            },
            "services": {
                SERVICE_NAME: {
                    "url": service_url(definitions),
                    "display": False,
                    "oauth_no_confirm": True,
                    "oauth_client_allowed_scopes": list(PANEL_SCOPES),
                }
            },
            "loadRoles": {
                "user": {"scopes": list(USER_SCOPES)},
                "frachub-admin": {
                    "scopes": list(ADMIN_SCOPES),
                    "users": admins,
                    "groups": [ADMIN_GROUP],
                },
                SERVICE_NAME: {"scopes": list(SERVICE_SCOPES), "services": [SERVICE_NAME]},
            },
            "extraConfig": {"frachub.py": extra_config(definitions)},
        },
        "singleuser": {
            "profileList": [dict(profile) for profile in definitions["profiles"]],
            "startTimeout": START_TIMEOUT,
            # the %frachub magics and the CLI reach the scheduler from notebook pods
            "networkPolicy": {
                "egress": [
                    {
                        "to": [{"podSelector": {"matchLabels": frachub_pods}}],
                        "ports": [{"port": SERVICE_PORT, "protocol": "TCP"}],
                    }
                ]
            },
        },
    }


class _Dumper(yaml.SafeDumper):
    """Block style; multi-line strings (the extraConfig snippet) as literal blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(values: Mapping[str, Any], purpose: str) -> str:
    body = yaml.dump(dict(values), Dumper=_Dumper, sort_keys=False, width=100)
    return HEADER.format(purpose=purpose) + body


def generate(definitions: Mapping[str, Any]) -> dict[str, str]:
    """File name -> text of each generated values file."""
    check_definitions(definitions)
    return {
        "frachub-values.yaml": dump(
            frachub_values(definitions),
            "helm install frachub helm/frachub -n NAMESPACE -f helm/frachub-values.yaml",
        ),
        "hub-values.yaml": dump(
            hub_values(definitions),
            "helm install jupyterhub jupyterhub/jupyterhub -n NAMESPACE -f helm/hub-values.yaml",
        ),
    }


def stale(definitions_path: Path = DEFINITIONS, out_dir: Path | None = None) -> list[str]:
    """The generated files that differ from what the definitions give (missing counts)."""
    out = out_dir or definitions_path.parent
    wanted = generate(load_definitions(definitions_path))
    return [
        name
        for name, text in wanted.items()
        if not (out / name).exists() or (out / name).read_text(encoding="utf-8") != text
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="frachub helm-values",
        description="Write the frachub chart's and the z2jh release's values from one file.",
    )
    parser.add_argument("definitions", nargs="?", default=str(DEFINITIONS), type=Path)
    parser.add_argument("--out-dir", type=Path, help="default: the definitions' directory")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if a generated file is out of date"
    )
    args = parser.parse_args(argv)
    out = args.out_dir or args.definitions.parent
    try:
        if args.check:
            names = stale(args.definitions, out)
            for name in names:
                print(f"{out / name} is out of date: run frachub helm-values", file=sys.stderr)
            return 1 if names else 0
        for name, text in generate(load_definitions(args.definitions)).items():
            (out / name).write_text(text, encoding="utf-8")
            print(f"wrote {out / name}")
    except (OSError, yaml.YAMLError, DefinitionError) as error:
        print(f"frachub helm-values: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
