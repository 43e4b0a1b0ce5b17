"""The two config files ``frachub up`` writes on every start: ``jupyterhub_config.py`` (the
hub, its proxy, the FracHub spawner, the log-in) and ``frachub_config.py`` (the scheduler
service), and the banner that says where everything is."""

from __future__ import annotations

import argparse
import html
import os
import pwd
from pathlib import Path
from typing import Any

from hub_ext.cli.up.options import (
    ADMIN_USER,
    DEMO_USERS,
    LOG_DIR,
    LOG_FILE_BACKUPS,
    LOG_FILE_BYTES,
    PROFILES,
    Gpus,
    Team,
    proxy_command,
)
from scheduler.common.scopes import ADMIN_GROUP, SERVICE_PREFIX


def file_logging(path: Path, level: str, logger: str) -> dict[str, Any]:
    """traitlets ``logging_config`` adding a rotating file beside an application's console
    log (JupyterHub routes tornado's and the spawners' messages through its own logger)."""
    return {
        "formatters": {
            "frachub_file": {"format": "[%(levelname)1.1s %(asctime)s %(name)s] %(message)s"}
        },
        "handlers": {
            "frachub_file": {
                "class": "logging.handlers.RotatingFileHandler",
                "filename": str(path),
                "maxBytes": LOG_FILE_BYTES,
                "backupCount": LOG_FILE_BACKUPS,
                "encoding": "utf-8",
                "formatter": "frachub_file",
                "level": level,
            }
        },
        "loggers": {logger: {"handlers": ["console", "frachub_file"]}},
    }


def public_url(args: argparse.Namespace) -> str:
    host = "localhost" if args.ip in ("127.0.0.1", "0.0.0.0", "") else args.ip
    scheme = "https" if args.ssl_cert else "http"
    return f"{scheme}://{host}:{args.port}/"


def this_account() -> str:
    """The Unix account ``frachub up`` runs as: with a shared password, every user's
    notebooks, terminals and jobs run as it."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def login_hint(args: argparse.Namespace) -> str:
    """The login page's announcement with a shared password (HTML): who may log in, and that
    everything runs as one Unix account, so nobody takes the demo for isolation."""
    if args.demo:
        users = ", ".join(f"<b>{name}</b>" for name in (*DEMO_USERS, ADMIN_USER))
        who = f"Demo users: {users}, with the shared password <code>frachub up</code> printed."
    else:
        who = "Log in with any user name and the shared password <code>frachub up</code> printed."
    account = html.escape(this_account())
    return (
        f"{who} Every notebook, terminal and job runs as the Unix account "
        f"<code>{account}</code>, for every user: no isolation between users."
    )


def demo_admin_role(team: Team) -> dict[str, Any]:
    """What the demo's ``admin`` may do on the hub's admin page, which its spawn form sends it
    to: see the users and groups and change the members of the projects' groups, so it can
    add itself (or alice) to a project. It is no hub admin (the shared password cannot log
    one in), and it cannot change the FracHub admins' group nor anything else."""
    projects = sorted(name for name in team.groups if name != ADMIN_GROUP)
    return {
        "name": "frachub-demo-admin",
        "description": "The demo admin: the hub's admin page, to edit the projects' members",
        "scopes": [
            "admin-ui",
            "list:users",
            "read:users",
            "list:groups",
            "read:groups",
            *(f"groups!group={name}" for name in projects),
        ],
        "users": [ADMIN_USER],
    }


def hub_config(args: argparse.Namespace, data: Path, proxy: str, team: Team) -> str:
    service_url = f"http://127.0.0.1:{args.service_port}"
    scheme = "https" if args.ssl_cert else "http"
    settings: dict[str, Any] = {
        "JupyterHub.bind_url": f"{scheme}://{args.ip}:{args.port}/",
        "JupyterHub.hub_ip": "127.0.0.1",
        "JupyterHub.hub_port": args.hub_port,
        "JupyterHub.db_url": f"sqlite:///{data / 'jupyterhub.sqlite'}",
        "JupyterHub.cookie_secret_file": str(data / "jupyterhub_cookie_secret"),
        "JupyterHub.pid_file": str(data / "jupyterhub.pid"),
        "JupyterHub.log_level": args.log_level,
        "JupyterHub.logging_config": file_logging(
            data / LOG_DIR / "jupyterhub.log", args.log_level, "JupyterHub"
        ),
        "JupyterHub.load_groups": {name: {"users": users} for name, users in team.groups.items()},
        "ConfigurableHTTPProxy.command": proxy_command(proxy),
        "ConfigurableHTTPProxy.api_url": f"http://127.0.0.1:{args.proxy_api_port}",
        "ConfigurableHTTPProxy.pid_file": str(data / "jupyterhub-proxy.pid"),
        "Authenticator.admin_users": set(team.admins),
        "Spawner.default_url": "/lab",
        # a CPU server and a GPU server side by side, each with its own allocation
        "JupyterHub.allow_named_servers": True,
    }
    if args.ssl_cert:
        settings["JupyterHub.ssl_cert"] = str(Path(args.ssl_cert).resolve())
        settings["JupyterHub.ssl_key"] = str(Path(args.ssl_key).resolve())
    if team.auth == "pam":
        settings["JupyterHub.authenticator_class"] = "pam"
        # the projects' members and the admins; more are added on the admin page
        settings["Authenticator.allowed_users"] = set(team.allowed)
        settings["Authenticator.allow_existing_users"] = True
    else:
        settings["JupyterHub.authenticator_class"] = "shared-password"
        settings["FracLocalSpawner.home_dir_template"] = str(data / "home" / "{username}")
        settings["JupyterHub.template_vars"] = {"announcement_login": login_hint(args)}
        if args.demo:
            settings["Authenticator.allowed_users"] = {*DEMO_USERS, *team.admins}
            settings["JupyterHub.load_roles"] = [demo_admin_role(team)]
        else:
            settings["Authenticator.allow_all"] = True
    lines = [
        "# Written by `frachub up` on every start: your own settings go in",
        "# jupyterhub_config_extra.py beside this file, loaded last.",
        "import os",
        "from hub_ext.configure import configure",
        "",
        "c = get_config()  # noqa: F821",
    ]
    lines += [f"c.{key} = {value!r}" for key, value in settings.items()]
    if team.auth == "shared-password":
        # read from the 0600 files, never written here
        lines.append(
            "c.SharedPasswordAuthenticator.user_password = "
            f"open({str(data / 'password')!r}).read().strip()"
        )
        if team.admins:
            lines.append(
                "c.SharedPasswordAuthenticator.admin_password = "
                f"open({str(data / 'admin-password')!r}).read().strip()"
            )
    lines += [
        "configure(",
        "    c,",
        f"    service_config={str(data / 'frachub_config.py')!r},",
        f"    data_dir={str(data)!r},",
        f"    service_url={service_url!r},",
        f"    profile_list={PROFILES!r},",
        ")",
        f"_extra = {str(data / 'jupyterhub_config_extra.py')!r}",
        "if os.path.exists(_extra):",
        "    load_subconfig(_extra)  # noqa: F821",
    ]
    return "\n".join(lines) + "\n"


