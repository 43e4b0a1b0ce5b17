"""The Training panel and the admin page in a real Chromium, against a real hub, proxy and
service: log in through the hub's form, submit from the panel, watch a job run and its log
grow, cancel one, see why a job waits, and (as an admin) see who holds which share of each
GPU. Every step leaves a screenshot in artifacts/screenshots/.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator

import httpx
import pytest
from hubharness import API_PATH, SERVICE_PREFIX, Hub
from playwright.sync_api import Locator, Page, expect
from service_client import CHECKED, submit, wait_state

from browser.browserharness import HUB_ADMIN_PAGE_GROUP

pytestmark = pytest.mark.browser


@pytest.fixture
def api(oauth_hub: Hub) -> Iterator[Callable[[str], httpx.Client]]:
    """api(token) -> a client of the frachub API, for setting the scene quickly."""
    clients: list[httpx.Client] = []

    def client(token: str) -> httpx.Client:
        made = httpx.Client(
            base_url=oauth_hub.service_url(API_PATH),
            headers={"Authorization": f"token {token}"},
            timeout=30,
            event_hooks=CHECKED,
        )
        clients.append(made)
        return made

    yield client
    for made in clients:
        made.close()


def row(page: Page, workload_id: int) -> Locator:
    return page.locator(f"#frachub-workloads-table tr[data-id='{workload_id}']")


def test_login_opens_the_panel_in_the_hubs_look(
    page: Page, frachub, make_user, login, shot, api
) -> None:
    name, token = make_user(groups=["vision"])
    notebook = api(token).post("allocations", json={"gpus": 0.25}).json()
    login(page, name)
    nav = page.locator("#frachub-nav-training")
    expect(nav).to_have_text("Training")
    expect(nav).to_have_attribute("href", SERVICE_PREFIX)
    expect(page.locator("nav a.nav-link", has_text="Home")).to_have_attribute("href", "/hub/home")
    expect(page.locator("#login_widget")).to_contain_text(name)
    project = page.locator("#frachub-projects-table tr[data-project='vision']")
    expect(project.locator(".frachub-deserved")).to_have_text("1")
    expect(page.locator("#frachub-project")).to_have_value("vision")
    notebook_row = row(page, notebook["id"])
    expect(notebook_row).to_contain_text("notebook")
    expect(notebook_row.locator(".frachub-state")).to_have_text("running")
    expect(notebook_row.locator(".frachub-placement")).to_contain_text("local: GPU")
    expect(notebook_row.locator(".frachub-cancel")).to_have_count(0)  # stop the server instead
    expect(page.locator("#frachub-nav-admin")).to_have_count(0)
    shot("panel")


def test_the_hubs_own_pages_link_to_the_panel(page: Page, frachub, make_user, login, shot) -> None:
    name, _ = make_user(groups=["vision"])
    login(page, name)
    page.goto("/hub/token")
    link = page.locator("#frachub-nav-training")
    expect(link).to_have_attribute("href", SERVICE_PREFIX)
    shot("hub-token-page")
    link.click()
    page.wait_for_url(f"**{SERVICE_PREFIX}")
    expect(page.locator("#frachub-nav-training")).to_have_class(re.compile("active"))


def test_submit_from_the_form_and_watch_the_log_grow(
    page: Page, frachub, make_user, login, shot
) -> None:
    name, _ = make_user(groups=["vision"])
    login(page, name)
    page.fill("#frachub-command", "for i in 1 2 3 4 5 6 7 8; do echo step-$i; sleep 0.5; done")
    page.select_option("#frachub-gpus", "0.5")
    page.fill("#frachub-name", "counting")
    shot("form-filled")
    page.click("#frachub-submit-button")
    expect(page.locator("#frachub-submit-status")).to_contain_text("Submitted #")
    job = page.locator("#frachub-workloads-table tr.frachub-workload", has_text="counting")
    expect(job.locator(".frachub-state")).to_have_text("running")
    expect(job).to_contain_text("0.5 GPU")
    log = page.locator("#frachub-log")
    expect(log).to_contain_text("step-2")
    assert "step-8" not in log.inner_text(), "the log should arrive while the job runs"
    expect(page.locator("#frachub-detail-state")).to_have_text("running")
    expect(page.locator("#frachub-detail-facts")).to_contain_text("local: GPU 0 (0.5)")
    shot("running-with-live-log")
    expect(log).to_contain_text("step-8")
    expect(job.locator(".frachub-state")).to_have_text("succeeded")
    expect(page.locator("#frachub-log-status")).to_have_text("(the job has ended)")
    expect(job).to_contain_text("exit 0")
    shot("succeeded")


def test_form_errors_are_the_apis_messages(page: Page, frachub, make_user, login, shot) -> None:
    name, _ = make_user(groups=["vision"])
    login(page, name)
    page.fill("#frachub-command", "true")
    page.fill("#frachub-replicas", "0")
    page.click("#frachub-submit-button")
    status = page.locator("#frachub-submit-status")
    expect(status).to_have_text("replicas: must be a whole number >= 1, got 0")
    expect(status).to_have_class(re.compile("text-danger"))
    shot("refused")


def test_cancel_a_running_job(page: Page, frachub, make_user, login, shot, api) -> None:
    name, token = make_user(groups=["vision"])
    client = api(token)
    job = submit(client, command="sleep 120", gpus=0.25, name="long-sleep")
    wait_state(client, job["id"], "running")
    login(page, name)
    found = row(page, job["id"])
    expect(found.locator(".frachub-state")).to_have_text("running")
    cancel = found.locator(".frachub-cancel")
    cancel.click()
    expect(cancel).to_have_text("Confirm cancel")
    shot("confirm-cancel")
    cancel.click()
    expect(found.locator(".frachub-state")).to_have_text("cancelled")
    expect(found.locator(".frachub-cancel")).to_have_count(0)
    assert wait_state(client, job["id"], "cancelled")["state"] == "cancelled"
    shot("cancelled")


def test_workload_links_open_the_details(
    page: Page, frachub, oauth_hub: Hub, make_user, login, shot, api
) -> None:
    """A #workload-N link opens that workload's details: a row's name, a link followed from
    elsewhere (on load) and a hash changed on the page."""
    name, token = make_user(groups=["vision"])
    client = api(token)
    first = submit(client, command="true", gpus=0.25, name="first-link")
    second = submit(client, command="true", gpus=0.25, name="second-link")
    login(page, name)
    title = page.locator("#frachub-detail-title")
    expect(title).to_be_hidden()
    row(page, first["id"]).locator("a.frachub-name").click()
    expect(title).to_have_text(f"#{first['id']} first-link")
    assert page.url.endswith(f"#workload-{first['id']}")
    page.evaluate(f"window.location.hash = '#workload-{second['id']}'")
    expect(title).to_have_text(f"#{second['id']} second-link")
    page.goto("about:blank")
    page.goto(oauth_hub.service_url() + f"#workload-{first['id']}")
    expect(title).to_have_text(f"#{first['id']} first-link")
    shot("opened-by-link")
    page.click("#frachub-detail-close")
    expect(title).to_be_hidden()
    assert "#" not in page.url


def test_a_pending_job_shows_its_reason_and_queue_position(
    page: Page, frachub, make_user, login, shot, api
) -> None:
    name, token = make_user(groups=["vision"])
    client = api(token)
    whole = submit(client, command="sleep 120", gpus=2, name="takes-both")
    wait_state(client, whole["id"], "running")
    first = submit(client, command="sleep 1", gpus=1, name="waits-first")
    second = submit(client, command="sleep 1", gpus=1, name="waits-second")
    login(page, name)
    for job, position in ((first, 1), (second, 2)):
        found = row(page, job["id"])
        expect(found.locator(".frachub-state")).to_have_text("pending")
        expect(found.locator(".frachub-queue-position")).to_have_text(f"#{position} in queue")
        reason = found.locator(".frachub-pending-reason")
        expect(reason).not_to_be_empty()
        waiting = wait_state(client, job["id"], "pending")
        # the plain headline in the row, the engine's full reason on hover
        assert reason.inner_text() == waiting["pending_headline"]
        expect(reason).to_have_attribute("title", waiting["pending_reason"])
    row(page, second["id"]).click()
    facts = page.locator("#frachub-detail-facts")
    expect(facts).to_contain_text("Waiting")
    why = facts.locator("details.frachub-why")
    if why.count():  # the engine's detail sits behind a toggle, hidden until opened
        expect(why.locator(".frachub-why-detail")).not_to_be_visible()
        why.locator("summary").click()
        expect(why.locator(".frachub-why-detail")).to_be_visible()
    shot("pending")


def test_timeline_of_a_borrowed_preempted_and_restarted_job(
    page: Page, frachub, make_user, login, shot, api
) -> None:
    """The README's story: alice's second job borrows nlp's idle GPU (a badge says so and
    who may take it back), carol's notebook in nlp reclaims it (preempted, with the grace
    period), it waits first in line, and restarts as attempt 2 once carol is done; its log
    shows its own unbuffered ``restart 1`` between FracHub's lines."""
    alice, alice_token = make_user(groups=["vision"])
    _carol, carol_token = make_user(groups=["nlp"])
    owner, carol = api(alice_token), api(carol_token)
    script = (
        "import os, time; print('restart', os.environ['FRACHUB_RESTART_COUNT']); time.sleep(300)"
    )
    first = submit(owner, command="sleep 300", gpus=1, name="within-quota")
    wait_state(owner, first["id"], "running")
    job = submit(owner, command=[sys.executable, "-c", script], gpus=1, name="borrower")
    wait_state(owner, job["id"], "running")
    login(page, alice)
    badge = row(page, job["id"]).locator(".frachub-borrowed")
    expect(badge).to_have_text("borrowed")
    expect(badge).to_have_attribute("title", re.compile("may be preempted when nlp needs its GPUs"))
    expect(row(page, first["id"]).locator(".frachub-borrowed")).to_have_count(0)
    row(page, job["id"]).click()
    facts = page.locator("#frachub-detail-facts")
    expect(facts).to_contain_text("beyond its 1 GPU quota")
    expect(facts).to_contain_text(f'{sys.executable} -c "import os, time;')  # a list, spaced
    expect(facts).to_contain_text("local: GPU 1")
    expect(facts).not_to_contain_text("(1)")  # a whole GPU needs no share
    expect(page.locator("#frachub-log")).to_contain_text("restart 0")  # unbuffered
    shot("borrowed")

    notebook = carol.post("allocations", json={"gpus": 1}).json()
    wait_state(owner, job["id"], "pending", timeout=30)
    timeline = page.locator("#frachub-timeline")
    expect(timeline).to_contain_text(f"preempted for nlp/{notebook['name']}")
    expect(timeline).to_contain_text("grace period")
    expect(timeline).to_contain_text("#1 in vision")
    expect(page.locator("#frachub-detail-facts")).to_contain_text("Preempted1 time")
    shot("preempted")

    carol.delete(f"allocations/{notebook['id']}")
    wait_state(owner, job["id"], "running", timeout=30)
    expect(timeline.locator(".frachub-event-restarted")).to_contain_text("restarted: attempt 2")
    expect(page.locator("#frachub-log")).to_contain_text("restart 1")
    expect(page.locator("#frachub-detail-facts")).to_contain_text("Restarts1")
    types = [item.get_attribute("data-type") for item in timeline.locator("li").all()]
    assert types[:6] == ["submitted", "started", "borrowed", "preempting", "requeued", "restarted"]
    log = page.locator("#frachub-log").inner_text()
    assert log.index("restart 0") < log.index("preempted for nlp/") < log.index("restart 1")
    shot("restarted")
    for workload in (first, job):
        owner.delete(f"workloads/{workload['id']}")


