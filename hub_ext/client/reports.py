"""What the CLI prints and the magics display.

``Table``, ``Report``
    Aligned plain text from ``str()``/``repr()`` (``text/plain``) and an HTML table from
    ``_repr_html_()`` (``text/html`` in notebooks).
``jobs_table``, ``describe_report``, ``quota_report``, ``submitted_text``, ``state_line``
    Pure builders from the API's JSON to those objects (``now`` is passed in), tested without a
    service in ``tests/unit/test_client_format.py``.
"""

from __future__ import annotations

import html
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any

from hub_ext.client.api import Quota
from hub_ext.client.formatting import (
    WHOLE_GPU_MARK,
    WHOLE_GPU_NOTE,
    age_seconds,
    asks_resources,
    format_command,
    format_gpu_memory,
    format_gpu_percent,
    format_gpus,
    format_number,
    format_placement,
    format_resources,
    format_state,
    format_time,
    gpu_use_words,
    held_gpus,
    info_text,
    runtime_seconds,
)
from scheduler.common.messages import event_line
from scheduler.common.quantities import format_duration, plural, time_limit_words
from scheduler.common.quantities import gpus as format_gpus_count
from scheduler.common.states import (
    HOLDING_STATES,
    WorkloadState,
)

# --- display objects ----------------------------------------------------------------------------

_STATE_COLOURS = {
    WorkloadState.RUNNING: "#1a7f37",
    WorkloadState.SUCCEEDED: "#1a7f37",
    WorkloadState.PENDING: "#9a6700",
    WorkloadState.PREEMPTING: "#9a6700",
    WorkloadState.CANCELLING: "#9a6700",
    WorkloadState.STOPPING: "#9a6700",
    WorkloadState.FAILED: "#cf222e",
    WorkloadState.REVOKED: "#cf222e",
    WorkloadState.CANCELLED: "#57606a",
    WorkloadState.RELEASED: "#57606a",
}


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


class Displayed(ABC):
    """Shown as plain text by ``str()``/``repr()`` (terminals, logs) and as HTML by Jupyter's
    ``_repr_html_`` (notebooks); subclasses give ``text()`` and ``html()``."""

    @abstractmethod
    def text(self) -> str: ...

    @abstractmethod
    def html(self) -> str: ...

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        return self.html()


