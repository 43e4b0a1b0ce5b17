"""Profiles and user_options: what a spawn selects, and each refusal naming its option."""

from __future__ import annotations

import pytest

from spawner.offers import (
    FormView,
    ProjectUse,
    dry_run_body,
    no_project_message,
    offers,
    user_projects,
    verdicts_by_choice,
)
from spawner.profiles import InvalidOption, parse_gpu_choice, parse_profiles, resolve

pytestmark = pytest.mark.unit

PROFILES = [
    {"display_name": "CPU only", "slug": "cpu"},
    {
        "display_name": "GPU notebook",
        "slug": "gpu",
        "default": True,
        "frachub": {"gpu_choices": [0.25, 0.5, "20GiB", 1, 2], "default_gpu": 0.5},
    },
    {
        "display_name": "Big GPUs",
        "frachub": {"gpu_choices": [4], "allowed_groups": ["vision"], "idle_timeout_seconds": 60},
        "profile_options": {
            "image": {"display_name": "Image", "choices": {"torch": {}, "jax": {}}},
        },
    },
]


@pytest.fixture()
def profiles():
    return parse_profiles(PROFILES)


def test_parse_profiles_fills_slugs_and_defaults(profiles):
    assert [p.slug for p in profiles] == ["cpu", "gpu", "big-gpus"]
    gpu = profiles[1]
    assert [c.key for c in gpu.gpu_choices] == ["0.25", "0.5", "20GiB", "1", "2"]
    assert gpu.default_gpu.key == "0.5"
    assert profiles[2].default_gpu.key == "4"
    assert profiles[2].idle_timeout_seconds == 60
    assert profiles[0].gpu_choices == ()


@pytest.mark.parametrize(
    ("profile_list", "where"),
    [
        ([{"slug": "x"}], "profile_list[0].display_name"),
        ([{"display_name": "A", "profile_options": {"x": {}}}], "profile_options.x"),
        (
            [{"display_name": "A", "profile_options": {"x": {"choices": {"a": 1}}}}],
            "profile_options.x.choices",
        ),
        (
            [
                {
                    "display_name": "A",
                    "profile_options": {
                        "x": {"unlisted_choice": {"enabled": True, "validation_regex": "("}}
                    },
                }
            ],
            "profile_options.x.unlisted_choice.validation_regex",
        ),
        ({"a": {"display_name": "A", "frachub": {"gpu_choices": [3.5]}}}, "['a'].frachub"),
        ("not a list", "profile_list"),
        ([{"display_name": "A", "frachub": {"gpu": [1]}}], "profile_list[0].frachub.gpu"),
        ([{"display_name": "A", "frachub": {"gpu_choices": [1.5]}}], "gpu_choices[0]"),
        ([{"display_name": "A", "frachub": {"gpu_choices": ["lots"]}}], "gpu_choices[0]"),
        ([{"display_name": "A", "frachub": {"gpu_choices": [1, 1.0]}}], "gpu_choices"),
        (
            [{"display_name": "A", "frachub": {"gpu_choices": [1], "default_gpu": 2}}],
            "default_gpu",
        ),
        (
            [{"display_name": "A", "frachub": {"idle_timeout_seconds": -1}}],
            "idle_timeout_seconds",
        ),
    ],
)
def test_bad_profiles_name_the_key(profile_list, where):
    with pytest.raises(InvalidOption) as error:
        parse_profiles(profile_list)
    assert where in error.value.message


def test_gpu_choice_forms():
    assert parse_gpu_choice(0.5, "x").request == {"gpus": 0.5}
    assert parse_gpu_choice("20 GiB", "x").request == {"gpu_memory_gib": 20.0}
    assert parse_gpu_choice("2", "x").label == "2 GPUs"
    assert parse_gpu_choice(0.25, "x").label == "0.25 GPU"


def test_empty_options_take_the_default_profile_and_gpu(profiles):
    selection = resolve(profiles, {}, groups=[])
    assert selection.profile.slug == "gpu"
    assert selection.gpu.key == "0.5"


