"""NVIDIA MPS on the local backend: one control daemon per GPU, the variables a client gets,
and what the daemons' logs say about GPU faults.

Why MPS: without it a GPU share is a convention that only PyTorch and JAX keep (their own
caps); under MPS the driver itself refuses a client more pinned memory than
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` and runs its kernels on at most
``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` of the GPU's SMs, whatever the program is.

One daemon per GPU (``nvidia-cuda-mps-control -f``, in the foreground so the service owns the
process and learns of its death from ``waitpid``), each started with
``CUDA_VISIBLE_DEVICES=<the GPU's UUID>`` and its own pipe and log directories (what their
logs say about GPU faults, and who was whose victim: ``mps_faults``)::

    <data_dir>/mps/gpu<index>/pipe    CUDA_MPS_PIPE_DIRECTORY (control socket, pid file)
    <data_dir>/mps/gpu<index>/log     CUDA_MPS_LOG_DIRECTORY, and daemon.out: the daemon's
                                      stdout and stderr, where a foreground daemon writes
                                      its control and server log lines (measured on an
                                      H200, driver 580: no control.log or server.log then)

A daemon started with ``CUDA_VISIBLE_DEVICES`` remaps the devices its clients see (NVIDIA's MPS
guide, "CUDA_VISIBLE_DEVICES"): a client of GPU 3's daemon sees that GPU as device 0, and a
client that kept ``CUDA_VISIBLE_DEVICES=3`` would fail. So a client is shown its GPU by UUID
(which names the same device before and after the remapping), and the device ordinal in its
pinned memory limit is 0.

A daemon that dies is started again after a back-off (1 s, doubling to a minute, reset once
one stayed up a minute), with a line in the log. ``stop`` sends ``quit`` through the control
binary (with the daemon's pipe directory), and kills the daemon if it is still there after
a timeout. A daemon found running at start (the service was killed and restarted) is adopted
from the pid file the daemon keeps in its pipe directory, not started twice.

All process work happens in the supervisor's thread or the caller's (the backend calls
``start`` and ``stop`` from an executor), never on the event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from traitlets import CaselessStrEnum, Float, HasTraits, Integer, Unicode

from scheduler.backends import processes
from scheduler.backends.base import Checkpoint, Exit, Inventory
from scheduler.backends.mps_faults import (
    FAULT_WINDOW_SECONDS,
    OUTPUT_FAULT_PATTERNS,
    EndedClient,
    MpsFault,
    blame,
    fault_in,
    victim_message,
)
from scheduler.common.contract import CUDA_VISIBLE_DEVICES
from scheduler.common.placement import ReplicaPlacement
from scheduler.common.share import Share, share_of

GPU_SHARING_MODES = ("cooperative", "mps")
CONTROL_NAME = "nvidia-cuda-mps-control"
DRIVER_BIN_DIRS = (
    "/usr/bin",
    "/usr/local/bin",
    "/usr/local/nvidia/bin",
    "/usr/local/cuda/bin",
    "/usr/lib/nvidia/bin",
    "/opt/nvidia/bin",
)
"""Where the driver's utilities live when they are not on the service's PATH (the driver's
packages, the NVIDIA container toolkit's mount, the CUDA toolkit)."""

PIPE_DIRECTORY = "CUDA_MPS_PIPE_DIRECTORY"
LOG_DIRECTORY = "CUDA_MPS_LOG_DIRECTORY"
PINNED_MEMORY_LIMIT = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
THREAD_PERCENTAGE = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
PID_FILE = "nvidia-cuda-mps-control.pid"
DAEMON_OUTPUT = "daemon.out"

BACKOFF_FIRST = 1.0
BACKOFF_MAX = 60.0
STABLE_SECONDS = 60.0
"""A daemon that stayed up this long starts its next back-off from ``BACKOFF_FIRST`` again."""


class MpsUnavailable(RuntimeError):
    """``gpu_sharing = mps`` was asked for, and MPS cannot run here; the message says why and
    what to do (the service refuses to start with it)."""


def find_control(configured: str = "", search_path: str | None = None) -> str:
    """The path of ``nvidia-cuda-mps-control``: ``configured`` (a path, or a name looked up
    on PATH) when set, else the first on PATH or in the driver's usual directories."""
    if configured:
        found = shutil.which(configured, path=search_path) if "/" not in configured else None
        if "/" in configured and os.path.isfile(configured) and os.access(configured, os.X_OK):
            found = configured
        if found:
            return os.path.abspath(found)
        raise MpsUnavailable(
            f"LocalBackend.mps_control is {configured!r}, which is not an executable file; "
            f"point it at the NVIDIA driver's {CONTROL_NAME}, or set "
            "LocalBackend.gpu_sharing = 'cooperative'"
        )
    path = search_path if search_path is not None else os.environ.get("PATH", "")
    found = shutil.which(CONTROL_NAME, path=os.pathsep.join([path, *DRIVER_BIN_DIRS]))
    if found:
        return os.path.abspath(found)
    raise MpsUnavailable(
        f"GPU sharing 'mps' needs {CONTROL_NAME}, found neither on PATH nor in "
        f"{', '.join(DRIVER_BIN_DIRS)}: install the NVIDIA driver's utilities (the package "
        "that ships it, e.g. nvidia-utils or nvidia-compute-utils), set "
        "LocalBackend.mps_control to its path, or use --gpu-sharing cooperative"
    )


def mps_env(
    share: Share, pipe_directory: str, gpu_uuid: str, context_allowance_mib: int
) -> dict[str, str]:
    """The variables that make one client of a shared GPU an MPS client within its share.

    Empty for a whole-GPU replica (or none): nobody shares its GPU, so it runs as a plain CUDA
    process, outside MPS, with all of the GPU's memory and SMs.

    The pinned limit is the share's memory plus ``context_allowance_mib``: MPS counts the
    client's CUDA context against the limit (measured on an H200: a 20 GiB limit stopped
    allocations at 19.44 GiB), so without the allowance a job that asked for 30 GiB could not
    allocate 30 GiB. The device ordinal is 0: the client sees its daemon's one GPU as device 0.
    """
    if not share.is_partial:
        return {}
    limit_mib = share.memory_mib + max(0, int(context_allowance_mib))
    return {
        PIPE_DIRECTORY: pipe_directory,
        PINNED_MEMORY_LIMIT: f"0={limit_mib}M",
        THREAD_PERCENTAGE: str(share.thread_percentage),
        CUDA_VISIBLE_DEVICES: gpu_uuid,
    }


# --- the daemons --------------------------------------------------------------------------------


@dataclass
class _Daemon:
    node: str
    index: int
    uuid: str
    pipe_dir: str
    log_dir: str
    process: subprocess.Popen[bytes] | None = None
    pid: int | None = None
    """The daemon's pid; with ``process`` None, one adopted from its pid file."""
    started_at: float = 0.0
    restarts: int = 0
    backoff: float = BACKOFF_FIRST
    next_start: float = 0.0
    last_exit: str = ""
    log_offsets: dict[str, int] = field(default_factory=dict)


class MpsDaemons:
    """The MPS control daemons of this machine's GPUs, supervised by a thread.

    ``gpus`` are ``(node, index, uuid)``: every GPU runs on this machine (a declared
    inventory may name several nodes; their GPUs' directories are then ``<node>-gpu<index>``).
    ``start`` and ``stop`` block (a few seconds at most
    for ``stop``); call them from a thread or an executor in async code. Between them, a
    supervisor thread restarts daemons that die and reads their logs for GPU faults
    (``take_faults``).
    """

    def __init__(
        self,
        control: str,
        root: str,
        gpus: Iterable[tuple[str, int, str]],
        *,
        log: logging.Logger | logging.LoggerAdapter | None = None,
        stop_timeout: float = 10.0,
        check_interval: float = 0.5,
        env: dict[str, str] | None = None,
    ) -> None:
        self.control = control
        self.root = root
        self.stop_timeout = stop_timeout
        self.check_interval = check_interval
        self.log = log or logging.getLogger(__name__)
        self.base_env = dict(env) if env is not None else {"PATH": os.environ.get("PATH", "")}
        listed = sorted(gpus)
        several = len({node for node, _, _ in listed}) > 1
        self.daemons = [
            _Daemon(node, index, uuid, *_directories(root, node, index, several))
            for node, index, uuid in listed
        ]
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._faults: list[MpsFault] = []

    # -- what the rest of the service asks ----------------------------------------------------

    def pipe_directory(self, node: str, index: int) -> str:
        return self._daemon(node, index).pipe_dir

    def up(self, node: str, index: int) -> bool:
        with self._lock:
            return self._alive(self._daemon(node, index))

    def health(self) -> list[dict[str, object]]:
        """One entry per GPU: is its daemon up, its pid, how often it was restarted, and how
        it last ended."""
        with self._lock:
            return [
                {
                    "node": d.node,
                    "gpu": d.index,
                    "up": self._alive(d),
                    "pid": d.pid,
                    "restarts": d.restarts,
                    "last_exit": d.last_exit,
                    "pipe_directory": d.pipe_dir,
                }
                for d in self.daemons
            ]

    def take_faults(self) -> list[MpsFault]:
        """GPU faults the logs reported since the last call."""
        with self._lock:
            faults, self._faults = self._faults, []
        return faults

    # -- start and stop ---------------------------------------------------------------------

    def start(self) -> None:
        """Start (or adopt) every GPU's daemon, then the supervisor thread."""
        with self._lock:
            for daemon in self.daemons:
                os.makedirs(daemon.pipe_dir, 0o755, exist_ok=True)
                os.makedirs(daemon.log_dir, 0o755, exist_ok=True)
                # clients of every account reach the daemon through its pipe directory,
                # whatever the service's umask made of the directories above it
                for path in (self.root, os.path.dirname(daemon.pipe_dir), daemon.pipe_dir):
                    os.chmod(path, 0o755)
                adopted = self._adoptable(daemon)
                if adopted:
                    daemon.pid, daemon.started_at = adopted, time.time()
                    self.log.info(
                        "MPS control daemon for GPU %s is already running (pid %s); keeping it",
                        daemon.index,
                        adopted,
                    )
                else:
                    self._spawn(daemon)
                for name in ("control.log", "server.log", DAEMON_OUTPUT):  # faults from now on
                    path = os.path.join(daemon.log_dir, name)
                    daemon.log_offsets[name] = _size(path)
        self._stopping.clear()
        self._thread = threading.Thread(target=self._supervise, name="mps-daemons", daemon=True)
        self._thread.start()

    def detach(self) -> None:
        """Stop supervising; the daemons run on (a later ``start`` adopts them)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def stop(self) -> None:
        """Stop supervising, ask every daemon to quit, and kill those still there after
        ``stop_timeout`` seconds."""
        self.detach()
        with self._lock:
            deadline = time.monotonic() + self.stop_timeout
            for daemon in self.daemons:
                if self._alive(daemon):
                    self._quit(daemon, max(0.5, deadline - time.monotonic()))
            for daemon in self.daemons:
                while self._alive(daemon) and time.monotonic() < deadline:
                    time.sleep(0.05)
                if self._alive(daemon):
                    self.log.warning(
                        "MPS control daemon for GPU %s did not quit within %ss; killing it",
                        daemon.index,
                        self.stop_timeout,
                    )
                    self._kill(daemon)
                daemon.process, daemon.pid = None, None

    # -- the supervisor -----------------------------------------------------------------------

    def _supervise(self) -> None:
        while not self._stopping.wait(self.check_interval):
            try:
                self.check()
            except Exception:  # the supervisor must outlive any one bad check
                self.log.exception("MPS supervision failed; trying again")

    def check(self) -> None:
        """One pass: restart dead daemons whose back-off has passed, read new log lines."""
        now = time.time()
        with self._lock:
            for daemon in self.daemons:
                self._read_logs(daemon, now)
                if daemon.pid is None:
                    if now >= daemon.next_start and not self._stopping.is_set():
                        daemon.restarts += 1
                        self._spawn(daemon)
                    continue
                if self._alive(daemon):
                    if now - daemon.started_at >= STABLE_SECONDS:
                        daemon.backoff = BACKOFF_FIRST
                    continue
                daemon.last_exit = self._ended(daemon)
                daemon.process, daemon.pid = None, None
                daemon.next_start = now + daemon.backoff
                self.log.warning(
                    "MPS control daemon for GPU %s %s; starting it again in %.0f s "
                    "(restart %d); its GPU's clients run without MPS until then",
                    daemon.index,
                    daemon.last_exit,
                    daemon.backoff,
                    daemon.restarts + 1,
                )
                daemon.backoff = min(BACKOFF_MAX, daemon.backoff * 2)

    # -- one daemon -----------------------------------------------------------------------------

    def _daemon(self, node: str, index: int) -> _Daemon:
        for daemon in self.daemons:
            if daemon.node == node and daemon.index == index:
                return daemon
        raise KeyError(f"no MPS daemon for GPU {index} of node {node!r}")

    def _env(self, daemon: _Daemon) -> dict[str, str]:
        return {
            **self.base_env,
            CUDA_VISIBLE_DEVICES: daemon.uuid,
            PIPE_DIRECTORY: daemon.pipe_dir,
            LOG_DIRECTORY: daemon.log_dir,
        }

    def _spawn(self, daemon: _Daemon) -> None:
        out = os.open(
            os.path.join(daemon.log_dir, DAEMON_OUTPUT), os.O_WRONLY | os.O_CREAT | os.O_APPEND
        )
        try:
            daemon.process = subprocess.Popen(
                [self.control, "-f"],
                env=self._env(daemon),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C meant for the service does not reach it
                close_fds=True,
            )
        except OSError as e:
            daemon.process, daemon.pid = None, None
            daemon.last_exit = f"could not start: {e.strerror or e}"
            daemon.next_start = time.time() + daemon.backoff
            self.log.error("MPS control daemon for GPU %s %s", daemon.index, daemon.last_exit)
            daemon.backoff = min(BACKOFF_MAX, daemon.backoff * 2)
            return
        finally:
            os.close(out)
        daemon.pid, daemon.started_at = daemon.process.pid, time.time()
        self.log.info(
            "MPS control daemon for GPU %s started (pid %s, pipe directory %s)",
            daemon.index,
            daemon.pid,
            daemon.pipe_dir,
        )

    def _alive(self, daemon: _Daemon) -> bool:
        if daemon.process is not None:
            return daemon.process.poll() is None
        if daemon.pid is None:
            return False
        stat = processes.proc_stat(daemon.pid)
        return stat is not None and stat[0] != "Z"

    def _ended(self, daemon: _Daemon) -> str:
        """How a daemon that is no longer alive ended, in words."""
        if daemon.process is None:
            return "is gone"
        code = daemon.process.returncode
        if code is not None and code < 0:
            return f"was killed by {signal.Signals(-code).name}"
        return f"exited with code {code}"

    def _adoptable(self, daemon: _Daemon) -> int | None:
        """The pid of a daemon already serving this pipe directory, from its pid file."""
        try:
            with open(os.path.join(daemon.pipe_dir, PID_FILE)) as f:
                pid = int(f.read().strip() or 0)
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except (OSError, ValueError):
            return None
        stat = processes.proc_stat(pid)
        named = any(b"mps-control" in part for part in argv[:2])
        return pid if pid > 1 and named and stat is not None and stat[0] != "Z" else None

    def _quit(self, daemon: _Daemon, timeout: float) -> None:
        """``echo quit | nvidia-cuda-mps-control`` with the daemon's pipe directory."""
        try:
            subprocess.run(
                [self.control],
                input=b"quit\n",
                env=self._env(daemon),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            self.log.warning("MPS control daemon for GPU %s: quit failed: %s", daemon.index, e)

    def _kill(self, daemon: _Daemon) -> None:
        if daemon.pid is None:
            return
        processes.signal_group(daemon.pid, signal.SIGKILL)
        if daemon.process is not None:
            daemon.process.wait()

    def _read_logs(self, daemon: _Daemon, now: float) -> None:
        """New lines of the daemon's logs that report a fault go to ``take_faults``."""
        for name in ("control.log", "server.log", DAEMON_OUTPUT):
            path = os.path.join(daemon.log_dir, name)
            offset = daemon.log_offsets.get(name, 0)
            size = _size(path)
            if size < offset:  # rotated or truncated: read it from the start
                offset = 0
            if size == offset:
                continue
            try:
                with open(path, "rb") as f:
                    f.seek(offset)
                    chunk = f.read(size - offset)
            except OSError:
                continue
            complete = chunk.rfind(b"\n") + 1  # a line still being written waits for its end
            daemon.log_offsets[name] = offset + complete
            for line in chunk[:complete].decode(errors="replace").splitlines():
                fault = fault_in(line, daemon.index, now)
                if fault is not None:
                    self.log.warning("MPS on GPU %s reports a fault: %s", daemon.index, line)
                    self._faults.append(fault)


def _tail(path: str | None, size: int = 8192) -> str:
    """The end of a job's log: a faulting program's CUDA error is among its last lines."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - size))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _directories(root: str, node: str, index: int, several: bool) -> tuple[str, str]:
    base = os.path.join(root, f"{node}-gpu{index}" if several else f"gpu{index}")
    return os.path.join(base, "pipe"), os.path.join(base, "log")


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


# --- the local backend's settings and hooks -----------------------------------------------------


class GpuSharing(HasTraits):
    """How the local backend enforces shares of a GPU: its settings (``LocalBackend.*``) and
    the hooks it calls. A mixin of ``LocalBackend`` (not a configurable of its own, so that
    its settings are the backend's and ``--help-all`` lists them once), which provides
    ``data_dir``, ``run_as_user``, ``env_keep``, ``log`` and ``inventory()``."""

    data_dir: str
    run_as_user: bool
    env_keep: list[str]
    log: logging.Logger | logging.LoggerAdapter
    inventory: Callable[[], Inventory]

    def gpu_sharing_inventory(self, inventory: Inventory) -> Inventory:
        """The inventory with what the sharing mode imposes on placement: under MPS, with
        jobs run as their users (``run_as_user``, the service being root), a GPU serves one
        account at a time (``Node.one_account_per_gpu``)."""
        if self.gpu_sharing != "mps" or not self.run_as_user or os.geteuid() != 0:
            return inventory
        nodes = tuple(
            dataclasses.replace(node, one_account_per_gpu=True) for node in inventory.nodes
        )
        return dataclasses.replace(inventory, nodes=nodes)

    gpu_sharing = CaselessStrEnum(
        list(GPU_SHARING_MODES),
        default_value="cooperative",
        help="""How a share of a GPU is enforced (docs/gpu-sharing.md). ``cooperative``: the
        frameworks' own caps (PyTorch through FracHub's start-up hook, JAX and TensorFlow
        through their variables); a program that ignores them (raw CUDA, CuPy) is not held.
        ``mps``: the service runs one NVIDIA MPS control daemon per GPU, and every job and
        notebook on a shared GPU is an MPS client whose memory the driver caps at its share
        (``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``) and whose compute follows its share
        (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``). Whole-GPU work runs outside MPS.""",
    ).tag(config=True)

    mps_control = Unicode(
        "",
        help=f"""Path (or name on PATH) of NVIDIA's ``{CONTROL_NAME}``, for ``gpu_sharing =
        mps``. Empty: the first on the service's PATH or in {", ".join(DRIVER_BIN_DIRS)}.""",
    ).tag(config=True)

    mps_context_allowance_mib = Integer(
        1024,
        min=0,
        help="""MiB added to each MPS client's pinned memory limit for its CUDA context, which
        MPS counts against the limit (on an H200, driver 580, a 20 GiB limit stopped CuPy and
        PyTorch at 19.44 GiB: about 0.56 GiB of context): with it, a job that asked for
        30 GiB can allocate 30 GiB. A share's
        neighbours lose nothing: the engine places shares by their memory, and the context
        exists whether it is counted or not.""",
    ).tag(config=True)

    mps_stop_timeout = Float(
        10.0,
        help="""Seconds the MPS control daemons get to quit when the service stops, before
        they are killed.""",
    ).tag(config=True)

    mps_fault_window_seconds = Float(
        FAULT_WINDOW_SECONDS,
        help="""Under MPS, a GPU fault of one client ends the other clients of its GPU. Jobs of
        one GPU that fail within this many seconds of a fault the MPS logs report are its
        victims, requeued in their place; the one that faulted fails. A failing MPS client's
        end is reported this much later, to see whether it was one.""",
    ).tag(config=True)

    _mps: MpsDaemons | None = None
    _mps_clients: dict[int, tuple[int, frozenset[int]]]
    """Running workloads that are MPS clients: their GPU index and their replicas' pids."""
    _fault_hold: list[tuple[Exit, EndedClient]]
    """Failures of MPS clients, held ``mps_fault_window_seconds`` to see whether a GPU fault of
    another client caused them."""
    _fault_seen: list[EndedClient]
    """Failures already reported, kept a while as the context of later ones."""
    _faults: list[MpsFault]

    def start_gpu_sharing(self) -> None:
        """Start what the sharing mode needs (``mps``: a control daemon per GPU). Raises
        ``MpsUnavailable`` when MPS cannot run here. Blocking; a no-op when cooperative or
        already started."""
        if self.gpu_sharing != "mps" or self._mps is not None:
            return
        control = find_control(self.mps_control)
        gpus = [(gpu.node, gpu.index, gpu.uuid) for gpu in self.inventory().gpus]
        # the daemons get what jobs get of the service's environment (PATH, LD_LIBRARY_PATH)
        env = {name: os.environ[name] for name in self.env_keep if name in os.environ}
        daemons = MpsDaemons(
            control,
            os.path.join(self.data_dir, "mps"),
            gpus,
            log=self.log,
            stop_timeout=self.mps_stop_timeout,
            env=env,
        )
        daemons.start()
        self._mps = daemons
        self._mps_clients, self._fault_hold, self._fault_seen, self._faults = {}, [], [], []
        self.log.info(
            "GPU sharing: mps (%d control daemons, %s)", len(daemons.daemons), daemons.control
        )

    async def begin(self) -> None:
        """Before any work starts (the service, or a script, awaits it once): start what the
        sharing mode needs, off the event loop. Raises ``MpsUnavailable`` (a RuntimeError)
        when ``mps`` is asked and cannot run here. ``close()`` stops it again."""
        await asyncio.get_running_loop().run_in_executor(None, self.start_gpu_sharing)

    def stop_gpu_sharing(self, leave_running: bool = False) -> None:
        """Stop the MPS daemons (blocking, at most ``mps_stop_timeout`` seconds); with
        ``leave_running`` (jobs run on past the service, as they do across its restarts),
        only stop supervising them: the next start adopts them, and the jobs keep their
        MPS servers."""
        daemons, self._mps = self._mps, None
        if daemons is None:
            return
        if leave_running:
            daemons.detach()
            self.log.info("Leaving the MPS control daemons running for the jobs that run on")
        else:
            daemons.stop()

    def gpu_sharing_health(self) -> dict[str, Any]:
        """The mode and, under MPS, each daemon's state (``GET api/v1/health``, metrics)."""
        if self._mps is None:
            return {"mode": self.gpu_sharing}
        return {"mode": self.gpu_sharing, "daemons": self._mps.health()}

    def gpu_sharing_env(self, replica: ReplicaPlacement) -> dict[str, str]:
        """The MPS variables of one replica (empty when cooperative or for whole GPUs)."""
        if self._mps is None or not replica.gpus:
            return {}
        inventory = self.inventory()
        gpu = replica.gpus[0]
        return mps_env(
            inventory.share(replica),
            self._mps.pipe_directory(replica.node, gpu.index),
            inventory.uuid(replica.node, gpu.index),
            self.mps_context_allowance_mib,
        )

    def gpu_sharing_started(
        self, workload_id: int, placement: Sequence[ReplicaPlacement], pids: Iterable[int]
    ) -> None:
        """An attempt started; under MPS, remember it if its replicas are MPS clients (hold
        a share of a GPU) for ``gpu_sharing_exits``."""
        if self._mps is None:
            return
        for replica in placement:
            if share_of(replica, 0).is_partial:
                self._mps_clients[workload_id] = (replica.gpus[0].index, frozenset(pids))
                return

    def gpu_sharing_exits(self, reports: list[Exit | Checkpoint]) -> list[Exit | Checkpoint]:
        """``poll``'s reports, with the failures of MPS clients held up to
        ``mps_fault_window_seconds``: a client that a GPU fault of another client took down is
        reported lost (no exit code: the service requeues it in its place) with the faulting
        workload named; the faulting one fails as it did."""
        if self._mps is None:
            held = getattr(self, "_fault_hold", None)
            if held:  # the daemons were stopped meanwhile: report what was held as it was
                reports = reports + [report for report, _ in held]
                held.clear()
            return reports
        now = time.time()
        window = self.mps_fault_window_seconds
        self._faults = [f for f in self._faults if now - f.at < 4 * window]
        self._faults += self._mps.take_faults()
        out: list[Exit | Checkpoint] = []
        for report in reports:
            client = (
                self._mps_clients.pop(report.workload_id, None)
                if isinstance(report, Exit)
                else None
            )
            if client is None or report.exit_code == 0:
                out.append(report)
                continue
            assert isinstance(report, Exit)
            path = self.log_path(report.workload_id)  # type: ignore[attr-defined]
            ended = EndedClient(
                report.workload_id, client[0], now, report.exit_code, client[1], _tail(path)
            )
            self._fault_hold.append((report, ended))
            if any(pattern.search(ended.output) for pattern in OUTPUT_FAULT_PATTERNS):
                # the daemon's words for a fault are not known for every driver (measured on
                # an H200: the server did not exit): the faulting program's own error is
                self._faults.append(MpsFault(ended.gpu, now, "its output names a GPU fault"))
        due = [(r, c) for r, c in self._fault_hold if now - c.ended_at >= window]
        if due:
            self._fault_seen = [c for c in self._fault_seen if now - c.ended_at < 4 * window]
            context = [c for _, c in self._fault_hold] + self._fault_seen
            victims = blame(self._faults, context, window)
            for report, client in due:
                self._fault_hold.remove((report, client))
                self._fault_seen.append(client)
                if client.workload_id in victims:
                    message = victim_message(victims[client.workload_id], client.gpu)
                    self.log.warning("Workload %s: %s", client.workload_id, message)
                    report = Exit(report.workload_id, None, message, report.ended_at)
                out.append(report)
        return out