@dataclass(frozen=True, repr=False)
class Table(Displayed):
    """Rows under named columns. ``str()``/``repr()``: aligned plain text (long cells in the
    last column clipped to ``wrap`` characters, or never with ``wrap=None``);
    ``_repr_html_()``: an HTML table."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    title: str = ""
    empty: str = "nothing to show"
    note: str = ""
    wrap: int | None = 60

    def text(self) -> str:
        lines = [self.title] if self.title else []
        if not self.rows:
            lines.append(self.empty)
        else:
            last = len(self.columns) - 1
            rows = [
                tuple(
                    _clip(cell, self.wrap) if i == last and self.wrap else cell
                    for i, cell in enumerate(row)
                )
                for row in self.rows
            ]
            widths = [
                max(len(column), *(len(row[i]) for row in rows))
                for i, column in enumerate(self.columns)
            ]
            for row in (self.columns, *rows):
                cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
                lines.append("  ".join(cells).rstrip())
        if self.note:
            lines.append(self.note)
        return "\n".join(lines)

    def html(self) -> str:
        parts = []
        if self.title:
            parts.append(f"<p><b>{html.escape(self.title)}</b></p>")
        if not self.rows:
            parts.append(f"<p>{html.escape(self.empty)}</p>")
        else:
            head = "".join(
                f'<th style="text-align:left">{html.escape(c)}</th>' for c in self.columns
            )
            body = "".join(
                "<tr>"
                + "".join(
                    f'<td style="text-align:left">{_html_cell(column, cell)}</td>'
                    for column, cell in zip(self.columns, row, strict=True)
                )
                + "</tr>"
                for row in self.rows
            )
            parts.append(
                f'<table class="frachub-table"><thead><tr>{head}</tr></thead>'
                f"<tbody>{body}</tbody></table>"
            )
        if self.note:
            parts.append(f"<p><i>{html.escape(self.note)}</i></p>")
        return "\n".join(parts)


def _html_cell(column: str, cell: str) -> str:
    text = html.escape(cell)
    if column == "STATE":
        colour = _STATE_COLOURS.get(cell.split(" ")[0])
        if colour:
            return f'<span style="color:{colour};font-weight:bold">{text}</span>'
    return text


@dataclass(frozen=True, repr=False)
class Report(Displayed):
    """A titled list of fields followed by tables (``describe``, ``quota``), shown like
    :class:`Table`: plain text from ``str()``/``repr()``, HTML from ``_repr_html_()``."""

    title: str
    fields: tuple[tuple[str, str], ...]
    tables: tuple[Table, ...] = field(default=())

    def text(self) -> str:
        lines = [self.title]
        width = max((len(name) for name, _ in self.fields), default=0) + 1
        lines += [f"  {(name + ':').ljust(width)}  {value}" for name, value in self.fields]
        for table in self.tables:
            lines.append("")
            lines += ["  " + line if line else line for line in table.text().splitlines()]
        return "\n".join(lines)

    def html(self) -> str:
        rows = "".join(
            f'<tr><th style="text-align:left">{html.escape(name)}</th>'
            f'<td style="text-align:left">{_html_cell(name.upper(), value)}</td></tr>'
            for name, value in self.fields
        )
        parts = [
            f"<p><b>{html.escape(self.title)}</b></p>",
            f'<table class="frachub-report">{rows}</table>',
        ]
        parts += [table.html() for table in self.tables]
        return "\n".join(parts)


# --- builders: API answers -> display objects ---------------------------------------------------


def jobs_table(
    workloads: Sequence[Mapping[str, Any]],
    now: datetime,
    *,
    title: str = "",
    note: str = "",
    empty: str = "no jobs",
) -> Table:
    """The ``jobs`` listing; a USER column appears when the rows are not all one user's (an
    admin's view)."""
    show_user = len({w["user"] for w in workloads}) > 1
    show_resources = any(asks_resources(w) for w in workloads)
    columns = ("ID", "NAME", *(("USER",) if show_user else ()), "PROJECT", "KIND", "STATE")
    columns += ("GPUS", *(("CPU/MEM",) if show_resources else ()), "GPU%", "MEM", "NODE")
    columns += ("AGE", "RUNTIME", "INFO")
    rows = []
    for w in workloads:
        row = (str(w["id"]), w["name"], *((w["user"],) if show_user else ()), w["project"])
        row += (w["kind"], format_state(w), format_gpus(w))
        row += (*((format_resources(w),) if show_resources else ()),)
        row += (format_gpu_percent(w), format_gpu_memory(w), format_placement(w))
        row += (
            format_duration(age_seconds(w, now)),
            format_duration(runtime_seconds(w, now)),
            info_text(w),
        )
        rows.append(row)
    if any(format_gpu_percent(w).endswith(WHOLE_GPU_MARK) for w in workloads):
        note = "\n".join(part for part in (WHOLE_GPU_NOTE, note) if part)
    return Table(columns, tuple(rows), title=title, note=note, empty=empty)


