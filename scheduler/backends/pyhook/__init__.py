"""A start-up hook for user Python processes: put this directory first on ``PYTHONPATH``
(``scheduler.common.paths.HOOK_DIR`` names it).

Python imports ``sitecustomize`` at start-up; the one in this directory applies FracHub's
PyTorch memory cap (``FRACHUB_GPU_FRACTION``) when, and only if, the program imports torch,
then runs whatever ``sitecustomize`` would have run without it. The local backend and the
notebook spawner both use it. This ``__init__`` exists so the directory ships with the package.
"""