def test_an_admin_sees_the_gpu_map_with_each_users_share(
    page: Page, frachub, make_user, login, shot, api
) -> None:
    vision, vision_token = make_user(groups=["vision"])
    nlp, nlp_token = make_user(groups=["nlp"])
    admin, admin_token = make_user(admin=True)
    half = submit(api(vision_token), command="sleep 120", gpus=0.5, name="half")
    quarter = submit(api(nlp_token), command="sleep 120", gpus=0.25, name="quarter")
    for token, job in ((vision_token, half), (nlp_token, quarter)):
        wait_state(api(token), job["id"], "running")
    login(page, admin)
    page.click("#frachub-nav-admin")
    page.wait_for_url(re.compile(r"/services/frachub/admin$"))
    shares = page.locator("#frachub-nodes .frachub-share")
    expect(shares).to_have_count(2)
    mine = page.locator(f".frachub-share[data-user='{vision}']")
    expect(mine).to_have_attribute("data-share", "0.5")
    expect(mine).to_contain_text(f"{vision} 0.5")
    expect(page.locator(f".frachub-share[data-user='{nlp}']")).to_have_attribute(
        "data-share", "0.25"
    )
    expect(page.locator("#frachub-queues-table tr[data-queue='vision']")).to_contain_text("0.5")
    # a queue with CPU and memory quotas shows them beside its GPUs (rule 3b)
    made = api(admin_token).post(
        "queues",
        json={"name": "cpu-lab", "deserved_cpu": 8, "limit_cpu": 16, "limit_memory_gib": 64},
    )
    assert made.status_code == 201, made.text
    lab = page.locator("#frachub-queues-table tr[data-queue='cpu-lab']")
    expect(lab.locator(".frachub-queue-cpu")).to_have_text("0 in use · fair 0 · quota 8 · limit 16")
    expect(lab.locator(".frachub-queue-memory")).to_have_text(
        "0 in use · fair 0 · no quota · limit 64"
    )
    vision_cpu = page.locator("#frachub-queues-table tr[data-queue='vision'] .frachub-queue-cpu")
    expect(vision_cpu).to_contain_text("no quota")
    expect(page.locator("#frachub-active-table tr.frachub-workload")).to_have_count(2)
    expect(page.locator("#frachub-legend")).to_contain_text(vision)
    # how shares are enforced, per node (LocalBackend.gpu_sharing; cooperative here)
    expect(page.locator(".frachub-node .frachub-sharing")).to_have_text(" · sharing: cooperative")
    # two users whose names differ in one character get clearly different colours (a hash
    # of the name once gave rgb(48,158,166) and rgb(48,148,166)), the legend's the same
    colours = [
        page.locator(f".frachub-share[data-user='{user}']").evaluate(
            "e => getComputedStyle(e).backgroundColor"
        )
        for user in (vision, nlp)
    ]
    channels = [[int(c) for c in re.findall(r"\d+", colour)[:3]] for colour in colours]
    assert max(abs(a - b) for a, b in zip(*channels, strict=True)) >= 80, colours
    swatch = page.locator("#frachub-legend span.text-nowrap", has_text=vision).locator(
        ".frachub-swatch"
    )
    assert swatch.evaluate("e => getComputedStyle(e).backgroundColor") == colours[0]
    shot("gpu-map")
    assert api(admin_token).delete("queues/cpu-lab").status_code == 204


