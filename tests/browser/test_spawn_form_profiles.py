"""A z2jh admin's profile list, pasted unchanged plus one ``frachub`` key, in the hub's real
spawn form: a callable profile_list evaluated per user (z2jh's extraConfig pattern), a
profile option with KubeSpawner's ``unlisted_choice`` (free text with a validation_regex),
and FracHub's GPU choices beside it. The user picks "Other image...", the browser refuses
text the regex refuses, the server refuses it too (for REST clients), and an accepted value
reaches the server through the option's ``kubespawner_override``."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from hub.upharness import Kernel, Up, open_spawn_form

from browser.browserharness import browser_page

pytestmark = pytest.mark.browser

# What an admin has in singleuser.extraConfig: profiles built per user. The image option's
# override lands in the server's environment on FracLocalSpawner (which has no image).
PROFILES_CONFIG = """
async def _profiles(spawner):
    return [
        {
            "display_name": f"Custom image for {spawner.user.name}",
            "description": "Any <code>jupyter/</code> image",
            "profile_options": {
                "image": {
                    "display_name": "Image",
                    "choices": {
                        "scipy": {
                            "display_name": "SciPy",
                            "kubespawner_override": {
                                "environment": {"PICKED_IMAGE": "jupyter/scipy:latest"}
                            },
                        },
                    },
                    "unlisted_choice": {
                        "enabled": True,
                        "display_name": "Image name",
                        "display_name_in_choices": "Other image...",
                        "validation_regex": "^jupyter/[a-z-]+:[a-z0-9.]+$",
                        "validation_message": "an image jupyter/<name>:<tag>",
                        "kubespawner_override": {"environment": {"PICKED_IMAGE": "{value}"}},
                    },
                },
            },
            "frachub": {"gpu_choices": [0.25, 0.5]},
        },
        {"display_name": "CPU only", "slug": "cpu", "default": True},
    ]

c.FracLocalSpawner.profile_list = _profiles
"""


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    with Up(tmp_path_factory.mktemp("up-profiles"), extra_hub_config=PROFILES_CONFIG) as running:
        yield running


@pytest.fixture
def up_page(browser, up: Up, request: pytest.FixtureRequest) -> Iterator:
    with browser_page(browser, up.url, request) as page:
        yield page
    for user in ("alice", "bob"):
        up.stop_server(user)


def in_a_thread(work: Callable[[], str]) -> str:
    """Kernel runs its own asyncio loop; Playwright's sync API holds this thread's."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(work).result()


def test_unlisted_choice_in_the_spawn_form(up: Up, up_page, shot) -> None:
    page = up_page
    form = open_spawn_form(page, up, "alice")
    # the callable ran for alice; its slug is KubeSpawner's
    card = form.locator(".frachub-profile[data-profile='custom-image-for-alice']")
    assert "Custom image for alice" in card.inner_text()
    assert card.locator("code").inner_text() == "jupyter/"  # the admin's HTML, as in KubeSpawner
    free = card.locator("input[name$='--image--unlisted-choice']")
    assert free.is_hidden() and free.is_disabled()

    card.locator("select").select_option(label="Other image...")
    assert free.is_visible() and not free.is_disabled()
    assert card.locator("input[name='profile']").is_checked()  # choosing an option picks it
    card.locator("label", has_text="0.5 GPU").click()

    free.fill("evil/miner:1")  # the regex refuses it: the browser does not post the form
    page.get_by_role("button", name="Start").click()
    assert not free.evaluate("input => input.validity.valid")
    assert "an image jupyter/<name>:<tag>" in card.inner_text()
    shot("unlisted-choice-refused", page)
    assert up.server("alice") is None

    free.fill("jupyter/r-notebook:4.4")
    shot("unlisted-choice-filled", page)
    page.get_by_role("button", name="Start").click()
    page.wait_for_url(re.compile(r"/user/alice/lab"), timeout=90_000)
    (allocation,) = up.allocations("alice", ["running"])
    assert allocation["gpus"] == 0.5
    picked = in_a_thread(
        lambda: Kernel(up, "alice").text("import os; print(os.environ['PICKED_IMAGE'])")
    )
    assert picked.strip() == "jupyter/r-notebook:4.4"

    # back on the form, the saved free-text value is shown again
    up.stop_server("alice")
    page.goto(f"{up.url}/hub/spawn")
    card = page.locator(".frachub-profile[data-profile='custom-image-for-alice']")
    assert card.locator("input[name$='--unlisted-choice']").input_value() == (
        "jupyter/r-notebook:4.4"
    )


def test_rest_clients_get_the_regex_enforced_with_a_400_naming_the_field(up: Up) -> None:
    options = {
        "profile": "custom-image-for-bob",
        "image--unlisted-choice": "evil/miner:1",
        "gpus": 0.25,
    }
    response = up.start_server("bob", options)
    assert response.status_code == 400, response.text
    message = response.json()["message"]
    assert "user_options.image--unlisted-choice" in message
    assert "an image jupyter/<name>:<tag>" in message
    assert up.allocations("bob", ["pending", "running"]) == []  # refused before asking