@pytest.mark.parametrize(
    ("options", "gpu"),
    [
        ({"profile": "gpu", "gpus": 0.25}, "0.25"),
        ({"profile": "gpu", "gpus": "1"}, "1"),
        ({"profile": "gpu", "gpu": "20GiB"}, "20GiB"),
        ({"profile": "gpu", "gpu_memory_gib": 20}, "20GiB"),
        ({"profile": "cpu"}, None),
    ],
)
def test_rest_api_options_select_a_choice(profiles, options, gpu):
    selection = resolve(profiles, options, groups=[])
    assert (selection.gpu.key if selection.gpu else None) == gpu


@pytest.mark.parametrize(
    ("options", "where", "status"),
    [
        ({"profile": "nope"}, "user_options.profile", 400),
        ({"profile": "gpu", "gpus": 0.3}, "user_options.gpus", 400),
        ({"profile": "gpu", "gpus": "many"}, "user_options.gpus", 400),
        ({"profile": "gpu", "gpus": 0.5, "gpu": "1"}, "user_options.gpus", 400),
        ({"profile": "gpu", "gpu_memory_gib": True}, "user_options.gpu_memory_gib", 400),
        ({"profile": "cpu", "gpus": 1}, "user_options.gpus", 400),
        ({"profile": "big-gpus", "image": "tf"}, "user_options.image", 400),
        ({"profile": "big-gpus"}, "user_options.profile", 403),
        ({"profile": "gpu", "project": 3}, "user_options.project", 400),
    ],
)
def test_bad_options_name_the_option(profiles, options, where, status):
    with pytest.raises(InvalidOption) as error:
        resolve(profiles, options, groups=["nlp", "vision"] if "image" in options else ["nlp"])
    assert error.value.message.startswith(where)
    assert error.value.status == status


def test_group_restricted_profile_and_its_options(profiles):
    selection = resolve(profiles, {"profile": "big-gpus", "image": "jax"}, groups=["vision"])
    assert selection.gpu.gpus == 4
    assert selection.options == {"image": "jax"}


def test_no_profiles_means_no_gpu_and_no_options():
    assert resolve([], {}, groups=[]).gpu is None
    with pytest.raises(InvalidOption, match=r"user_options\.gpus"):
        resolve([], {"gpus": 1}, groups=[])


def verdict(outcome: str, message: str) -> dict:
    return {"outcome": outcome, "message": message, "reclaims_from": [], "queue_position": None}


def test_the_dry_run_asks_for_every_open_choice_with_its_profiles_preemptibility(profiles):
    body, keys = dry_run_body(profiles, ["nlp"], "ana", "nlp")
    assert body["user"] == "ana" and body["project"] == "nlp"
    assert keys == [("gpu", "0.25"), ("gpu", "0.5"), ("gpu", "20GiB"), ("gpu", "1"), ("gpu", "2")]
    assert body["requests"][2] == {"gpu_memory_gib": 20, "preemptible": False}
    assert body["requests"][3] == {"gpus": 1, "preemptible": False}


def dry_run_offers(profiles, answers: dict) -> FormView:
    project = ProjectUse("nlp", deserved_gpus=1, allocated_gpus=0.5, fair_share_gpus=1)
    _, keys = dry_run_body(profiles, ["nlp"], "ana", "nlp")
    verdicts = verdicts_by_choice(keys, {"results": [answers[key] for _, key in keys]})
    return FormView(
        offers=offers(profiles, ["nlp"], project, verdicts),
        projects=[project],
        project=project,
        selection=resolve(profiles, {}, ["nlp"]),
        unreachable=None,
    )


ANSWERS = {
    "0.25": verdict("now", "starts now on node a, GPU 0 (0.25)"),
    "0.5": verdict("wait", "would wait: nlp's notebooks use 0.5 GPU of its deserved 1 GPU"),
    "20GiB": verdict("reclaim", "starts after reclaiming GPUs that vision borrowed (1 workload)"),
    "1": verdict("wait", "would wait: nlp's notebooks use ..."),
    "2": verdict("never", "a notebook that nlp deserves 1 GPU; ... can never start"),
}


def test_each_hint_is_the_schedulers_answer_and_never_is_greyed_out(profiles):
    view = dry_run_offers(profiles, ANSWERS)
    gpu = {c.choice.key: c for c in view.offer("gpu").choices}
    assert gpu["0.25"].status == "starts now on node a, GPU 0 (0.25)"
    assert gpu["20GiB"].outcome == "reclaim" and not gpu["20GiB"].disabled
    assert gpu["2"].disabled and gpu["2"].status.startswith("nlp deserves 1 GPU")
    assert view.offer("big-gpus").disabled and "vision" in view.offer("big-gpus").note
    assert not view.offer("cpu").disabled


