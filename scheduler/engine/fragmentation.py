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
``frag`` placement and the openb trace replay share one definition; the
replay's numpy fast path is tested against :func:`node_fragmentation` on
random states.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


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
