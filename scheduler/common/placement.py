"""Where a workload runs: the placement every side of FracHub names, and its one JSON codec.

The engine decides placements, the service stores and reports them, the backends and the
spawner turn them into visible devices, the CLI and the magics print them. They all use
these types, and read and write the REST API's JSON through ``placement_to_api`` and
``placement_from_api`` (shares there are fractions of a GPU; here, thousandths of one, so
that 0.25 + 0.25 + 0.5 adds up to exactly one GPU).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.common.limits import MILLI


@dataclass(frozen=True)
class GpuShare:
    """One replica's hold on one GPU: ``milli`` of 1000."""

    index: int
    milli: int


@dataclass(frozen=True)
class ReplicaPlacement:
    """Where one replica of a workload runs."""

    node: str
    gpus: tuple[GpuShare, ...]


Placement = tuple[ReplicaPlacement, ...]

GpuFacts = Callable[[str, int], Mapping[str, Any]]
"""(node, GPU index) -> more fields of that GPU for the API (its UUID, its memory)."""


def placement_to_api(placement: Placement, facts: GpuFacts | None = None) -> list[dict[str, Any]]:
    """The API's ``placement``: ``[{"node", "gpus": [{"index", "share", ...}]}]``, each share
    a fraction of its GPU, with whatever ``facts`` adds about each GPU."""
    return [
        {
            "node": replica.node,
            "gpus": [
                {
                    "index": share.index,
                    **(facts(replica.node, share.index) if facts else {}),
                    "share": share.milli / MILLI,
                }
                for share in replica.gpus
            ],
        }
        for replica in placement
    ]


def placement_from_api(replicas: Iterable[Mapping[str, Any]] | None) -> Placement:
    """The API's ``placement`` read back, shares in thousandths again (fields other than
    ``node``, ``index`` and ``share`` are ignored)."""
    return tuple(
        ReplicaPlacement(
            node=replica["node"],
            gpus=tuple(
                GpuShare(int(gpu["index"]), round(float(gpu["share"]) * MILLI))
                for gpu in replica["gpus"]
            ),
        )
        for replica in replicas or ()
    )


def describe_placement(placement: Placement) -> str:
    """Where a workload runs, for events, messages and tables; ``""`` when nowhere:
    ``"node-0 GPU 1 (0.5)"``, ``"node-0 GPUs 0, 1"``, replicas joined by ``"; "``."""
    parts = []
    for replica in placement:
        shares = replica.gpus
        if len(shares) == 1 and shares[0].milli < MILLI:
            parts.append(f"{replica.node} GPU {shares[0].index} ({shares[0].milli / MILLI:g})")
        else:
            label = "GPU" if len(shares) == 1 else "GPUs"
            parts.append(f"{replica.node} {label} {', '.join(str(s.index) for s in shares)}")
    return "; ".join(parts)
