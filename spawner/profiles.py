"""Profiles: what an admin offers, and what a user's ``user_options`` select from it.

The shape is KubeSpawner's ``profile_list`` in any of its three forms (a list of profiles, a
dict of them keyed by slug, or a callable returning either, evaluated per user), so a Zero
to JupyterHub ``singleuser.profileList`` carries over unchanged. FracHub adds one key per
profile, ``frachub``::

    {"display_name": "GPU notebook", "slug": "gpu",
     "frachub": {
         "gpu_choices": [0.25, 0.5, "20GiB", 1, 2],  # fractions, GPU memory, whole GPUs
         "default_gpu": 0.5,                          # else the first choice
         "allowed_groups": ["vision", "nlp"],         # else everybody
         "preemptible": False,                        # Run:ai's "build-preemptible"
         "idle_timeout_seconds": 3600,                # stop the server when idle this long
     }}

A profile without ``gpu_choices`` holds no GPU. CPU and memory are KubeSpawner's own traits,
as z2jh admins already write them in ``kubespawner_override`` (a profile's, or a profile
option's choice's): ``cpu_guarantee``/``mem_guarantee`` (what the notebook asks FracHub for,
and the pod's requests) and ``cpu_limit``/``mem_limit`` (its limits; asked for when no
guarantee is given, as Kubernetes takes a lone limit as the request); ``resources_of`` reads
them. Wherever FracHub adds no meaning, KubeSpawner's
own code decides, called here rather than copied (``KubeProfiles``): a profile's slug, the
defaults it fills in, the order of a dict's profiles, which overrides a choice applies and
how form fields become ``user_options``. Everything here is pure: the spawner passes the
evaluated list and the user's groups in, logs what ``Selection.ignored`` names, and turns
``InvalidOption`` into a ``SpawnException``; the same checks run for the spawn form and for
``user_options`` posted to the hub's REST API, so the two cannot disagree.
"""

from __future__ import annotations

import copy
import logging
import math
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jupyterhub.utils import maybe_future
from kubespawner.spawner import KubeSpawner

from scheduler.common.limits import MAX_CPU, MAX_MEMORY_GIB, gpu_count_problem, shown
from scheduler.common.quantities import byte_spec_mib, cores, gpus, memory_gib, memory_words

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
OPTION_KEYS = ("profile", "gpu", "gpus", "gpu_memory_gib", "project", "preemptible")
GPU_KEYS = ("gpu", "gpus", "gpu_memory_gib")
UNLISTED = "--unlisted-choice"  # KubeSpawner's suffix for an option's free-text value
ProfileList = Sequence[Mapping[str, Any]] | Mapping[str, Mapping[str, Any]]


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


class UnknownChoice(InvalidOption, KeyError):
    """A choice an option does not list: where KubeSpawner's ``_load_profile`` looks it up
    and raises ``KeyError``, so the refusal is a ``KeyError`` too."""

    __str__ = ValueError.__str__  # the message, not KeyError's quoted repr of it


class WrongType(InvalidOption, TypeError):
    """A value of the wrong type where KubeSpawner's code raises ``TypeError`` on it (an
    unlisted choice that is not text, matched against the option's ``validation_regex``)."""


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
        return gpus(self.gpus)

    @property
    def request(self) -> dict[str, float]:
        """The allocation request body fields for this choice."""
        if self.gpu_memory_gib is not None:
            return {"gpu_memory_gib": self.gpu_memory_gib}
        assert self.gpus is not None
        return {"gpus": self.gpus}


RESOURCE_TRAITS = ("cpu_guarantee", "cpu_limit", "mem_guarantee", "mem_limit")
"""KubeSpawner's (and JupyterHub's ``Spawner``'s) traits for a server's CPU and memory."""


