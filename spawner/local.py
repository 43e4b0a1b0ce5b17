"""``FracLocalSpawner``: notebooks on this machine, on a GPU share from FracHub.

JupyterHub's ``LocalProcessSpawner`` with the FracHub mixin. Two ways to run users' servers:

* ``home_dir_template`` empty (the default): users are system accounts, and servers run as
  them, as with ``LocalProcessSpawner`` (PAM log-in, a shared workstation);
* ``home_dir_template`` set (``frachub up`` sets it for hub-only users): every server runs as
  the hub's own Unix user in a home made from the template, like JupyterHub's
  ``SimpleLocalProcessSpawner``. There is no isolation between users then: it is for one
  person's workstation, demos and tests, and the docs say so.

The profile list is KubeSpawner's shape; on this spawner a profile's ``kubespawner_override``
sets those traits that a local spawner has (``environment``, ``default_url``, ``args``,
``cmd``, ``mem_limit``, ...), and says in the log which it skipped.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Dict, List, Unicode, default

from spawner.mixin import FracSpawnerMixin
from spawner.profiles import Selection


class FracLocalSpawner(FracSpawnerMixin, LocalProcessSpawner):
    profile_list = List(
        Dict(),
        config=True,
        help="""KubeSpawner-style profiles with FracHub's GPU choices (see docs/profiles.md).
        Empty: servers hold no GPU and there is no form.""",
    )

    home_dir_template = Unicode(
        "",
        config=True,
        help="""For hub-only users (no system accounts): run servers as the hub's own user in
        this home, e.g. /srv/frachub/home/{username}. Empty: servers run as the system user
        of the same name. Provides no isolation between users.""",
    )

    home_dir = Unicode(help="The server's home directory in hub-only mode.")

    @default("home_dir")
    def _default_home_dir(self) -> str:
        return self.home_dir_template.format(username=self.user.name)

    @default("cmd")
    def _default_cmd(self) -> list[str]:
        """The jupyterhub-singleuser installed beside the hub's Python, so servers run in
        FracHub's environment even when its bin/ is not on PATH."""
        beside = Path(sys.executable).parent / "jupyterhub-singleuser"
        return [str(beside)] if beside.exists() else ["jupyterhub-singleuser"]

    @property
    def hub_only_users(self) -> bool:
        return bool(self.home_dir_template)

    def frachub_apply_profile(self, selection: Selection) -> None:
        if selection.profile is None:
            return
        raw = selection.profile.raw
        overrides = [raw.get("kubespawner_override") or {}]
        for name, option in (raw.get("profile_options") or {}).items():
            choices = option.get("choices") or {}
            picked = selection.options.get(name) or next(
                (key for key, choice in choices.items() if choice.get("default")),
                next(iter(choices), None),
            )
            if picked in choices:
                overrides.append(choices[picked].get("kubespawner_override") or {})
        for override in overrides:
            for key, value in override.items():
                if not self.has_trait(key):
                    self.log.debug(
                        "profile %s: %s applies to Kubernetes only", selection.profile.slug, key
                    )
                    continue
                value = value(self) if callable(value) else value
                current = getattr(self, key)
                if isinstance(value, dict) and isinstance(current, dict):
                    setattr(self, key, {**current, **value})
                else:
                    setattr(self, key, value)

    # -- hub-only users ------------------------------------------------------------------

    def make_preexec_fn(self, name: str) -> Any:
        if not self.hub_only_users:
            return super().make_preexec_fn(name)
        home = self.home_dir

        def preexec() -> None:
            os.makedirs(home, 0o755, exist_ok=True)
            os.chdir(home)

        return preexec

    def user_env(self, env: dict[str, str]) -> dict[str, str]:
        if not self.hub_only_users:
            return super().user_env(env)
        env["USER"] = self.user.name
        env["HOME"] = self.home_dir
        env["SHELL"] = "/bin/bash"
        return env

    def get_args(self) -> list[str]:
        args = super().get_args()
        if self.hub_only_users and os.geteuid() == 0 and "--allow-root" not in args:
            args.append("--allow-root")  # the hub's user is root: Jupyter refuses otherwise
        return args

    def move_certs(self, paths: dict[str, str]) -> dict[str, str]:
        if self.hub_only_users:
            return paths
        return super().move_certs(paths)
