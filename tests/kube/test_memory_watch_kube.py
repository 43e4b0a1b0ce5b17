"""The memory watchdog on Kubernetes: the real ``frachub service`` on the Kubernetes backend
against the fake API server, reading each pod's GPU memory from an in-process fake
Prometheus that serves dcgm-exporter's ``DCGM_FI_DEV_FB_USED`` series (its labels as the
exporter writes them with its pod mapping on) through ``GET /api/v1/query``.

node-a has 2 x 80 GiB, so a 0.5 share is 40 GiB; the watchdog samples every 0.2 s with a
2-second grace period.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from hubharness import API_PATH, Hub, ServiceProcess
from service_client import CHECKED, submit, wait_for, wait_state, workload

from scheduler.backends.kubernetes.labels import COMPONENT, TRAINING, WORKLOAD
from scheduler.backends.kubernetes.pods import pod_phase
from scheduler.backends.kubernetes.usage import PrometheusError, by_workload, parse

from .conftest import SERVICE_CONFIG, started_fake
from .fakeapi import FakeKube

NAMESPACE = "default"
NODE = "node-a"
GIB = 1 << 30
GRACE = 2.0


class FakePrometheus:
    """Prometheus's query API over a list of series the test sets; ``queries`` holds what
    was asked. ``down`` answers 503 as an unready Prometheus does."""

    def __init__(self) -> None:
        self.series: list[dict[str, Any]] = []
        self.queries: list[str] = []
        self.down = False
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlparse(self.path)
                if url.path != "/api/v1/query":
                    self.send_error(404)
                    return
                promql = parse_qs(url.query).get("query", [""])[0]
                fake.queries.append(promql)
                if fake.down:
                    body, status = b"Service Unavailable", 503
                else:
                    body, status = json.dumps(fake.answer(promql)).encode(), 200
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, promql: str) -> dict[str, Any]:
        """The series of the namespace the query names (the only matcher FracHub uses
        besides ``pod!=""``), as Prometheus answers an instant query."""
        wanted = f'namespace="{NAMESPACE}"'
        result = [
            {"metric": labels, "value": [1764300000.0, str(mib)]}
            for labels, mib in ((s["labels"], s["mib"]) for s in self.series)
            if wanted in promql
            and promql.startswith(labels["__name__"] + "{")
            and labels.get("namespace") == NAMESPACE
            and labels.get("pod")
        ]
        return {"status": "success", "data": {"resultType": "vector", "result": result}}

    def pod_uses(
        self, pod: str, gpu: int, gib: float, metric: str = "DCGM_FI_DEV_FB_USED", **labels: str
    ) -> None:
        """dcgm-exporter's series for ``pod`` on GPU ``gpu`` of node-a (its memory, or with
        ``metric="DCGM_FI_DEV_GPU_UTIL"`` its GPU's utilization, in percent)."""
        self.series.append(
            {
                "labels": {
                    "__name__": metric,
                    "gpu": str(gpu),
                    "UUID": f"GPU-{NODE}-{gpu}",
                    "device": f"nvidia{gpu}",
                    "modelName": "NVIDIA A100-SXM4-80GB",
                    "Hostname": NODE,
                    "container": "main",
                    "namespace": NAMESPACE,
                    "pod": pod,
                    **labels,
                },
                "mib": gib * 1024 if metric == "DCGM_FI_DEV_FB_USED" else gib,
            }
        )

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeKube]:
    with started_fake() as cluster:
        cluster.add_node(NODE, gpus=2, memory_mib=81920)
        yield cluster


