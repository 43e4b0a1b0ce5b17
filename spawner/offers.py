"""What the spawn form shows next to each GPU choice: free now, would wait, or out of reach.

Pure: it reads the service's ``queues`` and ``nodes`` views (already fetched by the spawner)
and the user's groups. It answers the questions a researcher has before clicking Start —
"will this start now?", "how much of my project's quota is used?" — and greys out what can
never start for them (a profile closed to their groups, a size beyond their project's
deserved quota, which is all a notebook may ever use).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from scheduler.service.access import projects_of
from spawner.profiles import GpuChoice, Profile, Selection, gpus_text

EPSILON = 1e-9


@dataclass(frozen=True)
class ProjectUse:
    name: str
    deserved_gpus: float
    allocated_gpus: float
    fair_share_gpus: float

    @property
    def summary(self) -> str:
        return (
            f"{self.name}: {self.allocated_gpus:g} of {gpus_text(self.deserved_gpus)} in use "
            f"(fair share now {gpus_text(self.fair_share_gpus)})"
        )


@dataclass(frozen=True)
class ChoiceOffer:
    choice: GpuChoice
    disabled: bool
    status: str  # "free now", "would wait: ...", or why it is out of reach


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
    service's own rule (``access.projects_of``) on the queue tree the service reports."""
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


def size_in_gpus(choice: GpuChoice, nodes: Sequence[Mapping[str, Any]]) -> float:
    """A memory request counts as the share of the largest GPU it needs."""
    if choice.gpus is not None:
        return choice.gpus
    largest = max((gpu["memory_gib"] for node in nodes for gpu in node["gpus"]), default=0.0)
    return choice.gpu_memory_gib / largest if largest else float("inf")  # type: ignore[operator]


def fits_now(choice: GpuChoice, nodes: Sequence[Mapping[str, Any]]) -> bool:
    """Whether some node has room for the choice right now, without evicting anything."""
    for node in nodes:
        gpus = node["gpus"]
        if choice.gpu_memory_gib is not None:
            if any(
                (1 - gpu["used"]) * gpu["memory_gib"] + EPSILON >= choice.gpu_memory_gib
                for gpu in gpus
            ):
                return True
        elif choice.gpus is not None and choice.gpus <= 1:
            if any(1 - gpu["used"] + EPSILON >= choice.gpus for gpu in gpus):
                return True
        elif choice.gpus is not None and sum(gpu["used"] < EPSILON for gpu in gpus) >= choice.gpus:
            return True
    return False


def offers(
    profiles: Sequence[Profile],
    groups: Iterable[str],
    project: ProjectUse | None,
    nodes: Sequence[Mapping[str, Any]],
) -> list[ProfileOffer]:
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
                    tuple(ChoiceOffer(c, True, note) for c in profile.gpu_choices),
                )
            )
            continue
        choices = []
        for choice in profile.gpu_choices:
            size = size_in_gpus(choice, nodes)
            if project is None:
                choices.append(ChoiceOffer(choice, True, "you are in no project with GPUs"))
            elif not profile.preemptible and size > project.deserved_gpus + EPSILON:
                choices.append(
                    ChoiceOffer(
                        choice,
                        True,
                        f"beyond {project.name}'s quota of {gpus_text(project.deserved_gpus)}",
                    )
                )
            elif fits_now(choice, nodes):
                choices.append(ChoiceOffer(choice, False, "free now"))
            else:
                choices.append(
                    ChoiceOffer(choice, False, "would wait: no GPU has this much free now")
                )
        disabled = bool(choices) and all(offer.disabled for offer in choices)
        result.append(ProfileOffer(profile, disabled, "", tuple(choices)))
    return result


@dataclass(frozen=True)
class FormView:
    """What the spawn form's templates read, as the ``frachub`` variable (a custom
    ``profile_form_template`` gets it too, beside KubeSpawner's ``profile_list``)."""

    offers: Sequence[ProfileOffer]
    projects: Sequence[ProjectUse]
    project: ProjectUse | None
    selection: Selection | None  # what the form pre-selects
    unreachable: str | None  # why GPU availability is unknown, if it is

    @property
    def by_slug(self) -> dict[str, ProfileOffer]:
        found: dict[str, ProfileOffer] = {}
        for offer in self.offers:
            found.setdefault(offer.profile.slug, offer)
        return found

    def offer(self, slug: str) -> ProfileOffer | None:
        return self.by_slug.get(slug)
