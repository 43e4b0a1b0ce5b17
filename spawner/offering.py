"""The spawner's side of the offer to start a GPU notebook now as a preemptible one.

The rule is ``spawner/preemptible.py`` (pure); this mixin asks the service what the rule
needs: the spawn form's second dry run (the choices that would wait, asked preemptible),
the words and the last check when a start asks for it, and the spawn page's offer while a
notebook waits at its project's quota. ``FracSpawnerMixin`` inherits it.
"""

from __future__ import annotations

import html
import json
from typing import Any

from traitlets import Enum
from traitlets.config import Configurable

from hub_ext.client.session import FracHubError
from spawner import preemptible
from spawner.offers import dry_run_body, verdicts_by_choice, waiting_choices
from spawner.profiles import Profile


class PreemptibleOffer(Configurable):
    """Mixed into ``FracSpawnerMixin``: it uses the host's ``frachub_client``, ``user``,
    ``log`` and ``_frachub_note``."""

    frachub_preemptible_offer = Enum(
        list(preemptible.MODES),
        default_value=preemptible.AUTO,
        config=True,
        help="""When a GPU notebook would wait at its project's deserved quota and a
        preemptible one would start now, the spawn form and the spawn page offer "start now
        as a preemptible notebook" (it may be stopped when others need their quota). 'auto':
        only to users a profile with preemptible: True is open to (the admin already lets
        them run preemptible notebooks); 'all': to everyone; 'off': never. A start that asks
        for it (user_options.preemptible) by someone it is not offered to is refused.""",
    )

    async def _frachub_preemptible_verdicts(
        self,
        profiles: list[Profile],
        groups: list[str],
        project: str,
        verdicts: dict[tuple[str, str], Any],
    ) -> dict[tuple[str, str], Any] | None:
        """The dry run of the choices that would wait, asked preemptible: what the offer to
        start now rests on. None when the admin does not allow it or nothing waits."""
        if not preemptible.allowed(self.frachub_preemptible_offer, profiles, groups):
            return None
        waiting = waiting_choices(profiles, verdicts)
        if not waiting:
            return None
        user = self.user.name  # type: ignore[attr-defined]
        body, keys = dry_run_body(profiles, groups, user, project, preemptible_for=waiting)
        return verdicts_by_choice(keys, await self.frachub_client.dry_run(body))

    async def _frachub_still_waits(self, body: dict[str, Any]) -> bool:
        """A preemptible start asked for: say why in words (the spawn page, the hub's log),
        from the scheduler's dry run of the notebook as a normal one. If the quota has room
        again it starts as a normal notebook instead, which nobody may stop."""
        request = one_request(body, body.get("project"), preemptible=False)
        try:
            answer = await self.frachub_client.dry_run(request)
        except FracHubError as error:  # the allocation will say what is wrong, if anything
            self.log.warning("no dry run before a preemptible start: %s", error.message)  # type: ignore[attr-defined]
            answer = {}
        project = answer.get("project") or body.get("project") or "the project"
        verdict = (answer.get("results") or [{}])[0]
        if verdict.get("outcome") == "now":
            self._frachub_note(preemptible.normal_words(project, verdict), 5)
            return False
        waits = verdict.get("outcome") == "wait"
        reason = preemptible.wait_reason(verdict) if waits else None
        self._frachub_note(preemptible.start_words(project, reason), 5)
        return True

    def frachub_offer_allowed(self, profiles: list[Profile], groups: list[str]) -> bool:
        allowed = preemptible.allowed(self.frachub_preemptible_offer, profiles, groups)
        self._frachub_may_offer = allowed
        return allowed

    async def frachub_pending_offer(
        self, allocation: dict[str, Any], body: dict[str, Any], waiting: str
    ) -> dict[str, Any] | None:
        """While a non-preemptible notebook waits, the spawn page's offer: a progress event
        whose ``html_message`` has the waiting line and a button (the page's script,
        ``templates/spawn_pending.html``, stops this pending start and starts it again with
        ``user_options.preemptible``). Only when the admin allows it and the scheduler's dry
        run says the notebook made preemptible would start now; else None."""
        if body.get("preemptible") or not getattr(self, "_frachub_may_offer", False):
            return None
        request = one_request(body, allocation["project"], preemptible=True)
        try:
            answer = await self.frachub_client.dry_run(request)  # type: ignore[attr-defined]
        except FracHubError:
            return None
        verdict = (answer.get("results") or [{}])[0]
        if verdict.get("outcome") != "now":
            return None
        options = {**(self.user_options or {}), "preemptible": True}  # type: ignore[attr-defined]
        hint = preemptible.OFFER_HINT
        where = str(verdict.get("message") or "")
        where = where[:1].upper() + where[1:]
        offer = (
            f"{html.escape(waiting)}"
            '<div class="mt-2 frachub-pending-offer">'
            '<button type="button" class="btn btn-primary btn-sm frachub-start-preemptible" '
            f'data-options="{html.escape(json.dumps(options), quote=True)}">'
            f"{html.escape(preemptible.OFFER_LABEL)}</button>"
            f'<div class="form-text">{html.escape(where)}. '
            f"{html.escape(hint)}</div></div>"
        )
        return {"message": waiting, "html_message": offer}


def one_request(body: dict[str, Any], project: str | None, *, preemptible: bool) -> dict[str, Any]:
    """A dry run of the notebook an allocation ``body`` asks for, preemptible or not."""
    keys = ("gpus", "gpu_memory_gib", "gpu_model", "cpu", "memory_gib")
    asked = {key: body[key] for key in keys if key in body}
    request: dict[str, Any] = {
        "user": body["user"],
        "requests": [{**asked, "preemptible": preemptible}],
    }
    if project:
        request["project"] = project
    return request
