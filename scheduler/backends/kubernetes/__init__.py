"""The Kubernetes backend: training as batch/v1 Jobs, GPUs from Nodes, GPU sharing by
reservation pods or HAMi, leader election on a Lease. See docs/kubernetes.md.

- ``backend.py``      ``KubernetesBackend`` (traits, the Backend protocol, ``connect()``)
- ``objects.py``      pure manifest builders and readers (labels, Jobs, Services, reservations)
- ``client.py``       API calls with retries, watch caches (``Informer``)
- ``reservation.py``  reservation pods, shared with FracKubeSpawner
- ``leader.py``       ``LeaseElector``
"""

from scheduler.backends.kubernetes.backend import KubernetesBackend

__all__ = ["KubernetesBackend"]
