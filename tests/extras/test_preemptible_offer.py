"""The offer to start a notebook now as a preemptible one: who may get it (the admin's
setting and preemptible profiles), which choices it is made for (the two dry runs), what the
form posts, and each malformed ``user_options.preemptible`` refused naming it. The whole
flow on a real hub is tests/hub/test_preemptible_offer.py."""

from __future__ import annotations

import pytest

from spawner import preemptible
from spawner.local import FracLocalSpawner
from spawner.offers import (
    ProjectUse,
    dry_run_body,
    offers,
    verdicts_by_choice,
    waiting_choices,
)
from spawner.profiles import InvalidOption, parse_profiles, resolve

PROFILES = [
    {"display_name": "CPU only", "slug": "cpu"},
    {"display_name": "GPU", "slug": "gpu", "default": True, "frachub": {"gpu_choices": [0.5, 1]}},
    {
        "display_name": "Spot GPU",
        "slug": "spot",
        "frachub": {"gpu_choices": [1], "preemptible": True, "allowed_groups": ["vision"]},
    },
]


@pytest.fixture()
def profiles():
    return parse_profiles(PROFILES)


@pytest.mark.parametrize(
    ("mode", "groups", "allowed"),
    [
        ("auto", ["vision"], True),  # a preemptible profile is open to them
        ("auto", ["nlp"], False),  # the only preemptible profile is vision's
        ("all", ["nlp"], True),
        ("off", ["vision"], False),
    ],
)
def test_who_may_be_offered_it(profiles, mode, groups, allowed):
    assert preemptible.allowed(mode, profiles, groups) is allowed


def test_auto_offers_nothing_without_a_preemptible_profile():
    plain = parse_profiles(PROFILES[:2])
    assert not preemptible.allowed("auto", plain, ["vision"])
    assert preemptible.allowed("all", plain, ["vision"])


def verdict(outcome: str, message: str) -> dict:
    return {"outcome": outcome, "message": message, "reclaims_from": [], "queue_position": None}


WAIT = verdict("wait", "would wait: vision's notebooks already use its deserved 1 GPU; ...")


@pytest.mark.parametrize(
    ("asked", "preemptible_one", "made"),
    [
        (WAIT, verdict("now", "starts now on a, GPU 1 (0.5)"), True),
        (WAIT, verdict("wait", "would wait: no GPU has 0.5 free"), False),  # would not help
        (WAIT, verdict("reclaim", "starts after reclaiming ..."), False),  # not "now"
        (verdict("now", "starts now on a"), verdict("now", "starts now on a"), False),
        (verdict("reclaim", "starts after reclaiming"), verdict("now", "starts now"), False),
        (WAIT, None, False),
    ],
)
def test_offered_only_when_it_would_wait_and_preemptible_starts_now(asked, preemptible_one, made):
    assert preemptible.offered(asked, preemptible_one) is made


def test_the_second_dry_run_asks_the_waiting_choices_preemptible(profiles):
    body, keys = dry_run_body(profiles, ["vision"], "alice", "vision")
    answers = [WAIT, verdict("now", "starts now on a, GPU 0"), verdict("now", "starts now")]
    verdicts = verdicts_by_choice(keys, {"results": answers})
    waiting = waiting_choices(profiles, verdicts)
    assert waiting == [("gpu", "0.5")]  # the spot profile is preemptible already
    body, keys = dry_run_body(profiles, ["vision"], "alice", "vision", preemptible_for=waiting)
    assert keys == [("gpu", "0.5")]
    assert body["requests"] == [{"gpus": 0.5, "preemptible": True}]

    project = ProjectUse("vision", deserved_gpus=1, allocated_gpus=1, fair_share_gpus=1)
    other = {("gpu", "0.5"): verdict("now", "starts now on a, GPU 1 (0.5)")}
    (_, gpu, _) = offers(profiles, ["vision"], project, verdicts, other)
    by_key = {c.choice.key: c for c in gpu.choices}
    assert by_key["0.5"].preemptible_now == "starts now on a, GPU 1 (0.5)"
    assert by_key["0.5"].status.startswith("would wait: vision's notebooks")
    assert by_key["1"].preemptible_now == ""


def test_the_start_words_say_why_and_what_may_happen():
    words = preemptible.start_words("vision", preemptible.wait_reason(WAIT))
    assert words == (
        "Starting as a preemptible notebook because vision is at its quota (vision's notebooks "
        "already use its deserved 1 GPU; ...). It may be stopped when others need their quota: "
        "its GPU share is then revoked and the notebook stopped; your files are kept."
    )
    # the dry run could not say it waits (unreachable, or "never"): no reason is made up
    assert preemptible.start_words("vision", None).startswith(
        "Starting as a preemptible notebook in vision, as asked. It may be stopped"
    )


def test_user_options_preemptible(profiles):
    assert resolve(profiles, {"gpus": 0.5, "preemptible": True}, []).preemptible
    assert not resolve(profiles, {"gpus": 0.5, "preemptible": False}, []).preemptible
    assert not resolve(profiles, {"gpus": 0.5}, []).start_preemptible
    spot = resolve(profiles, {"profile": "spot"}, ["vision"])
    assert spot.preemptible and not spot.start_preemptible  # the profile's own rule


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"gpus": 0.5, "preemptible": "yes"}, "must be true or false, got 'yes'"),
        ({"gpus": 0.5, "preemptible": 1}, "must be true or false, got 1"),
        ({"profile": "cpu", "preemptible": True}, "applies to a GPU notebook; profile 'cpu'"),
    ],
)
def test_bad_preemptible_options_name_the_option(profiles, options, says):
    with pytest.raises(InvalidOption) as refused:
        resolve(profiles, options, ["vision"])
    assert refused.value.where == "user_options.preemptible"
    assert says in refused.value.message


def test_the_forms_box_counts_only_under_the_chosen_gpu():
    spawner = FracLocalSpawner()
    form = {"profile": ["gpu"], "gpu-gpu": ["0.5"], "preemptible-gpu": ["0.5"]}
    assert spawner.frachub_options_from_form(form) == {
        "profile": "gpu",
        "gpu": "0.5",
        "preemptible": True,
    }
    # ticked under 1 GPU, then 0.5 GPU picked: not preemptible
    form = {"profile": ["gpu"], "gpu-gpu": ["0.5"], "preemptible-gpu": ["1"]}
    assert spawner.frachub_options_from_form(form) == {"profile": "gpu", "gpu": "0.5"}


def test_the_setting_refuses_an_unknown_mode():
    from traitlets import TraitError

    assert FracLocalSpawner().frachub_preemptible_offer == "auto"
    with pytest.raises(TraitError):
        FracLocalSpawner(frachub_preemptible_offer="sometimes")
