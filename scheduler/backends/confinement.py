"""Confinement of local jobs: every process of a replica is tracked, and dies with it.

Slurm's cgroup plugin is the model. Each replica of an attempt runs in a control group of
its own, made before the user's command starts (the wrapper waits on its stdin until the
service has moved it in), so every process it starts is inside: children, re-parented
orphans and ``setsid`` daemons alike. A process cannot leave its group, since moving one
needs write access to a common ancestor's ``cgroup.procs``, which is root's. The local
backend kills the whole group when a stop's grace period ends, and when the replica's main
process ends (also when it dies without its wrapper), and reports the end only once the
group is empty; a restarted service kills the groups of attempts it could not adopt, and of
any earlier attempt of a workload, before a new attempt starts.

Modes (``LocalBackend.confinement``; ``auto`` takes the first that works and logs which):

- ``cgroup2``: groups under the cgroup v2 mount (``/sys/fs/cgroup`` on current
  distributions, ``/sys/fs/cgroup/unified`` on hybrid ones); killed with ``cgroup.kill``
  (Linux 5.14 and later, which cannot miss a process that forks meanwhile) or else by
  signalling every member until none is left.
- ``cgroup1``: groups in a v1 hierarchy (``pids``, else ``freezer``); ``pids.max`` is set to
  0 before the kill, so nothing forks while the group is emptied.
- ``session``: no group can be made (the service is not root, or no hierarchy is mounted
  writable): the wrapper's process group, plus a sweep of ``/proc`` for the processes whose
  environment carries ``FRACHUB_ATTEMPT=<attempt>``. That finds ``setsid`` daemons and
  orphans too, but not a process that replaced its environment (``env -i``, ``execve`` with
  a new one), nor, for a service that is not root, another account's processes.

CPU and memory: a replica that asked for CPU cores gets them as its group's limit
(``cpu.max`` on v2, ``cpu.cfs_quota_us`` on v1: the cores it asked for, no more, so the
cores the scheduler counted as free are); one that asked for memory gets it as its hard limit
(``memory.max``, or v1's ``memory.limit_in_bytes``, with swap held to the same so the job
cannot page its way past it): memory cannot be taken back from a process once given, so
what was counted is what it may use, and the kernel kills a process that needs more. The
backend reads that kill back (``oom_kills``: v2's ``memory.events``, v1's
``memory.oom_control``) and says it in words. The controllers live where the host has them:
in the v2 groups themselves when the v2 mount offers ``memory``/``cpu`` (enabled down the
service's directories), else in the v1 ``memory`` and ``cpu`` hierarchies beside the
tracking one (hybrid hosts); in ``session`` mode nothing limits them, and ``describe`` says
so.

GPUs: where a cgroup v1 ``devices`` hierarchy is mounted (v1 and hybrid hosts), each
replica's group there denies the NVIDIA GPUs (character devices of major 195) that are not
its share, so a job that ignores ``CUDA_VISIBLE_DEVICES`` cannot open them. Best effort:
minors come from ``/proc/driver/nvidia/gpus`` (in PCI order, as NVML numbers GPUs), else are
taken to equal the indices. cgroup v2 has no ``devices`` file (it needs a BPF program), so on
a v2-only host GPUs are held apart by ``CUDA_VISIBLE_DEVICES`` alone.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import re
import signal
from collections.abc import Iterable
from dataclasses import dataclass, field

ATTEMPT_VARIABLE = "FRACHUB_ATTEMPT"
"""Set in every replica's environment to its attempt's token; the ``session`` mode's sweep
(and anyone checking by hand) finds the attempt's processes by it."""
NVIDIA_MAJOR = 195
MODES = ("auto", "cgroup2", "cgroup1", "session")
V1_TRACKING = ("pids", "freezer")
"""v1 hierarchies that can hold the groups, in order of preference."""
GROUPS_DIR = "frachub"