def test_who_may_open_the_hubs_admin_page_finds_it_from_the_panel(
    page: Page, frachub, make_user, login, shot
) -> None:
    """The hub's own pages show their Admin link to who holds admin-ui; FracHub's pages show
    it to them too (the panel's OAuth token carries admin-ui for them), and it opens."""
    name, _ = make_user(groups=[HUB_ADMIN_PAGE_GROUP])
    login(page, name)
    link = page.locator(".navbar a.nav-link", has_text=re.compile("^Admin$"))
    expect(link).to_have_count(1)
    expect(page.locator("#frachub-nav-training")).to_be_visible()
    expect(page.locator("#frachub-nav-admin")).to_have_count(0)  # no FracHub admin scope
    shot("hub-admin-link")
    with page.expect_navigation():
        link.click()
    expect(page).to_have_url(re.compile(r"/hub/admin"))
    assert "403" not in page.title()


def test_a_user_gets_no_admin_section(page: Page, frachub, make_user, login, shot) -> None:
    name, _ = make_user(groups=["nlp"])
    login(page, name)
    expect(page.locator("#frachub-workloads-table")).to_be_visible()
    expect(page.locator("#frachub-nav-admin")).to_have_count(0)
    expect(page.locator(".navbar a.nav-link", has_text=re.compile("^Admin$"))).to_have_count(0)
    expect(page.locator("#frachub-admin-link")).to_have_count(0)
    expect(page.locator("#frachub-gpu-map")).to_have_count(0)
    answer = page.goto(f"{SERVICE_PREFIX}admin")
    assert answer is not None and answer.status == 403
    expect(page.locator("h1")).to_contain_text("403")
    expect(page.locator("body")).to_contain_text(
        "needs the scope custom:frachub:admin: your login to FracHub lacks it; the hub grants "
        "it to FracHub admins"
    )
    # still logged in, and it shows: the user's name, Logout and the way back to the panel
    expect(page.locator("#login_widget")).to_contain_text(name)
    expect(page.locator("#logout")).to_be_visible()
    expect(page.locator("#frachub-nav-training")).to_be_visible()
    expect(page).to_have_title(re.compile("403"))
    shot("admin-refused")


