"""The usage history charts read at a glance, in a real Chromium against a real hub and a
fresh service per test: a new install (no sample yet, then one) says data is being
collected instead of drawing a lone dot; a day and a week of minute samples (written into
the service's database as its sampler writes them) draw as steps with ticks on round hours
(a day) or midnights (a week), none repeated, the note naming the true peak (a one-minute
spike the 5-minute means flatten) and the average, "recorded since" the oldest sample and
unmoved by a refresh, and the legend as crisp line swatches with each series' dash pattern.

Screenshots of the history section go to artifacts/screenshots/history-{new-install,
collecting,day,week}.png; docs/images/history-{new-install,day,week}.png are copies.
"""

from __future__ import annotations

import itertools
import math
import random
import re
import sqlite3
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hubharness import Hub, ServiceProcess
from playwright.sync_api import Page, expect
from service_client import service_config

from browser.browserharness import SCREENSHOTS

pytestmark = pytest.mark.browser

MINUTE = 60.0
HOUR = 3600.0
DAY = 86400.0
SPIKE_AGE = 5 * HOUR + 2 * MINUTE
"""How long ago vision's one-minute spike to 2 GPUs was: inside the last day."""

TICKS = """(selector) => {
  const chart = Chart.getChart(document.querySelector(selector));
  return chart.scales.x.ticks.map((tick) => ({ value: tick.value, label: tick.label }));
}"""
DATASETS = """(selector) => Chart.getChart(document.querySelector(selector)).data.datasets.map(
  (set) => ({ label: set.label, stepped: set.stepped, points: set.data.length,
              max: Math.max(...set.data.map((point) => point.y ?? 0)) }))"""
LEGEND = """(selector) => [
  ...document.querySelectorAll(selector + " .frachub-history-legend li"),
].map((item) => {
    const shape = item.querySelector("svg > *");
    return { text: item.textContent.trim(), shape: shape.tagName,
             dash: shape.getAttribute("stroke-dasharray"), stroke: shape.getAttribute("stroke") };
  })"""


@pytest.fixture
def service(oauth_hub: Hub, tmp_path: Path) -> Iterator[ServiceProcess]:
    """A fresh service per test, sampling at the default minute (so no sample of its own
    lands during a test of a few seconds), and its database to write samples into."""
    process = ServiceProcess(oauth_hub, service_config(gpus=2), tmp_path)
    with process:
        yield process


def database(service: ServiceProcess) -> Path:
    return service.workdir / "frachub-data" / "frachub.sqlite"


