"""FracHub's start-up hook: the PyTorch GPU memory cap, applied only if the program uses torch.

Python imports ``sitecustomize`` at start-up from the first ``sys.path`` entry that has one;
FracHub puts this directory first on ``PYTHONPATH`` for training jobs and notebooks. It:

1. If ``FRACHUB_GPU_FRACTION`` is a share below 1, watches for ``import torch`` with a
   ``sys.meta_path`` finder, without importing torch itself (most programs never do, and
   importing it costs seconds). When torch has been imported, it registers
   ``torch.cuda._lazy_call(...)`` so that ``set_per_process_memory_fraction`` is applied to
   every visible GPU when CUDA initialises; it never initialises CUDA itself.
2. Runs the ``sitecustomize`` that this one shadows (a distribution's or a virtualenv's), so
   putting FracHub first changes nothing else.

The cap is cooperative (docs/service.md, "Environment"): it keeps an honest program inside its
share.
Any failure here is reported on stderr and otherwise ignored: a broken hook must never stop a
user's program. Keep this file compatible with old Pythons (users bring their own).
"""

import os
import sys

_ENV = "FRACHUB_GPU_FRACTION"


def _warn(what, error):
    # Not contextlib.suppress: this file runs at every Python start-up, so it imports little.
    try:  # noqa: SIM105
        sys.stderr.write(f"frachub: {what}: {type(error).__name__}: {error}\n")
    except Exception:
        pass


def _fraction():
    """The share to cap torch at, or None when there is nothing to cap."""
    raw = os.environ.get(_ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if 0 < value < 1 else None


def _install_cap(torch, fraction):
    """Queue the cap for CUDA initialisation (or apply it now if CUDA is already up)."""
    cuda = torch.cuda

    def cap():
        # Runs inside torch's lazy CUDA init; an exception here would break the user's first
        # CUDA call, so it is reported and swallowed.
        try:
            for device in range(cuda.device_count()):
                cuda.set_per_process_memory_fraction(fraction, device)
        except Exception as e:
            _warn("could not apply the PyTorch memory cap", e)

    cuda._lazy_call(cap)


class _CapOnExec:
    """A loader that runs torch's real loader, then installs the cap.

    Unknown attributes are the real loader's, and the module's ``__loader__``/``__spec__`` are
    given back the real loader before torch runs, so nothing inside torch sees this wrapper.
    """

    def __init__(self, loader, fraction):
        self._loader = loader
        self._fraction = fraction

    def __getattr__(self, name):
        if name in ("_loader", "_fraction"):  # not yet set (copying): no endless recursion
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
            _install_cap(module, self._fraction)
        except Exception as e:
            _warn("could not register the PyTorch memory cap", e)


class _TorchWatcher:
    """A ``sys.meta_path`` finder that only notices ``torch``; it finds nothing itself."""

    def __init__(self, fraction):
        self._fraction = fraction
        self._done = False

    def find_spec(self, fullname, path=None, target=None):
        # Never removes itself from sys.meta_path: the import system is iterating over it.
        if self._done or fullname != "torch":
            return None
        self._done = True  # one-shot, and safe against finders that call back into meta_path
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
                spec.loader = _CapOnExec(spec.loader, self._fraction)
                return spec
        except Exception as e:
            _warn("could not watch the torch import", e)
        return None


def _watch_torch():
    fraction = _fraction()
    if fraction is None:
        return
    torch = sys.modules.get("torch")
    if torch is not None:  # imported before start-up finished (unusual): cap it now
        _install_cap(torch, fraction)
    else:
        sys.meta_path.insert(0, _TorchWatcher(fraction))


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
    _watch_torch()
except Exception as e:
    _warn("could not set up the PyTorch memory cap", e)

try:
    _run_shadowed_sitecustomize()
except Exception as e:
    _warn("the sitecustomize that FracHub's hook runs after itself failed", e)
