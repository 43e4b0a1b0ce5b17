"""A Python kernelspec that starts every notebook kernel with the ``%frachub`` magics loaded.

The spawner calls ``write_kernelspec(directory)`` and puts the directory it returns first on
the notebook server's ``JUPYTER_PATH``. Jupyter looks for kernelspecs in
``<each JUPYTER_PATH entry>/kernels/`` before the user's and the system's directories, so
this spec, named ``python3`` like ipykernel's own, replaces the default Python kernel: new
and existing notebooks get ``%frachub`` without ``%load_ext``. The kernel is an ordinary
ipykernel; ``--ext=hub_ext.magics`` (IPython's ``InteractiveShellApp.extra_extensions``)
loads the extension at start-up.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

KERNEL_NAME = "python3"  # the name notebooks record: ours replaces the default kernel
DISPLAY_NAME = "Python 3 (FracHub)"
EXTENSION = "hub_ext.magics"


def kernel_argv(python: str = sys.executable) -> list[str]:
    """The kernel's command line: ipykernel with the magics loaded, for ``python``."""
    return [python, "-m", "ipykernel_launcher", "-f", "{connection_file}", f"--ext={EXTENSION}"]


def write_kernelspec(directory: Path, python: str = sys.executable) -> Path:
    """Write the ``python3`` kernelspec under ``directory/kernels/python3/`` and return
    ``directory``: the entry to put first on ``JUPYTER_PATH``.

    ``python`` must have ipykernel and FracHub installed. Writing again replaces the spec
    atomically, so servers starting at the same moment never read half a file.
    """
    directory = Path(directory)
    spec_dir = directory / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": kernel_argv(python),
        "display_name": DISPLAY_NAME,
        "language": "python",
        "metadata": {"debugger": True},
    }
    _copy_logos(spec_dir)
    handle, temporary = tempfile.mkstemp(dir=spec_dir, prefix=".kernel-", suffix=".json")
    try:
        with os.fdopen(handle, "w") as file:
            json.dump(spec, file, indent=1)
            file.write("\n")
        os.chmod(temporary, 0o644)
        os.replace(temporary, spec_dir / "kernel.json")
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return directory


def _copy_logos(spec_dir: Path) -> None:
    """ipykernel's logos, so the launcher shows the usual Python icon (optional)."""
    try:
        from ipykernel.kernelspec import RESOURCES
    except ImportError:  # the kernel's Python may differ from this one
        return
    for logo in Path(RESOURCES).glob("logo-*"):
        target = spec_dir / logo.name
        if not target.exists():
            shutil.copyfile(logo, target)