@dataclass(frozen=True)
class Mounts:
    """Where the cgroup hierarchies are mounted: the v2 one, and each v1 controller's."""

    v2: str | None = None
    v1: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Confinement:
    """The mode in use: ``root`` holds the replicas' groups (None in ``session`` mode),
    ``devices`` the same groups in the v1 devices hierarchy (None without one)."""

    mode: str
    root: str | None = None
    devices: str | None = None
    memory: str | None = None
    """Where the replicas' memory limits are set: ``root`` itself (v2 with the memory
    controller), a v1 memory hierarchy's directory, or None (not limited)."""
    cpu: str | None = None
    """Where their CPU limits are set, as ``memory``."""

    def describe(self) -> str:
        if self.root is None:
            return (
                "process groups plus a sweep of /proc for each attempt's FRACHUB_ATTEMPT "
                "(no control group can be made here; CPU and memory requests are counted "
                "but not enforced)"
            )
        devices = (
            f"; other GPUs denied through the v1 devices controller ({self.devices})"
            if self.devices
            else "; GPUs are not denied by a devices controller"
        )
        limits = "; ".join(
            f"{what} limited in {where}" if where else f"{what} not limited (no controller)"
            for what, where in (("memory", self.memory), ("CPU", self.cpu))
        )
        return f"{self.mode} control groups under {self.root}{devices}; {limits}"

    def is_v2(self, base: str | None) -> bool:
        """Whether ``base`` (one of the roots) holds v2 groups: the tracking root in v2 mode."""
        return base is not None and base == self.root and self.mode == "cgroup2"


def cgroup_mounts(mountinfo: str = "/proc/self/mountinfo") -> Mounts:
    """The cgroup mounts this process sees (the first of each kind)."""
    try:
        with open(mountinfo) as f:
            lines = f.read().splitlines()
    except OSError:
        return Mounts()
    v2: str | None = None
    v1: dict[str, str] = {}
    for line in lines:
        before, _, after = line.partition(" - ")
        fields, rest = before.split(), after.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        if rest[0] == "cgroup2" and v2 is None:
            v2 = point
        elif rest[0] == "cgroup":
            for option in rest[2].split(","):
                v1.setdefault(option, point)
    return Mounts(v2, v1)


def scope_of(owner: str) -> str:
    """A name for one service's groups (from its data directory, or a hub's API URL), so
    services, hubs and test backends on one machine never touch each other's."""
    return hashlib.sha256(owner.encode()).hexdigest()[:12]


def choose(wanted: str, scope: str, mounts: Mounts | None = None) -> tuple[Confinement, str]:
    """The confinement to use, and why a wanted mode could not be (empty when it could)."""
    mounts = cgroup_mounts() if mounts is None else mounts
    devices = _usable(mounts.v1.get("devices"), scope)
    tried: list[str] = []
    if wanted in ("auto", "cgroup2"):
        root = _usable(mounts.v2, scope)
        if root is not None:
            assert mounts.v2 is not None
            offered = _v2_controllers(mounts.v2)
            memory, cpu = (
                root if name in offered else _usable(mounts.v1.get(name), scope)
                for name in ("memory", "cpu")
            )
            return Confinement("cgroup2", root, devices, memory, cpu), ""
        tried.append("no writable cgroup v2 mount")
    if wanted in ("auto", "cgroup1"):
        for controller in V1_TRACKING:
            root = _usable(mounts.v1.get(controller), scope)
            if root is not None:
                memory = _usable(mounts.v1.get("memory"), scope)
                cpu = _usable(mounts.v1.get("cpu"), scope)
                return Confinement("cgroup1", root, devices, memory, cpu), ""
        tried.append("no writable cgroup v1 pids or freezer hierarchy")
    why = "" if wanted == "session" else "; ".join(tried)
    return Confinement("session"), why


def _v2_controllers(mount: str) -> set[str]:
    """The controllers a v2 mount offers (none on a hybrid host, where v1 holds them)."""
    try:
        with open(os.path.join(mount, "cgroup.controllers")) as f:
            return set(f.read().split())
    except OSError:
        return set()


def _usable(mount: str | None, scope: str) -> str | None:
    """The directory for this service's groups in a hierarchy, made if need be; None when
    it cannot be made or written (not root, a read-only mount)."""
    if mount is None:
        return None
    root = os.path.join(mount, GROUPS_DIR, scope)
    try:
        os.makedirs(root, exist_ok=True)
    except OSError:
        return None
    usable = os.access(os.path.join(root, "cgroup.procs"), os.W_OK)
    with contextlib.suppress(OSError):
        os.rmdir(root)  # made again with the first group: an idle service leaves none
    return root if usable else None


def group_name(workload_id: int, token: str, rank: int) -> str:
    """The group of one replica of one attempt (the same name in every hierarchy)."""
    return f"w{workload_id}-{token}-r{rank}"


def server_group_name(user: str, server: str) -> str:
    """The group of a user's notebook server (hub user names may hold any character)."""
    return "s-" + hashlib.sha256(f"{user}/{server}".encode()).hexdigest()[:16]


CPU_PERIOD_US = 100_000
"""The scheduling period of a CPU limit (the kernel's default): 1.5 cores is 150 ms of CPU
time per 100 ms."""


