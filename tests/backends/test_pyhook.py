"""FracHub's start-up hook (``scheduler/backends/pyhook/sitecustomize.py``) in real Python
processes: harmless without torch, chains the ``sitecustomize`` it shadows, caps torch at the
share's bytes of the total torch reports, makes ``torch.cuda.mem_get_info`` report the share,
and gives JAX the fraction of CUDA's total that holds the share.

CUDA itself is not here: a small fake ``torch`` package on ``sys.path`` records what the hook
asks of it (``FAKE_TORCH_CUDA``), and a test replaces the hook's one NVML read. What a real
GPU does with these calls was measured on an H200 (docs/service.md, "Memory within a share").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

from scheduler.common.paths import HOOK_DIR
from scheduler.common.share import MIB, Share

pytestmark = pytest.mark.backends

GIB = 1 << 30
SEEN_TOTAL = 150_109_880_320
"""What torch and CUDA report as an H200's total (NVML: 150,754,820,096 less 644,939,776
reserved), as measured."""
SHARE_MIB = 30_766
"""A 30 GiB request on an H200 of 143,771 MiB: milli 214, so 214 * 143771 // 1000 MiB."""

FAKE_TORCH_CUDA = """
import os

_queued_calls = []
_initialized = False
calls = []
GIB = 1 << 30
reserved = {0: 0, 1: 0}
free = int(os.environ.get("FAKE_FREE", str(139 * GIB)))

def _lazy_call(callable, **kwargs):
    _queued_calls.append(callable)

def is_initialized():
    return _initialized

def device_count():
    return 2

def mem_get_info(device=None):
    if device not in (None, 0, 1):
        raise ValueError("invalid device " + repr(device))
    calls.append(("mem_get_info", device))
    return free, 150109880320

def memory_reserved(device=None):
    if os.environ.get("FAKE_BROKEN_RESERVED"):
        raise RuntimeError("no allocator")
    return reserved[device or 0]

def set_per_process_memory_fraction(fraction, device=None):
    calls.append((fraction, device))

def init():
    global _initialized
    _initialized = True
    for call in _queued_calls:
        call()
"""


