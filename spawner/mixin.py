"""What both FracHub spawners do around the server they start.

profile -> request -> wait with progress -> apply -> release:

1. ``start()`` resolves the chosen profile and GPU option from ``user_options`` (the spawn
   form's or the REST API's), refusing a malformed or forbidden choice at once with a
   ``SpawnException`` naming the option;
2. asks the FracHub service for an allocation on the user's behalf, failing fast when the
   service says it can never be met;
3. waits for it, while ``progress()`` tells the spawn page the queue position and the reason
   it waits (the hub's ``start_timeout`` bounds the wait, as it bounds any slow start);
4. gives the server the environment contract of its share (``scheduler/common/contract.py``), the
   service's URL, and a kernel that loads the ``%frachub`` magics; then the base spawner
   starts the server;
5. releases the allocation when the server stops, fails to start, or is found gone.

The allocation id lives in ``get_state()``, so a restarted hub finds the share it holds
rather than asking for a second one.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

from jinja2 import ChoiceLoader, Environment, FileSystemLoader, PackageLoader
from jupyterhub.spawner import SpawnException
from traitlets import Bool, Float, Unicode, default
from traitlets.config import Configurable

from hub_ext.client.api import AsyncFracHubClient
from hub_ext.client.session import FracHubError
from scheduler.common.contract import CUDA_VISIBLE_DEVICES, contract_env, prepend_path
from scheduler.common.paths import HOOK_DIR, TEMPLATES_DIR
from scheduler.common.placement import describe_placement, placement_from_api
from scheduler.common.scopes import ADMIN_GROUP, SERVER_TOKEN_SCOPES
from scheduler.common.share import Share, share_of
from scheduler.common.states import FINAL_STATES, WorkloadState
from spawner import preemptible
from spawner.offering import PreemptibleOffer
from spawner.offers import (
    FormView,
    dry_run_body,
    no_project_message,
    offers,
    user_projects,
    verdicts_by_choice,
)
from spawner.profiles import (
    RESOURCE_TRAITS,
    InvalidOption,
    KubeProfiles,
    Profile,
    Resources,
    Selection,
    UnknownChoice,
    WrongType,
    evaluate,
    parse_profiles,
    resolve,
    resources_of,
)

RELEASE_RETRY_SECONDS = 600.0
RETRIES: set[asyncio.Future] = set()  # background releases, kept referenced until done
WAIT_STEP = 30.0  # seconds per long-poll; the hub's start_timeout bounds the whole wait


class FracSpawnerMixin(PreemptibleOffer, Configurable):
    """Mixed in before a JupyterHub spawner class (``class S(FracSpawnerMixin, Base)``)."""

    frachub_api_url = Unicode(
        config=True,
        help="""The FracHub service's REST API as the hub reaches it, e.g.
        http://127.0.0.1:10101/services/frachub/api/v1/ (``hub_ext.configure`` sets it).""",
    )

    @default("frachub_api_url")
    def _default_api_url(self) -> str:
        return os.environ.get("FRACHUB_API_URL", "")

    frachub_api_token = Unicode(
        config=True,
        help="""A token holding custom:frachub:admin, used to ask for allocations on users'
        behalf: the frachub service's own token (``hub_ext.configure`` sets it).""",
    )

    @default("frachub_api_token")
    def _default_api_token(self) -> str:
        return os.environ.get("FRACHUB_API_TOKEN", "")

    frachub_server_url = Unicode(
        config=True,
        help="""The service's base URL as notebook servers reach it (their FRACHUB_URL, read by
        the magics and the CLI); default: frachub_api_url without its api/v1/ suffix.""",
    )

    frachub_jupyter_path = Unicode(
        config=True,
        help="""A directory for the FracHub kernelspec (a Python kernel that loads the
        %frachub magics), put first on the servers' JUPYTER_PATH. Empty: none.""",
    )

    frachub_checkpoint_dir = Unicode(
        "frachub-checkpoints",
        config=True,
        help="""FRACHUB_CHECKPOINT_DIR for notebooks, relative to the server's working
        directory unless absolute.""",
    )

    frachub_request_timeout = Float(
        30.0, config=True, help="Seconds for one request to the FracHub service."
    )

    frachub_pytorch_hook = Bool(
        True,
        config=True,
        help="""Put FracHub's start-up hook on the servers' PYTHONPATH, so PyTorch in a
        notebook caps its memory at the notebook's share.""",
    )

    # -- state --------------------------------------------------------------------------

    allocation_id: int | None = None
    allocation: dict[str, Any] | None = None
    frachub_selected: Selection | None = None  # what the last start() resolved
    _frachub_stopping = False  # poll() is stopping a server whose share was revoked

    def get_state(self) -> dict[str, Any]:
        state = super().get_state()  # type: ignore[misc]
        if self.allocation_id is not None:
            state["frachub_allocation_id"] = self.allocation_id
            if self.allocation is not None:
                state["frachub_allocation"] = self.allocation
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)  # type: ignore[misc]
        if state.get("frachub_allocation_id") is not None:
            self.allocation_id = int(state["frachub_allocation_id"])
            self.allocation = state.get("frachub_allocation")

    def clear_state(self) -> None:
        """The allocation outlives the server's state on purpose: the base spawner clears its
        state as soon as it sees the process gone (before ``stop()`` can release), and a
        release that failed must be retried. ``frachub_release`` forgets it once released."""
        super().clear_state()  # type: ignore[misc]

    # -- configuration -------------------------------------------------------------------

    @default("server_token_scopes")
    def _default_server_token_scopes(self) -> list[str]:
        return list(SERVER_TOKEN_SCOPES)

    @default("apply_user_options")
    def _default_apply_user_options(self) -> Any:
        return options_read_at_start

    @property
    def frachub_client(self) -> AsyncFracHubClient:
        if not self.frachub_api_url or not self.frachub_api_token:
            raise SpawnException(
                "FracHub is not configured: set frachub_api_url and frachub_api_token "
                "(hub_ext.configure does)",
                reason="frachub-config",
                status_code=500,
            )
        return AsyncFracHubClient(
            self.frachub_api_url,
            self.frachub_api_token,
            timeout=self.frachub_request_timeout,
            token_source="frachub_api_token",
            url_source="frachub_api_url",
        )

    async def frachub_profiles(self) -> list[Profile]:
        """The profile list as KubeSpawner would read it for this user now (a dict in its
        order, a callable evaluated with this spawner, as for every form and every start),
        checked; keys nobody reads are logged and ignored."""
        try:
            raw = await evaluate(getattr(self, "profile_list", None) or [], self)
        except Exception:
            self.log.exception("profile_list for %s failed", self._log_name)  # type: ignore[attr-defined]
            raise SpawnException(
                "the hub's profile_list callable failed; the hub's log says why",
                reason="frachub-config",
                status_code=500,
            ) from None
        try:
            return parse_profiles(raw, warn=self.log.warning)  # type: ignore[attr-defined]
        except InvalidOption as error:
            raise SpawnException(
                f"the hub's profile list is invalid: {error.message}",
                reason="frachub-config",
                status_code=500,
            ) from None

    def user_groups(self) -> list[str]:
        """The user's group names (none for a user object without groups)."""
        groups = getattr(self.user, "groups", None) or ()  # type: ignore[attr-defined]
        return [group.name for group in groups]

    @property
    def frachub_is_admin(self) -> bool:
        """A hub admin or a FracHub admin (the frachub-admins group): someone who can add
        themselves to a project rather than ask an admin to."""
        return bool(getattr(self.user, "admin", False)) or ADMIN_GROUP in self.user_groups()  # type: ignore[attr-defined]

    @property
    def frachub_hub_admin_page(self) -> bool:
        """The user may open the hub's admin page and change a group's members there
        (``admin-ui`` and a ``groups`` scope): the way into a project the no-project words
        name for an admin."""
        try:
            from jupyterhub.scopes import get_scopes_for

            scopes = get_scopes_for(self.user.orm_user)  # type: ignore[attr-defined]
        except (ImportError, AttributeError):  # a user object without roles: say both ways
            return True
        return "admin-ui" in scopes and any(scope.split("!")[0] == "groups" for scope in scopes)

    def frachub_no_project(self) -> str:
        return no_project_message(self.frachub_is_admin, self.frachub_hub_admin_page)

    def frachub_selection(self, profiles: list[Profile]) -> Selection:
        try:
            selection = resolve(profiles, self.user_options or {}, self.user_groups())
        except InvalidOption as error:
            kind = next(
                (kind for made, kind in REFUSALS if isinstance(error, made)), InvalidUserOptions
            )
            raise refusal(
                error.message, reason="frachub-option", status=error.status, kind=kind
            ) from None
        if selection.ignored:
            self.log.warning(  # type: ignore[attr-defined]
                "Ignoring unrecognized user_options for %s: %s",
                self._log_name,  # type: ignore[attr-defined]
                ", ".join(selection.ignored),
            )
        return selection

    # -- the spawn form ------------------------------------------------------------------

    @default("options_form")
    def _default_options_form(self) -> Any:
        if not getattr(self, "profile_list", None):
            return ""
        return self.frachub_options_form

    async def frachub_options_form(self, spawner: Any = None) -> str:
        """The form, with each GPU choice's availability and the user's project quota, as
        the service sees them now. (The hub calls a callable form with the spawner.)

        Drawn from the admin's ``profile_form_template`` or a ``form.html`` in
        ``additional_profile_form_template_paths`` when there is one (as KubeSpawner does,
        with its variables ``profile_list`` and ``user_options``, plus ``frachub`` and the
        includes ``frachub_quota.html`` and ``frachub_gpus.html``), else FracHub's own."""
        profiles = await self.frachub_profiles()
        groups = self.user_groups()
        user = self.user.name  # type: ignore[attr-defined]
        try:
            client = self.frachub_client
            queues = await client.queues()
            unreachable = None
        except FracHubError as error:
            queues, unreachable = [], error.message
        projects = user_projects(queues, user, groups)
        user_options = dict(self.user_options or {})
        selection: Selection | None
        try:
            selection = resolve(profiles, user_options, groups)
        except InvalidOption as error:
            self.log.warning(  # type: ignore[attr-defined]
                "Not pre-selecting saved user_options on the spawn form: %s", error.message
            )
            user_options = {}
            selection = (
                resolve(profiles, {}, groups) if any(p.allows(groups) for p in profiles) else None
            )
        wanted = user_options.get("project")
        project = next((p for p in projects if p.name == wanted), projects[0] if projects else None)
        verdicts = None
        others = None
        if project is not None and unreachable is None:
            body, keys = dry_run_body(profiles, groups, user, project.name)
            if keys:
                try:
                    verdicts = verdicts_by_choice(keys, await client.dry_run(body))
                    others = await self._frachub_preemptible_verdicts(
                        profiles, groups, project.name, verdicts
                    )
                except FracHubError as error:
                    unreachable = error.message
        view = FormView(
            offers=offers(profiles, groups, project, verdicts, others),
            projects=projects,
            project=project,
            selection=selection,
            unreachable=unreachable,
            no_project="" if projects or unreachable else self.frachub_no_project(),
        )
        environment = Environment(
            loader=ChoiceLoader(
                [
                    FileSystemLoader(self._frachub_template_paths()),
                    FileSystemLoader(str(TEMPLATES_DIR)),
                    PackageLoader("kubespawner", "templates"),  # its style.css, for copies
                ]
            )
        )
        # as KubeSpawner: the admin's profile order survives |tojson
        environment.policies["json.dumps_kwargs"] = {"sort_keys": False}
        custom = getattr(self, "profile_form_template", "")
        if custom:
            template = environment.from_string(custom)
        elif any((Path(path) / "form.html").is_file() for path in self._frachub_template_paths()):
            template = environment.get_template("form.html")
        else:
            template = environment.get_template("spawn_form.html")
        return template.render(
            profile_list=[dict(profile.raw) for profile in profiles],
            user_options=user_options,
            frachub=view,
        )

    def _frachub_template_paths(self) -> list[str]:
        return [str(path) for path in getattr(self, "additional_profile_form_template_paths", [])]

    @default("options_from_form")
    def _default_options_from_form(self) -> Any:
        return self.frachub_options_from_form

    def frachub_options_from_form(self, formdata: dict[str, list[str]]) -> dict[str, Any]:
        """KubeSpawner's own reading of the form (``profile``, and the profile's options
        posted as ``profile-option-{slug}--{name}``, an unlisted value as
        ``...--{name}--unlisted-choice``), plus FracHub's fields: ``gpu-{slug}`` (the
        chosen GPU's key) and ``project``."""
        ours = {
            key
            for key in formdata
            if key in ("gpu", "project") or key.startswith(("gpu-", "preemptible-"))
        }
        kube = KubeProfiles(log=self.log)  # type: ignore[attr-defined]
        options = kube.options_from_form({k: v for k, v in formdata.items() if k not in ours})
        slug = options.get("profile")
        if slug:
            gpu = (formdata.get(f"gpu-{slug}") or formdata.get("gpu") or [""])[0]
            if gpu:
                options["gpu"] = gpu
            # the offer's box, ticked under the GPU choice it was made for
            if gpu and gpu in formdata.get(f"preemptible-{slug}", []):
                options["preemptible"] = True
        project = (formdata.get("project") or [""])[0]
        if project:
            options["project"] = project
        return options

    # -- start, wait, stop ---------------------------------------------------------------

    async def frachub_resolve(self) -> Selection:
        """What this start asks for, from the profile list evaluated now (once per start).
        A preemptible start on request is refused (403) to a user it is not offered to."""
        profiles = await self.frachub_profiles()
        selection = self.frachub_selection(profiles)
        allowed = self.frachub_offer_allowed(profiles, self.user_groups())
        by_profile = selection.profile is not None and selection.profile.preemptible
        if selection.start_preemptible and not by_profile and not allowed:
            raise refusal(
                f"user_options.preemptible: {preemptible.refused(self.frachub_preemptible_offer)}",
                reason="frachub-option",
                status=403,
                kind=InvalidUserOptions,
            )
        self.frachub_selected = selection
        return selection

    async def start(self) -> Any:
        selection = await self.frachub_resolve()
        self.frachub_apply_profile(selection)
        self._frachub_progress: list[dict[str, Any]] = []
        self._frachub_changed = asyncio.Event()
        self._frachub_waiting = False
        if selection.gpu is not None:
            self._frachub_waiting = True
            try:
                await self._frachub_acquire(selection)
            except BaseException:
                self._frachub_waiting = False
                self._frachub_changed.set()
                await self.frachub_release()
                raise
            self._frachub_waiting = False
            self._frachub_changed.set()
        try:
            return await super().start()  # type: ignore[misc]
        except BaseException:
            await self.frachub_release()
            raise

    def frachub_apply_profile(self, selection: Selection) -> None:
        """Apply the selection's ``kubespawner_override`` dicts (``selection.overrides``);
        each spawner knows its own traits and when KubeSpawner would apply them."""

    def frachub_resources(self, selection: Selection | None = None) -> Resources:
        """The server's CPU and memory: the spawner's own ``cpu_guarantee``, ``mem_limit``,
        ... with the selection's overrides applied (as KubeSpawner will apply them); where
        neither sets one, what the allocation was given (the service's default for
        notebooks), as a guarantee."""
        selection = selection or self.frachub_selected
        overrides = selection.overrides if selection is not None else ()
        values = {key: getattr(self, key, None) for key in RESOURCE_TRAITS}
        try:
            found = resources_of(values, overrides, spawner=self)
        except InvalidOption as error:
            raise SpawnException(400, error.message) from None
        allocation = self.allocation or {}
        if found.cpu is None and allocation.get("cpu"):
            found = dataclasses.replace(found, cpu_guarantee=round(allocation["cpu"] * 1000))
        if found.memory is None and allocation.get("memory_gib"):
            memory = round(allocation["memory_gib"] * 1024)
            found = dataclasses.replace(found, mem_guarantee=memory)
        return found

    async def _frachub_acquire(self, selection: Selection) -> None:
        assert selection.gpu is not None and selection.profile is not None
        body: dict[str, Any] = {
            "user": self.user.name,  # type: ignore[attr-defined]
            "server_name": self.name,  # type: ignore[attr-defined]
            "preemptible": selection.preemptible,
            **selection.gpu.request,
            **self.frachub_resources(selection).request,
        }
        if selection.project:
            body["project"] = selection.project
        if selection.start_preemptible and not selection.profile.preemptible:
            body["preemptible"] = await self._frachub_still_waits(body)
        if selection.profile.idle_timeout_seconds is not None:
            body["idle_timeout_seconds"] = selection.profile.idle_timeout_seconds
        allocation = await self._frachub_adopt(body)
        if allocation is None:
            self._frachub_note(f"Asking FracHub for {selection.gpu.label}", 5)
            try:
                allocation = await self.frachub_client.allocate(body)
            except FracHubError as error:
                raise self._refusal(error) from None
        self.allocation_id = int(allocation["id"])
        self.allocation = allocation
        allocation = await self._frachub_wait(allocation, body)
        self.allocation = allocation
        where = describe_placement(placement_from_api(allocation.get("placement"))) or "no GPU"
        self._frachub_note(f"GPU share granted: {where} in project {allocation['project']}", 40)

    async def _frachub_adopt(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The allocation this server already holds (a hub restarted during a wait, a state
        saved before the hub died), if it asks for the same share; otherwise release it, so
        that nothing is counted twice."""
        try:
            held = await self.frachub_client.allocations_of(body["user"])
        except FracHubError as error:
            raise self._refusal(error) from None
        for allocation in held:
            if allocation.get("server_name") != body["server_name"]:
                continue
            same = (
                allocation.get("gpus") == body.get("gpus")
                and allocation.get("gpu_memory_gib") == body.get("gpu_memory_gib")
                and all(
                    allocation.get(key) == body[key] for key in ("cpu", "memory_gib") if key in body
                )
                and body.get("project") in (None, allocation["project"])
            )
            if same:
                self.log.info("adopting FracHub allocation %s", allocation["id"])  # type: ignore[attr-defined]
                return allocation
            await self._release_id(int(allocation["id"]))
        return None

    async def _frachub_wait(
        self, allocation: dict[str, Any], body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        last_key = None
        offered = False
        while allocation["state"] == WorkloadState.PENDING:
            key = (allocation.get("queue_position"), allocation.get("pending_reason"))
            # kept as the scheduler wrote it: it may start with a project's name, which
            # capitalising would misspell ("Vision's")
            reason = allocation.get("pending_reason") or "waiting for the scheduler"
            if key != last_key and "can never start" in reason:
                raise refusal(
                    f"This GPU request can never be met: {reason}",
                    reason="frachub-never",
                    status=503,
                )
            position = allocation.get("queue_position")
            where = (
                f"position {position} in {allocation['project']}'s queue"
                if position
                else f"queued in {allocation['project']}"
            )
            waiting = f"Waiting for a GPU share: {where}; {reason}"
            # the offer to start preemptible is asked again each poll until it is made
            offer = None
            if key != last_key or not offered:
                offer = await self.frachub_pending_offer(allocation, body or {}, waiting)
                offered = offered or offer is not None
            if offer is not None:
                self._frachub_note(waiting, 10, html_message=offer["html_message"])
            elif key != last_key:
                self._frachub_note(waiting, 10)
            last_key = key
            try:
                allocation = await self.frachub_client.allocation(
                    int(allocation["id"]), wait=WAIT_STEP, version=allocation.get("version")
                )
            except FracHubError as error:
                if error.status == 0:  # the service restarts: keep waiting, it keeps the queue
                    self._frachub_note(f"The scheduler is not answering; retrying ({error})")
                    await asyncio.sleep(2)
                    continue
                raise self._refusal(error) from None
            self.allocation = allocation
        if allocation["state"] != WorkloadState.RUNNING:
            raise refusal(
                f"The GPU share ended before the server started: {allocation['state']}"
                + (f" ({allocation['message']})" if allocation.get("message") else ""),
                reason="frachub-ended",
                status=503,
            )
        return allocation

    def _refusal(self, error: FracHubError) -> SpawnException:
        if error.status == 0:
            return refusal(
                f"The GPU scheduler is not answering: {error.message}",
                reason="frachub-unreachable",
                status=503,
            )
        status = {409: 503, 404: 503}.get(error.status, error.status)
        if status >= 500:
            status = 503
        message = error.message
        if "is not a member of any project" in message:
            message = self.frachub_no_project().replace("CPU only works", "a CPU-only server works")
        else:
            message = f"The GPU scheduler refused this server: {message}"
        return refusal(message, reason="frachub-refused", status=status)

    async def frachub_release(self) -> None:
        """Give the share back (idempotent: the service answers 409 when it is already gone,
        404 when it never existed). When the service cannot be reached — the hub starts
        before its managed service, and polls its servers then — the release is retried in
        the background; the service's own check of servers also releases a share whose
        server is gone."""
        allocation_id = self.allocation_id
        if allocation_id is None:
            return
        self.allocation_id = None
        self.allocation = None
        if not await self._release_id(allocation_id):
            task = asyncio.ensure_future(self._release_later(allocation_id))
            RETRIES.add(task)
            task.add_done_callback(RETRIES.discard)

    async def _release_later(self, allocation_id: int) -> None:
        delay = 2.0
        deadline = time.monotonic() + RELEASE_RETRY_SECONDS
        while time.monotonic() < deadline:
            await asyncio.sleep(delay)
            if await self._release_id(allocation_id):
                return
            delay = min(delay * 2, 60.0)
        self.log.warning(  # type: ignore[attr-defined]
            "gave up releasing FracHub allocation %s; the service releases it when it sees "
            "its server gone",
            allocation_id,
        )

    async def _release_id(self, allocation_id: int) -> bool:
        """True when the allocation is released now or was already; False to retry."""
        try:
            await self.frachub_client.release(allocation_id)
            self.log.info("released FracHub allocation %s", allocation_id)  # type: ignore[attr-defined]
        except FracHubError as error:
            if error.status in (404, 409):
                return True
            if error.status in (0, 502, 503, 504):
                # the service is stopping, restarting or not up yet (a hub shut down after
                # it): nothing is misconfigured, and the share is not lost
                self.log.warning(  # type: ignore[attr-defined]
                    "FracHub allocation %s not released yet: the FracHub service did not "
                    "answer (stopped or restarting?); retrying, and the service releases it "
                    "itself when it next reconciles with the hub",
                    allocation_id,
                )
                return False
            self.log.warning(  # type: ignore[attr-defined]
                "could not release FracHub allocation %s: %s", allocation_id, error.message
            )
        return True

    async def stop(self, now: bool = False) -> None:
        try:
            await super().stop(now=now)  # type: ignore[misc]
        finally:
            await self.frachub_release()

    async def poll(self) -> int | None:
        """The server's own status; and a server whose share was revoked (a preemptible
        profile's notebook, evicted for in-quota work) is stopped here, as the scheduler
        asked: the hub treats a non-None poll as "the server has stopped" and will not stop
        it itself."""
        status = await super().poll()  # type: ignore[misc]
        if self.allocation_id is None or self._frachub_stopping:
            return status
        if status is not None:
            await self.frachub_release()  # the server is gone: so is its claim on a GPU
            return status
        try:
            allocation = await self.frachub_client.allocation(self.allocation_id)
        except FracHubError as error:
            if error.status == 404:
                self.log.warning("FracHub allocation %s is unknown", self.allocation_id)  # type: ignore[attr-defined]
            return status
        self.allocation = allocation
        if allocation["state"] not in FINAL_STATES:
            return status
        self.log.info(  # type: ignore[attr-defined]
            "stopping %s: its GPU allocation %s is %s%s",
            self._log_name,  # type: ignore[attr-defined]
            self.allocation_id,
            allocation["state"],
            f" ({allocation['message']})" if allocation.get("message") else "",
        )
        self._frachub_stopping = True  # the base stop() polls too
        try:
            await super().stop(now=True)  # type: ignore[misc]
        finally:
            self._frachub_stopping = False
        await self.frachub_release()
        return 1

    # -- progress ------------------------------------------------------------------------

    def _frachub_note(
        self, message: str, progress: int | None = None, html_message: str = ""
    ) -> None:
        self.log.info("%s: %s", self._log_name, message)  # type: ignore[attr-defined]
        event: dict[str, Any] = {"message": message}
        if html_message:
            event["html_message"] = html_message
        if progress is not None:
            event["progress"] = progress
        events = getattr(self, "_frachub_progress", None)
        if events is not None:
            events.append(event)
            self._frachub_changed.set()

    async def progress(self) -> Any:
        """FracHub's events (queue position, reason, grant) while the share is awaited, then
        the base spawner's own."""
        sent = 0
        while True:
            events = getattr(self, "_frachub_progress", [])
            while sent < len(events):
                yield events[sent]
                sent += 1
            if not getattr(self, "_frachub_waiting", False):
                break
            changed = self._frachub_changed
            changed.clear()
            if sent < len(events) or not self._frachub_waiting:
                continue
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(changed.wait(), 15)
        async for event in super().progress():  # type: ignore[misc]
            yield event

    # -- the server's environment ---------------------------------------------------------

    def frachub_env(self) -> dict[str, str]:
        """FRACHUB_URL for the magics and CLI, the kernelspec, and the contract of the share
        (a CPU-only server gets no GPU: an empty CUDA_VISIBLE_DEVICES hides them all)."""
        env: dict[str, str] = {}
        server_url = self.frachub_server_url or self.frachub_api_url.split("api/v1")[0]
        if server_url:
            env["FRACHUB_URL"] = server_url
        if self.frachub_jupyter_path:
            from hub_ext.kernelspec import write_kernelspec

            directory = write_kernelspec(Path(self.frachub_jupyter_path), sys.executable)
            env["JUPYTER_PATH"] = str(directory)
        allocation = self.allocation if self.allocation_id is not None else None
        if allocation is None:
            env[CUDA_VISIBLE_DEVICES] = ""
            return env
        env["FRACHUB_PROJECT"] = allocation["project"]
        env.update(notebook_contract(allocation, self.frachub_checkpoint_dir))
        env.update(allocation.get("sharing_env") or {})  # MPS: the service's daemon, the limits
        return env

    def get_env(self) -> dict[str, str]:
        env = super().get_env()  # type: ignore[misc]
        env.update(self.frachub_env())
        if self.frachub_pytorch_hook:
            env["PYTHONPATH"] = prepend_path(str(HOOK_DIR), env.get("PYTHONPATH"))
        return env


def options_read_at_start(spawner: Any, user_options: dict[str, Any]) -> None:
    """JupyterHub's ``apply_user_options`` hook, declared so the hub does not call every
    option unhandled: ``start()`` reads them (profile, GPU, project, the profile's own
    options), refuses bad ones before asking for a GPU and logs the keys nobody reads."""


class InvalidUserOptions(SpawnException, ValueError):
    """``user_options`` refused before any GPU is asked for: an HTTP error for the hub (400,
    or 403 for a profile closed to the user's groups) and the ``ValueError`` KubeSpawner
    raises for bad profile input, so code and tests written for KubeSpawner catch it."""


class UnknownOptionChoice(InvalidUserOptions, KeyError):
    """A choice a profile option does not list, where KubeSpawner raises ``KeyError``."""

    __str__ = SpawnException.__str__


class UserOptionOfWrongType(InvalidUserOptions, TypeError):
    """A value of the wrong type, where KubeSpawner raises ``TypeError``."""


# the profiles' refusal -> the spawner's, of the same types as KubeSpawner's own
REFUSALS = ((UnknownChoice, UnknownOptionChoice), (WrongType, UserOptionOfWrongType))


def refusal(
    message: str, *, reason: str, status: int, kind: type[SpawnException] = SpawnException
) -> SpawnException:
    """A ``SpawnException`` (or ``kind``, a subclass) the hub shows as the message alone: its
    own text would be "403 SpawnException(reason=frachub-refused): ...", a class name no user
    should read."""
    error = kind(message, reason=reason, status_code=status)
    error.jupyterhub_message = message  # type: ignore[attr-defined]
    return error


def allocation_share(allocation: dict[str, Any]) -> Share:
    """A notebook's share (``share_of``), from the allocation the service returned: its
    placement names each GPU with its memory, as the backend's inventory has it."""
    replica = allocation["placement"][0]
    (placement,) = placement_from_api([replica])
    gpus = replica["gpus"]
    return share_of(placement, int(gpus[0].get("memory_mib") or 0) if gpus else 0)


def notebook_contract(
    allocation: dict[str, Any], checkpoint_dir: str, device_variable: str = CUDA_VISIBLE_DEVICES
) -> dict[str, str]:
    """The environment contract of a notebook's share, from the allocation the service
    returned (its placement names GPUs by index and UUID, with each GPU's memory)."""
    replica = allocation["placement"][0]
    uuids = {(replica["node"], gpu["index"]): gpu.get("uuid") or "" for gpu in replica["gpus"]}
    (placement,) = placement_from_api([replica])
    return contract_env(
        workload_id=int(allocation["id"]),
        replica=placement,
        share=allocation_share(allocation),
        restart_count=0,
        checkpoint_dir=checkpoint_dir,
        uuid_of=lambda node, index: uuids[(node, index)],
        device_variable=device_variable,
    )
