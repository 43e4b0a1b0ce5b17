"""The contract between the scheduler service and a backend.

The service owns *what should run* (the store and the engine's decisions); a backend owns
*what does run*. The service calls ``start`` after it has durably recorded a start, ``stop``
after it has recorded an eviction or a cancellation, and ``adopt`` once per running workload
after a restart of the service. The backend reports every exit through ``poll``, exactly once
per started attempt, including exits of processes it adopted, so the service never has to
know whether it or a previous incarnation of itself started the work.

Handles are small JSON-able dicts that the service stores with the workload, so that a
restarted service can hand them back to ``adopt``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from scheduler.common.placement import Placement, ReplicaPlacement
from scheduler.common.share import Share, share_of
from scheduler.engine import Node

Handle = dict[str, Any]


@dataclass(frozen=True)
class Gpu:
    """One physical (or declared) GPU as users see it."""

    node: str
    index: int
    uuid: str
    model: str
    memory_mib: int


@dataclass(frozen=True)
class Inventory:
    """What a backend schedules onto; ``source`` says where it came from (``nvml``,
    ``declared``, ``kubernetes``) so the docs, the API and the logs can say which mode is in
    use."""

    nodes: tuple[Node, ...]
    gpus: tuple[Gpu, ...]
    source: str

    @cached_property
    def _by_place(self) -> dict[tuple[str, int], Gpu]:
        """(node, index) -> GPU, made on the first look-up: the API shows every workload's
        GPUs through ``gpu``, and a scan of 4,000 GPUs per workload shown is felt."""
        return {(gpu.node, gpu.index): gpu for gpu in self.gpus}

    def gpu(self, node: str, index: int) -> Gpu:
        found = self._by_place.get((node, index))
        if found is None:
            raise KeyError(f"no GPU {index} on node {node!r}")
        return found

    def uuid(self, node: str, index: int) -> str:
        return self.gpu(node, index).uuid

    def share(self, replica: ReplicaPlacement) -> Share:
        """The share ``replica`` holds of each of its GPUs (``share_of``), sized by its GPU's
        memory as inventoried: how every backend turns a placement into memory, so a job
        carries its placement alone. ``KeyError`` if the GPU is not in the inventory."""
        if not replica.gpus:
            return share_of(replica, 0)
        return share_of(replica, self.gpu(replica.node, replica.gpus[0].index).memory_mib)


@dataclass(frozen=True)
class JobSpec:
    """Everything a backend needs to start one attempt of a training workload."""

    workload_id: int
    name: str
    user: str
    project: str
    command: str | Sequence[str]
    """A string runs through ``/bin/sh -c``; a list is executed as is."""
    working_dir: str | None
    """None means the user's home directory (or the backend's per-user default)."""
    env: Mapping[str, str]
    """The user's own variables; the backend adds the environment contract on top."""
    placement: Placement
    """Where each replica runs and its share of each GPU; the backend sizes the share's
    memory from its inventory (``Inventory.share``)."""
    restart_count: int = 0
    replicas: int = 1
    log_notes: tuple[str, ...] = ()
    """Milestone lines decided with this start ("borrowed: ..."): a backend that keeps the
    job's log writes them after its header, before the command's first line, so that no
    later milestone (a preemption while the launch was under way) can come before them."""
    cpu_milli: int = 0
    """CPU each replica asked for, in thousandths of a core (0: none): its limit where the
    backend enforces one (the local backend's control group, a pod's requests and limits)."""
    memory_mib: int = 0
    """Memory (RAM) each replica asked for, in MiB (0: none): its hard limit, as cpu_milli."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    credentials: Mapping[str, str] = field(default_factory=dict)
    """Variables that let the job reach the service as itself (``FRACHUB_URL`` and the job's
    own hub token in ``JUPYTERHUB_API_TOKEN``; ``scheduler/service/hub/jobtokens.py``): above
    the contract, and kept out of anything stored or shown (on Kubernetes, a Secret)."""


@dataclass(frozen=True)
class Exit:
    """An attempt ended. ``exit_code`` is None when the backend cannot know it (the process
    vanished while nobody watched), which the service treats as "lost: requeue"."""

    workload_id: int
    exit_code: int | None
    message: str = ""
    ended_at: float | None = field(default=None, compare=False)
    """When it ended (Unix seconds), where the backend recorded it: an attempt that ended
    while the service was down ends then, not when a restarted service learns of it. None:
    it ended just now."""


@dataclass(frozen=True)
class Checkpoint:
    """A running attempt saved its work at ``at`` (Unix seconds): the newest file under its
    ``FRACHUB_CHECKPOINT_DIR`` on the local backend. Reported by ``poll`` beside the exits,
    the way a job's own ``POST workloads/{id}/checkpoint`` reports it through the API."""

    workload_id: int
    at: float


class BackendError(Exception):
    """A start that cannot happen (missing working directory, unknown user, ...); the message
    is shown to the user as the workload's failure reason."""


class Backend(Protocol):
    """What the service needs from a backend. All methods are called from the event loop.

    Optional: ``async def wait_for_exit(self, timeout: float) -> None``, returning as soon
    as an attempt may have ended (else after ``timeout``): the service then polls at once
    rather than at its next ``poll_interval`` tick (the local backend's ``exitwatch``);
    without it the service sleeps the interval between polls.
    """

    def inventory(self) -> Inventory:
        """The nodes and GPUs to schedule onto; may change between calls (nodes lost/added)."""
        ...

    async def start(self, job: JobSpec) -> Handle:
        """Start every replica of one attempt; raise ``BackendError`` if it cannot start."""
        ...

    async def stop(self, workload_id: int, handle: Handle, grace_seconds: float) -> None:
        """Ask the attempt to end (SIGTERM), force it after ``grace_seconds`` (SIGKILL).
        Returns at once; the end is reported by ``poll``."""
        ...

    def adopt(self, workload_id: int, handle: Handle) -> bool:
        """After a service restart: take over watching a recorded attempt. False when it is
        gone without a recorded exit (the service then requeues it); an attempt that exited
        while the service was down is reported by the next ``poll`` with its real code."""
        ...

    async def poll(self) -> list[Exit | Checkpoint]:
        """Attempts that ended since the last call, and checkpoints newer than the last
        reported (a backend that cannot see them reports none)."""
        ...

    def log_path(self, workload_id: int, replica: int = 0) -> str | None:
        """Where the combined stdout/stderr of a replica is written (all attempts appended)."""
        ...

    async def close(self) -> None:
        """Stop watching (the service is shutting down); never kills running work."""
        ...
