"""The panel's usage history in a real Chromium against a real hub and service that samples
every 0.2 s: each of the user's projects charted with what the service recorded (GPUs in use,
quota, fair share), the whole cluster with its queue for admins, and the GPU-hours CSV
downloaded through the page. The charts are asserted on the data Chart.js was given (the
same answer the page fetched) and on pixels the canvas drew. Screenshots go to
artifacts/screenshots/ (docs/images/history-*.png are copies of them).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from hubharness import API_PATH, Hub, ServiceProcess
from playwright.sync_api import Page, expect
from service_client import CHECKED, service_config, submit, wait_for, wait_state

from browser.browserharness import SCREENSHOTS

pytestmark = pytest.mark.browser

SAMPLING = "c.FracHubService.usage_sample_interval = 0.2\n"

CHART_DATA = """(selector) => {
  const chart = Chart.getChart(document.querySelector(selector));
  return chart.data.datasets.map((set) => ({
    label: set.label,
    points: set.data.map((point) => [point.x, point.y]),
  }));
}"""

INK = """(selector) => {
  // pixels of the canvas that are drawn in the "in use" blue (rgb(13, 110, 253))
  const canvas = document.querySelector(selector);
  const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let drawn = 0, blue = 0;
  for (let i = 0; i < pixels.length; i += 4) {
    if (pixels[i + 3] === 0) continue;
    drawn += 1;
    const [r, g, b] = [pixels[i], pixels[i + 1], pixels[i + 2]];
    if (r < 60 && g > 80 && g < 140 && b > 220) blue += 1;
  }
  return { drawn, blue };
}"""


@pytest.fixture(scope="module")
def frachub_process(
    oauth_hub: Hub, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    """The module's service, sampling usage every 0.2 s (the default is a minute)."""
    service = ServiceProcess(
        oauth_hub,
        service_config(gpus=2, grace=1.0, extra=SAMPLING),
        tmp_path_factory.mktemp("frachub-history"),
    )
    with service:
        yield service


def client(hub: Hub, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=hub.service_url(API_PATH),
        headers={"Authorization": f"token {token}"},
        timeout=30,
        event_hooks=CHECKED,
    )


def sampled(api: httpx.Client, project: str, test) -> None:
    """Wait until the service has sampled ``project`` in a state ``test`` accepts."""

    def seen() -> bool:
        answer = api.get("history", params={"project": project, "points": 1000})
        return any(test(point) for item in answer.json()["projects"] for point in item["points"])

    wait_for(seen, timeout=20, what=f"a sample of {project}")


def expected(points: list[dict], fields: dict[str, str]) -> dict[str, list]:
    """What the chart should have been given: ``fields`` of ``points`` by label, as
    [milliseconds, value] pairs."""

    def ms(text: str) -> float:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000

    return {
        label: [[ms(point["time"]), point[field]] for point in points]
        for label, field in fields.items()
    }


def charted(page: Page, selector: str) -> dict[str, list]:
    return {s["label"]: s["points"] for s in page.evaluate(CHART_DATA, selector)}


