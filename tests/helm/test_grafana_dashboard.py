"""The Grafana dashboard shipped with the chart (issue 27): installed as a ConfigMap that
Grafana's dashboard sidecar finds by its label when ``grafanaDashboard.enabled``; every
series its panels query is one the service exports, under the labels it filters by."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

from conftest import CHART, by_kind, render
from prometheus_client.parser import text_string_to_metric_families

from scheduler.backends.base import Gpu, Inventory
from scheduler.backends.gpu_usage import GpuReading, WorkloadGpu
from scheduler.common.placement import GpuShare, ReplicaPlacement
from scheduler.engine.model import Node
from scheduler.service.runtime.gpu_history import GpuHistory
from scheduler.service.runtime.gpu_watch import GpuUsageCollector
from scheduler.service.runtime.metrics import Metrics

DASHBOARD = CHART / "dashboards" / "frachub-gpu-use.json"


def exported() -> dict[str, set[str]]:
    """Every series name the service's /metrics has while a job runs on a sampled GPU, and
    its label names."""
    history = GpuHistory(points=4, busy_percent=5, interval=5, source="NVML")
    reading = GpuReading(0, "GPU-a", 40, 2 << 30, 80 << 30, (), 50, 200.0, {})
    history.record(1.0, {7: {"GPU 0": WorkloadGpu(2 << 30, 40, "processes")}}, {7: 1}, [reading])
    record = SimpleNamespace(
        id=7,
        name="train",
        project="vision",
        user="alice",
        kind="training",
        state="running",
        placement=(ReplicaPlacement("n", (GpuShare(0, 500),)),),
    )
    loop = SimpleNamespace(
        records={7: record},
        gpu_usage=history,
        inventory=Inventory((Node("n", 1),), (Gpu("n", 0, "GPU-a", "H100", 81920),), "nvml"),
    )
    metrics = Metrics()
    metrics.queue_running.labels("vision").set(1)
    metrics.allocated.labels("vision").set(1)
    metrics.deserved.labels("vision").set(1)
    metrics.fair_share.labels("vision").set(1)
    metrics.registry.register(GpuUsageCollector(loop))
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def test_the_dashboard_is_a_config_map_for_grafanas_sidecar_when_enabled(chart) -> None:
    assert not [
        c for c in by_kind(render(chart, {}), "ConfigMap") if "grafana" in c["metadata"]["name"]
    ]
    values = {"grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "FracHub"}}}
    [config] = [
        c
        for c in by_kind(render(chart, values), "ConfigMap")
        if c["metadata"]["name"] == "frachub-grafana-dashboard"
    ]
    assert config["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config["metadata"]["annotations"] == {"grafana_folder": "FracHub"}
    assert config["metadata"]["namespace"] == "jupyterhub"
    shipped = json.loads(config["data"]["frachub-gpu-use.json"])
    assert shipped == json.loads(DASHBOARD.read_text())
    other = {"grafanaDashboard": {"enabled": True, "label": "dash", "namespace": "monitoring"}}
    [moved] = [
        c
        for c in by_kind(render(chart, other), "ConfigMap")
        if c["metadata"]["name"] == "frachub-grafana-dashboard"
    ]
    assert moved["metadata"]["labels"]["dash"] == "1"
    assert moved["metadata"]["namespace"] == "monitoring"


def test_every_query_names_series_the_service_exports() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    names = exported()
    queried = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert queried
    for expr in queried:
        for metric, labels in re.findall(r"(frachub_[a-z_]+)(?:\{([^}]*)\})?", expr):
            assert metric in names, (metric, sorted(names))
            for label in re.findall(r"(\w+)=~", labels or ""):
                assert label in names[metric], (metric, label)
    variables = [v["name"] for v in dashboard["templating"]["list"]]
    assert variables == ["datasource", "project", "user", "kind"]
    assert {"project", "user", "kind"} <= names["frachub_workload_gpu_utilization_percent"]
