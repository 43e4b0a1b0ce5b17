"""A start-up hook for user Python processes: put ``HOOK_DIR`` first on ``PYTHONPATH``.

Python imports ``sitecustomize`` at start-up; the one in this directory applies FracHub's
PyTorch memory cap (``FRACHUB_GPU_FRACTION``) when, and only if, the program imports torch,
then runs whatever ``sitecustomize`` would have run without it. The local backend and the
notebook spawner both use it. This ``__init__`` exists so the directory ships with the package.
"""

from pathlib import Path

HOOK_DIR = str(Path(__file__).resolve().parent)
