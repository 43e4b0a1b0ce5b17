"""A workload's story in words: its timeline's lines and why it waits, the same in the panel,
the CLI, the magics, the spawner's messages and the job's log. Pure functions, no I/O."""

from __future__ import annotations

from scheduler.common.quantities import gpus

_EVENT_WORDS = {
    "preempting": "preempted",
    "cancelling": "stopping",
    "stopping": "stopping",
    "lost": "lost its process",
    "over-share": "over its GPU memory share",
    "within-share": "back within its share",
    "waited": "done waiting",
}


def event_line(type_: str, message: str) -> str:
    """One line of a workload's timeline, the same in the panel, the CLI, the magics and the
    job's log: "preempted for nlp/notebook-carol (…); grace period 30s", "restarted: attempt 2
    on ws GPU 0". A ``lost`` event whose message is a sentence of its own (a capital first)
    is that sentence: the backend says what happened instead of "lost its process"."""
    what = _EVENT_WORDS.get(type_, type_)
    if not message:
        return what
    if type_ == "lost" and message[:1].isupper():
        # a backend that knows why the attempt ended says so in a sentence of its own
        # ("Kubernetes found no node for its pod ...; requeued"): no process was lost
        return message
    if message.startswith(what):  # "preempted for nlp/...": the message already says it
        return message
    if message.startswith(("for ", "on ", "to ")):
        return f"{what} {message}"
    return f"{what}: {message}"


def pending_headline(
    reason: str, project: str, allocated: float | None, deserved: float | None
) -> str:
    """Why a workload waits, in one short phrase a researcher understands first; the engine's
    ``reason`` (which names every number) is the detail behind it.

    ``allocated`` and ``deserved`` are its project's GPUs in use and quota, when known.
    """
    if "can never start" in reason:
        return "can never start: " + reason.split("; ")[-1].replace(", so it can never start", "")
    if reason.startswith("starting as soon as"):
        return "starting soon: the work preempted for it is stopping"
    if "is limited to" in reason:
        return "waiting: " + reason.split("; ")[0]
    if allocated is not None and deserved is not None and allocated >= deserved - 1e-9:
        quota = gpus(deserved).replace(" ", "-") if deserved else "no GPU"
        # usage-decayed fair share: say when the project's recent use is why it may not reclaim
        recent = "; its recent use lowered its fair share" if "by its recent use" in reason else ""
        return (
            f"waiting: {project} is using its {quota} quota; borrowed GPUs are all taken{recent}"
            if deserved
            else f"waiting: {project} has no GPU quota; borrowed GPUs are all taken{recent}"
        )
    if reason.startswith("needs "):
        return "waiting for room: " + "; ".join(reason.split("; ")[1:2] or [reason])
    return "waiting: " + reason.split("; ")[0]
