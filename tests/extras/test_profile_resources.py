"""CPU and memory in profiles, as z2jh admins write them: KubeSpawner's ``cpu_guarantee``,
``mem_guarantee``, ``cpu_limit`` and ``mem_limit`` in a profile's (or a chosen option's)
``kubespawner_override``: what a notebook asks FracHub for, what its local control group
holds, what the spawn form and its dry run show; a malformed one refused naming it."""

from __future__ import annotations

import pytest

from spawner.offers import dry_run_body
from spawner.profiles import InvalidOption, Resources, parse_profiles, resolve, resources_of

pytestmark = pytest.mark.unit

PROFILES = [
    {
        "display_name": "GPU, sized",
        "slug": "sized",
        "kubespawner_override": {"cpu_guarantee": 2, "cpu_limit": 4, "mem_guarantee": "8G"},
        "profile_options": {
            "size": {
                "display_name": "Size",
                "choices": {
                    "s": {"display_name": "Small", "default": True},
                    "l": {
                        "display_name": "Large",
                        "kubespawner_override": {"mem_guarantee": "32G", "mem_limit": "64G"},
                    },
                },
            }
        },
        "frachub": {"gpu_choices": [0.5]},
    },
    {"display_name": "GPU, unsized", "slug": "plain", "frachub": {"gpu_choices": [0.5]}},
]


def test_the_guarantee_is_asked_and_the_limit_enforced() -> None:
    sized, plain = parse_profiles(PROFILES)
    assert sized.resources == Resources(2000, 4000, 8192, None)
    assert sized.resources.request == {"cpu": 2.0, "memory_gib": 8.0}
    assert sized.resources.enforced == (4000, 8192)  # the limit, else the guarantee
    assert sized.resources.summary == "2 CPUs (up to 4 CPUs), 8 GiB of memory"
    assert plain.resources == Resources() and plain.resources.request == {}
    assert plain.resources.summary == ""


def test_a_chosen_option_changes_them_as_kubespawner_would() -> None:
    profiles = parse_profiles(PROFILES)
    large = resolve(profiles, {"profile": "sized", "size": "l"}, [])
    asked = resources_of({}, large.overrides)
    assert asked.request == {"cpu": 2.0, "memory_gib": 32.0}
    assert asked.enforced == (4000, 64 * 1024)
    # the spawner's own config is the base; a None in an override unsets it
    base = {"cpu_guarantee": 0.5, "mem_limit": 2**30}
    assert resources_of(base, ()).request == {"cpu": 0.5, "memory_gib": 1.0}
    assert resources_of(base, ({"cpu_guarantee": None},)).request == {"memory_gib": 1.0}
    # a lone limit is asked for, as Kubernetes makes it the request
    assert resources_of({"cpu_limit": 3}).request == {"cpu": 3.0}
    called = resources_of({}, ({"cpu_limit": lambda spawner: spawner},), spawner=1.5)
    assert called.cpu_limit == 1500


def test_the_dry_run_asks_with_the_profiles_cpu_and_memory() -> None:
    body, keys = dry_run_body(parse_profiles(PROFILES), [], "ana", "vision")
    assert keys == [("sized", "0.5"), ("plain", "0.5")]
    assert body["requests"] == [
        {"gpus": 0.5, "cpu": 2.0, "memory_gib": 8.0, "preemptible": False},
        {"gpus": 0.5, "preemptible": False},
    ]


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ({"cpu_limit": "two"}, r"profile_list\[0\]\.kubespawner_override\.cpu_limit: must be"),
        ({"cpu_guarantee": 0}, r"cpu_guarantee: must be cores above 0"),
        ({"mem_limit": "16Q"}, r"mem_limit: must be memory such as '8G'"),
        ({"mem_guarantee": "16"}, r"mem_guarantee: must be memory"),  # KubeSpawner's: bytes
    ],
)
def test_a_malformed_value_is_refused_naming_it(override, words) -> None:
    bad = [{"display_name": "Bad", "kubespawner_override": override}]
    with pytest.raises(InvalidOption, match=words):
        parse_profiles(bad)
