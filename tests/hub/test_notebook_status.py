"""The notebook's share inside Jupyter (issue 27), in a real single-user server that
``frachub up`` spawned on half a GPU: ``%frachub status`` in its kernel names the share, the
project and its use, and a line under a later cell tells that a job of the user's finished
(the magics' ``post_run_cell`` notices; ``hub_ext/client/status.py`` says why not a
JupyterLab extension).

This module's ``frachub up`` reads the fake NVML (``tests/fakenvml.py``), which names the
notebook's own kernel process on its GPU: its use is the service's sample of that process,
told to the notebook's allocation as the memory watchdog tells it."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from browser.browserharness import SCREENSHOTS
from fakenvml import GIB, FakeNvml, install_line
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from hub.upharness import Kernel, Up, log_in


@pytest.fixture(scope="module")
def nvml(tmp_path_factory: pytest.TempPathFactory) -> FakeNvml:
    return FakeNvml.in_directory(tmp_path_factory.mktemp("nvml"))


@pytest.fixture(scope="module")
def up(nvml: FakeNvml, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    config = install_line(nvml.state_file) + "c.GpuMetrics.interval = 0.5\n"
    with Up(tmp_path_factory.mktemp("up-nvml"), extra_service_config=config) as running:
        yield running


def kernel_on_gpu(up: Up, notebook: Kernel, nvml: FakeNvml) -> None:
    """The kernel's process holds 5 GiB of its notebook's GPU and keeps it 42% busy."""
    with up.client("alice") as client:
        (allocation,) = client.get("/services/frachub/api/v1/allocations?state=running").json()
    gpu = allocation["placement"][0]["gpus"][0]["index"]
    with ThreadPoolExecutor(1) as thread:  # off Playwright's event loop, where it runs
        pid = int(thread.submit(notebook.text, "import os; print(os.getpid())").result().strip())
    nvml.set_processes(gpu, {pid: 5 * GIB})
    nvml.set_utilization(gpu, 60)
    nvml.set_process_utilization(gpu, {pid: 42})
    with up.client("alice") as client:
        url = f"/services/frachub/api/v1/workloads/{allocation['id']}"
        deadline = time.monotonic() + 30
        while not (client.get(url).json()["gpu_usage"] or {}).get("memory_bytes"):
            assert time.monotonic() < deadline, "the notebook's GPU use was never sampled"
            time.sleep(0.3)


def test_the_notebook_shows_its_share_and_tells_of_job_events(
    up: Up, kernel, nvml: FakeNvml
) -> None:
    up.start_server("alice", {"profile": "gpu", "gpus": 0.5})
    up.wait_ready("alice")
    notebook = kernel("alice")
    notebook.text('import os; os.environ["FRACHUB_NOTICE_SECONDS"] = "0.5"')  # the baseline
    kernel_on_gpu(up, notebook, nvml)
    status = notebook.text("%frachub status")
    assert "This notebook on FracHub" in status, status
    assert re.search(r"0\.5 GPU on \S+ GPU \d \(0\.5\) \(running\)", status), status
    assert "vision" in status and "Your jobs:  none active" in status, status
    assert "42% busy (its own processes), 5.0 GiB of its 12 GiB share in use" in status, status

    submitted = notebook.text("%frachub submit --gpus 0.5 --name quick -- sleep 1")
    job_id = int(re.search(r"Submitted job (\d+)", submitted).group(1))
    with up.client("alice") as client:
        deadline = time.monotonic() + 60
        while client.get(f"/services/frachub/api/v1/workloads/{job_id}").json()["state"] != (
            "succeeded"
        ):
            assert time.monotonic() < deadline, "the job never finished"
            time.sleep(0.3)
    time.sleep(0.6)
    after = notebook.text("1 + 1")
    assert f"frachub: job {job_id} (quick) succeeded" in after, after
    assert "frachub:" not in notebook.text("time.sleep(0.6) if False else 2"), "said twice"
    off = notebook.text("%frachub notices off")
    assert "notices of your jobs' events off" in off


NOTEBOOK = {
    "cells": [
        {
            "cell_type": "code",
            "execution_count": None,
            "id": "share",
            "metadata": {},
            "outputs": [],
            "source": "%frachub status",
        }
    ],
    "metadata": {
        "kernelspec": {
            "display_name": "Python 3 (FracHub)",
            "language": "python",
            "name": "python3",
        }
    },
    "nbformat": 4,
    "nbformat_minor": 5,
}


def test_jupyterlab_shows_the_notebooks_share(up: Up, up_page, kernel, nvml: FakeNvml) -> None:
    """The same in JupyterLab, in Chromium: the cell's output is the share in a table.
    Screenshot: artifacts/screenshots/jupyterlab-share.png (docs/images/ has a copy)."""
    up.start_server("alice", {"profile": "gpu", "gpus": 0.5})
    up.wait_ready("alice")
    with up.client("alice") as client:
        saved = client.put(
            "/user/alice/api/contents/share.ipynb",
            json={"type": "notebook", "format": "json", "content": NOTEBOOK},
            headers={"Authorization": f"token {up.token('alice')}"},
        )
        assert saved.status_code in (200, 201), saved.text
    kernel_on_gpu(up, kernel("alice"), nvml)
    page = up_page
    log_in(page, up, "alice")
    page.goto(f"{up.url}/user/alice/lab/tree/share.ipynb")
    editor = page.locator(".jp-Notebook .jp-Cell .cm-content").first
    editor.wait_for(timeout=60_000)
    page.get_by_text("Python 3 (FracHub) | Idle").wait_for(timeout=60_000)  # its kernel
    output = page.locator(".jp-OutputArea-output", has_text="This notebook on FracHub")
    for _attempt in range(3):  # a keystroke that lands while JupyterLab settles is lost
        editor.click()
        page.keyboard.press("Shift+Enter")
        try:
            output.wait_for(timeout=20_000)
            break
        except PlaywrightTimeout:
            continue
    output.wait_for(timeout=1_000)
    text = output.inner_text()
    assert "0.5 GPU on" in text and "vision" in text and "42% busy" in text, text
    news = page.get_by_role("button", name="No")
    if news.count():  # JupyterLab's "official Jupyter news?" toast
        news.first.click()
        page.wait_for_function(
            "() => ![...document.querySelectorAll('button')].some("
            "(b) => b.textContent.trim() === 'No' && b.offsetParent)",
            timeout=10_000,
        )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": 1100, "height": 520})
    page.screenshot(path=str(SCREENSHOTS / "jupyterlab-share.png"))
