"""A notebook's CPU and memory with the real spawners: what FracKubeSpawner asks FracHub for
is what KubeSpawner puts on the pod (the profile's guarantees and limits, unchanged); where
neither sets any, the pod requests what the allocation was given (the service's default);
FracLocalSpawner's control group holds the limits; the spawn form says what each profile
gives."""

from __future__ import annotations

import asyncio

from .conftest import Cluster, run
from .test_spawner import PROFILES, allocation, create, frac_loads, local_spawner, make_spawner

SIZED = [
    {
        "display_name": "GPU, sized",
        "slug": "sized",
        "kubespawner_override": {"cpu_guarantee": 2, "cpu_limit": 4, "mem_guarantee": "8G"},
        "frachub": {"gpu_choices": [1]},
    }
]


def test_the_profiles_cpu_and_memory_are_asked_for_and_on_the_pod(
    cluster: Cluster, kube_default: None
) -> None:
    async def scenario() -> None:
        spawner = make_spawner(cluster, allocation(1.0), profile_list=SIZED)
        selection = await frac_loads(spawner, {"profile": "sized"})
        assert spawner.frachub_resources(selection).request == {"cpu": 2.0, "memory_gib": 8.0}
        container = (await create(spawner))["spec"]["containers"][0]
        assert container["resources"]["requests"]["cpu"] == 2.0
        assert container["resources"]["limits"]["cpu"] == 4.0
        assert int(container["resources"]["requests"]["memory"]) == 8 * 2**30
        assert "memory" not in container["resources"]["limits"]  # as KubeSpawner leaves it

    run(scenario)


def test_the_services_default_reaches_the_pod_where_nothing_sets_one(
    cluster: Cluster, kube_default: None
) -> None:
    async def scenario() -> None:
        given = {**allocation(1.0), "cpu": 1.5, "memory_gib": 4.0}
        plain = [{"display_name": "GPU", "slug": "g", "frachub": {"gpu_choices": [1]}}]
        spawner = make_spawner(cluster, given, profile_list=plain)
        await frac_loads(spawner, {"profile": "g"})
        container = (await create(spawner))["spec"]["containers"][0]
        assert container["resources"]["requests"]["cpu"] == 1.5
        assert int(container["resources"]["requests"]["memory"]) == 4 * 2**30
        assert int(container["resources"]["limits"]["memory"]) == 4 * 2**30

    run(scenario)


def test_the_local_spawners_group_holds_the_limit_else_the_guarantee() -> None:
    spawner = local_spawner(SIZED)
    spawner.user_options = {"profile": "sized"}

    async def resolve() -> None:
        spawner.frachub_apply_profile(await spawner.frachub_resolve())

    asyncio.run(resolve())
    limits = spawner.frachub_limits()
    assert (limits.cpu_milli, limits.memory_mib) == (4000, 8192)


def test_the_spawn_form_says_what_each_profile_gives() -> None:
    form = asyncio.run(local_spawner([*SIZED, *PROFILES]).get_options_form())
    assert "CPU and memory: 2 CPUs (up to 4 CPUs), 8 GiB of memory" in form
    assert "CPU and memory: 2 CPUs</p>" in form  # Café GPU's cpu_limit alone
    assert "CPU and memory: 4 GiB of memory" in form  # Data Science's mem_limit "4G"
