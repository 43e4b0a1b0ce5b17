"""Each FracHub pod's GPU memory, from NVIDIA's DCGM exporter through Prometheus: what the
memory watchdog reads on Kubernetes (the local backend reads NVML itself).

dcgm-exporter, with its Kubernetes mapping on, labels ``DCGM_FI_DEV_FB_USED`` (framebuffer
in use, MiB) with the ``namespace``, ``pod`` and ``container`` of the pod using the GPU,
beside ``gpu`` (the index on its node), ``UUID`` and ``Hostname``. The backend asks
Prometheus (``KubernetesBackend.prometheus_url``, ``GET /api/v1/query``) for the series of
its namespace and tells each to its workload by the pod's ``frachub.io/workload-id`` label
(training pods and FracKubeSpawner's GPU notebooks carry it).

Whose memory a series counts depends on the exporter: with per-process attribution
(``--kubernetes-virtual-gpus``, dcgm-exporter 4.x; it needs ``hostPID``) a pod's series is
the memory of that pod's own processes; without it, every pod on a GPU gets the *whole GPU's*
figure. Such copies cannot be told to anyone: where two pods on one GPU report the very same
value, neither is judged (``parse`` leaves them out and says so), rather than stopping every
pod on a busy GPU. And the exporter knows pods by their GPU *requests*: a pod of a
reservation (``sharing_mode = "reservation"``) requests no GPU, so the exporter's pod mapping
does not see it (docs/kubernetes.md, "What each sharing mode enforces").
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from scheduler.backends.gpu_usage import MemoryByWorkload, UsageByWorkload, WorkloadGpu
from scheduler.backends.kubernetes.labels import WORKLOAD

METRIC = "DCGM_FI_DEV_FB_USED"
UTILIZATION = "DCGM_FI_DEV_GPU_UTIL"
"""The GPU's utilization (percent) that dcgm-exporter labels with each pod using the GPU: the
whole GPU's, whichever pod keeps it busy (``utilization_of == "gpu"``)."""
MIB = 1 << 20


class PrometheusError(RuntimeError):
    """Prometheus could not be asked, or answered something other than a vector."""


@dataclass(frozen=True)
class Series:
    """One ``DCGM_FI_DEV_FB_USED`` series: a container's memory on one GPU."""

    namespace: str
    pod: str
    container: str
    node: str
    gpu: str
    uuid: str
    used_bytes: int


def query(namespace: str, metric: str = METRIC) -> str:
    """The PromQL of ``metric`` (the memory) of every pod of ``namespace``."""
    return f'{metric}{{namespace="{namespace}",pod!=""}}'


def parse(answer: Any) -> list[Series]:
    """The series of a ``/api/v1/query`` answer; ``PrometheusError`` names what is wrong."""
    if not isinstance(answer, dict) or answer.get("status") != "success":
        error = answer.get("error") if isinstance(answer, dict) else None
        raise PrometheusError(f"Prometheus answered: {error or answer!r}"[:300])
    data = answer.get("data") or {}
    if data.get("resultType") != "vector":
        raise PrometheusError(f"Prometheus answered a {data.get('resultType')!r}, not a vector")
    series = []
    for item in data.get("result") or []:
        labels = item.get("metric") or {}
        try:
            mib = float(item["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if not math.isfinite(mib):  # Prometheus writes "NaN" for a stale gauge
            continue
        series.append(
            Series(
                namespace=str(labels.get("namespace", "")),
                pod=str(labels.get("pod", "")),
                container=str(labels.get("container", "")),
                node=str(labels.get("Hostname", "")),
                gpu=str(labels.get("gpu", "")),
                uuid=str(labels.get("UUID", "")),
                used_bytes=round(mib * MIB),
            )
        )
    return series


def gpu_words(item: Series) -> str:
    """How a pod's GPU is named in the watchdog's words ("GPU 0 on node-a")."""
    return f"GPU {item.gpu} on {item.node}" if item.node else f"GPU {item.gpu}"


def copies(series: Iterable[Series]) -> set[tuple[str, str]]:
    """GPUs (node, UUID) on which two pods report the very same figure: the exporter's
    copies of the whole GPU's memory, which are no pod's own."""
    seen: dict[tuple[str, str], dict[int, set[str]]] = {}
    for item in series:
        seen.setdefault((item.node, item.uuid), {}).setdefault(item.used_bytes, set()).add(item.pod)
    return {gpu for gpu, values in seen.items() if any(len(pods) > 1 for pods in values.values())}


def workload_of_pods(pods: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], int]:
    """(namespace, pod name) -> workload id, for the pods that carry FracHub's label."""
    out: dict[tuple[str, str], int] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        label = (meta.get("labels") or {}).get(WORKLOAD)
        if label and str(label).isdigit():
            out[(meta.get("namespace", ""), meta.get("name", ""))] = int(label)
    return out


def by_workload(
    series: Iterable[Series], owners: Mapping[tuple[str, str], int]
) -> tuple[MemoryByWorkload, set[tuple[str, str]]]:
    """Each workload's memory per GPU ("GPU 0 on node-a"), its containers' summed, and the
    GPUs left out because their figures are copies (``copies``)."""
    listed = list(series)
    skipped = copies(listed)
    memory: MemoryByWorkload = {}
    for item in listed:
        workload = owners.get((item.namespace, item.pod))
        if workload is None or (item.node, item.uuid) in skipped:
            continue
        words = gpu_words(item)
        per_gpu = memory.setdefault(workload, {})
        per_gpu[words] = per_gpu.get(words, 0) + item.used_bytes
    return memory, skipped


async def ask(url: str, promql: str, timeout: float) -> Any:
    """``GET <url>/api/v1/query?query=<promql>``, its JSON (an error answer included, which
    ``parse`` reads); ``PrometheusError`` when there is no JSON to be had."""
    endpoint = url.rstrip("/") + "/api/v1/query"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
            session.get(endpoint, params={"query": promql}) as response,
        ):
            text = await response.text()
            status = response.status
    except (aiohttp.ClientError, TimeoutError) as error:
        raise PrometheusError(f"Prometheus at {url} cannot be asked: {error}") from None
    try:
        return json.loads(text)
    except ValueError:
        raise PrometheusError(f"Prometheus at {url} answered {status}: {text[:200]}") from None