def service_config(args: argparse.Namespace, data: Path, gpus: Gpus, team: Team) -> str:
    settings: dict[str, Any] = {
        "FracHubService.queues": team.queues,
        "FracHubService.grace_period": args.grace_period,
        "FracHubService.log_level": args.log_level,
        "FracHubService.logging_config": file_logging(
            data / LOG_DIR / "frachub-service.log", args.log_level, "FracHubService"
        ),
    }
    if team.auth == "pam":
        # jobs run as the user's system account, in its home, like the user's notebooks
        settings["LocalBackend.run_as_user"] = True
    else:
        # hub-only users have no system account: jobs run as this Unix user, in the home
        # the notebooks have
        settings["LocalBackend.run_as_user"] = False
        settings["LocalBackend.home_dir_template"] = str(data / "home" / "{username}")
    settings["LocalBackend.gpu_sharing"] = args.gpu_sharing
    if gpus.source == "declared":
        settings["LocalBackend.inventory_source"] = "declared"
        settings["LocalBackend.declared_inventory"] = [
            {"name": "local", "gpus": gpus.count, "gpu_memory_gib": gpus.memory_gib}
        ]
    else:
        settings["LocalBackend.inventory_source"] = "nvml"
    lines = [
        "# Written by `frachub up` on every start: your own settings go in",
        "# frachub_config_extra.py beside this file, loaded last.",
        "import os",
        "",
        "c = get_config()  # noqa: F821",
    ]
    lines += [f"c.{key} = {value!r}" for key, value in settings.items()]
    lines += [
        f"_extra = {str(data / 'frachub_config_extra.py')!r}",
        "if os.path.exists(_extra):",
        "    load_subconfig(_extra)  # noqa: F821",
    ]
    return "\n".join(lines) + "\n"


def sharing_said(mode: str) -> str:
    """How shares are enforced, in words (the start-up lines and the banner)."""
    if mode == "mps":
        return (
            "mps: one NVIDIA MPS control daemon per GPU; every CUDA program on a shared GPU "
            "is held to its share's memory and compute"
        )
    return (
        "cooperative: PyTorch and JAX are capped at their share; other CUDA programs are "
        "not (--gpu-sharing mps holds every program)"
    )


def banner(
    args: argparse.Namespace, team: Team, passwords: dict[str, str], gpus_said: str, data: Path
) -> str:
    url = public_url(args)
    if args.demo:
        who = f"  users: alice, bob (project vision), carol (project nlp), {ADMIN_USER} (admin)\n"
    elif team.auth == "pam":
        who = (
            "  users: system accounts (PAM): "
            + (", ".join(u for u in team.allowed) or "none yet")
            + "; add more on the admin page\n"
        )
    else:
        who = "  users: any name\n"
    if not args.demo:
        projects = ", ".join(queue["name"] for queue in team.queues)
        who += f"  projects: {projects}; users in no project get CPU notebooks only\n"
        who += (
            f"  admins: {', '.join(team.admins)}\n"
            if team.admins
            else "  admins: none (give --admin NAME to use the admin page)\n"
        )
    if team.auth == "pam":
        who += "  runs as:  each user's own system account\n"
    else:
        who += (
            f"  runs as:  {this_account()}: every notebook, terminal and job of every user runs "
            "as this one Unix account (no isolation between users; --auth pam for a team)\n"
        )
    secrets_said = "".join(f"  {name}: {value}\n" for name, value in passwords.items())
    return (
        "\n"
        "FracHub is running.\n"
        f"  open:     {url}\n"
        f"{who}"
        f"{secrets_said}"
        f"  GPUs:     {gpus_said}\n"
        f"  sharing:  {sharing_said(args.gpu_sharing)}\n"
        f"  Training panel: {url.rstrip('/')}{SERVICE_PREFIX}\n"
        f"  data:     {data}\n"
        f"  logs:     {data / LOG_DIR} (jobs: {data / 'logs'})\n"
        "Stop with Ctrl-C.\n"
    )


# -- what a killed run left behind ----------------------------------------------------------