def describe_report(workload: Mapping[str, Any], now: datetime, tz: tzinfo | None = None) -> Report:
    """Everything about one workload: request, state, placement and history."""
    w = workload
    state = format_state(w)
    waiting = w["state"] == WorkloadState.PENDING
    headline = w.get("pending_headline") or w.get("pending_reason")
    if waiting and headline:
        state += f": {headline}"
    fields: list[tuple[str, str]] = [("State", state)]
    if waiting and w.get("pending_reason") and w["pending_reason"] != headline:
        fields.append(("Why", w["pending_reason"]))  # the engine's detail behind the headline
    if w.get("borrowed"):
        fields.append(("Borrowed", w["borrowed"]))
    fields += [
        ("User", w["user"]),
        ("Project", w["project"]),
        (
            "Kind",
            f"{w['kind']} (priority {w['priority']}, "
            f"{'preemptible' if w['preemptible'] else 'not preemptible'})",
        ),
        ("GPUs", format_gpus(w, words=True)),
    ]
    if asks_resources(w):
        fields.append(("CPU, memory", format_resources(w, words=True)))
    if gpu_use_words(w):
        fields.append(("GPU use", str(gpu_use_words(w))))
    if "command" in w:
        fields.append(("Command", format_command(w.get("command"))))
        fields.append(("Working dir", w.get("working_dir") or "(home directory)"))
        if w.get("env"):
            fields.append(("Env", " ".join(f"{k}={v}" for k, v in sorted(w["env"].items()))))
        if w.get("max_runtime_seconds"):
            fields.append(("Time limit", time_limit_words(w["max_runtime_seconds"])))
        if w.get("after"):
            fields.append(("After", f"job {w['after']} ends"))
        if w.get("after_ok"):
            fields.append(("After", f"job {w['after_ok']} succeeds"))
        if w.get("checkpoint_interval_seconds"):
            every = format_duration(w["checkpoint_interval_seconds"])
            fields.append(("Checkpoints", f"every {every}"))
        if w.get("checkpointed_at"):
            fields.append(("Last checkpoint", format_time(w["checkpointed_at"], tz)))
    else:
        fields.append(("Server", w.get("server_name") or "(default server)"))
    fields += [
        ("Submitted", format_time(w["submitted_at"], tz)),
        ("Started", format_time(w.get("started_at"), tz)),
        ("Finished", format_time(w.get("finished_at"), tz)),
        ("Runtime", format_duration(runtime_seconds(w, now))),
        ("Restarts", str(w.get("restart_count", 0))),
        ("Preempted", plural(w.get("preemptions", 0), "time")),
    ]
    if w.get("exit_code") is not None:
        fields.append(("Exit code", str(w["exit_code"])))
    if w.get("message"):
        fields.append(("Message", w["message"]))
    placement = Table(
        ("REPLICA", "NODE", "GPU", "SHARE", "UUID"),
        tuple(
            (
                str(rank),
                replica["node"],
                str(gpu["index"]),
                format_number(gpu["share"]),
                gpu.get("uuid") or "-",
            )
            for rank, replica in enumerate(w.get("placement") or [])
            for gpu in replica["gpus"]
        ),
        title="Placement",
        empty="not placed (no GPUs held)",
    )
    events = Table(
        ("TIME", "WHAT HAPPENED"),
        tuple(
            (
                format_time(event["time"], tz),
                event.get("text") or event_line(event["type"], event["message"]),
            )
            for event in w.get("events") or []
        ),
        title="Timeline",
        empty="nothing yet",
        wrap=None,  # the story is read in full: who preempted it, the grace, the work lost
    )
    title = f"{w['kind'].capitalize()} {w['id']}: {w['name']}"
    return Report(title, tuple(fields), (placement, events))


