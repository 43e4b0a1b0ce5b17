"""Where a submitted job runs: one rule for every client (CLI, magics, panel, Python API).

A relative ``working_dir`` — and ``~`` or ``~/...`` — is sent as written and taken by the
service from the user's home where the job runs (the home their notebooks have), never from
the client's current directory, which on a laptop means nothing on the cluster. An absolute
one is sent as written. Without one, a client that runs beside the jobs (the CLI on the hub's
machine, the magics in a notebook) sends its current directory; the panel and the Python API
send nothing, and the job runs in the home.
"""

from __future__ import annotations

import os


def working_dir_field(asked: str | None, current: str | None = None) -> str | None:
    """The ``working_dir`` a client sends for ``--working-dir asked`` run in ``current``."""
    if asked:
        return asked
    return os.path.abspath(current) if current else None
