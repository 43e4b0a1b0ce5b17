"""Vectorised, memoised use of :mod:`scheduler.engine.fragmentation` for the replay.

FGD must know, for every node and every request shape, how much the node's
fragmentation grows if the request lands there on its best GPU. Doing that from
scratch for 1,213 nodes per pod costs milliseconds. Two facts make it cheap:

* the answer depends only on the node's *state* (model, free CPU, free memory
  if the workload counts memory, and the multiset of free GPU-milli), and many
  nodes share a state (all idle nodes of one type, for a start), so rows are
  memoised by state;
* changing one GPU's free milli changes each task's "usable GPU count" and
  "milli on too-small GPUs" by a term that depends on that GPU alone, so all
  candidate GPUs of all request shapes are scored with one broadcast from the
  node's current per-task sums.

``tests/simulator`` checks :meth:`FragmentationTable.fragmentation` and
:meth:`FragmentationTable.row` against the plain
:func:`~scheduler.engine.fragmentation.node_fragmentation` on random states.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from scheduler.engine.fragmentation import TaskShape
from scheduler.openb.trace import GPU_MILLI

ScoreKey = tuple[int, int, int, int]
"""(cpu_milli, memory_mib, gpu_milli, num_gpu): what decides a request's effect on a node."""


class FragmentationTable:
    """Fragmentation deltas per node state and request key, for one workload and model list."""

    def __init__(
        self, workload: Sequence[TaskShape], models: Sequence[str], keys: Sequence[ScoreKey]
    ) -> None:
        self.keys = list(keys)
        self.uses_memory = any(t.memory_mib for t in workload)
        self.t_cpu = np.array([t.cpu_milli for t in workload], dtype=np.int64)
        self.t_mem = np.array([t.memory_mib for t in workload], dtype=np.int64)
        self.t_milli = np.array([t.gpu_milli for t in workload], dtype=np.int64)
        self.t_num = np.array([t.num_gpu for t in workload], dtype=np.int64)
        self.t_p = np.array([t.probability for t in workload], dtype=np.float64)
        # t_ok[model, task]: the task needs a GPU and may use this model at all.
        self.t_ok = np.array(
            [[t.num_gpu > 0 and (not t.models or m in t.models) for t in workload] for m in models],
            dtype=bool,
        ).reshape(len(models), len(workload))
        k = np.array(self.keys, dtype=np.int64).reshape(-1, 4)
        if not self.uses_memory:
            k[:, 1] = 0  # no task asks for memory: memory cannot strand a GPU
        self._share = np.flatnonzero(k[:, 3] == 1)
        self._multi = np.flatnonzero(k[:, 3] >= 2)
        self._cpu = np.flatnonzero(k[:, 3] == 0)
        self._k = k
        self._memo: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}

    def _sums(self, free: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """Per task: milli on GPUs too small for it, count of GPUs big enough; total free."""
        big = free[None, :] >= self.t_milli[:, None]
        return (free[None, :] * ~big).sum(axis=1), big.sum(axis=1), int(free.sum())

    def fragmentation(self, free: Sequence[int], cpu: int, mem: int, model: int) -> float:
        """Same value as ``node_fragmentation``, from numpy; ``model`` is an index."""
        small, usable, total = self._sums(np.asarray(free, dtype=np.int64))
        fit = self.t_ok[model] & (cpu >= self.t_cpu) & (mem >= self.t_mem) & (usable >= self.t_num)
        return float(self.t_p @ np.where(fit, small, total))

    def row(
        self, free: np.ndarray, cpu: int, mem: int, model: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """For every key: the least fragmentation growth on this node, and the GPU to use.

        Returns ``(delta, pick)``: ``delta[k]`` is F(after) - F(before) for the best
        GPU choice (``inf`` when the node's GPUs cannot host key ``k``; CPU and
        memory fit are the caller's concern), ``pick[k]`` the free milli of the
        GPU to take for a one-GPU key (the least free among equal deltas), -1 otherwise.
        """
        mem = mem if self.uses_memory else 0
        memo_key = (model, cpu, mem, *sorted(free.tolist()))
        hit = self._memo.get(memo_key)
        if hit is not None:
            return hit
        n_keys = len(self.keys)
        delta = np.full(n_keys, np.inf)
        pick = np.full(n_keys, -1, dtype=np.int64)
        small, usable, total = self._sums(free)
        ok = self.t_ok[model]
        p = self.t_p
        t_cpu, t_mem, t_milli, t_num = self.t_cpu, self.t_mem, self.t_milli, self.t_num
        before = float(
            p @ np.where(ok & (cpu >= t_cpu) & (mem >= t_mem) & (usable >= t_num), small, total)
        )
        k = self._k
        if self._share.size:
            idx = self._share
            values = np.unique(free[free > 0])  # ascending: ties go to the tightest GPU
            if values.size:
                kc, km, kg = k[idx, 0], k[idx, 1], k[idx, 2]
                left = values[None, :] - kg[:, None]  # (K, D) free milli left on the GPU
                v = values[:, None]  # (D, 1)
                lt = left[:, :, None]  # (K, D, 1)
                small2 = small - v * (v < t_milli) + lt * (lt < t_milli)  # (K, D, T)
                usable2 = usable - (v >= t_milli) + (lt >= t_milli)
                fit = (
                    ok
                    & ((cpu - kc)[:, None, None] >= t_cpu)
                    & ((mem - km)[:, None, None] >= t_mem)
                    & (usable2 >= t_num)
                )
                total2 = (total - kg)[:, None, None]
                after = np.where(fit, small2, total2) @ p  # (K, D)
                after = np.where(left >= 0, after, np.inf)
                best = after.argmin(axis=1)
                rows = np.arange(idx.size)
                delta[idx] = after[rows, best] - before
                pick[idx] = np.where(np.isfinite(after[rows, best]), values[best], -1)
        if self._multi.size:
            idx = self._multi
            kc, km, kn = k[idx, 0], k[idx, 1], k[idx, 3]
            whole = int((free == GPU_MILLI).sum())
            # Taking whole GPUs leaves "milli on too-small GPUs" unchanged (1000 -> 0).
            fit = (
                ok
                & ((cpu - kc)[:, None] >= t_cpu)
                & ((mem - km)[:, None] >= t_mem)
                & ((usable - kn[:, None]) >= t_num)
            )
            after = np.where(fit, small, (total - GPU_MILLI * kn)[:, None]) @ p
            delta[idx] = np.where(kn <= whole, after - before, np.inf)
        if self._cpu.size:
            idx = self._cpu
            kc, km = k[idx, 0], k[idx, 1]
            fit = (
                ok
                & ((cpu - kc)[:, None] >= t_cpu)
                & ((mem - km)[:, None] >= t_mem)
                & (usable >= t_num)
            )
            delta[idx] = np.where(fit, small, total) @ p - before
        self._memo[memo_key] = (delta, pick)
        return delta, pick
