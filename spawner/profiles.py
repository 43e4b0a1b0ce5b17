"""Profiles: what an admin offers, and what a user's ``user_options`` select from it.

The shape is KubeSpawner's ``profile_list`` (``display_name``, ``slug``, ``description``,
``default``, ``kubespawner_override``, ``profile_options`` with ``choices``), so a Zero to
JupyterHub ``singleuser.profileList`` carries over unchanged. FracHub adds one key per
profile, ``frachub``::

    {"display_name": "GPU notebook", "slug": "gpu",
     "frachub": {
         "gpu_choices": [0.25, 0.5, "20GiB", 1, 2],  # fractions, GPU memory, whole GPUs
         "default_gpu": 0.5,                          # else the first choice
         "allowed_groups": ["vision", "nlp"],         # else everybody
         "preemptible": False,                        # Run:ai's "build-preemptible"
         "idle_timeout_seconds": 3600,                # stop the server when idle this long
     }}

A profile without ``gpu_choices`` holds no GPU. Everything here is pure: the spawner passes
the user's groups in and turns ``InvalidOption`` into a ``SpawnException``; the same checks
run for the spawn form and for ``user_options`` posted to the hub's REST API, so the two
cannot disagree.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.display import memory_gib
from scheduler.engine import reasons
from scheduler.engine.model import MILLI

PROFILE_KEYS = frozenset(
    {
        "display_name",
        "slug",
        "description",
        "default",
        "kubespawner_override",
        "profile_options",
        "frachub",
    }
)
FRACHUB_KEYS = frozenset(
    {"gpu_choices", "default_gpu", "allowed_groups", "preemptible", "idle_timeout_seconds"}
)
# user_options FracHub reads itself; a profile's options (KubeSpawner's) are the others
OPTION_KEYS = ("profile", "gpu", "gpus", "gpu_memory_gib", "project")


def gpus_text(value: float) -> str:
    """0.5 -> "0.5 GPU", 2 -> "2 GPUs", worded as the engine's pending reasons word them."""
    return reasons.gpus(value * MILLI)


class InvalidOption(ValueError):
    """A profile setting or a user option that cannot be used, naming the field.

    ``status`` is the HTTP status the spawner reports: 400 for a malformed request, 403 for
    a choice this user may not make.
    """

    def __init__(self, where: str, message: str, status: int = 400) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = f"{where}: {message}"
        self.status = status


@dataclass(frozen=True)
class GpuChoice:
    """One GPU size a profile offers: a fraction or whole GPUs, or an amount of GPU memory."""

    key: str  # what the form posts and user_options["gpu"] may name: "0.5", "2", "20GiB"
    gpus: float | None
    gpu_memory_gib: float | None

    @property
    def label(self) -> str:
        if self.gpu_memory_gib is not None:
            return f"{self.gpu_memory_gib:g} GiB of GPU memory"
        assert self.gpus is not None
        return gpus_text(self.gpus)

    @property
    def request(self) -> dict[str, float]:
        """The allocation request body fields for this choice."""
        if self.gpu_memory_gib is not None:
            return {"gpu_memory_gib": self.gpu_memory_gib}
        assert self.gpus is not None
        return {"gpus": self.gpus}


@dataclass(frozen=True)
class Profile:
    slug: str
    display_name: str
    description: str
    default: bool
    gpu_choices: tuple[GpuChoice, ...]
    default_gpu: GpuChoice | None
    allowed_groups: frozenset[str] | None  # None: everybody
    preemptible: bool
    idle_timeout_seconds: float | None
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    def allows(self, groups: Iterable[str]) -> bool:
        return self.allowed_groups is None or bool(self.allowed_groups & set(groups))

    def choice(self, key: str) -> GpuChoice | None:
        return next((choice for choice in self.gpu_choices if choice.key == key), None)


@dataclass(frozen=True)
class Selection:
    """What a spawn asks for: a profile, maybe a GPU choice, and the profile's options."""

    profile: Profile | None  # None: no profiles are configured
    gpu: GpuChoice | None
    project: str | None
    options: Mapping[str, str]  # the profile's own options (KubeSpawner's profile_options)


def slugify(name: str) -> str:
    """KubeSpawner's rule, so a profile without a slug gets the same one in both spawners."""
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-") or "profile"


