"""The FracHub spawners: notebooks on a GPU share that the scheduler grants.

``FracLocalSpawner`` (processes on this machine) and ``FracKubeSpawner`` (pods) share one
mixin, ``spawner.mixin.FracSpawnerMixin``. Import them from their modules (``spawner.local``,
``spawner.kube``) so a hub without Kubernetes never imports the Kubernetes client.
"""