def keep(page: Page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"history-{name}.png"
    page.locator("#frachub-history").screenshot(path=str(path))
    return path


def test_a_user_sees_their_projects_history_and_downloads_the_csv(
    page: Page, frachub, oauth_hub: Hub, make_user, login, shot
) -> None:
    name, token = make_user(groups=["vision"])
    with client(oauth_hub, token) as api:
        job = submit(api, command="sleep 120", gpus=1, name="charted")
        wait_state(api, job["id"], "running")
        sampled(api, "vision", lambda point: point["allocated_gpus"] > 0)
        with page.expect_response(lambda r: "/api/v1/history?" in r.url) as answered:
            login(page, name)
        answer = answered.value.json()
    assert answer["cluster"] is None, "only admins get the cluster"
    assert [item["project"] for item in answer["projects"]] == ["vision"]
    (vision,) = answer["projects"]
    canvas = "#frachub-history-project-vision canvas"
    expect(page.locator(canvas)).to_be_visible()
    expect(page.locator("#frachub-history-charts")).to_have_attribute("data-loaded", "day")
    expect(page.locator("#frachub-history-nlp")).to_have_count(0)
    expect(page.locator("#frachub-history-cluster")).to_have_count(0)
    drawn = charted(page, canvas)
    assert drawn == expected(
        vision["points"],
        {"in use": "allocated_gpus", "quota": "deserved_gpus", "fair share": "fair_share_gpus"},
    )
    assert max(y for _, y in drawn["in use"]) > 0, "the running job's GPU shows"
    assert {y for _, y in drawn["quota"]} == {1.0}, "vision's quota is 1 GPU"
    ink = page.evaluate(INK, canvas)
    assert ink["drawn"] > 1000 and ink["blue"] > 20, ink
    note = page.locator("#frachub-history-project-vision .frachub-history-note")
    expect(note).to_contain_text("quota 1")
    expect(page.locator("#frachub-history-range")).to_contain_text("the last 24 hours")
    keep(page, "user")
    shot("user-history")

    with page.expect_response(lambda r: "/api/v1/history?" in r.url) as week:
        page.click("label[for='frachub-history-week']")
    assert week.value.ok
    expect(page.locator("#frachub-history-charts")).to_have_attribute("data-loaded", "week")
    expect(page.locator("#frachub-history-range")).to_contain_text("the last 7 days")
    (weekly,) = week.value.json()["projects"]
    assert (
        charted(page, canvas)["in use"] == expected(weekly["points"], {"u": "allocated_gpus"})["u"]
    )

    with page.expect_download() as downloading:
        page.click("#frachub-csv-download")
    download = downloading.value
    assert download.suggested_filename.startswith("frachub-usage-")
    rows = list(csv.reader(io.StringIO(Path(download.path()).read_text())))
    assert rows[0] == [
        "project",
        "user",
        "gpu_hours",
        "cpu_hours",
        "memory_gib_hours",
        "start",
        "end",
    ]
    assert [(row[0], row[1]) for row in rows[1:]] == [("vision", name)]
    assert float(rows[1][2]) > 0
    expect(page.locator("#frachub-csv-status")).to_have_text("downloaded 1 row")


def test_a_bad_csv_range_is_the_apis_message(page: Page, frachub, make_user, login, shot) -> None:
    name, _ = make_user(groups=["vision"])
    login(page, name)
    page.fill("#frachub-csv-start", "2020-01-01")
    page.fill("#frachub-csv-end", "2022-01-01")
    page.click("#frachub-csv-download")
    status = page.locator("#frachub-csv-status")
    expect(status).to_have_text("start: must be at most 366 days before end")
    shot("csv-refused")


def test_an_admin_sees_the_cluster_with_its_queue(
    page: Page, frachub, oauth_hub: Hub, make_user, login, shot
) -> None:
    _, token = make_user(groups=["vision"])
    admin, admin_token = make_user(admin=True)
    with client(oauth_hub, token) as api, client(oauth_hub, admin_token) as admin_api:
        running = submit(api, command="sleep 120", gpus=1, name="holding")
        wait_state(api, running["id"], "running")
        waiting = submit(api, command="sleep 120", gpus=2, name="waiting")
        wait_state(api, waiting["id"], "pending")

        def queued() -> bool:
            answer = admin_api.get("history", params={"points": 1000}).json()
            return any(point["pending"] >= 1 for point in answer["cluster"])

        wait_for(queued, timeout=20, what="a sample of the cluster with a queue")
        with page.expect_response(lambda r: "/api/v1/history?" in r.url) as answered:
            login(page, admin)
        answer = answered.value.json()
    canvas = "#frachub-history-cluster canvas"
    expect(page.locator(canvas)).to_be_visible()
    drawn = charted(page, canvas)
    assert drawn == expected(
        answer["cluster"],
        {
            "in use": "allocated_gpus",
            "cluster GPUs": "cluster_gpus",
            "queued workloads": "pending",
            "running workloads": "running",
        },
    )
    assert {y for _, y in drawn["cluster GPUs"]} == {2.0}
    assert max(y for _, y in drawn["queued workloads"]) >= 1
    projects = [item["project"] for item in answer["projects"]]
    assert "vision" in projects and "nlp" in projects, projects
    expect(page.locator("#frachub-history-project-vision canvas")).to_be_visible()
    ink = page.evaluate(INK, canvas)
    assert ink["drawn"] > 1000 and ink["blue"] > 20, ink
    expect(page.locator("#frachub-history-cluster .frachub-history-note")).to_contain_text(
        "of 2 GPUs"
    )
    keep(page, "admin")
    shot("admin-history")
