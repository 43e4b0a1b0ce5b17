"""``configure(c, ...)``: everything a ``jupyterhub_config.py`` needs for FracHub, in one call.

    from hub_ext.configure import configure
    configure(c, service_config="/etc/frachub/frachub_config.py", profile_list=[...])

It registers the custom scopes and the roles that use them (``scheduler/common/scopes.py``), the
``frachub`` service (hub-managed by default, so the hub starts and restarts it), the FracHub
spawner pointed at that service, the templates (the hub's navigation bar gets a Training
link), and the profile list. Settings made before the call are kept where they are lists to
extend (roles, services, groups, template paths); anything set after it wins, as usual in a
config file. ``frachub up`` writes a config that calls this, and so can an admin.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from scheduler.common.paths import TEMPLATES_DIR, check_data_files
from scheduler.common.scopes import (
    ADMIN_GROUP,
    ADMIN_SCOPES,
    API_PATH,
    CUSTOM_SCOPES,
    PANEL_SCOPES,
    SERVICE_NAME,
    SERVICE_PREFIX,
    SERVICE_SCOPES,
    USER_SCOPES,
)

SPAWNERS = {
    "local": "spawner.local.FracLocalSpawner",
    "kubernetes": "spawner.kube.FracKubeSpawner",
}


def service_token(data_dir: Path) -> str:
    """The frachub service's hub token, kept in data_dir so it survives restarts (the
    spawner's saved allocations and the service's sessions outlive one hub process)."""
    path = data_dir / "frachub-service-token"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32))
    return path.read_text().strip()


def _extend(c: Any, section: str, name: str, items: Sequence[Any], key: str = "name") -> None:
    """Append items to a list setting, replacing earlier entries of the same name."""
    config = getattr(c, section)
    current = list(config[name]) if name in config else []
    names = {item[key] for item in items}
    setattr(config, name, [entry for entry in current if entry.get(key) not in names] + list(items))


def configure(
    c: Any,
    *,
    service_config: str | os.PathLike[str] | None = None,
    data_dir: str | os.PathLike[str] = "frachub-data",
    service_url: str = "http://127.0.0.1:10101",
    managed: bool = True,
    spawner: str = "local",
    profile_list: Sequence[dict[str, Any]] | Mapping[str, Any] | Callable[..., Any] | None = None,
    admin_users: Sequence[str] = (),
    start_timeout: int = 900,
    api_token: str | None = None,
) -> None:
    """Configure a JupyterHub for FracHub.

    service_config: the service's own config file (queues, backend, grace period), passed
        to ``frachub service --config`` when the hub manages the service.
    data_dir: where the service keeps its database, logs and token.
    service_url: where the service listens (and the spawner reaches it).
    managed: the hub starts the service (True) or an operator runs it (False).
    spawner: "local" or "kubernetes", or a spawner class's import path.
    profile_list: KubeSpawner's profile_list (a list, a dict by slug, or a callable) with
        FracHub's GPU choices (docs/hub.md).
    admin_users: FracHub admins besides the members of the ``frachub-admins`` group.
    start_timeout: seconds a spawn may take, waiting for a GPU share included.
    api_token: the frachub service's hub token when something else keeps it (on Kubernetes,
        z2jh's hub Secret); default: a token generated once and kept in data_dir.
    """
    check_data_files()
    data = Path(data_dir).resolve()
    token = api_token or service_token(data)
    c.JupyterHub.custom_scopes = {**dict(c.JupyterHub.get("custom_scopes", {})), **CUSTOM_SCOPES}
    _extend(
        c,
        "JupyterHub",
        "load_roles",
        [
            {"name": "user", "scopes": USER_SCOPES},
            {
                "name": "frachub-admin",
                "scopes": ADMIN_SCOPES,
                "users": list(admin_users),
                "groups": [ADMIN_GROUP],
            },
            {"name": "frachub", "scopes": SERVICE_SCOPES, "services": [SERVICE_NAME]},
        ],
    )
    groups = dict(c.JupyterHub.get("load_groups", {}))
    groups.setdefault(ADMIN_GROUP, {"users": []})
    c.JupyterHub.load_groups = groups

    service: dict[str, Any] = {
        "name": SERVICE_NAME,
        "url": service_url,
        "api_token": token,
        "display": False,  # the navigation bar has its own Training link
        "oauth_no_confirm": True,
        # the panel's browser session may use the API as the user, within their own scopes
        # (and "admin-ui", for the hub's Admin link on FracHub's pages)
        "oauth_client_allowed_scopes": list(PANEL_SCOPES),
    }
    if managed:
        command = [sys.executable, "-m", "hub_ext.cli", "service", "--data-dir", str(data)]
        if service_config:
            command += ["--config", str(Path(service_config).resolve())]
        service.update(command=command, cwd=str(data), timeout=60)
    _extend(c, "JupyterHub", "services", [service])

    c.JupyterHub.spawner_class = SPAWNERS.get(spawner, spawner)
    api_url = f"{service_url.rstrip('/')}{SERVICE_PREFIX}{API_PATH}"
    for section in ("FracLocalSpawner", "FracKubeSpawner"):
        settings = getattr(c, section)
        settings.frachub_api_url = api_url
        settings.frachub_api_token = token
        # on the spawner's own section: z2jh sets c.KubeSpawner.start_timeout, which would
        # win over c.Spawner
        settings.start_timeout = start_timeout
        if profile_list is not None:  # a list, a dict by slug, or a callable, as KubeSpawner's
            settings.profile_list = (
                profile_list
                if callable(profile_list) or isinstance(profile_list, Mapping)
                else list(profile_list)
            )
    # a kernelspec written on the hub's disk reaches local servers only; notebook images on
    # Kubernetes carry FracHub and its kernelspec themselves
    c.FracLocalSpawner.frachub_jupyter_path = str(data / "jupyter")

    paths = list(c.JupyterHub.get("template_paths", []))
    if str(TEMPLATES_DIR) not in paths:
        paths.append(str(TEMPLATES_DIR))
    c.JupyterHub.template_paths = paths
    template_vars = dict(c.JupyterHub.get("template_vars", {}))
    template_vars.setdefault("frachub_panel_url", SERVICE_PREFIX)
    c.JupyterHub.template_vars = template_vars
