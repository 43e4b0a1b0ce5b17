"""The fleet comparison in words and pictures: Markdown tables, JSON and PNG plots."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from scheduler.common.quantities import format_duration
from scheduler.engine import Kind
from scheduler.fleet.driver import FleetRun
from scheduler.fleet.metrics import Quantile, Summary, Waits, binned, fair_share_gaps
from scheduler.fleet.variants import VARIANTS

REASONS = ("reclaim", "preempt", "consolidate")


def _q(value: Quantile | None) -> str:
    if value is None:
        return "-"
    return ("≥" if value.censored else "") + format_duration(value.seconds)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _row(cells: Sequence[Any]) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def _table(head: Sequence[str], rows: list[Sequence[Any]]) -> list[str]:
    align = ["---"] + ["---:"] * (len(head) - 1)
    return [_row(head), _row(align), *(_row(row) for row in rows)]


def tables(summaries: Sequence[Summary]) -> str:
    """Markdown tables: allocation and notebooks; training, evictions and fairness; and each
    project's distance from its fair share."""
    first = _table(
        (
            "variant",
            "GPUs held",
            "asked-for in use",
            "net of lost work",
            "held, busy hours",
            "asked-for, busy hours",
            "demand",
            "notebooks",
            "time-to-GPU p50",
            "p99",
            "in quota",
            "in-quota p50",
            "in-quota p99",
            "gave up",
        ),
        [
            (
                VARIANTS[s.variant].title,
                f"{s.allocation:.1%}",
                f"{s.requested:.1%}",
                f"{s.useful:.1%}",
                _pct(s.busy_allocation),
                _pct(s.busy_requested),
                f"{s.demand:.0%}",
                s.notebook_wait.count,
                _q(s.notebook_wait.p50),
                _q(s.notebook_wait.p99),
                s.in_quota_wait.count,
                _q(s.in_quota_wait.p50),
                _q(s.in_quota_wait.p99),
                s.notebooks_abandoned,
            )
            for s in summaries
        ],
    )
    second = _table(
        (
            "variant",
            "jobs",
            "done",
            "queueing p50",
            "p99",
            "completion p50",
            "p99",
            "evictions (reclaim/preempt/consolidate)",
            "GPU-h lost",
            "GPU-h lost, no checkpoints",
            "fair-share deviation",
        ),
        [
            (
                VARIANTS[s.variant].title,
                s.training_wait.count,
                s.training_done,
                _q(s.training_wait.p50),
                _q(s.training_wait.p99),
                _q(s.training_completion.p50),
                _q(s.training_completion.p99),
                f"{sum(s.preemptions.values())} "
                f"({'/'.join(str(s.preemptions.get(r, 0)) for r in REASONS)})",
                f"{s.lost_gpu_hours:.0f}",
                "-"
                if s.lost_gpu_hours_no_checkpoint is None
                else f"{s.lost_gpu_hours_no_checkpoint:.0f}",
                f"{s.fair_share_deviation:.1f} GPUs",
            )
            for s in summaries
        ],
    )
    projects = list(summaries[0].project_deviation) if summaries else []
    third = _table(
        ("mean \\|held − fair share\\| (GPUs)", *projects),
        [
            (VARIANTS[s.variant].title, *(f"{s.project_deviation[p]:.1f}" for p in projects))
            for s in summaries
        ],
    )
    fourth = _table(
        ("cumulative GPU-hours (share)", *projects),
        [
            (VARIANTS[s.variant].title, *(_hours(s.project_gpu_hours, p) for p in projects))
            for s in summaries
        ],
    )
    blocks = [first, second, third, fourth]
    if any(s.notebooks_preemptible for s in summaries):
        blocks.append(offers_table(summaries))
    return "\n\n".join("\n".join(block) for block in blocks)


def offers_table(summaries: Sequence[Summary]) -> list[str]:
    """What the offer to start preemptible did: shown only when some user took it, so the
    tables of a run without it stay as they were."""
    return _table(
        (
            "notebooks started preemptible (offer taken)",
            "gave up",
            "started preemptible",
            "stopped while preemptible",
            "session GPU-h cut short",
        ),
        [
            (
                VARIANTS[s.variant].title,
                s.notebooks_abandoned,
                s.notebooks_preemptible,
                s.notebooks_stopped,
                f"{s.notebook_hours_cut:.1f}",
            )
            for s in summaries
        ],
    )


def _hours(hours: dict[str, float], project: str) -> str:
    total = sum(hours.values())
    share = hours.get(project, 0.0) / total if total else 0.0
    return f"{hours.get(project, 0.0):.0f} ({share:.0%})"


def to_json(summaries: Sequence[Summary], meta: dict[str, Any]) -> dict[str, Any]:
    def plain(value: Any) -> Any:
        if isinstance(value, Quantile | Waits):
            return asdict(value)
        return value

    return {
        **meta,
        "variants": [{k: plain(v) for k, v in asdict(s).items()} for s in summaries],
    }


