"""The FracHub spawners: notebooks on a GPU share that the scheduler grants.

``FracLocalSpawner`` (processes on this machine) and ``FracKubeSpawner`` (pods) share one
mixin, ``spawner.mixin.FracSpawnerMixin``, and KubeSpawner's own profile code
(``spawner.profiles``), so both import ``kubespawner`` (a dependency); only
``FracKubeSpawner`` loads a cluster's configuration and talks to it. Import them from their
modules (``spawner.local``, ``spawner.kube``).
"""
