"""Profiles and user_options: what a spawn selects, and each refusal naming its option."""

from __future__ import annotations

import pytest

from spawner.offers import ProjectUse, fits_now, offers, user_projects
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
        ([{"display_name": "A", "colour": 1}], "profile_list[0].colour"),
        ([{"display_name": "A", "frachub": {"gpu": [1]}}], "profile_list[0].frachub.gpu"),
        ([{"display_name": "A", "frachub": {"gpu_choices": [1.5]}}], "gpu_choices[0]"),
        ([{"display_name": "A", "frachub": {"gpu_choices": ["lots"]}}], "gpu_choices[0]"),
        ([{"display_name": "A", "frachub": {"gpu_choices": [1, 1.0]}}], "gpu_choices"),
        (
            [{"display_name": "A", "frachub": {"gpu_choices": [1], "default_gpu": 2}}],
            "default_gpu",
        ),
        ([{"display_name": "A"}, {"display_name": "a"}], "profile_list"),
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
        ({"profile": "gpu", "colour": "red"}, "user_options.colour", 400),
        ({"profile": "big-gpus"}, "user_options.profile", 403),
        ({"profile": "gpu", "project": 3}, "user_options.project", 400),
    ],
)
def test_bad_options_name_the_option(profiles, options, where, status):
    with pytest.raises(InvalidOption) as error:
        resolve(profiles, options, groups=["nlp"])
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


NODES = [
    {
        "name": "a",
        "gpus": [
            {"index": 0, "memory_gib": 24, "used": 0.75},
            {"index": 1, "memory_gib": 24, "used": 1.0},
        ],
    },
    {
        "name": "b",
        "gpus": [
            {"index": 0, "memory_gib": 24, "used": 0.0},
            {"index": 1, "memory_gib": 24, "used": 0.5},
        ],
    },
]


def test_fits_now_reads_free_room_per_gpu_and_node(profiles):
    choices = {c.key: c for c in profiles[1].gpu_choices}
    assert fits_now(choices["0.25"], NODES)
    assert fits_now(choices["0.5"], NODES)
    assert fits_now(choices["1"], NODES)
    assert not fits_now(choices["2"], NODES)  # no node has two wholly free GPUs
    assert fits_now(choices["20GiB"], NODES)  # b/0 is free
    assert not fits_now(choices["20GiB"], NODES[:1])  # a/0 has 6 GiB free


def test_offers_grey_out_what_can_never_start(profiles):
    project = ProjectUse("nlp", deserved_gpus=1, allocated_gpus=0.5, fair_share_gpus=1)
    result = {offer.profile.slug: offer for offer in offers(profiles, ["nlp"], project, NODES)}
    gpu = {c.choice.key: c for c in result["gpu"].choices}
    assert gpu["0.5"].status == "free now" and not gpu["0.5"].disabled
    assert gpu["2"].disabled and "beyond nlp's quota of 1 GPU" in gpu["2"].status
    assert result["big-gpus"].disabled and "vision" in result["big-gpus"].note
    assert not result["cpu"].disabled


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