@dataclass(frozen=True)
class Resources:
    """A server's CPU (thousandths of a core) and memory (MiB), as guaranteed and as
    limited; None where not set."""

    cpu_guarantee: int | None = None
    cpu_limit: int | None = None
    mem_guarantee: int | None = None
    mem_limit: int | None = None

    @property
    def cpu(self) -> int | None:
        """What the notebook asks for: the guarantee, else the limit (Kubernetes' rule)."""
        return self.cpu_guarantee if self.cpu_guarantee is not None else self.cpu_limit

    @property
    def memory(self) -> int | None:
        return self.mem_guarantee if self.mem_guarantee is not None else self.mem_limit

    @property
    def request(self) -> dict[str, float]:
        """The allocation request's ``cpu`` and ``memory_gib`` (only those set)."""
        body: dict[str, float] = {}
        if self.cpu is not None:
            body["cpu"] = self.cpu / 1000
        if self.memory is not None:
            body["memory_gib"] = self.memory / 1024
        return body

    @property
    def enforced(self) -> tuple[int, int]:
        """What the local spawner's control group holds (thousandths, MiB; 0: no limit):
        the limit, else the guarantee (the notebook must not use what others were
        promised)."""
        cpu = self.cpu_limit if self.cpu_limit is not None else self.cpu_guarantee
        memory = self.mem_limit if self.mem_limit is not None else self.mem_guarantee
        return cpu or 0, memory or 0

    @property
    def summary(self) -> str:
        """For the spawn form: "2 CPUs (up to 4), 8 GiB of memory (up to 16 GiB)"."""
        parts = []
        for asked, limit, words in (
            (self.cpu, self.cpu_limit, cores),
            (self.memory, self.mem_limit, memory_words),
        ):
            if asked is None:
                continue
            text = words(asked) + (" of memory" if words is memory_words else "")
            if limit is not None and limit != asked:
                text += f" (up to {words(limit)})"
            parts.append(text)
        return ", ".join(parts)


def resources_of(
    values: Mapping[str, Any],
    overrides: Sequence[Mapping[str, Any]] = (),
    spawner: Any = None,
    where: str = "kubespawner_override",
) -> Resources:
    """The CPU and memory ``values`` (a spawner's traits) give, with ``overrides`` applied
    in order as KubeSpawner applies them (``None`` unsets, a callable is called with
    ``spawner``). A value that is not CPU or memory raises InvalidOption naming it."""
    merged = {key: values.get(key) for key in RESOURCE_TRAITS}
    for override in overrides:
        for key in RESOURCE_TRAITS:
            if key in override:
                value = override[key]
                if callable(value):
                    if spawner is None:  # a form's summary: known only at spawn time
                        continue
                    value = value(spawner)
                merged[key] = value
    parsed: dict[str, int | None] = {}
    for key, value in merged.items():
        if value is None:
            parsed[key] = None
        elif key.startswith("cpu"):
            number = not isinstance(value, bool) and isinstance(value, int | float)
            if not number or not 0 < value <= MAX_CPU:
                raise InvalidOption(
                    f"{where}.{key}", f"must be cores above 0, at most {MAX_CPU}, got {value!r}"
                )
            parsed[key] = round(value * 1000)
        else:
            mib = byte_spec_mib(value)
            if mib is None or not 0 < mib <= MAX_MEMORY_GIB * 1024:
                raise InvalidOption(
                    f"{where}.{key}",
                    f"must be memory such as '8G' or '512M' (a number is bytes), got {value!r}",
                )
            parsed[key] = mib
    return Resources(**parsed)


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
    resources: Resources = Resources()
    """The CPU and memory its own ``kubespawner_override`` sets (a chosen option may change
    them; the spawner reads the final values with ``resources_of``)."""

    def allows(self, groups: Iterable[str]) -> bool:
        return self.allowed_groups is None or bool(self.allowed_groups & set(groups))

    def choice(self, key: str) -> GpuChoice | None:
        return next((choice for choice in self.gpu_choices if choice.key == key), None)


