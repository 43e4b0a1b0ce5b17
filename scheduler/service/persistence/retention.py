"""Retention: finished workloads and their job logs do not accumulate forever.

Every ``retention_check_interval`` the service deletes the job logs (and exit files) of
workloads that finished more than ``log_retention_days`` ago, and the records (events and
usage intervals included) of workloads that finished more than ``workload_retention_days``
ago, and the usage samples behind the panel's history charts older than
``usage_sample_retention_days``. 0 keeps them forever. Checkpoints are the users' and are
never deleted here.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass

from sqlalchemy.engine import Engine

from scheduler.service.persistence.store import finished_before, purge_finished, purge_samples

DAY = 86400.0


@dataclass(frozen=True)
class Retention:
    workload_days: float
    log_days: float
    sample_days: float = 0.0


def _numbered_dirs(parent: str) -> dict[int, str]:
    try:
        names = os.listdir(parent)
    except FileNotFoundError:
        return {}
    return {int(name): os.path.join(parent, name) for name in names if name.isdigit()}


def purge(
    engine: Engine, data_dir: str, retention: Retention, now: float, log: logging.Logger
) -> tuple[int, int]:
    """One pass; returns (workloads deleted, log directories deleted)."""
    logs = 0
    if retention.log_days > 0:
        dirs: dict[int, list[str]] = {}
        for area in ("logs", "run"):
            for workload_id, path in _numbered_dirs(os.path.join(data_dir, area)).items():
                dirs.setdefault(workload_id, []).append(path)
        for workload_id in finished_before(engine, now - retention.log_days * DAY, dirs):
            for path in dirs[workload_id]:
                shutil.rmtree(path, ignore_errors=True)
            logs += 1
    workloads = 0
    if retention.workload_days > 0:
        purged = purge_finished(engine, now - retention.workload_days * DAY)
        workloads = len(purged)
        for workload_id in purged:  # records gone, so are their logs (whatever log_days says)
            for area in ("logs", "run"):
                shutil.rmtree(os.path.join(data_dir, area, str(workload_id)), ignore_errors=True)
    if retention.sample_days > 0:
        samples = purge_samples(engine, now - retention.sample_days * DAY)
        if samples:
            log.info(
                "retention: deleted %d usage samples (older than %g days)",
                samples,
                retention.sample_days,
            )
    if workloads or logs:
        log.info(
            "retention: deleted %d finished workloads (older than %g days) and the job logs "
            "of %d (older than %g days)",
            workloads,
            retention.workload_days,
            logs,
            retention.log_days,
        )
    return workloads, logs