def write_samples(service: ServiceProcess, rows: list[tuple]) -> None:
    """Rows (time, project, allocated, deserved, fair share, running, pending, cluster GPUs)
    into the running service's SQLite store, as its sampler writes them."""
    with sqlite3.connect(database(service)) as db:
        db.executemany(
            "INSERT INTO usage_samples (time, project, allocated_gpus, deserved_gpus, "
            "fair_share_gpus, running, pending, cluster_gpus) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )


def week_of_samples(now: float) -> list[tuple]:
    """A week of minute samples of a 2-GPU cluster: vision (quota 1) busy in working hours
    and borrowing, with one minute at 2 GPUs; nlp (quota 1) training in long runs; guests
    now and then; and the cluster's row summing them, with a queue when both want more."""
    rows = []
    start = now - 7 * DAY - 30 * MINUTE
    for k in range(int((now - start) // MINUTE)):
        moment = start + k * MINUTE
        hour = datetime.fromtimestamp(moment, timezone.utc).hour
        weekday = datetime.fromtimestamp(moment, timezone.utc).weekday() < 5
        luck = random.Random(int(moment // HOUR)).random()
        vision = (1.5 if luck > 0.6 else 1.0) if weekday and 8 <= hour < 19 else 0.5 * (luck > 0.7)
        nlp = 1.0 if int(moment // (6 * HOUR)) % 3 else 0.0
        nlp = min(nlp, 2.0 - vision)
        guests = 0.25 if luck < 0.1 and vision + nlp <= 1.75 else 0.0
        if abs(now - SPIKE_AGE - moment) < MINUTE / 2:
            vision, nlp, guests = 2.0, 0.0, 0.0
        used = vision + nlp + guests
        idle = 2.0 - used
        pending = int(vision >= 1.5 and nlp >= 0.5)
        projects = [
            ("vision", vision, 1.0, 1.0 + idle / 2, math.ceil(vision), pending),
            ("nlp", nlp, 1.0, 1.0 + idle / 2, math.ceil(nlp), 0),
            ("guests", guests, 0.0, guests, int(guests > 0), 0),
        ]
        for name, allocated, deserved, fair, running, waiting in projects:
            rows.append((moment, name, allocated, deserved, fair, running, waiting, 2.0))
        rows.append(
            (
                moment,
                "",
                used,
                2.0,
                sum(p[3] for p in projects),
                sum(p[4] for p in projects),
                pending,
                2.0,
            )
        )
    return rows


def keep(page: Page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"history-{name}.png"
    page.locator("#frachub-history").screenshot(path=str(path))
    return path


def open_history(page: Page, login, name: str, window: str = "day") -> dict:
    """Log in (the panel loads the day), switch to ``window``; the history answer drawn."""
    with page.expect_response(lambda r: "/api/v1/history?" in r.url) as answered:
        login(page, name)
    if window != "day":
        with page.expect_response(lambda r: "/api/v1/history?" in r.url) as answered:
            page.click(f"label[for='frachub-history-{window}']")
    expect(page.locator("#frachub-history-charts")).to_have_attribute("data-loaded", window)
    return answered.value.json()


def test_a_new_install_says_data_is_being_collected(
    page: Page, service: ServiceProcess, make_user, login
) -> None:
    admin, _ = make_user(admin=True)
    answer = open_history(page, login, admin)
    assert answer["recorded_since"] is None and answer["cluster"] == []
    assert answer["sample_interval_seconds"] == 60
    expect(page.locator("#frachub-history-range")).to_contain_text("nothing recorded yet")
    for key in ("cluster", "project-vision", "project-nlp"):
        box = page.locator(f"#frachub-history-{key}")
        expect(box.locator(".frachub-history-empty")).to_have_text(
            "No samples in the last 24 hours yet: data is being collected (a sample every 1 min)."
        )
        expect(box.locator("canvas")).to_be_hidden()
        expect(box.locator(".frachub-history-note")).to_have_text("")
    keep(page, "new-install")

    # the first sample: one point is not drawn as a lone dot, it is said
    first = time.time() - 20
    write_samples(
        service,
        [(first, "vision", 1.0, 1.0, 1.0, 1, 0, 2.0), (first, "", 1.0, 2.0, 2.0, 1, 0, 2.0)],
    )
    page.click("label[for='frachub-history-hour']")
    expect(page.locator("#frachub-history-charts")).to_have_attribute("data-loaded", "hour")
    vision = page.locator("#frachub-history-project-vision")
    expect(vision.locator(".frachub-history-empty")).to_contain_text(
        "Data is being collected: one sample so far"
    )
    expect(vision.locator(".frachub-history-empty")).to_contain_text("1 in use")
    expect(vision.locator("canvas")).to_be_hidden()
    expect(vision.locator(".frachub-history-note")).to_have_text(
        "peak 1 · average 1 in use · quota 1"
    )
    range_text = page.locator("#frachub-history-range")
    expect(range_text).to_contain_text("the last hour, one point per sample (every 1 min)")
    expect(range_text).to_contain_text("recorded since")
    expect(page.locator("#frachub-history-cluster .frachub-history-note")).to_have_text(
        "peak 1 · average 1 of 2 GPUs in use · none queued"
    )
    keep(page, "collecting")


def test_a_day_of_samples_reads_at_a_glance(
    page: Page, service: ServiceProcess, make_user, login
) -> None:
    now = time.time()
    write_samples(service, week_of_samples(now))
    admin, _ = make_user(admin=True)
    answer = open_history(page, login, admin)
    vision = next(item for item in answer["projects"] if item["project"] == "vision")
    means = [point["allocated_gpus"] for point in vision["points"]]
    assert vision["summary"]["peak_allocated_gpus"] == 2.0, "the spike is the peak"
    assert max(means) < 2.0, "no 5-minute mean reaches the one-minute spike"
    assert vision["summary"]["samples"] >= 1430
    assert answer["step_seconds"] == 300.0
    canvas = "#frachub-history-project-vision canvas"
    expect(page.locator(canvas)).to_be_visible()
    expect(page.locator("#frachub-history-project-vision .frachub-history-note")).to_have_text(
        f"peak 2 · average {_number(vision['summary']['average_allocated_gpus'])} in use · quota 1"
    )
    sets = {item["label"]: item for item in page.evaluate(DATASETS, canvas)}
    assert set(sets) == {
        "in use (average per 5 min)",
        "in use (peak per 5 min)",
        "quota",
        "fair share",
    }
    assert all(item["stepped"] == "before" for item in sets.values())
    assert sets["in use (peak per 5 min)"]["max"] == 2.0, "the chart shows the peak it names"

    ticks = page.evaluate(TICKS, canvas)
    labels = [tick["label"] for tick in ticks]
    assert len(labels) == len(set(labels)), f"a tick label repeats: {labels}"
    spacing = {round(b["value"] - a["value"]) for a, b in itertools.pairwise(ticks)}
    assert spacing == {3 * HOUR * 1000}, labels
    assert 7 <= len(ticks) <= 8, labels
    assert all(re.fullmatch(r"\d\d:00|\w{3} \d{1,2}", label) for label in labels), labels
    assert sum(":" not in label for label in labels) == 1, "midnight is named by its day"

    drawn = page.evaluate(LEGEND, "#frachub-history-project-vision")
    legend = {item["text"]: item for item in drawn}
    assert list(legend) == list(sets)
    assert legend["quota"]["shape"] == "line" and legend["quota"]["dash"] == "6 4"
    assert legend["fair share"]["dash"] == "2 3"
    assert legend["in use (average per 5 min)"]["shape"] == "rect"

    since = datetime.fromisoformat(answer["recorded_since"].replace("Z", "+00:00"))
    assert abs(since.timestamp() - (now - 7 * DAY - 30 * MINUTE)) < 1
    range_text = page.locator("#frachub-history-range")
    expect(range_text).to_contain_text("the last 24 hours, one point per 5 min; recorded since")
    said = range_text.text_content()
    with page.expect_response(lambda r: "/api/v1/history?" in r.url):
        page.click("label[for='frachub-history-hour']")
    expect(page.locator("#frachub-history-charts")).to_have_attribute("data-loaded", "hour")
    with page.expect_response(lambda r: "/api/v1/history?" in r.url):
        page.click("label[for='frachub-history-day']")
    expect(page.locator("#frachub-history-charts")).to_have_attribute("data-loaded", "day")
    assert range_text.text_content().split("; ")[1] == said.split("; ")[1], "recorded since stays"
    queued = answer["cluster_summary"]["peak_pending"]
    cluster = page.locator("#frachub-history-cluster .frachub-history-note")
    words = f"up to {queued} queued" if queued else "none queued"
    expect(cluster).to_contain_text(f"of 2 GPUs in use · {words}")
    keep(page, "day")


def test_a_week_of_samples_has_a_tick_a_day(
    page: Page, service: ServiceProcess, make_user, login
) -> None:
    write_samples(service, week_of_samples(time.time()))
    name, _ = make_user(groups=["vision"])
    answer = open_history(page, login, name, "week")
    assert [item["project"] for item in answer["projects"]] == ["vision"]
    assert answer["cluster"] is None and answer["cluster_summary"] is None
    assert answer["step_seconds"] == 1800.0
    canvas = "#frachub-history-project-vision canvas"
    ticks = page.evaluate(TICKS, canvas)
    labels = [tick["label"] for tick in ticks]
    assert len(ticks) == 7 and len(set(labels)) == 7, labels
    assert all(re.fullmatch(r"\w{3} \d{1,2}", label) for label in labels), labels
    expect(page.locator("#frachub-history-range")).to_contain_text(
        "the last 7 days, one point per 30 min"
    )
    expect(page.locator("#frachub-history-project-vision .frachub-history-note")).to_contain_text(
        "peak 2 · average"
    )
    keep(page, "week")


def _number(value: float) -> str:
    """As the page's number() writes it."""
    text = str(round(value * 1000) / 1000)
    return text.removesuffix(".0")
