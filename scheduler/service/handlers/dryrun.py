"""``POST /api/v1/allocations/dry-run``: what the scheduler would do with notebook shares now.

The spawn form shows, beside each GPU choice, whether it would start now, start once borrowed
GPUs are reclaimed from another project, wait (and why), or never start. Each request is
decided alone, as if it arrived now, by the engine's arrival path on the service's standing
session (``scheduler/engine/dryrun.py``); nothing is stored and nobody's queue position
moves. A request may name GPU models (``gpu_model``, as an allocation may), and is then
decided on those models' GPUs only. The same refusals as a real allocation apply first: a
shape no GPU here holds (of its models), or a notebook beyond the deserved quota it must stay
inside, is "never".
"""

from __future__ import annotations

from dataclasses import replace

from scheduler.engine.dryrun import dry_run, never
from scheduler.engine.feasibility import never_starts
from scheduler.service.access import READ
from scheduler.service.handlers.workloads import WorkloadAccess
from scheduler.service.requests import parse_dry_run

ARRIVAL = "dry-run"


class DryRunHandler(WorkloadAccess):
    async def post(self) -> None:
        self.require(READ)
        body = parse_dry_run(self.json_body(), self.settings["resource_defaults"])
        user = self.acting_for(body.user, "a dry run")
        project = await self.project_for(body.project, user)
        loop = self.loop
        nodes = loop.inventory.nodes
        grow = self.cluster_may_grow
        standing = None
        now = loop.clock()
        results = []
        for asked in body.requests:
            ask = replace(asked, project=project, user=user)
            hopeless = never_starts(ask, loop.queues, nodes, cluster_may_grow=grow)
            if hopeless is not None:
                verdict = never(hopeless)
            else:
                standing = standing or loop.standing()
                arrival = ask.workload(ARRIVAL, seq=2**62, submitted_at=now)
                verdict = dry_run(standing, arrival, now, loop.settings.grace_seconds)
            request = ask.request
            entry = {"preemptible": ask.preemptible, **verdict.as_json()}
            if request.gpu_memory_mib is not None:
                entry["gpu_memory_gib"] = request.gpu_memory_mib / 1024
            else:
                entry["gpus"] = request.gpus
            results.append(entry)
        self.write_json({"user": user, "project": project, "results": results})


default_handlers = [(r"/api/v1/allocations/dry-run/?", DryRunHandler)]
