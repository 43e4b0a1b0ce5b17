"""FracHub's start-up hook: a GPU share's memory cap and view for PyTorch and JAX, applied
only if the program imports them.

Python imports ``sitecustomize`` at start-up from the first ``sys.path`` entry that has one;
FracHub puts this directory first on ``PYTHONPATH`` for training jobs and notebooks. When the
environment contract gives a share below a whole GPU (``FRACHUB_GPU_FRACTION`` below 1, the
share's memory in ``FRACHUB_GPU_MEMORY_MIB``), a ``sys.meta_path`` finder watches for two
imports without importing anything itself (most programs never do, and importing torch
costs seconds):

1. ``import torch``: once torch has loaded, ``torch.cuda._lazy_call(...)`` queues the cap
   for CUDA's initialisation: ``set_per_process_memory_fraction`` on every visible GPU, at
   the fraction that allows the share's *bytes* of the total torch itself reports (which is
   less than NVML's: the driver keeps some), so a job that asked for 30 GiB may allocate
   30 GiB. It never initialises CUDA itself. And ``torch.cuda.mem_get_info`` is replaced by
   one that reports memory within the share (total: the share; free: what the share has
   left, never more than the GPU has free), so code that sizes itself by it (vLLM,
   accelerate's ``device_map="auto"``, batch-size finders) sizes itself to the share. The
   real one stays reachable as ``torch.cuda.mem_get_info.__wrapped__``.
2. ``import jax``: before JAX loads, ``XLA_PYTHON_CLIENT_MEM_FRACTION`` (the share's fraction
   of NVML's total, as the contract sets it) becomes the fraction of the total CUDA reports
   that allows the share's bytes. That total is NVML's total less the memory it says the
   driver reserves (``nvmlDeviceGetMemoryInfo_v2``), read through ``ctypes`` without
   creating a CUDA context, so a program that forks after ``import jax`` still can. JAX
   reads the variable when it first uses the GPU, after the import.

Then it runs the ``sitecustomize`` that this one shadows (a distribution's or a virtualenv's),
so putting FracHub first changes nothing else.

The caps are cooperative (docs/service.md, "Environment"): they keep an honest program inside
its share. Any failure here is reported on stderr and otherwise ignored: a broken hook must
never stop a user's program. Keep this file compatible with old Pythons (users bring their
own) and free of FracHub's imports (it runs in users' own Pythons, where FracHub is not
installed).
"""

import os
import sys

_FRACTION = "FRACHUB_GPU_FRACTION"
_MEMORY_MIB = "FRACHUB_GPU_MEMORY_MIB"
_UUIDS = "FRACHUB_GPU_UUIDS"
_XLA_FRACTION = "XLA_PYTHON_CLIENT_MEM_FRACTION"
_MIB = 1 << 20


def _warn(what, error):
    # Not contextlib.suppress: this file runs at every Python start-up, so it imports little.
    try:  # noqa: SIM105
        sys.stderr.write(f"frachub: {what}: {type(error).__name__}: {error}\n")
    except Exception:
        pass


# --- the share, from the environment contract (pure) -----------------------------------------


def _share():
    """(fraction, memory bytes or None) of a share below a whole GPU, or None: nothing to cap.

    Without a usable ``FRACHUB_GPU_MEMORY_MIB`` (an older contract) the caps fall back to the
    fraction of the total each framework sees."""
    try:
        fraction = float(os.environ.get(_FRACTION, "").strip())
    except ValueError:
        return None
    if not 0 < fraction < 1:
        return None
    try:
        memory_mib = int(os.environ.get(_MEMORY_MIB, "").strip())
    except ValueError:
        memory_mib = 0
    return fraction, (memory_mib * _MIB if memory_mib > 0 else None)


