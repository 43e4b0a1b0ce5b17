"""Load the openb CSV files into typed, validated records.

The openb trace (Alibaba, ATC'23 FGD paper) comes as two CSV files: a node list
(``sn,cpu_milli,memory_mib,gpu,model``) and a pod list
(``name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...]``). Everything
downstream assumes clean integers, so this module is the only place that parses
text: a bad file raises :class:`TraceError` naming the file, the row and the
field, which the CLI prints as one line.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

GPU_MILLI = 1000
"""A whole GPU, in the trace's unit (thousandths of a GPU)."""

MAX_GPUS_PER_NODE = 8
"""The widest node the replay supports; openb's largest nodes have 8 GPUs."""

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


class TraceError(ValueError):
    """A trace file is missing or malformed; the message names file, row and field."""


@dataclass(frozen=True)
class Node:
    """One GPU node: capacities in milli-CPU and MiB, ``gpus`` GPUs of one ``model``."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True)
class Pod:
    """One pod request.

    ``gpu_milli`` is the share of *each* GPU (1000 = whole GPU); a multi-GPU pod
    (``num_gpu >= 2``) always asks for whole GPUs. ``gpu_spec`` holds the allowed
    GPU models, empty when any model will do.
    """

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: frozenset[str] = frozenset()

    @property
    def gpu_total_milli(self) -> int:
        """GPU-milli this pod asks for in total: what counts towards "arrived"."""
        return self.num_gpu * self.gpu_milli


def _int_field(
    path: Path, row_no: int, row: Mapping[str, str], field: str, lo: int, hi: int
) -> int:
    raw = (row.get(field) or "").strip()
    try:
        value = int(raw)
    except ValueError:
        raise TraceError(
            f"{path}: row {row_no}: field {field!r}: expected an integer, got {raw!r}"
        ) from None
    if not lo <= value <= hi:
        raise TraceError(f"{path}: row {row_no}: field {field!r}: {value} is outside {lo}..{hi}")
    return value


def _read_rows(path: Path, required: Iterable[str]) -> list[tuple[int, dict[str, str]]]:
    """Rows numbered as a spreadsheet would (the header is row 1)."""
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            columns = reader.fieldnames or []
            missing = [c for c in required if c not in columns]
            if missing:
                raise TraceError(f"{path}: row 1: missing column(s) {', '.join(missing)}")
            rows = [(i, row) for i, row in enumerate(reader, start=2)]
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise TraceError(f"{path}: cannot read: {exc}") from None
    if not rows:
        raise TraceError(f"{path}: no data rows")
    return rows


def load_nodes(path: str | Path) -> list[Node]:
    """Read a node list; nodes without GPUs are skipped (openb's placement runs on GPU nodes)."""
    path = Path(path)
    nodes = []
    for row_no, row in _read_rows(path, NODE_COLUMNS):
        name = (row.get("sn") or "").strip()
        if not name:
            raise TraceError(f"{path}: row {row_no}: field 'sn': empty node name")
        gpus = _int_field(path, row_no, row, "gpu", 0, MAX_GPUS_PER_NODE)
        model = (row.get("model") or "").strip()
        if gpus and not model:
            raise TraceError(f"{path}: row {row_no}: field 'model': empty for a GPU node")
        node = Node(
            name=name,
            cpu_milli=_int_field(path, row_no, row, "cpu_milli", 0, 10**9),
            memory_mib=_int_field(path, row_no, row, "memory_mib", 0, 10**12),
            gpus=gpus,
            model=model,
        )
        if gpus:
            nodes.append(node)
    if not nodes:
        raise TraceError(f"{path}: no GPU nodes")
    return nodes


def load_pods(path: str | Path) -> list[Pod]:
    """Read a pod list, checking the GPU fields make sense together."""
    path = Path(path)
    pods = []
    for row_no, row in _read_rows(path, POD_COLUMNS):
        name = (row.get("name") or "").strip()
        if not name:
            raise TraceError(f"{path}: row {row_no}: field 'name': empty pod name")
        num_gpu = _int_field(path, row_no, row, "num_gpu", 0, MAX_GPUS_PER_NODE)
        gpu_milli = _int_field(path, row_no, row, "gpu_milli", 0, GPU_MILLI)
        if num_gpu and not gpu_milli:
            raise TraceError(f"{path}: row {row_no}: field 'gpu_milli': 0 with num_gpu={num_gpu}")
        if num_gpu >= 2 and gpu_milli != GPU_MILLI:
            raise TraceError(
                f"{path}: row {row_no}: field 'gpu_milli': multi-GPU pods need whole GPUs (1000)"
            )
        if not num_gpu:
            gpu_milli = 0
        spec = (row.get("gpu_spec") or "").strip()
        models = frozenset(m.strip() for m in spec.split("|") if m.strip()) if spec else frozenset()
        pods.append(
            Pod(
                name=name,
                cpu_milli=_int_field(path, row_no, row, "cpu_milli", 0, 10**9),
                memory_mib=_int_field(path, row_no, row, "memory_mib", 0, 10**12),
                num_gpu=num_gpu,
                gpu_milli=gpu_milli,
                gpu_spec=models,
            )
        )
    return pods
