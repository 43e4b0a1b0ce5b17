"""A start-up hook for user Python processes: put this directory first on ``PYTHONPATH``
(``scheduler.common.paths.HOOK_DIR`` names it).

Python imports ``sitecustomize`` at start-up; the one in this directory applies a GPU share's
memory cap and view (``FRACHUB_GPU_FRACTION``, ``FRACHUB_GPU_MEMORY_MIB``) when, and only if,
the program imports torch or JAX, then runs whatever ``sitecustomize`` would have run without
it. The local backend and the notebook spawner both use it. This ``__init__`` exists so the
directory ships with the package.
"""