def test_an_admin_in_no_project_is_told_they_may_submit_to_any(
    page: Page, frachub, make_user, login, shot
) -> None:
    """The panel offered an admin every project while saying "You are in no project"."""
    admin, _ = make_user(admin=True)
    login(page, admin)
    projects = page.locator("#frachub-projects-table tbody")
    expect(projects).to_contain_text("as an admin you may submit to any project")
    expect(page.locator("#frachub-project option[value='vision']")).to_have_count(1)
    expect(page.locator("#frachub-submit-button")).to_be_enabled()
    shot("admin-no-project")


def test_a_sweep_from_the_form(page: Page, frachub, make_user, login, shot, api) -> None:
    """Run:ai's HPO workloads from the panel: one job per combination, at most "At once"
    holding GPUs together, each with its values in its environment."""
    name, token = make_user(groups=["vision"])
    login(page, name)
    page.fill("#frachub-command", 'echo "lr=$FRACHUB_SWEEP_LR bs=$FRACHUB_SWEEP_BS"; sleep 1')
    page.select_option("#frachub-gpus", "0.25")
    page.fill("#frachub-name", "hpo")
    page.fill("#frachub-sweep", "lr=0.1,0.01 bs=32,64")
    page.fill("#frachub-parallel", "2")
    shot("sweep-filled")
    page.click("#frachub-submit-button")
    status = page.locator("#frachub-submit-status")
    expect(status).to_contain_text("Submitted sweep #")
    expect(status).to_contain_text("4 jobs, at most 2 at once")
    rows = page.locator("#frachub-workloads-table tr.frachub-workload", has_text="hpo-")
    expect(rows).to_have_count(4)
    sweep_id = int(status.inner_text().split("#")[1].split(":")[0])
    members = api(token).get(f"sweeps/{sweep_id}").json()["workloads"]
    assert [member["name"] for member in members] == [f"hpo-{i}" for i in range(4)]
    page.fill("#frachub-sweep", "1lr=0.1")
    page.click("#frachub-submit-button")
    expect(status).to_contain_text("sweep.parameters")  # the API's refusal, naming the field
    shot("sweep-submitted")