@pytest.fixture(scope="module")
def prometheus() -> Iterator[FakePrometheus]:
    server = FakePrometheus()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def service(
    hub: Hub, fake: FakeKube, prometheus: FakePrometheus, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    workdir = tmp_path_factory.mktemp("kube-watch")
    kubeconfig = fake.kubeconfig(str(workdir / "kubeconfig"), NAMESPACE)
    config = SERVICE_CONFIG.format(kubeconfig=kubeconfig, namespace=NAMESPACE) + (
        '\nc.FracHubService.queues = [{"name": "vision", "deserved_gpus": 2}]\n'
        "c.FracHubService.grace_period = 1\n"
        f"c.KubernetesBackend.prometheus_url = {prometheus.url!r}\n"
        "c.KubernetesBackend.reservation_timeout = 10.0\n"
        f"c.MemoryWatchdog.grace_seconds = {GRACE}\n"
        "c.MemoryWatchdog.interval = 0.2\n"
        "c.GpuMetrics.interval = 0.2\n"
        'c.Application.log_level = "INFO"\n'
    )
    process = ServiceProcess(hub, config, workdir, env={"KUBECONFIG": kubeconfig}).start()
    yield process
    process.stop()


@pytest.fixture
def alice(hub: Hub, service: ServiceProcess, request: pytest.FixtureRequest) -> Iterator[Any]:
    name = "w-" + request.node.name.removeprefix("test_")[:20].replace("_", "-")
    hub.create_user(name, groups=["vision"])
    client = httpx.Client(
        base_url=hub.service_url(API_PATH),
        headers={"Authorization": f"token {hub.token_for(name)}"},
        timeout=30,
        event_hooks=CHECKED,
    )
    yield client
    for item in client.get("workloads?active").json():
        client.delete(f"workloads/{item['id']}")
    client.close()


def running_pod(fake: FakeKube, workload_id: int) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        selector = f"{COMPONENT}={TRAINING},{WORKLOAD}={workload_id}"
        pods = [p for p in fake.objects("pods", NAMESPACE, selector) if pod_phase(p) == "Running"]
        return pods[0] if pods else None

    return wait_for(found, 30, f"a running pod of workload {workload_id}")


def test_a_pod_over_its_share_is_stopped_with_the_reason(
    alice, fake: FakeKube, prometheus: FakePrometheus, service: ServiceProcess
) -> None:
    job = submit(alice, command="sleep 300", gpus=0.5, name="hog")
    running = wait_state(alice, job["id"], "running", timeout=30)
    gpu = running["placement"][0]["gpus"][0]["index"]
    pod = running_pod(fake, job["id"])["metadata"]["name"]
    prometheus.pod_uses(pod, gpu, 52)
    try:
        failed = wait_state(alice, job["id"], "failed", timeout=30)
    finally:
        prometheus.series.clear()
    reason = f"uses 52 GiB of its 40 GiB share of GPU {gpu} on {NODE} for more than {GRACE:g}s"
    assert failed["message"] == f"stopped: {reason}", failed
    assert f"stopping: {reason}" in [e["text"] for e in failed["events"]]
    assert 'DCGM_FI_DEV_FB_USED{namespace="default",pod!=""}' in prometheus.queries
    log = service.log_path.read_text()
    assert "memory watchdog: GPU memory read from Prometheus at" in log


def test_a_pods_gpu_use_comes_from_the_dcgm_exporter(
    alice, fake: FakeKube, prometheus: FakePrometheus, service: ServiceProcess
) -> None:
    """The GPU use sampler on Kubernetes (issue 27): the pod's memory and its GPU's
    utilization (the whole GPU's: dcgm-exporter's DCGM_FI_DEV_GPU_UTIL), in the workload's
    gpu_usage and the metrics."""
    job = submit(alice, command="sleep 300", gpus=0.5, name="busy")
    running = wait_state(alice, job["id"], "running", timeout=30)
    gpu = running["placement"][0]["gpus"][0]["index"]
    pod = running_pod(fake, job["id"])["metadata"]["name"]
    prometheus.pod_uses(pod, gpu, 12)
    prometheus.pod_uses(pod, gpu, 63, metric="DCGM_FI_DEV_GPU_UTIL")
    try:
        use = wait_for(
            lambda: (
                (u := alice.get(f"workloads/{job['id']}").json()["gpu_usage"])
                and u["utilization_percent"] == 63
                and u
            ),
            30,
            "the pod's GPU use",
        )
    finally:
        prometheus.series.clear()
    assert use["utilization_of"] == "gpu" and use["memory_bytes"] == 12 << 30, use
    assert use["share_memory_bytes"] == 40 << 30
    assert use["gpus"] == {
        f"GPU {gpu} on {NODE}": {"memory_bytes": 12 << 30, "utilization_percent": 63}
    }
    assert 'DCGM_FI_DEV_GPU_UTIL{namespace="default",pod!=""}' in prometheus.queries
    assert "GPU use sampling: Prometheus at" in service.log_path.read_text()


def test_copies_of_the_whole_gpus_figure_are_judged_for_no_one(
    alice, fake: FakeKube, prometheus: FakePrometheus, service: ServiceProcess
) -> None:
    """Without per-process attribution dcgm-exporter gives every pod on a GPU the GPU's
    figure: two pods with the same 60 GiB on one GPU are no one's, so no one is stopped;
    and a Prometheus that does not answer is said once in the log and asked again."""
    first = submit(alice, command="sleep 300", gpus=0.5, name="one")
    second = submit(alice, command="sleep 300", gpus=0.5, name="two")
    gpus = {
        wait_state(alice, w["id"], "running", timeout=30)["placement"][0]["gpus"][0]["index"]
        for w in (first, second)
    }
    pods = [running_pod(fake, w["id"])["metadata"]["name"] for w in (first, second)]
    for pod, gpu in zip(pods, sorted(gpus) * 2, strict=False):
        prometheus.pod_uses(pod, gpu, 60)
    if len(gpus) > 1:  # placed apart: put both figures on one GPU, as time-slicing would
        prometheus.series = [
            {**s, "labels": {**s["labels"], "gpu": "0", "UUID": f"GPU-{NODE}-0"}}
            for s in prometheus.series
        ]
    try:
        wait_for(lambda: "report the same figure" in service.log_path.read_text(), 20, "log")
        asked = len(prometheus.queries)
        wait_for(lambda: len(prometheus.queries) >= asked + 15, 20, "3 s of samples")
        for w in (first, second):
            assert workload(alice, w["id"])["state"] == "running"
        prometheus.down = True
        wait_for(
            lambda: (
                "memory watchdog: cannot read GPU memory: Prometheus at"
                in service.log_path.read_text()
            ),
            20,
            "the outage in the log",
        )
    finally:
        prometheus.down = False
        prometheus.series.clear()


def test_what_prometheus_answers_is_read_strictly() -> None:
    with pytest.raises(PrometheusError, match="bad_data"):
        parse({"status": "error", "errorType": "bad_data", "error": "bad_data: parse error"})
    with pytest.raises(PrometheusError, match="'matrix', not a vector"):
        parse({"status": "success", "data": {"resultType": "matrix", "result": []}})
    answer = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {
                    "metric": {"namespace": "ns", "pod": "p", "gpu": "1", "Hostname": "n"},
                    "value": [0, "1024"],
                },
                {"metric": {"namespace": "ns", "pod": "p", "gpu": "1"}, "value": [0, "NaN"]},
                {"metric": {"namespace": "ns", "pod": "p", "gpu": "1"}, "value": [0, "?"]},
                {"metric": {"namespace": "ns", "pod": "other"}, "value": [0, "5"]},
            ],
        },
    }
    memory, skipped = by_workload(parse(answer), {("ns", "p"): 7})
    assert memory == {7: {"GPU 1 on n": GIB}} and not skipped