def test_the_form_pre_selects_a_choice_that_starts(profiles):
    # the profile's default (0.5) would wait while 0.25 starts now: 0.25 is picked
    assert dry_run_offers(profiles, ANSWERS).picked == ("gpu", "0.25")
    # a default that can start (now, or after a reclaim) stays picked
    starts = {**ANSWERS, "0.5": verdict("reclaim", "starts after reclaiming ...")}
    assert dry_run_offers(profiles, starts).picked == ("gpu", "0.5")
    # nothing of the profile can ever start: the first open profile without a GPU
    never = dict.fromkeys(ANSWERS, verdict("never", "can never start"))
    view = dry_run_offers(profiles, never)
    assert view.offer("gpu").disabled and view.picked == ("cpu", None)
    assert view.checked_profile("cpu") and not view.checked_profile("gpu")


def test_someone_in_no_project_gets_cpu_pre_selected_and_words_for_who_they_are(profiles):
    view = FormView(
        offers=offers(profiles, [], None, None),
        projects=[],
        project=None,
        selection=resolve(profiles, {}, []),
        unreachable=None,
        no_project=no_project_message(is_admin=True),
    )
    assert view.offer("gpu").disabled and view.picked == ("cpu", None)
    assert "ask an admin" not in no_project_message(is_admin=True).lower()
    assert "add yourself" in no_project_message(is_admin=True)
    assert "Ask an admin" in no_project_message(is_admin=False)
    # an admin whom the hub does not let change groups is not sent to its admin page
    assert "hub's admin page (Admin, then Groups)" in no_project_message(is_admin=True)
    barred = no_project_message(is_admin=True, hub_admin_page=False)
    assert "hub's admin page (Admin" not in barred and "queues API" in barred
    assert "ask a hub admin to add you to its group" in barred


def test_the_quota_line_does_not_say_an_idle_project_gets_nothing():
    idle = ProjectUse("nlp", deserved_gpus=1, allocated_gpus=0, fair_share_gpus=0)
    assert idle.summary == "nlp: 0 of 1 GPU in use"
    lending = ProjectUse("nlp", deserved_gpus=1, allocated_gpus=1, fair_share_gpus=2)
    assert "up to 2 GPUs now with idle GPUs borrowed" in lending.summary


def test_user_projects_by_group_member_or_everybody():
    queues = [
        {"name": "research", "children": ["vision"]},
        {"name": "vision", "children": [], "deserved_gpus": 2, "allocated_gpus": 1},
        {"name": "nlp", "children": [], "members": ["ana"]},
        {"name": "open", "children": [], "members": ["*"]},
    ]
    names = [p.name for p in user_projects(queues, "bo", ["vision", "research"])]
    assert names == ["vision", "open"]
    assert [p.name for p in user_projects(queues, "ana", [])] == ["nlp", "open"]


# -- KubeSpawner's behaviour where FracHub adds no meaning ---------------------------------

IMAGE = {
    "display_name": "Image",
    "choices": {
        "base": {"display_name": "Base", "kubespawner_override": {"image": "jupyter/base"}},
        "scipy": {"display_name": "SciPy", "kubespawner_override": {"image": "jupyter/scipy"}},
    },
    "unlisted_choice": {
        "enabled": True,
        "display_name": "Other image",
        "validation_regex": "^jupyter/.+:.+$",
        "validation_message": "an image jupyter/<name>:<tag>",
        "kubespawner_override": {"image": "{value}", "environment": {"IMAGE": "{value}"}},
    },
}


@pytest.mark.parametrize(
    ("name", "slug"),
    [("Café GPU", "cafe-gpu"), ("Data -- Science", "data-science"), ("Über image", "uber-image")],
)
def test_slugs_are_kubespawners(name, slug):
    from kubespawner.spawner import slugify

    (profile,) = parse_profiles([{"display_name": name}])
    assert profile.slug == slug == slugify(name)


def test_dict_profile_list_is_ordered_by_key_as_kubespawner_orders_it():
    profiles = parse_profiles(
        {"z": {"display_name": "Last"}, "a": {"display_name": "First", "slug": "first"}}
    )
    assert [p.slug for p in profiles] == ["first", "last"]
    assert profiles[0].default  # KubeSpawner's default: the first when none is marked


