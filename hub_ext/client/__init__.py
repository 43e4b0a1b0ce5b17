"""The FracHub REST client, and how its answers are shown to people.

Every caller of the service's API goes through this package: the ``frachub`` CLI
(``hub_ext/cli/``) and the ``%frachub`` magics (``hub_ext/magics.py``), which act the same way
and print the same tables, and the spawner (``spawner/mixin.py``). It imports nothing of the
scheduler but ``scheduler.common``, so a client-only install never loads the engine.

- ``session``: the service's URL, headers and errors (``FracHubError``, ``NotConfigured``,
  ``Unreachable``);
- ``api``: ``connect``, ``FracHubClient`` (CLI, magics, scripts), ``AsyncFracHubClient`` (the
  spawner), ``checkpointed()`` (inside a job);
- ``formatting``: the API's JSON in short words; ``reports``: the tables and reports shown;
- ``arguments`` and ``jobs``: the job commands' flags and views, shared by the CLI and the
  magics.

What scripts and jobs use is importable from here (docs/client.md):
``from hub_ext.client import connect, FracHubClient, FracHubError, checkpointed``.
"""

from hub_ext.client.api import FracHubClient, checkpointed, connect
from hub_ext.client.session import FracHubError

__all__ = ["FracHubClient", "FracHubError", "checkpointed", "connect"]