@dataclass(frozen=True)
class Limits:
    """What a replica may use of the machine: thousandths of a core and MiB (0: no limit)."""

    cpu_milli: int = 0
    memory_mib: int = 0


def prepare(
    confinement: Confinement, name: str, denied_minors: Iterable[int], limits: Limits = Limits()
) -> None:
    """Make the replica's groups; the devices one denies ``denied_minors`` (NVIDIA GPUs),
    the memory and CPU ones hold ``limits``. Raises OSError, also when a limit cannot be set
    where the controller is (a job is not started unlimited behind its request's back)."""
    if confinement.root is None:
        return
    _make(os.path.join(confinement.root, name))
    if confinement.devices is not None:
        group = os.path.join(confinement.devices, name)
        _make(group)
        for minor in denied_minors:
            _write(os.path.join(group, "devices.deny"), f"c {NVIDIA_MAJOR}:{minor} rwm")
    if limits.memory_mib and confinement.memory is not None:
        group = _limited_group(confinement, confinement.memory, name, "memory")
        limit = str(limits.memory_mib * 2**20)
        if confinement.is_v2(confinement.memory):
            _write(os.path.join(group, "memory.max"), limit)
            _write_if_there(os.path.join(group, "memory.swap.max"), "0")
        else:
            _write(os.path.join(group, "memory.limit_in_bytes"), limit)
            _write_if_there(os.path.join(group, "memory.memsw.limit_in_bytes"), limit)
    if limits.cpu_milli and confinement.cpu is not None:
        group = _limited_group(confinement, confinement.cpu, name, "cpu")
        quota = max(1000, limits.cpu_milli * CPU_PERIOD_US // 1000)
        if confinement.is_v2(confinement.cpu):
            _write(os.path.join(group, "cpu.max"), f"{quota} {CPU_PERIOD_US}")
        else:
            _write(os.path.join(group, "cpu.cfs_period_us"), str(CPU_PERIOD_US))
            _write(os.path.join(group, "cpu.cfs_quota_us"), str(quota))


def _limited_group(confinement: Confinement, base: str, name: str, controller: str) -> str:
    """The replica's group under ``base`` for ``controller``, made; on v2 the controller is
    first enabled for the children of each directory from the mount down to ``base``."""
    group = os.path.join(base, name)
    if confinement.is_v2(base):
        mount = os.path.dirname(os.path.dirname(base))  # base is <mount>/frachub/<scope>
        for directory in (mount, os.path.dirname(base), base):
            with contextlib.suppress(OSError):  # already on, or the host's own business
                _write(os.path.join(directory, "cgroup.subtree_control"), f"+{controller}")
    else:
        _make(group)
    return group


def enter(confinement: Confinement, name: str, pid: int) -> None:
    """Move ``pid`` (the waiting wrapper) into the replica's groups. Raises OSError."""
    for base in _bases(confinement):
        group = os.path.join(base, name)
        if base == confinement.root or os.path.isdir(group):
            _write(os.path.join(group, "cgroup.procs"), str(pid))


def _bases(confinement: Confinement) -> list[str]:
    """Every directory that holds the replicas' groups, each once."""
    bases = (confinement.root, confinement.devices, confinement.memory, confinement.cpu)
    return list(dict.fromkeys(base for base in bases if base is not None))


def oom_kills(confinement: Confinement, name: str) -> int:
    """How many processes of the replica the kernel killed for going past its memory limit
    (v2's ``memory.events`` or v1's ``memory.oom_control``, ``oom_kill``; on a v1 kernel
    without that line, whether the limit was ever hit: ``memory.failcnt``). 0 when its
    memory was not limited here, or its group is gone."""
    text = _memory_file(confinement, name, "memory.events", "memory.oom_control")
    match = re.search(r"^oom_kill (\d+)$", text or "", re.MULTILINE)
    if match:
        return int(match.group(1))
    if text is None or confinement.is_v2(confinement.memory):
        return 0
    failed = _memory_file(confinement, name, "", "memory.failcnt") or "0"
    return 1 if failed.isdigit() and int(failed) > 0 else 0


def memory_limit_mib(confinement: Confinement, name: str) -> int:
    """The replica's memory limit in MiB as its group holds it; 0 when unlimited or gone."""
    text = _memory_file(confinement, name, "memory.max", "memory.limit_in_bytes") or ""
    if not text.isdigit() or int(text) >= 2**62:  # "max", or v1's "unlimited" page count
        return 0
    return int(text) // 2**20


def _memory_file(confinement: Confinement, name: str, v2: str, v1: str) -> str | None:
    """A file of the replica's memory group (``v2``'s or ``v1``'s name as the group is),
    stripped; None when its memory is not limited here or the file cannot be read."""
    if confinement.memory is None:
        return None
    file = v2 if confinement.is_v2(confinement.memory) else v1
    try:
        with open(os.path.join(confinement.memory, name, file)) as f:
            return f.read().strip()
    except OSError:
        return None


def members(confinement: Confinement, name: str, token: str) -> list[int]:
    """The live processes of the replica (``session`` mode: of its whole attempt)."""
    if confinement.root is None:
        return sweep(token)
    return _pids(os.path.join(confinement.root, name))


def signal_all(confinement: Confinement, name: str, token: str, sig: int) -> None:
    """Send ``sig`` to every process of the replica (``session``: of its attempt)."""
    for pid in members(confinement, name, token):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def kill_all(confinement: Confinement, name: str, token: str) -> bool:
    """SIGKILL every process of the replica; True once none is left, the group then being
    removed. Call again until True: killed processes take a moment to go."""
    if confinement.root is None:
        left = sweep(token)
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        return not left
    group = os.path.join(confinement.root, name)
    if not os.path.isdir(group):
        return True
    kill_file = os.path.join(group, "cgroup.kill")
    if confinement.mode == "cgroup2" and os.path.exists(kill_file):
        _write(kill_file, "1")
    else:
        with contextlib.suppress(OSError):  # only the pids hierarchy has it
            _write(os.path.join(group, "pids.max"), "0")
        for pid in _pids(group):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    if _pids(group):
        return False
    remove(confinement, name)
    return True


def remove(confinement: Confinement, name: str) -> None:
    """Remove the replica's (empty) groups, and the service's directory of groups when it
    was the last (``prepare`` makes it again); a group still in use stays."""
    for base in _bases(confinement):
        for path in (os.path.join(base, name), base):
            with contextlib.suppress(OSError):
                os.rmdir(path)


def remove_empty(confinement: Confinement) -> None:
    """Remove the empty groups a previous run of the service left (attempts whose end it
    never saw: stopped for good, or their records gone); called before this run makes any."""
    for name in groups_of(confinement, None):
        remove(confinement, name)


def groups_of(confinement: Confinement, workload_id: int | None) -> list[str]:
    """Names of the groups left of any attempt of the workload (None: of every workload;
    none in ``session`` mode)."""
    if confinement.root is None:
        return []
    try:
        names = os.listdir(confinement.root)
    except OSError:
        return []
    prefix = "w" if workload_id is None else f"w{workload_id}-"
    return sorted(n for n in names if n.startswith(prefix))


def sweep(token: str) -> list[int]:
    """Processes whose environment carries ``FRACHUB_ATTEMPT=<token>`` (readable ones: all
    of them for root, the service's own otherwise)."""
    wanted = f"{ATTEMPT_VARIABLE}={token}".encode()
    found = []
    own = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == own:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if wanted in environ.split(b"\0"):
            found.append(int(entry))
    return found


def gpu_minors() -> list[int]:
    """Device minors of this machine's NVIDIA GPUs in PCI bus order (NVML's index order);
    empty without the driver's /proc files."""
    minors = []
    for info in sorted(glob.glob("/proc/driver/nvidia/gpus/*/information")):
        try:
            with open(info) as f:
                match = re.search(r"^Device Minor:\s*(\d+)", f.read(), re.MULTILINE)
        except OSError:
            continue
        if match:
            minors.append(int(match.group(1)))
    return minors


def denied_minors(own: Iterable[int], every: Iterable[int]) -> list[int]:
    """Minors of the GPUs (by index, of ``every`` GPU of the node) that are not ``own``:
    the driver's minors where it says, else the indices themselves."""
    minors = gpu_minors()
    own_set = set(own)
    indices = sorted(set(every) | set(range(len(minors))))
    return sorted(minors[i] if i < len(minors) else i for i in indices if i not in own_set)


def _make(group: str) -> None:
    """Make a group and its parents; once more when another thread removed the (then empty)
    parent meanwhile."""
    try:
        os.makedirs(group, exist_ok=True)
    except FileNotFoundError:
        os.makedirs(group, exist_ok=True)


def _pids(group: str) -> list[int]:
    try:
        with open(os.path.join(group, "cgroup.procs")) as f:
            return [int(line) for line in f.read().split()]
    except OSError:
        return []


def _write_if_there(path: str, text: str) -> None:
    """Write a control file the kernel may not have (swap accounting is optional)."""
    if os.path.exists(path):
        _write(path, text)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
