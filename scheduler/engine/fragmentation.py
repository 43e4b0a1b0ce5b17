"""GPU fragmentation, as defined by FGD (Weng et al., ATC'23): the single definition.

A node's free GPU capacity is *fragmented* for a kind of task when that task
could not use it. For one task shape the fragment is

* all free GPU-milli on the node, when the task needs no GPU, when the node's
  GPU model is not allowed, or when the task does not fit the node at all (not
  enough CPU or memory, or fewer than ``num_gpu`` GPUs with ``gpu_milli`` free);
* otherwise the free GPU-milli sitting on GPUs that have less free than the
  task's per-GPU share (those GPUs are useless to it).

The node's fragmentation for a *workload* (a distribution of task shapes) is the
expectation of that amount. FGD places each pod where this expectation grows
least. This module is pure (no I/O, clock or randomness) so that the engine's
``frachub`` placement and the openb replay's ``fgd`` baseline share one definition.
:class:`FragmentationTable` is its memoised numpy fast path, tested equal to
:func:`node_fragmentation` on random states.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from scheduler.common.limits import MILLI
from scheduler.engine.model import Request


@dataclass(frozen=True)
class TaskShape:
    """One kind of task in the target workload, with its share of the workload.

    ``gpu_milli`` is per GPU (1000 = whole GPU); ``models`` empty means any GPU
    model. ``memory_mib`` is 0 in FGD's own workload (the paper ignores memory);
    FracHub's policy sets it so that memory-stranded GPUs count as fragments.
    """

    cpu_milli: int
    gpu_milli: int
    num_gpu: int
    probability: float
    models: frozenset[str] = frozenset()
    memory_mib: int = 0


def task_fragmentation(
    gpu_free_milli: Sequence[int],
    cpu_free: int,
    mem_free: int,
    model: str,
    task: TaskShape,
) -> int:
    """GPU-milli on this node that ``task`` could not use (see the module docstring)."""
    total = sum(gpu_free_milli)
    if task.num_gpu == 0:
        return total
    if task.models and model not in task.models:
        return total
    if task.cpu_milli > cpu_free or task.memory_mib > mem_free:
        return total
    usable = sum(1 for free in gpu_free_milli if free >= task.gpu_milli)
    if usable < task.num_gpu:
        return total
    return sum(free for free in gpu_free_milli if free < task.gpu_milli)


def node_fragmentation(
    gpu_free_milli: Sequence[int],
    cpu_free: int,
    mem_free: int,
    model: str,
    workload: Iterable[TaskShape],
) -> float:
    """Expected fragmented GPU-milli of one node under ``workload`` (FGD's F_n(M)).

    ``gpu_free_milli`` lists each GPU's free milli (0..1000); GPUs with 0 free
    may be included or left out, the result is the same.
    """
    return sum(
        task.probability * task_fragmentation(gpu_free_milli, cpu_free, mem_free, model, task)
        for task in workload
    )


def target_workload(
    requests: Iterable[tuple[int, int, int, int, frozenset[str]]],
    coverage: float = 0.95,
    with_memory: bool = False,
) -> tuple[TaskShape, ...]:
    """FGD's target workload: the most frequent request shapes covering ``coverage`` of pods.

    ``requests`` are ``(cpu_milli, memory_mib, gpu_milli, num_gpu, models)``
    per pod. Shapes are grouped on (CPU, GPU share, GPU count, models), plus
    memory when ``with_memory``; they are taken most frequent first (ties in a
    fixed key order) until their cumulative share reaches ``coverage``, the
    shape that crosses it included. Each probability is the shape's share of
    *all* pods, as in the paper's simulator, so the probabilities sum to about
    ``coverage``.
    """
    counts: Counter[tuple[int, int, int, int, tuple[str, ...]]] = Counter()
    total = 0
    for cpu, mem, milli, num, models in requests:
        counts[(cpu, mem if with_memory else 0, milli, num, tuple(sorted(models)))] += 1
        total += 1
    if total == 0:
        return ()
    shapes = []
    covered = 0
    for (cpu, mem, milli, num, models), count in sorted(
        counts.items(), key=lambda item: (-item[1], item[0])
    ):
        shapes.append(
            TaskShape(
                cpu_milli=cpu,
                gpu_milli=milli,
                num_gpu=num,
                probability=count / total,
                models=frozenset(models),
                memory_mib=mem,
            )
        )
        covered += count
        if covered >= coverage * total:
            break
    return tuple(shapes)


def recent_workload(
    requests: Iterable[Request], gpu_memory_mib: int, coverage: float = 0.95
) -> tuple[TaskShape, ...]:
    """The target workload a cluster's own recent requests describe (one task per replica).

    A request sized by GPU memory counts as the share it takes of a ``gpu_memory_mib`` GPU
    (the cluster's most common size); CPU-only requests count too (they strand GPUs).
    Probabilities are rounded to the percent, so the target (and a scorer's memo built
    for it) changes when the mix of requests does, not with every arrival.
    """
    shapes = []
    for request in requests:
        if request.whole_gpus:
            milli, num = MILLI, request.whole_gpus
        elif request.is_fraction:
            milli, num = min(request.milli_on(gpu_memory_mib), MILLI), 1
        else:
            milli, num = 0, 0
        shape = (request.cpu_milli, request.memory_mib, milli, num, request.gpu_models)
        shapes.extend([shape] * request.replicas)
    return tuple(
        replace(shape, probability=round(shape.probability, 2))
        for shape in target_workload(shapes, coverage=coverage, with_memory=True)
    )


MEMO_LIMIT = 200_000
"""Node states a table remembers before it starts again (a few tens of MB at most)."""

ScoreKey = tuple[int, int, int, int]
"""(cpu_milli, memory_mib, gpu_milli, num_gpu): what decides a request's effect on a node."""


class FragmentationTable:
    """Fragmentation growth per node state and request key, memoised, for one target workload.

    FGD must know, for every node and request shape, how much the node's fragmentation
    grows if the request lands there on its best GPU. From scratch that costs milliseconds
    per request on a thousand nodes. Two facts make it cheap:

    * the answer depends only on the node's *state* (GPU model, free CPU, free memory if
      the workload counts memory, and the multiset of free GPU-milli), and many nodes
      share a state (all idle nodes of one type, for a start), so rows are memoised by state;
    * changing one GPU's free milli changes each task's "usable GPU count" and "milli on
      too-small GPUs" by a term that depends on that GPU alone, so all candidate GPUs of
      all request keys are scored with one broadcast from the node's per-task sums.

    Models and keys may be added as they appear (the engine meets request shapes one by
    one); a memoised row computed before a key was added is extended when next asked.
    """

    def __init__(
        self,
        workload: Sequence[TaskShape],
        models: Sequence[str] = (),
        keys: Sequence[ScoreKey] = (),
    ) -> None:
        self.workload = tuple(workload)
        self.uses_memory = any(t.memory_mib for t in workload)
        self.t_cpu = np.array([t.cpu_milli for t in workload], dtype=np.int64)
        self.t_mem = np.array([t.memory_mib for t in workload], dtype=np.int64)
        self.t_milli = np.array([t.gpu_milli for t in workload], dtype=np.int64)
        self.t_num = np.array([t.num_gpu for t in workload], dtype=np.int64)
        self.t_p = np.array([t.probability for t in workload], dtype=np.float64)
        self.models: dict[str, int] = {}
        self._ok_rows: list[np.ndarray] = []
        for model in models:
            self.model_index(model)
        self.keys: list[ScoreKey] = []
        self.key_index: dict[ScoreKey, int] = {}
        self._k = np.zeros((0, 4), dtype=np.int64)
        self._memo: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}
        self._lists: dict[tuple[int, ...], tuple[list[float], list[int]]] = {}
        """``row_lists``' memo: the same rows as lists."""
        self.add_keys(keys)

    def model_index(self, model: str) -> int:
        """The index of ``model`` (added on first sight)."""
        index = self.models.get(model)
        if index is None:
            index = self.models[model] = len(self._ok_rows)
            # the task needs a GPU and may use this model at all
            self._ok_rows.append(
                np.array(
                    [t.num_gpu > 0 and (not t.models or model in t.models) for t in self.workload],
                    dtype=bool,
                )
            )
        return index

    def add_keys(self, keys: Iterable[ScoreKey]) -> None:
        """Make ``keys`` answerable by :meth:`row` (known ones are ignored)."""
        new = []
        for key in keys:
            key = self.normal(key)
            if key not in self.key_index:
                self.key_index[key] = len(self.keys)
                self.keys.append(key)
                new.append(key)
        if new:
            self._k = np.array(self.keys, dtype=np.int64).reshape(-1, 4)

    def normal(self, key: ScoreKey) -> ScoreKey:
        """``key`` as the table files it: memory is 0 when no task asks for memory."""
        cpu, mem, milli, num = key
        return (cpu, mem if self.uses_memory else 0, milli, num)

    def _sums(self, free: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """Per task: milli on GPUs too small for it, count of GPUs big enough; total free."""
        big = free[None, :] >= self.t_milli[:, None]
        return (free[None, :] * ~big).sum(axis=1), big.sum(axis=1), int(free.sum())

    def fragmentation(self, free: Sequence[int], cpu: int, mem: int, model: int) -> float:
        """Same value as ``node_fragmentation``, from numpy; ``model`` is an index."""
        small, usable, total = self._sums(np.asarray(free, dtype=np.int64))
        ok = self._ok_rows[model]
        fit = ok & (cpu >= self.t_cpu) & (mem >= self.t_mem) & (usable >= self.t_num)
        return float(self.t_p @ np.where(fit, small, total))

    def row(
        self, free: Sequence[int], cpu: int, mem: int, model: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """For every key: the least fragmentation growth on this node, and the GPU to use.

        Returns ``(delta, pick)``: ``delta[k]`` is F(after) - F(before) for the best GPU
        choice (``inf`` when the node's GPUs cannot host key ``k``; CPU, memory and model
        fit are the caller's concern), ``pick[k]`` the free milli of the GPU to take for a
        one-GPU key (the least free among equal deltas), -1 otherwise.
        """
        mem = mem if self.uses_memory else 0
        values = free.tolist() if isinstance(free, np.ndarray) else free
        memo_key = (model, cpu, mem, *sorted(values))
        hit = self._memo.get(memo_key)
        if hit is not None and hit[0].size == len(self.keys):
            return hit
        done = 0 if hit is None else hit[0].size
        array = np.asarray(values, dtype=np.int64)
        delta, pick = self._compute(array, cpu, mem, model, self._k[done:])
        if hit is not None:
            delta, pick = np.concatenate((hit[0], delta)), np.concatenate((hit[1], pick))
        if len(self._memo) >= MEMO_LIMIT:
            self._memo.clear()  # a long-lived service meets ever new states: stay bounded
        self._memo[memo_key] = (delta, pick)
        return delta, pick

    def row_lists(
        self, free: list[int], cpu: int, mem: int, model: int
    ) -> tuple[list[float], list[int]]:
        """``row`` as lists, memoised by state too (speed only: a victim search's trial
        evictions and their rollback move a node between a few states, and converting the
        same row to lists again for each was 5% of a 4,000-node cycle). Read-only, shared."""
        memo_key = (model, cpu, mem if self.uses_memory else 0, *sorted(free))
        hit = self._lists.get(memo_key)
        if hit is not None and len(hit[0]) == len(self.keys):
            return hit
        delta, pick = self.row(free, cpu, mem, model)
        lists = (delta.tolist(), pick.tolist())
        if len(self._lists) >= MEMO_LIMIT:
            self._lists.clear()
        self._lists[memo_key] = lists
        return lists

    def _compute(
        self, free: np.ndarray, cpu: int, mem: int, model: int, k: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        n_keys = len(k)
        delta = np.full(n_keys, np.inf)
        pick = np.full(n_keys, -1, dtype=np.int64)
        small, usable, total = self._sums(free)
        ok = self._ok_rows[model]
        p = self.t_p
        t_cpu, t_mem, t_milli, t_num = self.t_cpu, self.t_mem, self.t_milli, self.t_num
        before = float(
            p @ np.where(ok & (cpu >= t_cpu) & (mem >= t_mem) & (usable >= t_num), small, total)
        )
        share = np.flatnonzero(k[:, 3] == 1)
        multi = np.flatnonzero(k[:, 3] >= 2)
        cpu_only = np.flatnonzero(k[:, 3] == 0)
        if share.size:
            values = np.unique(free[free > 0])  # ascending: ties go to the tightest GPU
            if values.size:
                kc, km, kg = k[share, 0], k[share, 1], k[share, 2]
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
                # rounded: float noise must not beat "the tightest among equals"
                after = np.round(np.where(fit, small2, total2) @ p, 6)  # (K, D)
                after = np.where(left >= 0, after, np.inf)
                best = after.argmin(axis=1)
                rows = np.arange(share.size)
                delta[share] = after[rows, best] - before
                pick[share] = np.where(np.isfinite(after[rows, best]), values[best], -1)
        if multi.size:
            kc, km, kn = k[multi, 0], k[multi, 1], k[multi, 3]
            whole = int((free == MILLI).sum())
            # Taking whole GPUs leaves "milli on too-small GPUs" unchanged (1000 -> 0).
            fit = (
                ok
                & ((cpu - kc)[:, None] >= t_cpu)
                & ((mem - km)[:, None] >= t_mem)
                & ((usable - kn[:, None]) >= t_num)
            )
            after = np.where(fit, small, (total - MILLI * kn)[:, None]) @ p
            delta[multi] = np.where(kn <= whole, after - before, np.inf)
        if cpu_only.size:
            kc, km = k[cpu_only, 0], k[cpu_only, 1]
            fit = (
                ok
                & ((cpu - kc)[:, None] >= t_cpu)
                & ((mem - km)[:, None] >= t_mem)
                & (usable >= t_num)
            )
            delta[cpu_only] = np.where(fit, small, total) @ p - before
        return delta, pick