def python_with_hook(
    code: str,
    *,
    fraction: str | None = "0.5",
    memory_mib: str | None = None,
    extra_path: Sequence[Path] = (),
    python: str = "",
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a new Python with the hook first on PYTHONPATH and a share's contract."""
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {})}
    environment["PYTHONPATH"] = ":".join([HOOK_DIR, *map(str, extra_path)])
    if fraction is not None:
        environment["FRACHUB_GPU_FRACTION"] = fraction
    if memory_mib is not None:
        environment["FRACHUB_GPU_MEMORY_MIB"] = memory_mib
    return subprocess.run(
        [python or sys.executable, "-c", textwrap.dedent(code)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_hook_is_harmless_without_torch() -> None:
    done = python_with_hook(
        """
        import sys
        assert "torch" not in sys.modules
        import json
        print("ok", sys.modules["sitecustomize"].__file__)
        """
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.split() == ["ok", os.path.join(HOOK_DIR, "sitecustomize.py")]


def test_hook_runs_the_sitecustomize_it_shadows(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text("import builtins\nbuiltins.CHAINED = True\n")
    done = python_with_hook("print(CHAINED)", extra_path=[tmp_path])
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "True", "")


def test_hook_survives_a_broken_shadowed_sitecustomize(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text("raise RuntimeError('broken site')\n")
    done = python_with_hook("print('still runs')", extra_path=[tmp_path])
    assert (done.returncode, done.stdout.strip()) == (0, "still runs")
    assert "broken site" in done.stderr


@pytest.fixture
def fake_torch(tmp_path: Path) -> Path:
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("from . import cuda\n")
    (tmp_path / "torch" / "cuda.py").write_text(FAKE_TORCH_CUDA)
    return tmp_path


# --- the cap -----------------------------------------------------------------------------------


def test_hook_caps_torch_at_the_shares_bytes_of_the_total_torch_reports(fake_torch: Path) -> None:
    done = python_with_hook(
        """
        import torch
        assert type(torch.__loader__).__name__ == "SourceFileLoader", torch.__loader__
        assert torch.__spec__.loader is torch.__loader__
        assert torch.cuda.calls == [] and not torch.cuda.is_initialized()
        torch.cuda.init()
        print(torch.cuda.calls)
        """,
        fraction="0.214",
        memory_mib=str(SHARE_MIB),
        extra_path=[fake_torch],
    )
    assert (done.returncode, done.stderr) == (0, "")
    expected = Share(214, SHARE_MIB).framework_fraction(SEEN_TOTAL)
    assert done.stdout.strip() == str(
        [("mem_get_info", 0), (expected, 0), ("mem_get_info", 1), (expected, 1)]
    )
    # what torch then allows (fraction x total, truncated): the share, not 0.214 of the total
    allowed = int(expected * SEEN_TOTAL)
    assert 0 <= allowed - SHARE_MIB * MIB < 1024
    assert int(0.214 * SEEN_TOTAL) < 30 * GIB  # the share's own fraction: less than asked


def test_without_the_shares_memory_the_cap_is_its_fraction(fake_torch: Path) -> None:
    done = python_with_hook(
        "import torch; torch.cuda.init(); print(torch.cuda.calls)",
        fraction="0.25",
        extra_path=[fake_torch],
    )
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "[(0.25, 0), (0.25, 1)]", "")


@pytest.mark.parametrize("fraction", [None, "1", "not a number"], ids=["unset", "whole", "junk"])
def test_hook_leaves_torch_alone_without_a_share(fake_torch: Path, fraction: str | None) -> None:
    done = python_with_hook(
        """
        import torch
        torch.cuda.init()
        print(torch.cuda.calls, hasattr(torch.cuda.mem_get_info, "__wrapped__"))
        """,
        fraction=fraction,
        memory_mib="143771",
        extra_path=[fake_torch],
    )
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "[] False", "")


def test_hook_never_breaks_a_torch_it_does_not_understand(tmp_path: Path) -> None:
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("cuda = None\nprint('imported')\n")
    done = python_with_hook("import torch", extra_path=[tmp_path])
    assert (done.returncode, done.stdout.strip()) == (0, "imported")
    assert "could not register the PyTorch memory cap" in done.stderr


def test_the_hooks_rule_is_share_py_s() -> None:
    """The hook repeats ``Share.framework_fraction`` (it cannot import FracHub): the same
    answers, and never a cap below the share once a framework truncates fraction x total."""
    cases = [
        (milli, memory_mib, seen)
        for milli, memory_mib in [(214, SHARE_MIB), (250, 35_942), (1, 143), (999, 143_627)]
        for seen in [SEEN_TOTAL, 80 * GIB, 85_031_714_816, 1, 0, SHARE_MIB * MIB]
    ] + [(500, 40_960, 81_920 * MIB), (333, 27_279, 81_920 * MIB + 7)]
    done = python_with_hook(
        f"""
        import json, sitecustomize
        cases = {cases!r}
        print(json.dumps([
            sitecustomize._framework_fraction(m / 1000, mib << 20, seen) for m, mib, seen in cases
        ]))
        """,
        fraction=None,
    )
    assert done.returncode == 0, done.stderr
    hooks = json.loads(done.stdout)
    for (milli, memory_mib, seen), theirs in zip(cases, hooks, strict=True):
        share = Share(milli, memory_mib)
        ours = share.framework_fraction(seen)
        assert theirs == ours, (milli, memory_mib, seen)
        if 0 < share.memory_bytes < seen:
            assert 0 <= int(ours * seen) - share.memory_bytes < 1024


# --- what torch.cuda.mem_get_info reports ----------------------------------------------------


def test_mem_get_info_reports_the_share(fake_torch: Path) -> None:
    share = SHARE_MIB * MIB
    done = python_with_hook(
        """
        import json, torch
        import torch.cuda as cuda
        seen = [cuda.mem_get_info(), cuda.mem_get_info(1), cuda.mem_get_info.__wrapped__(0)]
        cuda.reserved[0] = 10 << 30
        seen.append(cuda.mem_get_info(0))
        cuda.reserved[0] = 40 << 30  # more than the share (a cap that failed)
        seen.append(cuda.mem_get_info())
        try:
            cuda.mem_get_info(7)
        except ValueError as e:
            seen.append(str(e))
        print(json.dumps(seen))
        """,
        fraction="0.214",
        memory_mib=str(SHARE_MIB),
        extra_path=[fake_torch],
    )
    assert (done.returncode, done.stderr) == (0, "")
    fresh, other, real, used, over, error = json.loads(done.stdout)
    assert fresh == other == [share, share]  # nothing reserved yet: the whole share is free
    assert real == [139 * GIB, SEEN_TOTAL]  # the real one stays reachable
    assert used == [share - 10 * GIB, share]
    assert over == [0, share]
    assert error == "invalid device 7"  # the real one's own errors are the caller's


def test_mem_get_info_never_reports_more_free_than_the_gpu_has(fake_torch: Path) -> None:
    done = python_with_hook(
        "import torch; print(list(torch.cuda.mem_get_info()))",
        fraction="0.214",
        memory_mib=str(SHARE_MIB),
        extra_path=[fake_torch],
        env={"FAKE_FREE": str(5 * GIB)},  # the neighbours use the rest
    )
    assert (done.returncode, done.stdout.strip()) == (0, str([5 * GIB, SHARE_MIB * MIB]))


def test_a_failing_mem_get_info_patch_falls_back_to_the_real_one(fake_torch: Path) -> None:
    done = python_with_hook(
        "import torch; print(torch.cuda.mem_get_info()); print(torch.cuda.mem_get_info())",
        fraction="0.214",
        memory_mib=str(SHARE_MIB),
        extra_path=[fake_torch],
        env={"FAKE_BROKEN_RESERVED": "1"},
    )
    assert done.returncode == 0
    assert done.stdout.split("\n")[:2] == [str((139 * GIB, SEEN_TOTAL))] * 2
    assert done.stderr.count("reports the whole GPU, not the share: RuntimeError") == 1


def test_mem_get_info_is_patched_where_torch_defines_it_too(tmp_path: Path) -> None:
    """Real torch defines it in ``torch.cuda.memory`` and re-exports it from ``torch.cuda``:
    code calling either sees the share."""
    package = tmp_path / "torch" / "cuda"
    package.mkdir(parents=True)
    (tmp_path / "torch" / "__init__.py").write_text("from . import cuda\n")
    (package / "memory.py").write_text(FAKE_TORCH_CUDA)
    (package / "__init__.py").write_text(
        "from . import memory\nfrom .memory import *\nfrom .memory import _lazy_call\n"
    )
    done = python_with_hook(
        """
        import torch
        from torch.cuda import memory
        assert memory.mem_get_info is torch.cuda.mem_get_info
        print(memory.mem_get_info()[1], torch.cuda.mem_get_info.__wrapped__()[1])
        """,
        fraction="0.5",
        memory_mib="1024",
        extra_path=[tmp_path],
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.split() == [str(GIB), str(SEEN_TOTAL)]


# --- JAX ---------------------------------------------------------------------------------------

FAKE_JAX = "import os\nprint('jax sees', os.environ.get('XLA_PYTHON_CLIENT_MEM_FRACTION'))\n"


@pytest.fixture
def fake_jax(tmp_path: Path) -> Path:
    (tmp_path / "jax").mkdir()
    (tmp_path / "jax" / "__init__.py").write_text(FAKE_JAX)
    return tmp_path


def jax_env(**overrides: str) -> dict[str, str]:
    return {
        "FRACHUB_GPU_UUIDS": "GPU-aaaa",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.214",
        **overrides,
    }


def test_jax_gets_the_fraction_of_cudas_total_that_holds_the_share(fake_jax: Path) -> None:
    done = python_with_hook(
        f"""
        import os, sitecustomize
        asked = []
        sitecustomize._cuda_visible_total = lambda uuid: asked.append(uuid) or {SEEN_TOTAL}
        assert os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.214"
        import jax
        print(asked)
        """,
        fraction="0.214",
        memory_mib=str(SHARE_MIB),
        extra_path=[fake_jax],
        env=jax_env(),
    )
    assert (done.returncode, done.stderr) == (0, "")
    expected = Share(214, SHARE_MIB).framework_fraction(SEEN_TOTAL)
    assert done.stdout.split("\n")[:2] == [f"jax sees {expected!r}", "['GPU-aaaa']"]


@pytest.mark.parametrize(
    "env",
    [
        jax_env(XLA_PYTHON_CLIENT_MEM_FRACTION="0.9"),  # the program's own choice
        jax_env(FRACHUB_GPU_UUIDS=""),  # no GPU to ask NVML about
        jax_env(FRACHUB_GPU_UUIDS="GPU-declared-local-0"),  # NVML has no such GPU
    ],
    ids=["own choice", "no uuid", "unknown gpu"],
)
def test_jax_keeps_the_contracts_fraction_otherwise(fake_jax: Path, env: dict[str, str]) -> None:
    done = python_with_hook(
        "import jax",
        fraction="0.214",
        memory_mib=str(SHARE_MIB),
        extra_path=[fake_jax],
        env=env,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.strip() == f"jax sees {env['XLA_PYTHON_CLIENT_MEM_FRACTION']}"


def test_the_nvml_read_says_nothing_without_nvml_or_the_gpu() -> None:
    """On this machine (no GPU, or not this UUID) the read answers None rather than fail."""
    done = python_with_hook(
        "import sitecustomize; print(sitecustomize._cuda_visible_total('GPU-no-such-gpu'))",
        fraction=None,
    )
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "None", "")


# --- real torch (CPU build) --------------------------------------------------------------------


def torch_python() -> str | None:
    """An interpreter with torch: FRACHUB_TEST_TORCH_PYTHON, or this one if it has torch."""
    import importlib.util

    if os.environ.get("FRACHUB_TEST_TORCH_PYTHON"):
        return os.environ["FRACHUB_TEST_TORCH_PYTHON"]
    return sys.executable if importlib.util.find_spec("torch") else None


@pytest.mark.skipif(
    torch_python() is None,
    reason="torch is not installed (set FRACHUB_TEST_TORCH_PYTHON to a python that has it); "
    "the fake-torch tests cover the hook",
)
def test_hook_with_real_torch_queues_the_cap_without_initialising_cuda() -> None:
    done = python_with_hook(
        """
        import torch
        assert not torch.cuda.is_initialized()
        calls = []
        torch.cuda.device_count = lambda: 1
        torch.cuda.set_per_process_memory_fraction = lambda f, d=None: calls.append((f, d))
        for queued, _ in torch.cuda._queued_calls:
            if queued.__qualname__.startswith("_install_torch"):
                queued()
        print(calls)
        """,
        python=torch_python() or "",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[(0.5, 0)]"


@pytest.mark.skipif(torch_python() is None, reason="torch is not installed")
def test_hook_with_real_torch_patches_mem_get_info_where_torch_defines_it() -> None:
    done = python_with_hook(
        """
        import torch
        assert not torch.cuda.is_initialized()
        assert torch.cuda.memory.mem_get_info is torch.cuda.mem_get_info
        print(torch.cuda.mem_get_info.__wrapped__.__module__)
        """,
        memory_mib="1024",
        python=torch_python() or "",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "torch.cuda.memory"