class PodMemoryReader:
    """What ``KubernetesBackend.gpu_memory`` answers with: one query per sample, told to
    workloads by the pods in the backend's cache; GPUs whose figures are copies are named in
    the log once."""

    def __init__(self, url: str, namespace: str, timeout: float, log: logging.Logger) -> None:
        self.url = url
        self.namespace = namespace
        self.timeout = timeout
        self.log = log
        self._said: set[tuple[str, str]] = set()

    async def usage(self, pods: Iterable[Mapping[str, Any]]) -> UsageByWorkload:
        """Memory and utilization per workload and GPU: two queries per sample."""
        listed = list(pods)
        memory = await self.memory(listed)
        answer = await ask(self.url, query(self.namespace, UTILIZATION), self.timeout)
        return usage_by_workload(memory, parse(answer), workload_of_pods(listed))

    async def memory(self, pods: Iterable[Mapping[str, Any]]) -> MemoryByWorkload:
        series = parse(await ask(self.url, query(self.namespace), self.timeout))
        memory, skipped = by_workload(series, workload_of_pods(pods))
        if skipped - self._said:
            self._said |= skipped
            self.log.warning(
                "GPU memory from Prometheus: pods on %s report the same figure, the whole "
                "GPU's (dcgm-exporter without per-process attribution: "
                "--kubernetes-virtual-gpus); the memory watchdog does not judge them",
                ", ".join(f"{uuid} on {node}" for node, uuid in sorted(skipped)),
            )
        return memory


def usage_by_workload(
    memory: MemoryByWorkload,
    utilization: Iterable[Series],
    owners: Mapping[tuple[str, str], int],
) -> UsageByWorkload:
    """Each workload's memory (``by_workload``) and its GPUs' utilization per GPU, from the
    ``DCGM_FI_DEV_GPU_UTIL`` series (``parse``'s ``used_bytes`` holds percent x MiB there:
    ``percent_of``), which is the whole GPU's."""
    busy: dict[int, dict[str, int]] = {}
    for item in utilization:
        workload = owners.get((item.namespace, item.pod))
        if workload is not None:
            busy.setdefault(workload, {})[gpu_words(item)] = percent_of(item)
    usage: UsageByWorkload = {}
    for workload in set(memory) | set(busy):
        used, percents = memory.get(workload, {}), busy.get(workload, {})
        usage[workload] = {
            words: WorkloadGpu(
                used.get(words, 0),
                percents.get(words),
                "gpu" if words in percents else "none",
            )
            for words in set(used) | set(percents)
        }
    return usage


def percent_of(item: Series) -> int:
    """A ``DCGM_FI_DEV_GPU_UTIL`` series' value (``parse`` reads every value as MiB)."""
    return round(item.used_bytes / MIB)


class PrometheusUsage:
    """``KubernetesBackend``'s GPU memory and utilization reads (the memory watchdog's and
    the GPU use sampler's), from Prometheus by its pods' labels; mixed into the backend,
    whose settings and caches it reads (the attributes annotated here)."""

    prometheus_url: str
    namespace: str
    request_timeout: float
    log: logging.Logger
    _pod_memory: PodMemoryReader | None
    _require: Callable[[], tuple[Any, Any]]

    @property
    def gpu_memory_source(self) -> str | None:
        """Where ``gpu_memory`` reads, in words; None when it cannot."""
        return (
            f"Prometheus at {self.prometheus_url} (DCGM exporter)" if self.prometheus_url else None
        )

    async def gpu_memory(self, notebooks: Mapping[int, tuple[str, str]]) -> MemoryByWorkload:
        """The GPU memory of each workload's pods per GPU, from Prometheus (``usage``); the
        pods are told apart by their labels, so ``notebooks`` is not needed here."""
        reader, pods = self._gpu_reader()
        return await reader.memory(pods)

    async def gpu_usage(
        self, notebooks: Mapping[int, tuple[str, str]], *, max_age: float = 0.0
    ) -> UsageByWorkload:
        """``gpu_memory`` with each pod's GPU utilization (the whole GPU's: dcgm-exporter's
        ``DCGM_FI_DEV_GPU_UTIL``), for the GPU use sampler; always asked anew (``max_age``
        is the local reader's: Prometheus keeps its own scrape interval)."""
        reader, pods = self._gpu_reader()
        return await reader.usage(pods)

    def _gpu_reader(self) -> tuple[PodMemoryReader, list[Any]]:
        _, caches = self._require()
        if self._pod_memory is None:
            self._pod_memory = PodMemoryReader(
                self.prometheus_url, self.namespace, self.request_timeout, self.log
            )
        return self._pod_memory, list(caches.pods.objects.values())