@dataclass(frozen=True)
class Selection:
    """What a spawn asks for: a profile, maybe a GPU choice, the profile's options, and the
    ``kubespawner_override`` dicts they apply, in KubeSpawner's order."""

    profile: Profile | None  # None: no profiles are configured
    gpu: GpuChoice | None
    project: str | None
    options: Mapping[str, str]  # the profile's own options (KubeSpawner's profile_options)
    overrides: tuple[Mapping[str, Any], ...] = ()
    ignored: tuple[str, ...] = ()  # user_options keys nobody reads (KubeSpawner ignores them)
    start_preemptible: bool = False
    """The user took the offer to start this GPU notebook now as a preemptible one rather
    than wait at the project's quota (``user_options.preemptible``; the spawner checks the
    admin allows it, ``spawner/preemptible.py``)."""

    @property
    def preemptible(self) -> bool:
        """Whether the notebook's allocation is preemptible: its profile's rule, or the offer."""
        return self.start_preemptible or bool(self.profile and self.profile.preemptible)


class KubeProfiles:
    """KubeSpawner's own profile methods, on an object that holds only what they read
    (``user_options`` and a log), so FracHub runs KubeSpawner's code rather than a copy of
    it, without a spawner or a cluster. ``_apply_overrides`` records instead of setting
    traits: the spawner applies the record (``Selection.overrides``) itself."""

    _sorted_dict_values = KubeSpawner._sorted_dict_values
    _get_initialized_profile_list = KubeSpawner._get_initialized_profile_list
    _validate_user_options = KubeSpawner._validate_user_options
    _get_profile = KubeSpawner._get_profile
    _load_profile = KubeSpawner._load_profile
    _options_from_form = KubeSpawner._options_from_form

    def __init__(
        self, user_options: Mapping[str, Any] | None = None, log: logging.Logger | None = None
    ) -> None:
        self.user_options = dict(user_options or {})
        self.log = log or logging.getLogger(__name__)
        self.applied: list[Mapping[str, Any]] = []

    def _apply_overrides(self, spawner_override: Mapping[str, Any]) -> None:
        self.applied.append(spawner_override)

    def options_from_form(self, formdata: Mapping[str, list[str]]) -> dict[str, Any]:
        """KubeSpawner's reading of a spawn form post: ``profile``, and the chosen profile's
        ``profile-option-{slug}--{name}`` fields (others are logged as ignored)."""
        return self._options_from_form(formdata)

    def overrides(self, profile: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...]:
        """The override dicts KubeSpawner's ``_load_profile`` applies for ``user_options`` on
        this (initialized) profile, unlisted choices' ``{value}`` filled in."""
        self.applied = []
        self._load_profile(profile["slug"], [copy.deepcopy(dict(profile))])
        return tuple(self.applied)


def ordered(profile_list: Any) -> Any:
    """KubeSpawner's order: a dict's profiles sorted by key; a list or a callable as it is."""
    return KubeProfiles()._sorted_dict_values(profile_list)


async def evaluate(profile_list: Any, spawner: Any) -> Any:
    """The profile list as KubeSpawner reads it for this spawner now: a callable (the z2jh
    ``extraConfig`` pattern) is called with the spawner and awaited if it returns a future,
    and a dict (what it returns, or what is configured) is put in KubeSpawner's order."""
    profile_list = ordered(profile_list)
    if callable(profile_list):
        result: Callable[..., Any] | Awaitable[Any] = profile_list(spawner)
        profile_list = ordered(await maybe_future(result))
    return profile_list or []


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
    problem = gpu_count_problem(value)  # the API's own rule, so a profile offers what it accepts
    if problem is not None:
        raise InvalidOption(where, problem)
    return GpuChoice(key=f"{value:g}", gpus=float(value), gpu_memory_gib=None)


