"""The Kubernetes backend: training as batch/v1 Jobs, GPUs from Nodes, GPU sharing by
reservation pods or HAMi, leader election on a Lease. See docs/kubernetes.md.

One module a job; where a change goes:

- ``backend.py``      ``KubernetesBackend``: its settings (traits), ``connect()``, and an
                      attempt's life (the Backend protocol)
- ``caches.py``       the watch caches, and what the pod watch keeps of pods that leave them
- ``attempts.py``     an attempt's record, its handle, and how it ends (read from the caches)
- ``stuck.py``        ending an attempt whose pod cannot start (unschedulable, Multi-Attach)
- ``stopping.py``     confirming stopped attempts' ends through the API and deleting their
                      Jobs, many at once
- ``jobs.py``         an attempt's Indexed Jobs, their environment, a gang's Service
- ``volumes.py``      home volume templates and ReadWriteOnce claims
- ``gpus.py``         a pod's GPU resources in each sharing mode; the shares annotation
- ``sharing.py``      the backend's GPU sharing: UUIDs for a job, each replica's share,
                      shares in use, releasing unused reservations
- ``reservation.py``  reservation pods (shared with FracKubeSpawner)
- ``credentials.py``  a job's credentials as a Secret
- ``logs.py``         training logs through pods/log
- ``usage.py``        each pod's GPU memory from the DCGM exporter through Prometheus
- ``inventory.py``    the engine's inventory from Nodes (and HAMi's registrations)
- ``pods.py``         what every FracHub pod shares, pinning, reading pods back
- ``labels.py``       the labels, annotations and names FracHub writes
- ``client.py``       API calls with retries, watch caches (``Informer``)
- ``leader.py``       ``LeaseElector``

Builders and readers (``jobs``, ``gpus``, ``pods``, ``labels``, ``inventory``,
``attempts``) are pure; the others make the calls.
"""

from scheduler.backends.kubernetes.backend import KubernetesBackend

__all__ = ["KubernetesBackend"]
