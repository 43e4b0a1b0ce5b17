"""The memory watchdog's loop: sample each running workload's GPU memory, judge, act.

Every ``MemoryWatchdog.interval`` seconds the service asks its backend for the GPU memory
each running workload's processes hold (``gpu_memory``: NVML on the local backend, NVIDIA's
DCGM exporter through Prometheus on Kubernetes), compares it with the workload's share
(``scheduler/common/share.py``) by ``scheduler/service/policies/memory_watch.py``'s rules,
and carries out what they decide:

- ``stop`` (training jobs' default): the job goes ``stopping`` with the reason in words
  ("uses 52 GiB of its 35 GiB share of GPU 0 for more than 10s"), gets SIGTERM and, after
  ``MemoryWatchdog.stop_grace_seconds``, SIGKILL, and fails with that reason: in its
  timeline, the panel, ``frachub describe``, its own log and the service log.
- ``warn`` (notebooks' default): an ``over-share`` event in the timeline and a line in the
  service log, and a ``within-share`` event once it is back within its share; the
  workload goes on.

Notebooks are warned, never stopped: a notebook server holds its user's unsaved state in
its kernels, which a stop would lose without a word to the user at the keyboard.

The mode of GPU sharing does not matter here: under MPS the driver caps memory itself and
the watchdog finds nothing over; it runs the same. Nothing of its state is stored: a
restarted service starts the grace periods anew.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from traitlets import CaselessStrEnum, Float, Integer, validate
from traitlets.config import LoggingConfigurable

from scheduler.common.messages import event_line
from scheduler.common.share import MIB, share_of
from scheduler.common.states import WorkloadState
from scheduler.engine.lifecycle import LifecycleError
from scheduler.service.persistence.orm import WorkloadRecord
from scheduler.service.policies.memory_watch import ACTIONS, Over, Verdict, Watched, judge
from scheduler.service.runtime.periodic import Periodic
from scheduler.service.scheduling.joblog import write_milestone
from scheduler.service.scheduling.loop import SchedulingLoop

RULE = "memory"
"""The ``stop_reason`` of a workload the watchdog stopped."""


class MemoryWatchdog(LoggingConfigurable):
    """The memory watchdog's settings (``c.MemoryWatchdog.jobs = "warn"``)."""

    jobs = CaselessStrEnum(
        list(ACTIONS),
        default_value="stop",
        help="""What a training job whose processes hold more GPU memory than its share for
        longer than grace_seconds gets: "stop" (it fails with the reason in words), "warn"
        (an event in its timeline; it goes on) or "off".""",
    ).tag(config=True)

    notebooks = CaselessStrEnum(
        ["warn", "off"],
        default_value="warn",
        help="""The same for notebook servers: "warn" or "off". A notebook is never stopped
        for it: its kernels hold its user's unsaved work.""",
    ).tag(config=True)

    grace_seconds = Float(
        10.0,
        help="""Seconds a workload may hold more than its share before it is acted on (a
        framework's allocator may overshoot briefly while it frees memory).""",
    ).tag(config=True)

    interval = Float(
        2.0,
        help="""Seconds between samples of the GPUs' per-process memory. 0 turns the watchdog
        off. A stop comes at most about interval + stop_grace_seconds after the grace
        period.""",
    ).tag(config=True)

    stop_grace_seconds = Float(
        5.0,
        help="""Seconds between the SIGTERM and the SIGKILL of a job stopped for its memory
        (short: it may be holding another workload's memory).""",
    ).tag(config=True)

    slack_mib = Integer(
        1024,
        help="""MiB a workload may hold beyond its share, per GPU, without being over: NVML
        counts each CUDA process's context (about 545 MiB on an H200 with CUDA 13), which
        the frameworks' caps do not, so a PyTorch job that fills its share is not stopped.""",
    ).tag(config=True)

    @validate("grace_seconds", "interval", "stop_grace_seconds", "slack_mib")
    def _not_negative(self, proposal):
        if proposal.value < 0:
            raise ValueError(f"MemoryWatchdog.{proposal.trait.name} must be >= 0")
        return proposal.value