def parse_gpu_choice(value: Any, where: str) -> GpuChoice:
    """0.25 / 0.5 (a fraction), 1 / 2 (whole GPUs), "20GiB" (GPU memory)."""
    if isinstance(value, str):
        gib = memory_gib(value)  # a bare number is a GPU count here, not a size
        if gib is not None:
            if gib <= 0:
                raise InvalidOption(where, f"GPU memory must be positive, got {value!r}")
            return GpuChoice(key=f"{gib:g}GiB", gpus=None, gpu_memory_gib=gib)
        try:
            value = float(value)
        except ValueError:
            raise InvalidOption(
                where,
                f"expected a GPU count such as 0.5 or 2, or memory such as '20GiB', got {value!r}",
            ) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidOption(where, f"expected a number of GPUs, got {value!r}")
    if value <= 0 or (value > 1 and value != int(value)):
        raise InvalidOption(
            where, f"must be a fraction in (0, 1] or a whole number of GPUs, got {value:g}"
        )
    return GpuChoice(key=f"{value:g}", gpus=float(value), gpu_memory_gib=None)


def parse_profiles(profile_list: Sequence[Mapping[str, Any]]) -> list[Profile]:
    """Check an admin's profile_list once, at start-up, so a typo fails loudly then and not
    on a user's spawn."""
    if not isinstance(profile_list, (list, tuple)):
        raise InvalidOption("profile_list", "must be a list of profiles")
    profiles: list[Profile] = []
    for index, raw in enumerate(profile_list):
        where = f"profile_list[{index}]"
        if not isinstance(raw, Mapping):
            raise InvalidOption(where, "must be a dict")
        unknown = sorted(set(raw) - PROFILE_KEYS)
        if unknown:
            raise InvalidOption(
                f"{where}.{unknown[0]}",
                f"unknown key; profiles have {', '.join(sorted(PROFILE_KEYS))}",
            )
        name = raw.get("display_name")
        if not isinstance(name, str) or not name:
            raise InvalidOption(f"{where}.display_name", "is required")
        slug = raw.get("slug") or slugify(name)
        extra = raw.get("frachub") or {}
        if not isinstance(extra, Mapping):
            raise InvalidOption(f"{where}.frachub", "must be a dict")
        unknown = sorted(set(extra) - FRACHUB_KEYS)
        if unknown:
            raise InvalidOption(
                f"{where}.frachub.{unknown[0]}",
                f"unknown key; one of {', '.join(sorted(FRACHUB_KEYS))}",
            )
        choices = tuple(
            parse_gpu_choice(value, f"{where}.frachub.gpu_choices[{i}]")
            for i, value in enumerate(extra.get("gpu_choices") or ())
        )
        if len({choice.key for choice in choices}) != len(choices):
            raise InvalidOption(f"{where}.frachub.gpu_choices", "lists a choice twice")
        default_gpu = None
        if choices:
            default_gpu = choices[0]
            if extra.get("default_gpu") is not None:
                wanted = parse_gpu_choice(extra["default_gpu"], f"{where}.frachub.default_gpu")
                default_gpu = next((c for c in choices if c.key == wanted.key), None)
                if default_gpu is None:
                    raise InvalidOption(
                        f"{where}.frachub.default_gpu", f"{wanted.key} is not in gpu_choices"
                    )
        groups = extra.get("allowed_groups")
        if groups is not None and (
            not isinstance(groups, (list, tuple)) or not all(isinstance(g, str) for g in groups)
        ):
            raise InvalidOption(f"{where}.frachub.allowed_groups", "must be a list of group names")
        idle = extra.get("idle_timeout_seconds")
        if idle is not None and (
            isinstance(idle, bool) or not isinstance(idle, (int, float)) or idle <= 0
        ):
            raise InvalidOption(
                f"{where}.frachub.idle_timeout_seconds", "must be a positive number of seconds"
            )
        profiles.append(
            Profile(
                slug=slug,
                display_name=name,
                description=str(raw.get("description") or ""),
                default=bool(raw.get("default")),
                gpu_choices=choices,
                default_gpu=default_gpu,
                allowed_groups=None if groups is None else frozenset(groups),
                preemptible=bool(extra.get("preemptible", False)),
                idle_timeout_seconds=None if idle is None else float(idle),
                raw=copy.deepcopy(dict(raw)),
            )
        )
    slugs = [profile.slug for profile in profiles]
    duplicate = next((slug for slug in slugs if slugs.count(slug) > 1), None)
    if duplicate:
        raise InvalidOption("profile_list", f"two profiles have the slug {duplicate!r}")
    return profiles