def test_callable_profile_lists_are_evaluated_with_the_spawner():
    import asyncio

    from spawner.profiles import evaluate

    spawner = object()

    def sync(s):
        assert s is spawner
        return {"b": {"display_name": "B"}, "a": {"display_name": "A"}}

    async def later(s):
        return [{"display_name": "Async"}]

    assert [p["display_name"] for p in asyncio.run(evaluate(sync, spawner))] == ["A", "B"]
    assert asyncio.run(evaluate(later, spawner)) == [{"display_name": "Async"}]
    assert asyncio.run(evaluate(None, spawner)) == []


def test_unknown_profile_keys_are_warned_about_and_ignored():
    warnings: list[str] = []
    (profile,) = parse_profiles([{"display_name": "A", "colour": "red"}], warn=warnings.append)
    assert profile.slug == "a"
    assert warnings == ["profile_list[0].colour: unknown key, ignored (KubeSpawner ignores it too)"]
    warnings.clear()
    parse_profiles([{"display_name": "A"}, {"display_name": "a"}], warn=warnings.append)
    assert "slug 'a' is also profile_list[0]'s" in warnings[0]


def test_unknown_user_options_are_ignored_and_named(profiles):
    selection = resolve(profiles, {"profile": "gpu", "colour": "red", "x": 1}, groups=[])
    assert selection.ignored == ("colour", "x")
    assert selection.gpu.key == "0.5"


@pytest.fixture()
def with_images():
    return parse_profiles(
        [
            {
                "display_name": "Images",
                "kubespawner_override": {"default_url": "/lab", "environment": {"A": "1"}},
                "profile_options": {"image": IMAGE},
            }
        ]
    )


def test_options_resolve_to_kubespawners_overrides_in_order(with_images):
    default = resolve(with_images, {}, groups=[])
    assert default.overrides == (
        {"default_url": "/lab", "environment": {"A": "1"}},
        {"image": "jupyter/base"},
    )
    chosen = resolve(with_images, {"profile": "images", "image": "scipy"}, groups=[])
    assert chosen.overrides[1] == {"image": "jupyter/scipy"}
    free = resolve(with_images, {"image--unlisted-choice": "jupyter/r:4.4"}, groups=[])
    assert free.overrides[1] == {
        "image": "jupyter/r:4.4",
        "environment": {"IMAGE": "jupyter/r:4.4"},
    }
    assert free.options == {"image--unlisted-choice": "jupyter/r:4.4"}
    assert with_images[0].raw["profile_options"]["image"]["unlisted_choice"][
        "kubespawner_override"
    ] == {"image": "{value}", "environment": {"IMAGE": "{value}"}}  # not formatted in place


@pytest.mark.parametrize(
    ("options", "where", "says"),
    [
        ({"image--unlisted-choice": "evil/image:1"}, "image--unlisted-choice", "jupyter/<name>"),
        ({"image--unlisted-choice": 7}, "image--unlisted-choice", "must be a string"),
        ({"image": "nope"}, "user_options.image", "one of base, scipy, or image--unlisted"),
    ],
)
def test_bad_profile_options_name_the_field(with_images, options, where, says):
    with pytest.raises(InvalidOption) as error:
        resolve(with_images, options, groups=[])
    assert where in error.value.message and says in error.value.message
    assert error.value.status == 400


def test_unlisted_choice_needs_to_be_enabled():
    closed = {**IMAGE, "unlisted_choice": {"enabled": False}}
    profiles = parse_profiles([{"display_name": "A", "profile_options": {"image": closed}}])
    with pytest.raises(InvalidOption, match="takes no unlisted choice"):
        resolve(profiles, {"image--unlisted-choice": "jupyter/x:1"}, groups=[])


def test_form_fields_become_kubespawners_user_options():
    from spawner.profiles import KubeProfiles

    form = {
        "profile": ["images"],
        "profile-option-images--image--unlisted-choice": ["jupyter/r:4.4"],
        "profile-option-other--image": ["base"],
    }
    assert KubeProfiles().options_from_form(form) == {
        "profile": "images",
        "image--unlisted-choice": "jupyter/r:4.4",
    }
