"""The local backend: training replicas as subprocesses of this machine, GPUs from NVML.

``LocalBackend`` meets ``scheduler.backends.base.Backend``. Each replica of an attempt is a
tiny ``/bin/sh`` wrapper (``processes.WRAPPER``), in a session of its own, that runs the
user's command and then records its exit status in a file. That file, and the pid and kernel
start time kept in the handle, are what let a restarted service adopt running work and still
learn real exit codes; the service may be SIGKILLed at any moment without taking the jobs
with it. A replica's end wakes the service's poll at once (``exitwatch``).

Files under ``data_dir``::

    logs/<workload>/replica-<r>.log      stdout+stderr of every attempt, appended, with a header
    run/<workload>/<attempt>/replica-<r>.exit   the exit status, written by the wrapper
    checkpoints/<workload>/              FRACHUB_CHECKPOINT_DIR, kept across attempts
    users/<user>/                        working directory of users without a usable home
                                         (unless ``home_dir_template`` names one)

Exit codes follow the shell: a replica killed by signal N reports 128 + N (143 for SIGTERM,
137 for SIGKILL). An unknown command in a list is refused at start (``BackendError``); in a
string it is the shell's business and ends with 127.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from traitlets import Bool, CaselessStrEnum, Dict, Float, List, Unicode, validate
from traitlets.config import LoggingConfigurable

from scheduler.backends import confinement as cg
from scheduler.backends import processes, workplace
from scheduler.backends.base import BackendError, Checkpoint, Exit, Handle, Inventory, JobSpec
from scheduler.backends.checkpoints import CheckpointScanner
from scheduler.backends.exitwatch import ExitWatch
from scheduler.backends.gpu_usage import MemoryByWorkload, MemoryReader, UsageByWorkload
from scheduler.backends.holders import Holders, attempt_holders
from scheduler.backends.inventory import load_inventory, machine_resources, validate_declared
from scheduler.backends.mps import GpuSharing
from scheduler.common.contract import (
    CUDA_VISIBLE_DEVICES,
    contract_env,
    prepend_path,
    rendezvous,
    visible_gpus,
)
from scheduler.common.paths import HOOK_DIR

HANDLE_KIND = "local"

UNKILLABLE_SECONDS = 60.0
"""How long the processes an ended attempt left may resist SIGKILL before its end is
reported anyway (a process stuck in the kernel cannot die; its share would never be
freed)."""


@dataclass
class _Replica:
    """One wrapper process; ``process`` is None when it was adopted from a handle."""

    index: int
    pid: int
    start_time: int
    exit_file: str
    group: str
    """Its control group (``confinement.group_name``)."""
    process: subprocess.Popen[bytes] | None = None
    ended: bool = False
    cleared: bool = False
    """Ended, and none of its processes is left (its group was killed and removed)."""
    exit_code: int | None = None
    message: str = ""
    ended_at: float | None = None
    """When its exit file was written, for a replica that ended unwatched (adopted)."""


@dataclass
class _Attempt:
    workload_id: int
    token: str
    replicas: list[_Replica]
    failures: list[_Replica] = field(default_factory=list)
    """Replicas that ended with a non-zero (or unknown) code, in the order they were seen."""
    killed: bool = False
    kill_timer: asyncio.TimerHandle | None = None
    kill_at: float = float("inf")
    checkpointed_at: float | None = None
    """The newest checkpoint file's time already reported by ``poll``."""
    ended_at: float | None = None
    """When ``poll`` first saw every replica ended (monotonic)."""