# -- plots --------------------------------------------------------------------------------

COLOURS = {
    "static": "#7f7f7f",
    "pool": "#ff7f0e",
    "reclaim": "#1f77b4",
    "frachub": "#2ca02c",
    "frachub-no-consolidation": "#98df8a",
}


def plot(
    runs: Sequence[FleetRun], grace_seconds: float, directory: Path, stem: str = "fleet"
) -> list[Path]:
    """Write ``<stem>_allocation.png``, ``<stem>_time_to_gpu.png`` and
    ``<stem>_fair_share.png``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    directory.mkdir(parents=True, exist_ok=True)
    return [
        _save(_allocation(runs), directory / f"{stem}_allocation.png"),
        _save(_time_to_gpu(runs, grace_seconds), directory / f"{stem}_time_to_gpu.png"),
        _save(_fair_share(runs), directory / f"{stem}_fair_share.png"),
    ]


def _hourly_lines(ax, runs: Sequence[FleetRun], series, scale) -> None:
    """One line per run: hourly means of ``series(run)`` times ``scale(run)``."""
    for run in runs:
        hourly = binned(run.timeline.times, series(run), run.end, 3600)
        ax.plot(
            [(i + 0.5) / 24 for i in range(len(hourly))],
            [v * scale(run) for v in hourly],
            label=VARIANTS[run.variant].title,
            color=COLOURS.get(run.variant),
            linewidth=1.2,
        )


def _allocation(runs: Sequence[FleetRun]):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True)

    def percent(run: FleetRun) -> float:
        return 100 / run.capacity

    _hourly_lines(axes[0], runs, lambda run: run.timeline.held, percent)
    _hourly_lines(axes[1], runs, lambda run: run.timeline.asked, percent)
    _weekends(axes, runs[0].end)
    axes[0].set_ylabel("GPUs held, % of cluster")
    axes[1].set_ylabel("GPUs asked for by\nrunning work, %")
    axes[1].set_xlabel("simulated day (day 0 is a Monday; weekends shaded), hourly means")
    for ax in axes:
        ax.set_ylim(0, 105)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="lower right", ncol=4, fontsize=8)
    fig.suptitle(f"GPU allocation over time ({runs[0].capacity} GPUs)")
    return fig


def _time_to_gpu(runs: Sequence[FleetRun], grace_seconds: float):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, in_quota in ((axes[0], False), (axes[1], True)):
        for run in runs:
            waits, asked = _notebook_waits(run, in_quota)
            if not waits:
                continue
            xs = sorted(max(w, 1.0) for w in waits)
            ys = [100 * (i + 1) / asked for i in range(len(xs))]
            ax.step(
                xs,
                ys,
                where="post",
                label=VARIANTS[run.variant].title,
                color=COLOURS.get(run.variant),
            )
        ax.axvline(max(grace_seconds, 1.0), color="black", linestyle=":", linewidth=1)
        ax.text(max(grace_seconds, 1.0) * 1.1, 3, "grace period", fontsize=8)
        ax.set_xscale("log")
        ax.set_xlim(1, 86400 * 2)
        ax.set_xticks([1, 10, 60, 600, 3600, 6 * 3600, 86400])
        ax.set_xticklabels(["≤1s", "10s", "1m", "10m", "1h", "6h", "1d"])
        ax.grid(alpha=0.3)
        ax.set_title("in-quota notebooks" if in_quota else "all notebooks", fontsize=10)
        ax.set_xlabel("time to GPU (a curve ends below 100% by those who gave up or still wait)")
    axes[0].set_ylabel("% of notebook requests started")
    axes[1].legend(loc="lower right", fontsize=8)
    fig.suptitle("Notebook time-to-GPU")
    return fig


def _fair_share(runs: Sequence[FleetRun]):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 3.6))
    _hourly_lines(
        ax, runs, lambda run: [sum(gaps) for gaps in fair_share_gaps(run)], lambda run: 1.0
    )
    _weekends([ax], runs[0].end)
    ax.set_ylabel("Σ |held − fair share|, GPUs")
    ax.set_xlabel("simulated day, hourly means")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", ncol=4, fontsize=8)
    fig.suptitle("How far the projects stray from their fair share")
    return fig


def _notebook_waits(run: FleetRun, in_quota: bool) -> tuple[list[float], int]:
    """Waits of the notebooks that started, and how many were asked for."""
    asked = [
        r for r in run.records if r.job.kind is Kind.INTERACTIVE and (r.in_quota or not in_quota)
    ]
    waits = [r.first_start - r.job.at for r in asked if r.first_start is not None]
    return waits, len(asked)


def _weekends(axes, end: float) -> None:
    for day in range(int(end // 86400) + 1):
        if day % 7 == 5:
            for ax in axes:
                ax.axvspan(day, min(day + 2, end / 86400), color="#eeeeee", zorder=0)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