def quota_report(quota: Quota) -> Report:
    """The caller's projects: quota, hard limit, what the project and the caller hold."""
    user = quota.user
    rights = [right for right in ("read", "submit", "admin") if user.get(right)]
    mine: dict[str, float] = {}
    for workload in quota.holding:
        mine[workload["project"]] = mine.get(workload["project"], 0.0) + held_gpus(workload)
    table = Table(
        ("PROJECT", "DESERVED", "LIMIT", "IN USE", "FAIR SHARE", "YOURS", "RUNNING", "PENDING"),
        tuple(
            (
                queue["name"],
                format_number(queue["deserved_gpus"]),
                format_number(queue["limit_gpus"]) if queue["limit_gpus"] is not None else "none",
                format_number(queue["allocated_gpus"]),
                format_number(queue["fair_share_gpus"]),
                format_number(mine.get(queue["name"], 0.0)),
                str(queue["running"]),
                str(queue["pending"]),
            )
            for queue in quota.projects
        ),
        title="Projects (GPUs)",
        empty="not a member of any project: ask an admin to add you to one",
        note=(
            "\n".join(
                [
                    "Within DESERVED your jobs are safe; above it they borrow idle GPUs and may "
                    "be preempted when their owners need them.",
                    *usage_notes(quota.projects),
                ]
            )
            if quota.projects
            else ""
        ),
    )
    fields = (
        ("User", user["name"]),
        ("Rights", ", ".join(rights) or "none"),
        ("Projects", ", ".join(user["projects"]) or "none"),
    )
    host = host_quota_table(quota.projects)
    tables = (table,) if host is None else (table, host)
    return Report(f"FracHub quota for {user['name']}", fields, tables)


def host_quota_table(projects: Sequence[Mapping[str, Any]]) -> Table | None:
    """Per-resource rows for the CPUs and memory scheduled by quota (docs/scheduling.md, rule
    3b): one row per project and resource the service counts; None when it counts neither."""
    rows = []
    for queue in projects:
        for noun, suffix in (("CPUs", "cpu"), ("memory GiB", "memory_gib")):
            in_use = queue.get(f"allocated_{suffix}")
            if in_use is None:
                continue
            deserved, limit = queue.get(f"deserved_{suffix}"), queue.get(f"limit_{suffix}")
            rows.append(
                (
                    queue["name"],
                    noun,
                    "unlimited" if deserved is None else format_number(deserved),
                    "none" if limit is None else format_number(limit),
                    format_number(in_use),
                    format_number(queue.get(f"fair_share_{suffix}") or 0.0),
                )
            )
    if not rows:
        return None
    return Table(
        ("PROJECT", "RESOURCE", "DESERVED", "LIMIT", "IN USE", "FAIR SHARE"),
        tuple(rows),
        title="Projects (CPUs and memory)",
        note=(
            "Over its fair share in any resource, a project's preemptible jobs may be "
            "preempted for a project within its shares; notebooks stay within DESERVED."
        ),
    )


def usage_notes(projects: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per project whose recent use moved its fair share (usage-decayed fair share):
    "nlp: fair share 2 GPUs, lowered from 6 GPUs by its recent use (75% of the cluster's,
    decayed)"."""
    return [
        f"{queue['name']}: fair share {format_gpus_count(queue['fair_share_gpus'])}, "
        f"{queue['fair_share_note']}"
        for queue in projects
        if queue.get("fair_share_note")
    ]


def submitted_text(workload: Mapping[str, Any]) -> str:
    """The one line that confirms a submission and gives the id to use next."""
    return (
        f"Submitted job {workload['id']} ({workload['name']}) to project "
        f"{workload['project']}: {format_gpus(workload, words=True)}, {format_state(workload)}"
    )


def state_line(workload: Mapping[str, Any]) -> str:
    """Progress while following a job: where it is and, once it ended, how."""
    w = workload
    head = f"job {w['id']} ({w['name']})"
    state = w["state"]
    if state == WorkloadState.PENDING:
        where = f"#{w['queue_position']} in queue {w['project']}" if w.get("queue_position") else ""
        reason = w.get("pending_headline") or w.get("pending_reason") or ""
        detail = "; ".join(part for part in (where, reason) if part)
        return f"{head} is pending" + (f": {detail}" if detail else "")
    if state in HOLDING_STATES:
        return f"{head} is {state} on {format_placement(w)}"
    if state == WorkloadState.FAILED:
        ending = f"{head} failed"
        if w.get("exit_code") is not None:
            ending += f" with exit code {w['exit_code']}"
        return ending + (f": {w['message']}" if w.get("message") else "")
    return f"{head} {state}" + (f": {w['message']}" if w.get("message") else "")