def default_profile(profiles: Sequence[Profile], groups: Iterable[str]) -> Profile | None:
    """The admin's default if this user may use it, else the first profile they may use."""
    groups = set(groups)
    allowed = [profile for profile in profiles if profile.allows(groups)]
    return next((p for p in allowed if p.default), allowed[0] if allowed else None)


def resolve(
    profiles: Sequence[Profile], user_options: Mapping[str, Any], groups: Iterable[str]
) -> Selection:
    """What ``user_options`` (from the spawn form or the REST API) select, or InvalidOption
    naming the offending option."""
    if not isinstance(user_options, Mapping):
        raise InvalidOption("user_options", "must be a JSON object")
    groups = set(groups)
    project = user_options.get("project")
    if project is not None and (not isinstance(project, str) or not project):
        raise InvalidOption("user_options.project", "must be a project name")
    slug = user_options.get("profile")
    if not profiles:
        extra = sorted(set(user_options) - {"project"})
        if extra:
            raise InvalidOption(
                f"user_options.{extra[0]}", "no profiles are configured on this hub"
            )
        return Selection(profile=None, gpu=None, project=project, options={})
    if slug in (None, ""):
        profile = default_profile(profiles, groups)
        if profile is None:
            raise InvalidOption("user_options.profile", "no profile is open to you", status=403)
    else:
        if not isinstance(slug, str):
            raise InvalidOption("user_options.profile", "must be a profile slug")
        profile = next((p for p in profiles if p.slug == slug), None)
        if profile is None:
            raise InvalidOption(
                "user_options.profile",
                f"no such profile {slug!r}; one of {', '.join(p.slug for p in profiles)}",
            )
        if not profile.allows(groups):
            raise InvalidOption(
                "user_options.profile",
                f"profile {slug!r} is open to members of "
                f"{', '.join(sorted(profile.allowed_groups or ()))} only",
                status=403,
            )
    option_names = set((profile.raw.get("profile_options") or {}).keys())
    unknown = sorted(set(user_options) - set(OPTION_KEYS) - option_names)
    unknown = [key for key in unknown if not key.endswith("--unlisted-choice")]
    if unknown:
        raise InvalidOption(
            f"user_options.{unknown[0]}",
            f"unknown option; profile {profile.slug!r} takes "
            + ", ".join([*OPTION_KEYS, *sorted(option_names)]),
        )
    gpu = _gpu_of(profile, user_options)
    options = {key: str(value) for key, value in user_options.items() if key not in OPTION_KEYS}
    return Selection(profile=profile, gpu=gpu, project=project, options=options)


def _gpu_of(profile: Profile, user_options: Mapping[str, Any]) -> GpuChoice | None:
    asked = [key for key in ("gpu", "gpus", "gpu_memory_gib") if user_options.get(key) is not None]
    if len(asked) > 1:
        raise InvalidOption(f"user_options.{asked[1]}", f"give either {asked[0]} or {asked[1]}")
    if not asked:
        return profile.default_gpu
    key = asked[0]
    value = user_options[key]
    if key == "gpu_memory_gib" and not (isinstance(value, str) and memory_gib(value) is not None):
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise InvalidOption(f"user_options.{key}", f"expected GiB as a number, got {value!r}")
        value = f"{value}GiB"
    wanted = parse_gpu_choice(value, f"user_options.{key}")
    if not profile.gpu_choices:
        raise InvalidOption(
            f"user_options.{key}", f"profile {profile.slug!r} has no GPU; pick a GPU profile"
        )
    choice = profile.choice(wanted.key)
    if choice is None:
        raise InvalidOption(
            f"user_options.{key}",
            f"{wanted.label} is not offered by profile {profile.slug!r}; choose one of "
            + ", ".join(c.label for c in profile.gpu_choices),
        )
    return choice
