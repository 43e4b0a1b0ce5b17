"""What the spawn form shows next to each GPU choice: the scheduler's own answer.

Each choice's hint is the service's dry run (``POST allocations/dry-run``): the engine's
decision for that request if it arrived now (starts now; starts after reclaiming GPUs another
project borrowed; waits, and why; can never start), so the form and what then happens agree.
Pure: the spawner fetches the queues and the dry run and passes them in. Greyed out is what
can never start for this user: a profile closed to their groups, a choice the scheduler says
can never start, any GPU when they are in no project.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from scheduler.common.projects import projects_of
from scheduler.common.quantities import gpus
from spawner.preemptible import OFFER_HINT, OFFER_LABEL, offered
from spawner.profiles import GpuChoice, Profile, Selection

EPSILON = 1e-9


@dataclass(frozen=True)
class ProjectUse:
    name: str
    deserved_gpus: float
    allocated_gpus: float
    fair_share_gpus: float

    @property
    def summary(self) -> str:
        """Use against the guaranteed quota. The fair share is named only when it exceeds the
        quota (idle GPUs others may lend): on an idle cluster it is 0, which would read as
        "you get nothing" while the whole quota is there for the asking."""
        text = f"{self.name}: {self.allocated_gpus:g} of {gpus(self.deserved_gpus)} in use"
        if self.fair_share_gpus > self.deserved_gpus + EPSILON:
            text += (
                f" (up to {gpus(self.fair_share_gpus)} now with idle GPUs borrowed, "
                "for preemptible work)"
            )
        return text


@dataclass(frozen=True)
class ChoiceOffer:
    choice: GpuChoice
    disabled: bool
    status: str  # the scheduler's answer in words: "starts now on ...", "would wait: ..."
    outcome: str = ""  # the dry run's: now, reclaim, preempt, wait, never; "" when unknown
    preemptible_now: str = ""
    """When it would wait and the admin allows it: the preemptible dry run's "starts now on
    ...", and the form offers to start it so (``spawner/preemptible.py``); else ""."""

    @property
    def rank(self) -> int:
        """How good a pick it is: starts now, then after making room, then waits."""
        return {"now": 0, "reclaim": 1, "preempt": 1, "": 2, "wait": 3}.get(self.outcome, 9)


@dataclass(frozen=True)
class ProfileOffer:
    profile: Profile
    disabled: bool
    note: str
    choices: tuple[ChoiceOffer, ...]


def user_projects(
    queues: Sequence[Mapping[str, Any]], user: str, groups: Iterable[str]
) -> list[ProjectUse]:
    """The leaf queues ``user`` belongs to (by group or listed member), decided by the
    service's own rule (``scheduler/common/projects.py``) on the queue tree the service reports."""
    parent_of = {child: q["name"] for q in queues for child in q.get("children") or ()}
    tree = [
        SimpleNamespace(name=q["name"], parent=q.get("parent") or parent_of.get(q["name"]))
        for q in queues
    ]
    members = {queue["name"]: queue.get("members") or () for queue in queues}
    mine = set(projects_of(user, groups, tree, members))
    return [
        ProjectUse(
            name=queue["name"],
            deserved_gpus=float(queue.get("deserved_gpus") or 0.0),
            allocated_gpus=float(queue.get("allocated_gpus") or 0.0),
            fair_share_gpus=float(queue.get("fair_share_gpus") or 0.0),
        )
        for queue in queues
        if queue["name"] in mine
    ]


