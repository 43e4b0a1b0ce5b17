"""A job's GPU use in a real Chromium, against a real hub and a service whose NVML is the fake
one (``tests/fakenvml.py``), sampling every 0.25 s: the panel's job details draw a live chart
of its utilization and memory against its share, and the admin GPU map shows each GPU's
utilization, each share's memory and the borrowed share marked.

Screenshots: artifacts/screenshots/gpu-use-{panel,admin}.png; docs/images/gpu-use-panel.png
and docs/images/gpu-use-admin.png are copies.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fakenvml import GIB, FakeNvml, install_line
from hubharness import API_PATH, Hub, ServiceProcess
from playwright.sync_api import Page, expect
from service_client import CHECKED, service_config, wait_for

from browser.browserharness import SCREENSHOTS

pytestmark = pytest.mark.browser

POINTS = """(selector) => Chart.getChart(document.querySelector(selector)).data.datasets.map(
  (set) => ({ label: set.label, points: set.data.length,
              max: Math.max(...set.data.map((point) => point.y ?? 0)) }))"""


@pytest.fixture
def nvml(tmp_path: Path) -> FakeNvml:
    fake = FakeNvml(state_file=tmp_path / "nvml.json")
    fake.set_processes(0, {})
    return fake


@pytest.fixture
def service(oauth_hub: Hub, nvml: FakeNvml, tmp_path: Path) -> Iterator[ServiceProcess]:
    extra = install_line(nvml.state_file) + "c.GpuMetrics.interval = 0.25\n"
    with ServiceProcess(oauth_hub, service_config(gpus=2, extra=extra), tmp_path) as process:
        yield process


def start_job(client: httpx.Client, tmp_path: Path, gpus: float, name: str) -> tuple[dict, int]:
    pid_file = tmp_path / f"{name}.pid"
    created = client.post(
        "workloads",
        json={"name": name, "gpus": gpus, "command": f"echo $$ > {pid_file}; exec sleep 300"},
    ).json()
    running = wait_for(
        lambda: (w := client.get(f"workloads/{created['id']}").json())["state"] == "running" and w,
        30,
        f"{name} to run",
    )
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 20, "pid"))
    return running, pid


class Load(threading.Thread):
    """Moves the fake GPUs' figures like a training loop's: utilization in waves, memory
    growing to a plateau, until stopped."""

    def __init__(self, nvml: FakeNvml, jobs: list[tuple[int, int, float]]) -> None:
        super().__init__(daemon=True)
        self.nvml, self.jobs = nvml, jobs
        self.done = threading.Event()

    def run(self) -> None:
        began = time.monotonic()
        while not self.done.is_set():
            t = time.monotonic() - began
            for gpu, pid, peak_gib in self.jobs:
                busy = round(55 + 30 * math.sin(t / 1.5 + gpu) + 8 * math.sin(t * 3.1))
                memory = peak_gib * min(1.0, 0.35 + t / 8) * GIB
                self.nvml.set_processes(gpu, {pid: int(memory)})
                self.nvml.set_utilization(gpu, min(100, busy + 6))
                self.nvml.set_process_utilization(gpu, {pid: busy})
            self.done.wait(0.2)


def test_the_panel_charts_a_jobs_gpu_and_the_admin_map_shows_utilization(
    service: ServiceProcess,
    oauth_hub: Hub,
    nvml: FakeNvml,
    make_user,
    page: Page,
    login,
    tmp_path: Path,
) -> None:
    alice, token = make_user(groups=["vision"])
    with httpx.Client(
        base_url=oauth_hub.service_url(API_PATH),
        headers={"Authorization": f"token {token}"},
        timeout=30,
        event_hooks=CHECKED,
    ) as client:
        train, train_pid = start_job(client, tmp_path, 0.5, "resnet")
        extra, extra_pid = start_job(client, tmp_path, 1, "bert-borrowed")
        gpus = [w["placement"][0]["gpus"][0]["index"] for w in (train, extra)]
        load = Load(nvml, [(gpus[0], train_pid, 31.0), (gpus[1], extra_pid, 58.0)])
        load.start()
        try:
            time.sleep(8)  # some 30 samples for the chart
            login(page, alice)
            page.goto(oauth_hub.service_url() + f"#workload-{train['id']}")
            box = page.locator("#frachub-gpu-use")
            expect(box).to_be_visible(timeout=15000)
            expect(page.locator("#frachub-gpu-use-summary")).to_contain_text(
                "busy (its own processes)"
            )
            expect(page.locator("#frachub-gpu-use-summary")).to_contain_text("of 40 GiB in use")
            page.wait_for_function(
                "() => window.Chart && Chart.getChart(document.querySelector("
                "'#frachub-gpu-chart')) && Chart.getChart(document.querySelector("
                "'#frachub-gpu-chart')).data.datasets[0].data.length >= 20",
                timeout=15000,
            )
            sets = page.evaluate(POINTS, "#frachub-gpu-chart")
            labels = [s["label"] for s in sets]
            assert labels == ["utilization %", "memory in use (GiB)", "share's memory (GiB)"]
            assert 20 < sets[0]["max"] <= 100 and 10 < sets[1]["max"] <= 31.5, sets
            assert sets[2]["max"] == 40, sets
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.locator("#frachub-detail").screenshot(path=str(SCREENSHOTS / "gpu-use-panel.png"))

            admin, _ = make_user(admin=True)
            page.context.clear_cookies()
            login(page, admin)
            page.click("#frachub-nav-admin")
            reading = page.locator(f".frachub-gpu[data-gpu='{gpus[0]}'] .frachub-gpu-reading")
            expect(reading).to_contain_text("°C", timeout=15000)
            expect(reading).to_contain_text("/80 GiB")
            share = page.locator(f".frachub-share[data-workload='{train['id']}']")
            expect(share).to_contain_text("/40 GiB")
            borrowed = page.locator(f".frachub-share[data-workload='{extra['id']}']")
            expect(borrowed).to_have_attribute("data-borrowed", "true")
            expect(borrowed).to_have_class("frachub-share frachub-borrowed")
            expect(borrowed).to_contain_text("⇄")
            expect(share).to_have_attribute("data-borrowed", "false")
            expect(page.locator("#frachub-legend-borrowed")).to_contain_text("borrowed")
            page.locator("#frachub-gpu-map").screenshot(path=str(SCREENSHOTS / "gpu-use-admin.png"))
        finally:
            load.done.set()
            load.join()