class MemoryWatch:
    """Runs the watchdog against ``loop``'s backend (``start``/``stop``, or ``check`` once)."""

    def __init__(
        self,
        loop: SchedulingLoop,
        settings: MemoryWatchdog,
        *,
        clock: Callable[[], float] = time.time,
        log: logging.Logger | None = None,
    ) -> None:
        self.loop = loop
        self.settings = settings
        self.clock = clock
        self.log = log or logging.getLogger("frachub")
        self.over: dict[int, Over] = {}
        self._timer = Periodic(
            self.check,
            lambda: settings.interval,
            self.log,
            "memory watchdog: the check",
            on_error=loop.store.rollback,
        )
        self._said = ""
        """The last reason no sample could be taken (logged once, until it changes)."""

    @property
    def source(self) -> Callable | None:
        """The backend's ``gpu_memory``, where it has one and something to read it from
        (``gpu_memory_source``: NVML; Prometheus when ``prometheus_url`` is set)."""
        if not getattr(self.loop.backend, "gpu_memory_source", None):
            return None
        return getattr(self.loop.backend, "gpu_memory", None)

    def start(self) -> None:
        settings = self.settings
        if settings.interval <= 0 or settings.jobs == settings.notebooks == "off":
            self.log.info("memory watchdog: off")
            return
        if self.source is None:
            self.log.info("memory watchdog: off (the backend has no source of GPU memory)")
            return
        self.log.info(
            "memory watchdog: GPU memory read from %s every %gs; over its share for %gs: "
            "jobs %s, notebooks %s",
            self.loop.backend.gpu_memory_source,
            settings.interval,
            settings.grace_seconds,
            settings.jobs,
            settings.notebooks,
        )
        self._timer.start()

    async def stop(self) -> None:
        await self._timer.stop()

    def _action(self, record: WorkloadRecord) -> str:
        return self.settings.notebooks if record.is_allocation else self.settings.jobs

    async def check(self) -> None:
        """One sample: read, judge, act. Nothing is read while no workload runs on a
        fraction of a GPU."""
        source = self.source
        running = [
            r
            for r in self.loop.records.values()
            if r.state == WorkloadState.RUNNING
            and r.placement
            and r.placement[0].gpus
            and self._action(r) != "off"
        ]
        if source is None or not running:
            self.over.clear()
            return
        notebooks = {r.id: (r.user, r.server_name or "") for r in running if r.is_allocation}
        began = time.monotonic()
        try:
            memory = await source(notebooks)
        except Exception as error:  # no NVML, Prometheus down: said once, tried again
            self.loop.metrics.gpu_sampled(time.monotonic() - began, ok=False)
            if str(error) != self._said:
                self._said = str(error)
                # a declared inventory is a machine without NVIDIA GPUs, as a rule: no alarm
                declared = self.loop.inventory.source == "declared"
                say = self.log.info if declared else self.log.warning
                say("memory watchdog: cannot read GPU memory: %s", error)
            return
        self.loop.metrics.gpu_sampled(time.monotonic() - began, ok=True)
        if self._said:
            self._said = ""
            self.log.info("memory watchdog: reading GPU memory again")
        now = self.clock()
        node_memory = {node.name: node.gpu_memory_mib for node in self.loop.inventory.nodes}
        watched = [
            Watched(
                r.id,
                share_of(r.placement[0], node_memory.get(r.placement[0].node, 0)).memory_bytes,
                memory.get(r.id, {}),
                self._action(r),
            )
            for r in running
        ]
        judgement = judge(
            watched, self.over, now, self.settings.grace_seconds, self.settings.slack_mib * MIB
        )
        self.over = judgement.over
        self.loop.metrics.over_share.set(len(self.over))
        for finding in judgement.findings:
            record = self.loop.records.get(finding.workload_id)
            if record is not None:
                await self._act(record, finding.verdict, finding.words, now)

    async def _act(self, record: WorkloadRecord, verdict: Verdict, words: str, now: float) -> None:
        loop = self.loop
        what = f"workload {record.id} ({record.name}, {record.user})"
        self.loop.metrics.watchdog_acted(verdict.value)
        if verdict is Verdict.STOP:
            try:
                effects = loop.lifecycle.enforce(
                    str(record.id), RULE, words, self.settings.stop_grace_seconds
                )
            except LifecycleError:
                return  # it stopped meanwhile
            self.log.warning("memory watchdog: stopping %s: %s", what, words)
            stops, _ = loop.effects.record(effects, now)
            loop.store.commit()
            await loop.effects.stop(stops)
            loop.changed()
            return
        kind = "over-share" if verdict is Verdict.WARN else "within-share"
        loop.store.event(record, now, kind, words)
        write_milestone(loop.backend, record, now, event_line(kind, words))
        loop.store.commit()
        log = self.log.warning if verdict is Verdict.WARN else self.log.info
        log("memory watchdog: %s %s", what, words)
        loop.changed()
