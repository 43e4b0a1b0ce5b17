"""``FracLocalSpawner``: notebooks on this machine, on a GPU share from FracHub.

JupyterHub's ``LocalProcessSpawner`` with the FracHub mixin. Two ways to run users' servers:

* ``home_dir_template`` empty (the default): users are system accounts, and servers run as
  them, as with ``LocalProcessSpawner`` (PAM log-in, a shared workstation);
* ``home_dir_template`` set (``frachub up`` sets it for hub-only users): every server runs as
  the hub's own Unix user in a home made from the template, like JupyterHub's
  ``SimpleLocalProcessSpawner``. There is no isolation between users then: it is for one
  person's workstation, demos and tests, and the docs say so.

The profile list is KubeSpawner's, in all its forms (list, dict, callable), with its
``profile_form_template`` and ``additional_profile_form_template_paths``; on this spawner a
profile's ``kubespawner_override`` sets, with KubeSpawner's own ``_apply_overrides`` (dicts
merged, ``None`` deleting a key, callables called with the spawner), those traits that a
local spawner has (``environment``, ``default_url``, ``args``, ``cmd``, ``mem_limit``, ...),
and says in the log which it skipped.
"""

from __future__ import annotations

import copy
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from jupyterhub.spawner import LocalProcessSpawner
from jupyterhub.traitlets import Callable
from kubespawner.spawner import KubeSpawner
from traitlets import Dict, List, Unicode, Union, default

from scheduler.common.contract import prepend_path
from spawner.mixin import FracSpawnerMixin
from spawner.profiles import Selection

BIN_DIR = Path(sys.executable).parent
"""FracHub's environment's bin/: ``frachub``, ``jupyterhub-singleuser``."""


def terminal_setting(bin_dir: Path) -> str:
    """The server's terminals: a login shell, as Jupyter starts them, that then puts
    ``bin_dir`` back first on the PATH (a login shell's /etc/profile sets PATH anew) and
    becomes the user's interactive shell."""
    shell = '"${SHELL:-/bin/sh}"'
    script = f'PATH={shlex.quote(str(bin_dir))}:"$PATH"; export PATH; exec {shell} -i'
    command = ["/bin/sh", "-c", f"exec {shell} -l -c {shlex.quote(script)}"]
    return f"--ServerApp.terminado_settings={json.dumps({'shell_command': command})}"


class FracLocalSpawner(FracSpawnerMixin, LocalProcessSpawner):
    profile_list = Union(
        [List(Dict()), Callable(), Dict()],
        config=True,
        help="""KubeSpawner's profile_list with FracHub's GPU choices (docs/hub.md): a list of
        profiles, a dict of them keyed by slug (shown in key order), or a callable taking the
        spawner and returning either (may be async), called for each form and each start.
        Empty: servers hold no GPU and there is no form.""",
    )

    profile_form_template = Unicode(
        "",
        config=True,
        help="""As KubeSpawner's: a literal Jinja2 template for the spawn form, given
        profile_list, user_options and frachub (see docs/hub.md). Empty: FracHub's form.""",
    )

    additional_profile_form_template_paths = List(
        Unicode(),
        config=True,
        help="""As KubeSpawner's: directories searched first for templates; a form.html in
        one of them draws the spawn form.""",
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
        for overrides in selection.overrides:
            skipped = sorted(key for key in overrides if not self.has_trait(key))
            if skipped:
                self.log.info(
                    "profile %s: %s apply to Kubernetes only",
                    selection.profile.slug,
                    ", ".join(skipped),
                )
            mine = {k: copy.deepcopy(v) for k, v in overrides.items() if self.has_trait(k)}
            KubeSpawner._apply_overrides(self, mine)

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
        # `frachub` (and jupyter, python) of FracHub's environment first on the PATH, in the
        # server and in its terminals (see get_args), also when the hub was started by path
        env["PATH"] = prepend_path(str(BIN_DIR), env.get("PATH"))
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
        if not any("terminado_settings" in arg for arg in args):
            args.append(terminal_setting(BIN_DIR))
        return args

    def move_certs(self, paths: dict[str, str]) -> dict[str, str]:
        if self.hub_only_users:
            return paths
        return super().move_certs(paths)