class LocalBackend(LoggingConfigurable, GpuSharing):
    """Runs each replica as a local subprocess; see the module docstring for the file layout.
    Its GPU sharing settings and hooks (MPS) come from ``GpuSharing``."""

    data_dir = Unicode(
        "frachub-data",
        help="""Directory for job logs, exit files, checkpoints and default working directories.

        A relative path is taken from the service's working directory. Users' processes must be
        able to traverse it (their own subdirectories are private to them).
        """,
    ).tag(config=True)

    inventory_source = CaselessStrEnum(
        ["auto", "nvml", "declared"],
        default_value="auto",
        help="""Where the GPUs come from: ``nvml`` (the NVIDIA driver; an error if it does not
        answer), ``declared`` (``declared_inventory``), or ``auto`` (NVML when it works, else
        the declared inventory).""",
    ).tag(config=True)

    declared_inventory = List(
        Dict(),
        default_value=[{"name": "local", "gpus": 2, "gpu_memory_gib": 80, "model": "declared"}],
        help="""Nodes to schedule onto when NVML is not used: a list of
        ``{"name": str, "gpus": positive int, "gpu_memory_gib": number (default 80),
        "model": str (default "declared"), "labels": {str: str} (optional topology, e.g.
        ``{"topology.kubernetes.io/zone": "a"}``; gangs prefer nodes whose labels all match),
        "cpu": cores, "memory_gib": GiB (optional: what the node offers; not counted when
        absent)}``. Every job still runs on this machine; declared GPUs get the UUIDs
        ``GPU-declared-<node>-<index>``.""",
    ).tag(config=True)

    reserved_cpu = Float(
        None,
        allow_none=True,
        help="""Cores of this machine kept for the system and the hub: the NVML node offers
        the rest to workloads. None (the default): the larger of 1 core and a tenth.""",
    ).tag(config=True)

    reserved_memory_gib = Float(
        None,
        allow_none=True,
        help="""Memory (GiB) of this machine kept for the system and the hub: the NVML node
        offers the rest to workloads. None (the default): the larger of 2 GiB and a
        tenth.""",
    ).tag(config=True)

    inventory_refresh_seconds = Float(
        60.0,
        help="How long (seconds) an inventory read from NVML is reused before asking again.",
    ).tag(config=True)

    run_as_user = Bool(
        True,
        help="""When the service runs as root, run each job as its user's system account (uid,
        gid and groups, HOME/USER/LOGNAME), as JupyterHub's LocalProcessSpawner does; a user
        without an account cannot run jobs. False runs every job as the service's own user
        (a single-user workstation, or hub users that are not system accounts).""",
    ).tag(config=True)

    home_dir_template = Unicode(
        "",
        help="""For users without a system account (``run_as_user`` off, or the service not
        root): their home, e.g. ``/srv/frachub/home/{username}``, the same directory as the
        spawner's ``FracLocalSpawner.home_dir_template``, so that jobs run where the
        notebook's files are. Created on demand. Empty: the account's home when the job runs
        as the service's own user, else ``<data_dir>/users/<user>``.""",
    ).tag(config=True)

    env_keep = List(
        Unicode(),
        default_value=["PATH", "LANG", "LC_ALL", "TZ", "LD_LIBRARY_PATH"],
        help="""Variables jobs inherit from the service's environment. Nothing else is
        inherited, so the service's secrets (API tokens) never reach users' processes.""",
    ).tag(config=True)

    environment = Dict(
        value_trait=Unicode(),
        help="""Extra variables for every job (e.g. a shared PATH). The job's own variables
        override these; the environment contract overrides both.""",
    ).tag(config=True)

    python_hook = Bool(
        True,
        help="""Put FracHub's ``sitecustomize`` hook first on PYTHONPATH, which caps PyTorch
        and JAX at the share's memory (FRACHUB_GPU_MEMORY_MIB) and makes
        ``torch.cuda.mem_get_info`` report the share, in programs that import them.""",
    ).tag(config=True)

    gang_stop_grace_seconds = Float(
        10.0,
        help="""When one replica of a gang fails, the others get SIGTERM and, after this many
        seconds, SIGKILL.""",
    ).tag(config=True)

    confinement = CaselessStrEnum(
        list(cg.MODES),
        default_value="auto",
        help="""How each replica's processes are held (docs/service.md, "Confinement"):
        ``cgroup2`` or ``cgroup1`` (a control group per replica: every process tracked and
        killed with it; NVIDIA GPUs outside the share denied where a v1 devices hierarchy is
        mounted), ``session`` (the process group plus a sweep of /proc for the attempt's
        FRACHUB_ATTEMPT), or ``auto`` (the first of these that works here; the log says
        which). A cgroup mode that cannot work here falls back to ``session``, with a
        warning.""",
    ).tag(config=True)

    @validate("declared_inventory")
    def _check_declared(self, proposal: Any) -> list[dict[str, Any]]:
        return validate_declared(proposal.value)

    @validate("data_dir")
    def _absolute_data_dir(self, proposal: Any) -> str:
        if not proposal.value:
            raise ValueError("LocalBackend.data_dir cannot be empty")
        return os.path.abspath(proposal.value)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.data_dir = os.path.abspath(self.data_dir)  # the default is relative too
        self._attempts: dict[str, _Attempt] = {}
        self._inventory: Inventory | None = None
        self._inventory_read_at = 0.0
        self._checkpoints = CheckpointScanner(os.path.join(self.data_dir, "checkpoints"), self.log)
        self._confined: cg.Confinement | None = None
        self._confining = threading.Lock()
        self.gpu_reader = MemoryReader(log=self.log)
        self._exits = ExitWatch(self.log)

    # --- Backend protocol ---------------------------------------------------------------------

    @property
    def confined(self) -> cg.Confinement:
        """The confinement in use, chosen (and logged) on first use."""
        with self._confining:  # starts run in threads: the first ones wait for the choice
            if self._confined is None:
                chosen, why = cg.choose(self.confinement, cg.scope_of(self.data_dir))
                if why:
                    self.log.warning("Confinement %s is not available (%s)", self.confinement, why)
                log = self.log.warning if chosen.root is None else self.log.info
                log("Local jobs are confined by %s", chosen.describe())
                cg.remove_empty(chosen)
                self._confined = chosen
            return self._confined

    def inventory(self) -> Inventory:
        """The configured inventory; NVML answers are reused for ``inventory_refresh_seconds``."""
        now = time.monotonic()
        stale = now - self._inventory_read_at >= self.inventory_refresh_seconds
        if self._inventory is None or (self._inventory.source == "nvml" and stale):
            loaded = load_inventory(
                self.inventory_source,
                self.declared_inventory,
                machine=machine_resources(self.reserved_cpu, self.reserved_memory_gib),
            )
            self._inventory = self.gpu_sharing_inventory(loaded)
            self._inventory_read_at = now
        return self._inventory

    async def start(self, job: JobSpec) -> Handle:
        """Start every replica (spawning runs in a thread so 2,000 starts don't stall the loop)."""
        loop = asyncio.get_running_loop()
        attempt = await loop.run_in_executor(None, self._launch, job)
        self._attempts[attempt.token] = attempt
        for replica in attempt.replicas:
            self._exits.watch(replica.pid, replica.start_time)
        self.gpu_sharing_started(job.workload_id, job.placement, (r.pid for r in attempt.replicas))
        return self._handle(attempt)

    async def stop(self, workload_id: int, handle: Handle, grace_seconds: float) -> None:
        """SIGTERM every live replica's process group now, SIGKILL after ``grace_seconds``.

        An attempt this instance does not watch (never adopted) is still signalled, from its
        handle; its end is then not reported. A repeated stop may shorten the grace, never
        lengthen it.
        """
        attempt = self._attempts.get(str(handle.get("attempt")))
        if attempt is None:
            attempt = self._attempt_from_handle(workload_id, handle)
            if attempt is None:
                self.log.error("Cannot stop workload %s: malformed handle %r", workload_id, handle)
                return
            self.log.warning(
                "Stopping workload %s attempt %s, which this backend does not watch (not "
                "adopted); its end will not be reported",
                workload_id,
                attempt.token,
            )
        self._terminate(attempt, grace_seconds)

    def adopt(self, workload_id: int, handle: Handle) -> bool:
        """Watch an attempt a previous incarnation started; False when it is lost.

        Lost means every replica is gone and at least one left no exit file. A gang with one
        such replica but others still running is adopted; ``poll`` then reports it with exit
        code None and stops the rest. What is left of a lost attempt (its command, when only
        the wrapper died) is killed before this returns, so a new attempt never runs beside it.
        """
        token = str(handle.get("attempt"))
        if token in self._attempts:
            return True
        attempt = self._attempt_from_handle(workload_id, handle)
        if attempt is None:
            self.log.error("Cannot adopt workload %s: malformed handle %r", workload_id, handle)
            return False
        for replica in attempt.replicas:
            self._check(replica, attempt)
        if all(r.ended for r in attempt.replicas) and any(
            r.exit_code is None for r in attempt.replicas
        ):
            self.log.warning(
                "Workload %s attempt %s is gone without an exit file", workload_id, token
            )
            self._clear_now(attempt)
            return False
        self._attempts[token] = attempt
        for replica in attempt.replicas:
            if not replica.ended:
                self._exits.watch(replica.pid, replica.start_time)
        return True

    async def wait_for_exit(self, timeout: float) -> None:
        """Return as soon as a replica ended (or an ended attempt's group may be empty now),
        else after ``timeout`` s: the service polls after it (``exitwatch``)."""
        await self._exits.wait(timeout)

    async def poll(self) -> list[Exit | Checkpoint]:
        """Attempts that ended since the last call, each reported once, and the running
        attempts whose checkpoint directory holds a file newer than the last one reported.

        A replica's end kills what is left in its control group; the attempt's end is reported
        once every group is empty (``wait_for_exit`` returns again 10 ms later when something
        was left, then after longer and longer waits).

        Cost: one ``waitpid`` per own replica, one read of ``/proc/<pid>/stat`` per adopted
        one; exit files are read only for adopted replicas that have ended. Checkpoint
        directories are read by another thread, a bounded part per poll
        (``scheduler.backends.checkpoints``): this takes what it found so far.
        """
        exits: list[Exit | Checkpoint] = []
        saved = self._checkpoints.newest(a.workload_id for a in self._attempts.values())
        for token, attempt in list(self._attempts.items()):
            newest = saved.get(attempt.workload_id)
            if newest is not None and (
                attempt.checkpointed_at is None or newest > attempt.checkpointed_at
            ):
                attempt.checkpointed_at = newest
                exits.append(Checkpoint(attempt.workload_id, newest))
            for replica in attempt.replicas:
                self._check(replica, attempt)
            cleared = self._clear(attempt)
            if all(r.ended for r in attempt.replicas):
                if attempt.ended_at is None:
                    attempt.ended_at = time.monotonic()
                # reported once nothing of it is left, its share then free
                if cleared or self._unkillable(attempt):
                    del self._attempts[token]
                    exits.append(self._exit(attempt))
                else:  # killed processes go within milliseconds: look again soon, then less
                    self._exits.wake_later(min(max(time.monotonic() - attempt.ended_at, 0.01), 1))
            elif attempt.failures and attempt.kill_timer is None and not attempt.killed:
                failed = attempt.failures[0]
                self.log.info(
                    "Workload %s: replica %s failed (%s); stopping the rest of the gang",
                    attempt.workload_id,
                    failed.index,
                    failed.message,
                )
                self._terminate(attempt, self.gang_stop_grace_seconds)
        return self.gpu_sharing_exits(exits)  # MPS: a GPU fault's victims are not failures

    gpu_memory_source = "NVML"
    """Where ``gpu_memory`` reads, in words (the memory watchdog's start-up line)."""

    async def gpu_memory(self, notebooks: Mapping[int, tuple[str, str]]) -> MemoryByWorkload:
        """The GPU memory each running job and notebook server (``notebooks``: running
        allocations, id -> (user, server name)) holds per GPU, from one NVML sample; raises
        ``NvmlUnavailable`` where NVML cannot answer (``gpu_usage``, ``holders``)."""
        holders = attempt_holders(self._attempts.values()).merged(Holders.of_notebooks(notebooks))
        return await self.gpu_reader.memory(holders)

    async def gpu_usage(
        self, notebooks: Mapping[int, tuple[str, str]], *, max_age: float = 0.0
    ) -> UsageByWorkload:
        """Memory and utilization of each running workload per GPU, from one NVML sample
        (``gpu_memory``'s, with utilization; one at most ``max_age`` seconds old is reused);
        ``gpu_reader.last`` then holds the per-GPU readings."""
        holders = attempt_holders(self._attempts.values()).merged(Holders.of_notebooks(notebooks))
        return await self.gpu_reader.usage(holders, max_age=max_age)

    def log_path(self, workload_id: int, replica: int = 0) -> str | None:
        """The replica's log file, or None before anything was written."""
        path = self._log_file(workload_id, replica)
        return path if os.path.exists(path) else None

    async def close(self) -> None:
        """Forget everything; running work goes on, and a restarted service adopts it.

        Pending SIGKILLs are cancelled with the rest: a restarted service that still wants an
        attempt stopped calls ``stop`` again after ``adopt``. Under MPS the daemons are told
        to quit, or left running for the jobs that run on (``stop_gpu_sharing``).
        """
        running = bool(self._attempts)
        for attempt in self._attempts.values():
            if attempt.kill_timer is not None:
                attempt.kill_timer.cancel()
        self._attempts.clear()
        self._exits.close()
        self._checkpoints.close()
        await asyncio.get_running_loop().run_in_executor(None, self.stop_gpu_sharing, running)
        self.gpu_reader.close()

    # --- starting -----------------------------------------------------------------------------

    def _launch(self, job: JobSpec) -> _Attempt:
        """Spawn all replicas of one attempt (blocking; runs in an executor thread).

        Everything that can be refused is checked before the first replica starts; should a
        later replica still fail to start, the earlier ones are killed, so an attempt runs
        whole or not at all.
        """
        argv = workplace.command_argv(job.command)
        if len(job.placement) != job.replicas or not job.placement:
            raise BackendError(
                f"the placement has {len(job.placement)} replica(s) but the job asks for "
                f"{job.replicas}"
            )
        workplace.check_dir_name("user name", job.user)
        account = workplace.account(job.user, self.run_as_user)
        home = self._default_dir(job.user, account)
        cwd = workplace.working_dir(job.working_dir, home)
        checkpoints = os.path.join(self.data_dir, "checkpoints", str(job.workload_id))
        master_port = processes.free_port() if len(job.placement) > 1 else 0
        envs = [
            self._environment(
                job, account, home, self._contract(job, rank, checkpoints, master_port)
            )
            for rank in range(len(job.placement))
        ]
        workplace.check_start(argv, envs[0]["PATH"], cwd, account)

        token = f"a{job.restart_count}-{uuid.uuid4().hex[:8]}"
        for env in envs:
            env[cg.ATTEMPT_VARIABLE] = token
        self._kill_earlier_attempts(job.workload_id)
        run_dir = os.path.join(self.data_dir, "run", str(job.workload_id))
        self._forget_old_attempts(run_dir)
        attempt_dir = os.path.join(run_dir, token)
        for path in (attempt_dir, checkpoints, os.path.dirname(self._log_file(job.workload_id, 0))):
            workplace.make_dir(path, account)
        runs_as = account.pw_name if account is not None else workplace.own_name()
        started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        attempt = _Attempt(job.workload_id, token, [])
        try:
            for rank, (replica, env) in enumerate(zip(job.placement, envs, strict=True)):
                header = (
                    f"=== frachub: workload {job.workload_id} attempt {job.restart_count + 1} "
                    f"({token}) replica {rank} of {len(envs)} started {started} on node "
                    f"{replica.node} GPUs {env[CUDA_VISIBLE_DEVICES] or 'none'} as {runs_as} "
                    f"in {cwd} ===\n"
                ) + "".join(job.log_notes)
                exit_file = os.path.join(attempt_dir, f"replica-{rank}.exit")
                log_file = self._log_file(job.workload_id, rank)
                group = cg.group_name(job.workload_id, token, rank)
                self._prepare_group(group, job, rank)
                attempt.replicas.append(
                    self._spawn(argv, rank, exit_file, log_file, header, env, cwd, account, group)
                )
        except BaseException:
            for replica_started in attempt.replicas:
                processes.signal_group(replica_started.pid, signal.SIGKILL)
                if replica_started.process is not None:
                    replica_started.process.wait()
                replica_started.ended = True
            self._clear_now(attempt)
            for rank in range(len(job.placement)):
                cg.remove(self.confined, cg.group_name(job.workload_id, token, rank))
            raise
        return attempt

    def _contract(
        self, job: JobSpec, rank: int, checkpoints: str, master_port: int
    ) -> dict[str, str]:
        """The environment contract of one replica; every replica runs on this machine."""
        try:
            inventory = self.inventory()
            env = contract_env(
                workload_id=job.workload_id,
                replica=job.placement[rank],
                share=inventory.share(job.placement[rank]),
                restart_count=job.restart_count,
                checkpoint_dir=checkpoints,
                uuid_of=inventory.uuid,
                device_variable=CUDA_VISIBLE_DEVICES,
                rendezvous=rendezvous(job.placement, rank, "127.0.0.1", master_port),
                visible=visible_gpus(job.placement, rank),
            )
            return {**env, **self.gpu_sharing_env(job.placement[rank])}
        except (KeyError, ValueError) as e:
            raise BackendError(f"cannot place replica {rank}: {e}") from e

    def _spawn(
        self,
        argv: list[str],
        rank: int,
        exit_file: str,
        log_file: str,
        header: str,
        env: dict[str, str],
        cwd: str,
        account: pwd.struct_passwd | None,
        group: str,
    ) -> _Replica:
        identity: dict[str, Any] = {}
        if account is not None:
            identity = {
                "user": account.pw_uid,
                "group": account.pw_gid,
                "extra_groups": os.getgrouplist(account.pw_name, account.pw_gid),
            }
        fd = workplace.open_log(log_file)
        try:
            if account is not None:
                os.fchown(fd, account.pw_uid, account.pw_gid)
            os.write(fd, header.encode())
            process = subprocess.Popen(
                ["/bin/sh", "-c", processes.WRAPPER, "frachub-job", exit_file, *argv],
                cwd=cwd,
                env=env,
                stdin=subprocess.PIPE,  # the wrapper waits on it until it is in its group
                stdout=fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                **identity,
            )
        except OSError as e:
            raise BackendError(f"cannot start replica {rank}: {e.strerror or e}") from e
        finally:
            os.close(fd)
        assert process.stdin is not None
        try:
            cg.enter(self.confined, group, process.pid)
            process.stdin.write(b"go\n")  # the command starts, in the group
        except OSError as e:
            process.kill()
            process.wait()
            raise BackendError(f"cannot confine replica {rank}: {e.strerror or e}") from e
        finally:
            with contextlib.suppress(OSError):
                process.stdin.close()
        stat = processes.proc_stat(process.pid)
        return _Replica(rank, process.pid, stat[1] if stat else 0, exit_file, group, process)

    def _prepare_group(self, group: str, job: JobSpec, rank: int) -> None:
        """Make the replica's control groups, denying the GPUs it is not shown and limiting
        its CPU and memory to what it asked for."""
        node = job.placement[rank].node
        every = [gpu.index for gpu in self.inventory().gpus if gpu.node == node]
        denied = cg.denied_minors(visible_gpus(job.placement, rank), every)
        limits = cg.Limits(job.cpu_milli, job.memory_mib)
        try:
            cg.prepare(self.confined, group, denied, limits)
        except OSError as e:
            raise BackendError(f"cannot make the control group of replica {rank}: {e}") from e

    def _default_dir(self, user: str, account: pwd.struct_passwd | None) -> str:
        """The user's home: the system account's when the job runs as that user (dropped
        privileges), else the one ``home_dir_template`` names (the notebook's), else the
        service's own account's home for its own user; otherwise ``<data_dir>/users/<user>``,
        created on demand. A home the job could not enter is no default."""
        home = None
        if account is not None:
            home = account.pw_dir
        elif self.home_dir_template:
            home = self.home_dir_template.format(username=user)
            os.makedirs(home, 0o755, exist_ok=True)
            return home
        elif user == workplace.own_name():
            home = pwd.getpwuid(os.getuid()).pw_dir
        if home and os.path.isdir(home):
            return home
        default = os.path.join(self.data_dir, "users", user)
        workplace.make_dir(default, account)
        return default

    def _environment(
        self,
        job: JobSpec,
        account: pwd.struct_passwd | None,
        home: str,
        gpu_env: dict[str, str],
    ) -> dict[str, str]:
        """Kept service variables < ``environment`` < the job's < identity < the contract <
        the job's credentials."""
        env = {name: os.environ[name] for name in self.env_keep if name in os.environ}
        env.setdefault("PATH", workplace.DEFAULT_PATH)
        env.update(self.environment)
        env.update(job.env)
        env.update(HOME=home, USER=job.user, LOGNAME=job.user)
        if account is not None and account.pw_shell:
            env["SHELL"] = account.pw_shell
        env.update(gpu_env)
        env.update(job.credentials)
        if self.python_hook:
            env["PYTHONPATH"] = prepend_path(HOOK_DIR, env.get("PYTHONPATH"))
        return env

    def _forget_old_attempts(self, run_dir: str) -> None:
        """Exit files of earlier attempts of this workload: their ends were reported already
        (the service starts a workload again only after recording the previous end)."""
        if not os.path.isdir(run_dir):
            return
        for name in os.listdir(run_dir):
            if name not in self._attempts:
                shutil.rmtree(os.path.join(run_dir, name), ignore_errors=True)

    # --- watching and stopping ----------------------------------------------------------------

    def _check(self, replica: _Replica, attempt: _Attempt) -> bool:
        """True while the replica runs. On its end, record code and message (and a failure)
        exactly once, whoever notices first: ``poll``, ``stop`` or the SIGKILL timer."""
        if replica.ended:
            return False
        if replica.process is not None:
            status = replica.process.poll()
            if status is None:
                return True
            code = 128 - status if status < 0 else status
            replica.message = processes.describe(code, attempt.killed)
        else:
            stat = processes.proc_stat(replica.pid)
            if stat is not None and stat[1] == replica.start_time and stat[0] != "Z":
                return True
            code, replica.ended_at = processes.read_exit_file(replica.exit_file)
            if code is not None:
                replica.message = processes.describe(code, attempt.killed)
            elif attempt.killed:
                code, replica.message = 128 + signal.SIGKILL, "killed after the grace period"
            else:
                replica.message = "the process vanished without recording an exit code"
        if code != 0 and cg.oom_kills(self.confined, replica.group):
            replica.message = processes.out_of_memory(
                code, cg.memory_limit_mib(self.confined, replica.group), attempt.killed
            )
        replica.ended, replica.exit_code = True, code
        self._exits.forget(replica.pid)
        if code != 0:
            attempt.failures.append(replica)
        return False

    def _terminate(self, attempt: _Attempt, grace_seconds: float) -> None:
        loop = asyncio.get_running_loop()
        for replica in attempt.replicas:
            if self._check(replica, attempt):
                self._signal(attempt, replica, signal.SIGTERM)
        deadline = loop.time() + max(grace_seconds, 0.0)
        if deadline < attempt.kill_at:
            if attempt.kill_timer is not None:
                attempt.kill_timer.cancel()
            attempt.kill_at = deadline
            attempt.kill_timer = loop.call_at(deadline, self._kill, attempt)

    def _kill(self, attempt: _Attempt) -> None:
        attempt.killed = True
        for replica in attempt.replicas:
            if self._check(replica, attempt):
                self.log.info(
                    "Workload %s replica %s outlived its grace period: SIGKILL",
                    attempt.workload_id,
                    replica.index,
                )
                self._signal(attempt, replica, signal.SIGKILL)

    def _signal(self, attempt: _Attempt, replica: _Replica, sig: int) -> None:
        """Signal every process of a running replica: its control group's, else its process
        group (the sweep for the rest comes when it has ended: ``_clear``)."""
        if self.confined.root is None:
            processes.signal_group(replica.pid, sig)
        elif sig == signal.SIGKILL:
            cg.kill_all(self.confined, replica.group, attempt.token)
        else:
            cg.signal_all(self.confined, replica.group, attempt.token, sig)

    def _clear(self, attempt: _Attempt) -> bool:
        """Kill whatever the ended replicas left running; True once every replica has ended
        and nothing of them is left."""
        for replica in attempt.replicas:
            if replica.ended and not replica.cleared:
                replica.cleared = cg.kill_all(self.confined, replica.group, attempt.token)
        return all(r.cleared for r in attempt.replicas)

    def _unkillable(self, attempt: _Attempt) -> bool:
        """True (once, with an error in the log) when the attempt's processes have outlived
        SIGKILL for ``UNKILLABLE_SECONDS`` (stuck in the kernel, as Slurm's unkillable
        steps): its end is then reported anyway, rather than never."""
        assert attempt.ended_at is not None
        if time.monotonic() - attempt.ended_at < UNKILLABLE_SECONDS:
            return False
        self.log.error(
            "Workload %s attempt %s: processes outlived SIGKILL for %ss (stuck in the "
            "kernel?); reporting its end anyway",
            attempt.workload_id,
            attempt.token,
            UNKILLABLE_SECONDS,
        )
        return True

    def _clear_now(self, attempt: _Attempt, timeout: float = 5.0) -> None:
        """``_clear`` until nothing is left (blocking: killed processes go within
        milliseconds); a process still there after ``timeout`` is logged."""
        deadline = time.monotonic() + timeout
        while not self._clear(attempt):
            if time.monotonic() > deadline:
                self.log.error(
                    "Workload %s attempt %s: processes outlived SIGKILL for %ss",
                    attempt.workload_id,
                    attempt.token,
                    timeout,
                )
                return
            time.sleep(0.01)

    def _kill_earlier_attempts(self, workload_id: int) -> None:
        """Kill the groups of this workload's attempts this backend does not watch (one a
        crashed service left and nobody adopted), so that two attempts never run at once."""
        for group in cg.groups_of(self.confined, workload_id):
            token = group[len(f"w{workload_id}-") :].rsplit("-r", 1)[0]
            if token in self._attempts:
                continue
            self.log.warning("Workload %s: killing what is left of attempt %s", workload_id, token)
            ghost = _Attempt(workload_id, token, [_Replica(0, 0, 0, "", group, ended=True)])
            self._clear_now(ghost)

    def _exit(self, attempt: _Attempt) -> Exit:
        if not attempt.failures:
            ends = [r.ended_at for r in attempt.replicas]
            ended_at = max(ends) if None not in ends else None  # type: ignore[type-var]
            return Exit(attempt.workload_id, 0, "exited with code 0", ended_at)
        first = attempt.failures[0]
        message = first.message
        if len(attempt.replicas) > 1:
            message = f"replica {first.index} {message}"
        return Exit(attempt.workload_id, first.exit_code, message, first.ended_at)

    # --- handles and paths --------------------------------------------------------------------

    def _handle(self, attempt: _Attempt) -> Handle:
        return {
            "backend": HANDLE_KIND,
            "workload_id": attempt.workload_id,
            "attempt": attempt.token,
            "replicas": [
                {"pid": r.pid, "start_time": r.start_time, "exit_file": r.exit_file}
                for r in attempt.replicas
            ],
        }

    def _attempt_from_handle(self, workload_id: int, handle: Handle) -> _Attempt | None:
        try:
            if handle.get("backend") != HANDLE_KIND:
                return None
            replicas = [
                _Replica(
                    i,
                    int(r["pid"]),
                    int(r["start_time"]),
                    str(r["exit_file"]),
                    cg.group_name(workload_id, str(handle["attempt"]), i),
                )
                for i, r in enumerate(handle["replicas"])
            ]
            token = str(handle["attempt"])
        except (AttributeError, KeyError, TypeError, ValueError):
            return None
        if not replicas or any(r.pid <= 1 for r in replicas):
            return None
        return _Attempt(workload_id, token, replicas)

    def _log_file(self, workload_id: int, replica: int) -> str:
        return os.path.join(self.data_dir, "logs", str(workload_id), f"replica-{replica}.log")


# --- small helpers ----------------------------------------------------------------------------
