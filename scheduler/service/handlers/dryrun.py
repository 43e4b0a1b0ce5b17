"""``POST /api/v1/allocations/dry-run``: what the scheduler would do with notebook shares now.

The spawn form shows, beside each GPU choice, whether it would start now, start once borrowed
GPUs are reclaimed from another project, wait (and why), or never start. Each request is
decided alone, as if it arrived now, by the engine's arrival path on the service's standing
session (``scheduler/service/policies/dryrun.py``); nothing is stored and nobody's queue position
moves. A request may name GPU models (``gpu_model``, as an allocation may), and is then
decided on those models' GPUs only. The same refusals as a real allocation apply first: a
shape no GPU here holds (of its models), or a notebook beyond the deserved quota it must stay
inside, is "never".
"""

from __future__ import annotations

from scheduler.engine import Kind, Request, Workload, default_priority
from scheduler.service.access import READ
from scheduler.service.handlers.workloads import WorkloadAccess
from scheduler.service.policies.dryrun import dry_run, never
from scheduler.service.requests import never_starts, parse_dry_run

ARRIVAL = "dry-run"


class DryRunHandler(WorkloadAccess):
    async def post(self) -> None:
        self.require(READ)
        body = parse_dry_run(self.json_body())
        user = self.acting_for(body.user, "a dry run")
        project = await self.project_for(body.project, user)
        loop = self.loop
        nodes = loop.inventory.nodes
        grow = self.cluster_may_grow
        standing = None
        now = loop.clock()
        results = []
        for request in body.requests:
            hopeless = never_starts(request, project, loop.queues, nodes, cluster_may_grow=grow)
            if hopeless is not None:
                verdict = never(hopeless)
            else:
                standing = standing or loop.standing()
                arrival = Workload(
                    name=ARRIVAL,
                    queue=project,
                    kind=Kind.INTERACTIVE,
                    request=Request(
                        gpus=request.gpus or 0.0,
                        gpu_memory_mib=request.gpu_memory_mib,
                        gpu_models=request.gpu_models,
                    ),
                    priority=default_priority(Kind.INTERACTIVE, request.preemptible),
                    preemptible=request.preemptible,
                    submitted_at=now,
                    seq=2**62,
                    user=user,
                )
                verdict = dry_run(standing, arrival, now, loop.settings.grace_seconds)
            entry = {"preemptible": request.preemptible, **verdict.as_json()}
            if request.gpu_memory_mib is not None:
                entry["gpu_memory_gib"] = request.gpu_memory_mib / 1024
            else:
                entry["gpus"] = request.gpus
            results.append(entry)
        self.write_json({"user": user, "project": project, "results": results})


default_handlers = [(r"/api/v1/allocations/dry-run/?", DryRunHandler)]