def parse_profiles(
    profile_list: ProfileList, warn: Callable[[str], None] | None = None
) -> list[Profile]:
    """Check an (evaluated) profile_list, list or dict, and fill it in with KubeSpawner's own
    initialisation (slugs, default profile, default choices). Our ``frachub`` key and the
    shapes KubeSpawner's code would crash on are errors naming the key; a key neither
    KubeSpawner nor FracHub reads is passed to ``warn`` and ignored, as KubeSpawner ignores
    it."""
    warn = warn or logging.getLogger(__name__).warning
    if isinstance(profile_list, Mapping):
        entries = [(f"profile_list[{key!r}]", profile_list[key]) for key in sorted(profile_list)]
    elif isinstance(profile_list, (list, tuple)):
        entries = [(f"profile_list[{index}]", raw) for index, raw in enumerate(profile_list)]
    else:
        raise InvalidOption(
            "profile_list", "must be a list or a dict of profiles, or a callable returning one"
        )
    for where, raw in entries:
        _check_profile(where, raw, warn)
    initialized = KubeProfiles()._get_initialized_profile_list([raw for _, raw in entries])
    profiles: list[Profile] = []
    for (where, _), raw in zip(entries, initialized, strict=True):
        slug = raw["slug"]
        if not isinstance(slug, str) or not slug:
            raise InvalidOption(f"{where}.slug", "must be a non-empty string")
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
                display_name=raw["display_name"],
                description=str(raw.get("description") or ""),
                default=bool(raw.get("default")),
                gpu_choices=choices,
                default_gpu=default_gpu,
                allowed_groups=None if groups is None else frozenset(groups),
                preemptible=bool(extra.get("preemptible", False)),
                idle_timeout_seconds=None if idle is None else float(idle),
                raw=raw,
                resources=resources_of(
                    raw.get("kubespawner_override") or {},
                    where=f"{where}.kubespawner_override",
                ),
            )
        )
    first: dict[str, str] = {}
    for (where, _), profile in zip(entries, profiles, strict=True):
        if profile.slug in first:
            warn(
                f"{where}: slug {profile.slug!r} is also {first[profile.slug]}'s; "
                "a spawn asking for it gets the first (as in KubeSpawner)"
            )
        first.setdefault(profile.slug, where)
    return profiles


def _check_profile(where: str, raw: Any, warn: Callable[[str], None]) -> None:
    """What KubeSpawner's code needs of a profile to run without a TypeError or KeyError."""
    if not isinstance(raw, Mapping):
        raise InvalidOption(where, "must be a dict")
    for key in sorted(set(raw) - PROFILE_KEYS, key=str):
        warn(f"{where}.{key}: unknown key, ignored (KubeSpawner ignores it too)")
    name = raw.get("display_name")
    if not isinstance(name, str) or not name:
        raise InvalidOption(f"{where}.display_name", "is required")
    override = raw.get("kubespawner_override")
    if override is not None and not isinstance(override, Mapping):
        raise InvalidOption(f"{where}.kubespawner_override", "must be a dict")
    options = raw.get("profile_options")
    if options is None:
        return
    if not isinstance(options, Mapping):
        raise InvalidOption(f"{where}.profile_options", "must be a dict of options")
    for name, option in options.items():
        at = f"{where}.profile_options.{name}"
        if not isinstance(option, Mapping):
            raise InvalidOption(at, "must be a dict")
        choices = option.get("choices")
        if choices is not None and (
            not isinstance(choices, Mapping)
            or not all(isinstance(choice, Mapping) for choice in choices.values())
        ):
            raise InvalidOption(f"{at}.choices", "must be a dict of choices, each a dict")
        unlisted = option.get("unlisted_choice")
        if unlisted is None:
            if not choices:
                raise InvalidOption(at, "has neither choices nor an enabled unlisted_choice")
            continue
        if not isinstance(unlisted, Mapping):
            raise InvalidOption(f"{at}.unlisted_choice", "must be a dict")
        if not choices and not unlisted.get("enabled"):
            raise InvalidOption(at, "has neither choices nor an enabled unlisted_choice")
        regex = unlisted.get("validation_regex")
        if regex is not None:
            try:
                re.compile(regex)
            except (re.error, TypeError) as error:
                raise InvalidOption(
                    f"{at}.unlisted_choice.validation_regex",
                    f"is not a regular expression: {error}",
                ) from None


def default_profile(profiles: Sequence[Profile], groups: Iterable[str]) -> Profile | None:
    """KubeSpawner's default (the first marked ``default``) if this user may use it, else the
    first profile they may use."""
    groups = set(groups)
    allowed = [profile for profile in profiles if profile.allows(groups)]
    return next((p for p in allowed if p.default), allowed[0] if allowed else None)


