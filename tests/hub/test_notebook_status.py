"""The notebook's share inside Jupyter (issue 27), in a real single-user server that
``frachub up`` spawned on half a GPU: ``%frachub status`` in its kernel names the share, the
project and its use, and a line under a later cell tells that a job of the user's finished
(the magics' ``post_run_cell`` notices; ``hub_ext/client/status.py`` says why not a
JupyterLab extension)."""

from __future__ import annotations

import re
import time

from hub.upharness import Up


def test_the_notebook_shows_its_share_and_tells_of_job_events(up: Up, kernel) -> None:
    up.start_server("alice", {"profile": "gpu", "gpus": 0.5})
    up.wait_ready("alice")
    notebook = kernel("alice")
    notebook.text('import os; os.environ["FRACHUB_NOTICE_SECONDS"] = "0.5"')  # the baseline
    status = notebook.text("%frachub status")
    assert "This notebook on FracHub" in status, status
    assert re.search(r"0\.5 GPU on \S+ GPU \d \(0\.5\) \(running\)", status), status
    assert "vision" in status and "GPU use" in status and "Your jobs" in status, status

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