def _framework_fraction(fraction, share_bytes, seen_total_bytes):
    """The fraction of ``seen_total_bytes`` that allows ``share_bytes`` (``fraction``, the
    share's own, where that total is unknown).

    The same rule as ``Share.framework_fraction`` in ``scheduler/common/share.py`` (this file
    cannot import FracHub; a test proves the two agree): rounded up to the next billionth and
    one more, so that the fraction times the total, in floating point and truncated to whole
    bytes as torch and XLA do, is never below the share (at most a few hundred bytes above).
    """
    if seen_total_bytes <= 0:
        return fraction
    if share_bytes >= seen_total_bytes:
        return 1.0
    return min(1.0, (share_bytes * 10**9 // seen_total_bytes + 1) / 10**9)


def _within_share(free, total, share_bytes, reserved):
    """What ``torch.cuda.mem_get_info`` reports in a share: the share as the total (never more
    than the GPU's), and as free what the share has left after this process's torch reserved
    ``reserved`` (never more than the GPU has free)."""
    shown_total = min(total, share_bytes)
    return max(0, min(free, shown_total - reserved)), shown_total


# --- PyTorch (thin: every call into torch is here) -------------------------------------------


def _install_torch(torch, share):
    fraction, share_bytes = share
    cuda = torch.cuda
    real_mem_get_info = cuda.mem_get_info

    def cap():
        # Runs inside torch's lazy CUDA init; an exception here would break the user's first
        # CUDA call, so it is reported and swallowed.
        try:
            for device in range(cuda.device_count()):
                seen = real_mem_get_info(device)[1] if share_bytes else 0
                cap_at = _framework_fraction(fraction, share_bytes or 0, seen)
                cuda.set_per_process_memory_fraction(cap_at, device)
        except Exception as e:
            _warn("could not apply the PyTorch memory cap", e)

    cuda._lazy_call(cap)
    if share_bytes:
        _patch_mem_get_info(cuda, real_mem_get_info, share_bytes)


def _patch_mem_get_info(cuda, real, share_bytes):
    """Make ``torch.cuda.mem_get_info`` (and ``torch.cuda.memory.mem_get_info``, where it is
    the same function) report memory within the share; the real one is ``__wrapped__``."""
    import functools

    warned = []

    @functools.wraps(real)
    def mem_get_info(device=None):
        free, total = real(device)  # its own errors (a bad device) are the caller's
        try:
            return _within_share(free, total, share_bytes, cuda.memory_reserved(device))
        except Exception as e:
            if not warned:
                warned.append(e)
                _warn("torch.cuda.mem_get_info reports the whole GPU, not the share", e)
            return free, total

    memory = getattr(cuda, "memory", None)
    if memory is not None and getattr(memory, "mem_get_info", None) is real:
        memory.mem_get_info = mem_get_info
    cuda.mem_get_info = mem_get_info


class _InstallOnExec:
    """A loader that runs torch's real loader, then installs the cap.

    Unknown attributes are the real loader's, and the module's ``__loader__``/``__spec__`` are
    given back the real loader before torch runs, so nothing inside torch sees this wrapper.
    """

    def __init__(self, loader, share):
        self._loader = loader
        self._share = share

    def __getattr__(self, name):
        if name in ("_loader", "_share"):  # not yet set (copying): no endless recursion
            raise AttributeError(name)
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        try:
            module.__loader__ = self._loader
            if getattr(module, "__spec__", None) is not None:
                module.__spec__.loader = self._loader
        except Exception as e:
            _warn("could not restore torch's loader", e)
        self._loader.exec_module(module)
        try:
            _install_torch(module, self._share)
        except Exception as e:
            _warn("could not register the PyTorch memory cap", e)


# --- JAX (thin: the NVML read is here) -------------------------------------------------------


def _cuda_visible_total(uuid):
    """The memory CUDA reports as the total of the GPU ``uuid``: NVML's total less what the
    driver reserves, or None where NVML cannot say (no driver, an old one, a declared GPU).

    NVML, not CUDA: ``cuInit`` in this process would stop a child it forks later from using
    CUDA, and NVML needs no context on the GPU."""
    import ctypes

    class Memory(ctypes.Structure):
        _fields_ = [
            ("version", ctypes.c_uint),
            ("total", ctypes.c_ulonglong),
            ("reserved", ctypes.c_ulonglong),
            ("free", ctypes.c_ulonglong),
            ("used", ctypes.c_ulonglong),
        ]

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        get_info = nvml.nvmlDeviceGetMemoryInfo_v2
    except (OSError, AttributeError):
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        device = ctypes.c_void_p()
        if nvml.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(device)) != 0:
            return None
        memory = Memory()
        memory.version = ctypes.sizeof(Memory) | (2 << 24)  # NVML_STRUCT_VERSION(Memory, 2)
        if get_info(device, ctypes.byref(memory)) != 0 or memory.total <= memory.reserved:
            return None
        return int(memory.total - memory.reserved)
    finally:
        nvml.nvmlShutdown()


def _set_jax_fraction(share):
    """Before JAX loads: its memory fraction, of the total CUDA reports, that allows the
    share's bytes; left as the contract set it where that total is unknown, or where the
    program set its own before importing JAX."""
    fraction, share_bytes = share
    current = os.environ.get(_XLA_FRACTION)
    uuid = os.environ.get(_UUIDS, "").split(",")[0].strip()
    try:
        if share_bytes is None or not uuid or current is None or float(current) != fraction:
            return
    except ValueError:
        return
    seen = _cuda_visible_total(uuid)
    if seen:
        os.environ[_XLA_FRACTION] = repr(_framework_fraction(fraction, share_bytes, seen))


# --- watching imports ------------------------------------------------------------------------


class _ImportWatcher:
    """A ``sys.meta_path`` finder that only notices ``torch`` and ``jax``; it finds nothing
    itself, and acts once for each."""

    def __init__(self, share):
        self._share = share
        self._seen = set()

    def find_spec(self, fullname, path=None, target=None):
        # Never removes itself from sys.meta_path: the import system is iterating over it.
        if fullname not in ("torch", "jax") or fullname in self._seen:
            return None
        self._seen.add(fullname)  # first, so finders that call back into meta_path are safe
        if fullname == "jax":
            try:
                _set_jax_fraction(self._share)
            except Exception as e:
                _warn("could not set JAX's memory fraction", e)
            return None
        try:
            for finder in list(sys.meta_path):
                if finder is self:
                    continue
                find_spec = getattr(finder, "find_spec", None)
                if find_spec is None:
                    continue
                spec = find_spec(fullname, path, target)
                if spec is None:
                    continue
                if spec.loader is None or not hasattr(spec.loader, "exec_module"):
                    return None
                spec.loader = _InstallOnExec(spec.loader, self._share)
                return spec
        except Exception as e:
            _warn("could not watch the torch import", e)
        return None


def _watch_imports():
    share = _share()
    if share is None:
        return
    watcher = _ImportWatcher(share)
    torch = sys.modules.get("torch")
    if torch is not None:  # imported before start-up finished (unusual): cap it now
        watcher._seen.add("torch")
        _install_torch(torch, share)
    sys.meta_path.insert(0, watcher)


def _run_shadowed_sitecustomize():
    """Find the next ``sitecustomize`` on ``sys.path`` and run it, as ``site`` would have."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.realpath(__file__))
    rest = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    if spec.origin and os.path.realpath(spec.origin) == os.path.realpath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


try:
    _watch_imports()
except Exception as e:
    _warn("could not set up the GPU memory caps", e)

try:
    _run_shadowed_sitecustomize()
except Exception as e:
    _warn("the sitecustomize that FracHub's hook runs after itself failed", e)
