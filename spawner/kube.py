"""``FracKubeSpawner``: KubeSpawner with notebooks on a GPU share from FracHub.

KubeSpawner keeps its own ``profile_list`` handling (``kubespawner_override``,
``profile_options``); the mixin adds FracHub's GPU choices to the same profiles, asks the
service for the share before the pod is created and shows the wait on the spawn page. The pod
details that place it on its GPU (node selection, ``NVIDIA_VISIBLE_DEVICES``, HAMi resources,
priority class) come with the Kubernetes backend.
"""

from __future__ import annotations

from kubespawner import KubeSpawner

from scheduler.contract import NVIDIA_VISIBLE_DEVICES
from spawner.mixin import FracSpawnerMixin, notebook_contract


class FracKubeSpawner(FracSpawnerMixin, KubeSpawner):
    def frachub_env(self) -> dict[str, str]:
        env = super().frachub_env()
        if self.allocation_id is not None and self.allocation is not None:
            # containers name their GPUs by UUID for the NVIDIA runtime
            for key in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
                env.pop(key, None)
            env.update(
                notebook_contract(
                    self.allocation, self.frachub_checkpoint_dir, NVIDIA_VISIBLE_DEVICES
                )
            )
        else:
            env.pop("CUDA_VISIBLE_DEVICES", None)
            env[NVIDIA_VISIBLE_DEVICES] = "none"
        return env
