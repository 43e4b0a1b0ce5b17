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

Each server runs in a control group of its own where the hub can make one, as the local
backend's jobs do (``scheduler/backends/confinement.py``): the server starts only once it is
inside, and when it has stopped (or died), whatever it left (kernels, terminals' daemons) is
killed before its GPU share is released. GPU device nodes are not denied to servers. Its
CPU and memory are limited there as a job's are: to the ``cpu_limit``/``mem_limit`` its
profile (or this spawner's config) sets, else to its guarantees, else to what its allocation
was given (the service's default for notebooks).
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from jupyterhub.spawner import LocalProcessSpawner
from jupyterhub.traitlets import Callable
from kubespawner.spawner import KubeSpawner
from traitlets import CaselessStrEnum, Dict, List, Unicode, Union, default

import scheduler.backends.confinement as cg
from scheduler.common.contract import prepend_path
from spawner.mixin import FracSpawnerMixin
from spawner.profiles import Selection

BIN_DIR = Path(sys.executable).parent
"""FracHub's environment's bin/: ``frachub``, ``jupyterhub-singleuser``."""


def server_command() -> list[str]:
    """The jupyterhub-singleuser installed beside the hub's Python, so servers run in
    FracHub's environment even when its bin/ is not on PATH (``frachub up`` checks that every
    user can run it)."""
    beside = BIN_DIR / "jupyterhub-singleuser"
    return [str(beside)] if beside.exists() else ["jupyterhub-singleuser"]


def terminal_setting(bin_dir: Path) -> str:
    """The server's terminals: a login shell, as Jupyter starts them, that then puts
    ``bin_dir`` back first on the PATH (a login shell's /etc/profile sets PATH anew) and
    becomes the user's interactive shell."""
    shell = '"${SHELL:-/bin/sh}"'
    script = f'PATH={shlex.quote(str(bin_dir))}:"$PATH"; export PATH; exec {shell} -i'
    command = ["/bin/sh", "-c", f"exec {shell} -l -c {shlex.quote(script)}"]
    return f"--ServerApp.terminado_settings={json.dumps({'shell_command': command})}"


GATE = 'read -r go || :; [ "$go" = go ] || exit 125; exec </dev/null; eval "exec $0"'
"""The server's command waits for "go" on stdin, sent once it is in its control group."""


class ConfinedProcessSpawner(LocalProcessSpawner):
    """``LocalProcessSpawner`` with each server in a control group of its own; below the
    FracHub mixin, so that a stop kills the group before the mixin releases the share."""

    confinement = CaselessStrEnum(
        list(cg.MODES),
        default_value="auto",
        config=True,
        help="""As ``LocalBackend.confinement``: ``auto``, ``cgroup2``, ``cgroup1`` or
        ``session`` (the server's process group plus a sweep of /proc for its
        FRACHUB_ATTEMPT).""",
    )

    _logged_confinement = False
    _frachub_confinement: cg.Confinement | None = None

    @property
    def frachub_group(self) -> str:
        return cg.server_group_name(self.user.name, self.name)

    def frachub_confined(self) -> cg.Confinement:
        """The confinement in use (chosen once per spawner; logged once per hub), in a
        scope of the hub's own, named after its API URL."""
        if self._frachub_confinement is not None:
            return self._frachub_confinement
        chosen, why = cg.choose(self.confinement, cg.scope_of(f"servers {self.hub.api_url}"))
        self._frachub_confinement = chosen
        if not ConfinedProcessSpawner._logged_confinement:
            ConfinedProcessSpawner._logged_confinement = True
            if why:
                self.log.warning("Confinement %s is not available (%s)", self.confinement, why)
            self.log.info("Notebook servers are confined by %s", chosen.describe())
        return chosen

    def frachub_limits(self) -> cg.Limits:
        """The CPU and memory the server's group holds (none here; FracLocalSpawner's are its
        profile's)."""
        return cg.Limits()

    def get_env(self) -> dict[str, str]:
        env = super().get_env()
        env[cg.ATTEMPT_VARIABLE] = self.frachub_group  # the session mode's sweep finds it
        return env

    async def start(self) -> Any:
        confined = self.frachub_confined()
        await self.frachub_kill_group(confined)  # what a server that died before left
        cg.prepare(confined, self.frachub_group, (), self.frachub_limits())
        shell_cmd, popen_kwargs = self.shell_cmd, self.popen_kwargs
        if not shell_cmd:  # a configured shell_cmd runs as configured, confined once started
            self.shell_cmd = ["/bin/sh", "-c", GATE]
            self.popen_kwargs = {**popen_kwargs, "stdin": subprocess.PIPE}
        try:
            address = await super().start()
        finally:
            self.shell_cmd, self.popen_kwargs = shell_cmd, popen_kwargs
        try:
            cg.enter(confined, self.frachub_group, self.pid)
            if self.proc is not None and self.proc.stdin is not None:
                self.proc.stdin.write(b"go\n")
                self.proc.stdin.close()
        except OSError as e:
            self.log.error("Cannot confine %s: %s", self._log_name, e)
            if self.proc is not None:
                self.proc.kill()
            raise
        return address

    async def stop(self, now: bool = False) -> None:
        await super().stop(now=now)
        await self.frachub_kill_group(self.frachub_confined())

    async def poll(self) -> int | None:
        status = await super().poll()
        if status is not None:  # the server is gone: so is everything it started
            await self.frachub_kill_group(self.frachub_confined())
        return status

    async def frachub_kill_group(self, confined: cg.Confinement, timeout: float = 10) -> None:
        """SIGKILL what is left in the server's group, until it is empty (and removed)."""
        deadline = time.monotonic() + timeout
        while not cg.kill_all(confined, self.frachub_group, self.frachub_group):
            if time.monotonic() > deadline:
                self.log.error("Processes of %s outlived SIGKILL", self._log_name)
                return
            await asyncio.sleep(0.02)


class FracLocalSpawner(FracSpawnerMixin, ConfinedProcessSpawner):
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
        return server_command()

    @property
    def hub_only_users(self) -> bool:
        return bool(self.home_dir_template)

    def frachub_limits(self) -> cg.Limits:
        """The server's ``cpu_limit``/``mem_limit`` (else its guarantees, else what its
        allocation was given), as its control group's limits: a notebook past its memory is
        killed by the kernel, as a job is."""
        return cg.Limits(*self.frachub_resources().enforced)

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