def dry_run_body(
    profiles: Sequence[Profile],
    groups: Iterable[str],
    user: str,
    project: str,
    *,
    preemptible_for: Collection[tuple[str, str]] | None = None,
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The dry-run request for every GPU choice of the profiles open to ``groups``, and the
    (profile slug, choice key) each entry of its ``requests`` stands for. With
    ``preemptible_for``: only those choices, each asked as a preemptible notebook (the
    offer to start now rather than wait)."""
    groups = set(groups)
    keys: list[tuple[str, str]] = []
    requests: list[dict[str, Any]] = []
    for profile in profiles:
        if not profile.allows(groups):
            continue
        for choice in profile.gpu_choices:
            key = (profile.slug, choice.key)
            if preemptible_for is not None and key not in preemptible_for:
                continue
            keys.append(key)
            requests.append(
                {
                    **choice.request,
                    **profile.resources.request,
                    "preemptible": profile.preemptible or preemptible_for is not None,
                }
            )
    return {"user": user, "project": project, "requests": requests}, keys


def waiting_choices(
    profiles: Sequence[Profile], verdicts: Mapping[tuple[str, str], Mapping[str, Any]]
) -> list[tuple[str, str]]:
    """The choices of non-preemptible profiles the dry run says would wait: the ones a
    preemptible start might help."""
    plain = {profile.slug for profile in profiles if not profile.preemptible}
    return [
        key
        for key, verdict in verdicts.items()
        if key[0] in plain and verdict.get("outcome") == "wait"
    ]


def verdicts_by_choice(
    keys: Sequence[tuple[str, str]], answer: Mapping[str, Any]
) -> dict[tuple[str, str], Mapping[str, Any]]:
    return dict(zip(keys, answer.get("results") or (), strict=False))


def offers(
    profiles: Sequence[Profile],
    groups: Iterable[str],
    project: ProjectUse | None,
    verdicts: Mapping[tuple[str, str], Mapping[str, Any]] | None,
    preemptible: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
) -> list[ProfileOffer]:
    """``verdicts``: the dry run's answer per (slug, key); None when it could not be asked
    (the service is unreachable: every choice may be tried, the hint says it is unknown).
    ``preemptible``: the answers for choices that would wait, asked preemptible (only when
    the admin allows the offer)."""
    preemptible = preemptible or {}
    groups = set(groups)
    result = []
    for profile in profiles:
        if not profile.allows(groups):
            note = "for members of " + ", ".join(sorted(profile.allowed_groups or ()))
            result.append(
                ProfileOffer(
                    profile,
                    True,
                    note,
                    tuple(ChoiceOffer(c, True, note, "never") for c in profile.gpu_choices),
                )
            )
            continue
        choices = []
        for choice in profile.gpu_choices:
            if project is None:
                choices.append(ChoiceOffer(choice, True, "you are in no project", "never"))
            elif verdicts is None:
                choices.append(ChoiceOffer(choice, False, "availability unknown"))
            else:
                verdict = verdicts.get((profile.slug, choice.key))
                if verdict is None:
                    choices.append(ChoiceOffer(choice, False, "availability unknown"))
                    continue
                outcome = str(verdict.get("outcome") or "")
                other = preemptible.get((profile.slug, choice.key))
                now = hint(other.get("message") or "") if offered(verdict, other) else ""
                choices.append(
                    ChoiceOffer(
                        choice,
                        outcome == "never",
                        hint(verdict.get("message") or ""),
                        outcome,
                        preemptible_now=now,
                    )
                )
        disabled = bool(choices) and all(offer.disabled for offer in choices)
        result.append(ProfileOffer(profile, disabled, "", tuple(choices)))
    return result


def hint(message: str) -> str:
    """The scheduler's words, without the leading notebook phrase a refusal carries."""
    return message.removeprefix("a notebook that ")


def no_project_message(is_admin: bool, hub_admin_page: bool = True) -> str:
    """Why GPU choices are greyed out for someone in no project, and what they can do; an
    admin is told how to fix it, not to ask an admin, and sent to the hub's admin page only
    if it lets them change a group's members (``hub_admin_page``)."""
    if is_admin and hub_admin_page:
        return (
            "You are in no FracHub project, so GPU choices are unavailable; CPU only works. "
            "To use GPUs, add yourself to a project: its group on the hub's admin page (Admin, "
            "then Groups), or its members through FracHub's queues API."
        )
    if is_admin:
        return (
            "You are in no FracHub project, so GPU choices are unavailable; CPU only works. "
            "To use GPUs, add yourself to a project's members through FracHub's queues API "
            "(PATCH queues/NAME), or ask a hub admin to add you to its group: the hub does not "
            "let you change groups on its admin page."
        )
    return (
        "You are in no FracHub project, so GPU choices are unavailable; CPU only works. "
        "Ask an admin to add you to a project."
    )


@dataclass(frozen=True)
class FormView:
    """What the spawn form's templates read, as the ``frachub`` variable (a custom
    ``profile_form_template`` gets it too, beside KubeSpawner's ``profile_list``)."""

    offers: Sequence[ProfileOffer]
    projects: Sequence[ProjectUse]
    project: ProjectUse | None
    selection: Selection | None  # what the user asked for last (or the profiles' default)
    unreachable: str | None  # why GPU availability is unknown, if it is
    no_project: str = ""  # why GPU choices are greyed out for someone in no project
    offer_label: str = OFFER_LABEL
    offer_hint: str = OFFER_HINT

    @property
    def picked(self) -> tuple[str, str | None] | None:
        """The (profile slug, GPU key) the form pre-selects: what the user asked for last or
        the default, if it can start; else the choice of that profile (then of any profile)
        that would start soonest; else the first profile open to them with no GPU."""
        sel = self.selection
        wanted = sel.profile.slug if sel and sel.profile else None
        wanted_key = sel.gpu.key if sel and sel.gpu else None
        mine = self.offer(wanted) if wanted else None
        if wanted is not None and mine is not None and not mine.disabled:
            if not mine.choices:
                return (wanted, None)
            if wanted_key is None and mine.profile.default_gpu is not None:
                wanted_key = mine.profile.default_gpu.key
            current = next((c for c in mine.choices if c.choice.key == wanted_key), None)
            best = min((c for c in mine.choices if not c.disabled), key=lambda c: c.rank)
            keep = current is not None and not current.disabled
            if keep and (current.rank <= 2 or current.rank <= best.rank):  # type: ignore[union-attr]
                return (wanted, current.choice.key)  # type: ignore[union-attr]
            return (wanted, best.choice.key)
        for offer in self.offers:
            if offer.disabled:
                continue
            usable = [c for c in offer.choices if not c.disabled]
            if not offer.choices:
                return (offer.profile.slug, None)
            if usable:
                return (offer.profile.slug, min(usable, key=lambda c: c.rank).choice.key)
        return None

    def checked_profile(self, slug: str) -> bool:
        picked = self.picked
        return picked is not None and picked[0] == slug

    def checked_gpu(self, slug: str, key: str) -> bool:
        picked = self.picked
        return picked is not None and picked == (slug, key)

    @property
    def by_slug(self) -> dict[str, ProfileOffer]:
        found: dict[str, ProfileOffer] = {}
        for offer in self.offers:
            found.setdefault(offer.profile.slug, offer)
        return found

    def offer(self, slug: str) -> ProfileOffer | None:
        return self.by_slug.get(slug)