def resolve(
    profiles: Sequence[Profile], user_options: Mapping[str, Any], groups: Iterable[str]
) -> Selection:
    """What ``user_options`` (from the spawn form or the REST API) select, or InvalidOption
    naming the offending option. FracHub's own keys and the chosen profile's options are
    checked; any other key is ignored (``Selection.ignored``), as KubeSpawner ignores it."""
    if not isinstance(user_options, Mapping):
        raise InvalidOption("user_options", "must be a JSON object")
    groups = set(groups)
    project = user_options.get("project")
    if project is not None and (not isinstance(project, str) or not project):
        raise InvalidOption("user_options.project", "must be a project name")
    slug = user_options.get("profile")
    if not profiles:
        asked = [key for key in GPU_KEYS if user_options.get(key) is not None]
        if asked:
            raise InvalidOption(
                f"user_options.{asked[0]}", "no profiles are configured on this hub"
            )
        ignored = tuple(sorted(str(key) for key in set(user_options) - {"project"}))
        return Selection(profile=None, gpu=None, project=project, options={}, ignored=ignored)
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
    options = _options_of(profile, user_options)
    gpu = _gpu_of(profile, user_options)
    start_preemptible = _preemptible_of(profile, gpu, user_options)
    kube = KubeProfiles({**user_options, "profile": profile.slug})
    try:
        kube._validate_user_options([profile.raw])  # KubeSpawner's own word, after ours
        overrides = kube.overrides(profile.raw)
    except (ValueError, KeyError, StopIteration) as error:
        raise InvalidOption("user_options", str(error)) from None
    known = {*OPTION_KEYS, *options}
    ignored = tuple(sorted(str(key) for key in user_options if key not in known))
    return Selection(
        profile=profile,
        gpu=gpu,
        project=project,
        options=options,
        overrides=overrides,
        ignored=ignored,
        start_preemptible=start_preemptible,
    )


def _preemptible_of(profile: Profile, gpu: GpuChoice | None, user_options: Mapping) -> bool:
    """``user_options.preemptible``: true asks to start this GPU notebook preemptible."""
    value = user_options.get("preemptible", False)
    if value is None or value is False:
        return False
    if value is not True:
        raise InvalidOption(
            "user_options.preemptible", f"must be true or false, got {shown(value)}"
        )
    if gpu is None:
        raise InvalidOption(
            "user_options.preemptible",
            f"applies to a GPU notebook; profile {profile.slug!r} gives no GPU",
        )
    return True


def _options_of(profile: Profile, user_options: Mapping[str, Any]) -> dict[str, str]:
    """The profile's own options in ``user_options``, checked as KubeSpawner's
    ``_load_profile`` will use them: a listed choice, or an unlisted value (which wins, as in
    KubeSpawner) matching the option's ``validation_regex``."""
    chosen: dict[str, str] = {}
    for name, option in (profile.raw.get("profile_options") or {}).items():
        choices = option.get("choices") or {}
        unlisted = option.get("unlisted_choice") or {}
        free = user_options.get(f"{name}{UNLISTED}")
        value = user_options.get(name)
        if free not in (None, ""):
            where = f"user_options.{name}{UNLISTED}"
            if not isinstance(free, str):
                raise WrongType(where, f"must be a string, got {free!r}")
            if not unlisted.get("enabled"):
                raise InvalidOption(
                    where, f"profile {profile.slug!r} takes no unlisted choice for {name}"
                )
            regex = unlisted.get("validation_regex")
            if regex and not re.match(regex, free):
                hint = unlisted.get("validation_message") or f"must match {regex}"
                raise InvalidOption(where, f"{free!r} is not accepted: {hint}")
            chosen[f"{name}{UNLISTED}"] = free
            if value not in (None, ""):
                chosen[name] = str(value)
            continue
        if value in (None, ""):
            if not choices:
                raise InvalidOption(
                    f"user_options.{name}{UNLISTED}",
                    f"profile {profile.slug!r} needs a value for {name} (it lists no choices)",
                )
            continue
        if not isinstance(value, str) or value not in choices:
            raise UnknownChoice(
                f"user_options.{name}",
                f"no such choice {value!r} for {name}; one of {', '.join(choices)}"
                + (f", or {name}{UNLISTED}" if unlisted.get("enabled") else ""),
            )
        chosen[name] = value
    return chosen


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
