"""Start now as a preemptible notebook: what the spawn form and the spawn page offer when a
notebook would wait at its project's quota.

A notebook is non-preemptible unless its profile says ``preemptible: True``, so it must stay
inside its project's deserved quota (rule 3b in docs/scheduling.md); when the project's
notebooks already use it, the notebook waits, and a researcher who gives up is turned away
while other projects' GPUs may sit idle. The same notebook started preemptible (the admin's
existing preemptible-notebook rule: Run:ai's build-preemptible, priority 75) may borrow those
idle GPUs at once, and is stopped when their owners need their quota back: its GPU share is
revoked, the spawner's poll stops the server, and the user's files stay where they are.

The rule, decided here (pure) on the service's own dry runs:

* **Allowed** (``allowed``): the spawner's ``frachub_preemptible_offer`` setting, ``auto`` by
  default: only to users the admin already lets run preemptible notebooks, that is when a
  profile with ``preemptible: True`` is open to them. ``all`` offers it to everyone who may
  start a GPU notebook; ``off`` never.
* **Offered** (``offered``): for a GPU choice of a non-preemptible profile whose dry run says
  the notebook as asked would *wait*, when the same request made preemptible would start
  *now*. A notebook that starts now, after a reclaim, or never is not offered anything.
* **Started** (``start_words``): the spawn page and the hub's log say it in words, with the
  scheduler's reason for the wait.

Pure: the spawner asks the service and passes the answers in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from spawner.profiles import Profile

AUTO, ALL, OFF = "auto", "all", "off"
MODES = (AUTO, ALL, OFF)

OFFER_LABEL = "Start now as a preemptible notebook"
OFFER_HINT = (
    "It may be stopped when others need their quota: its GPU share is then revoked and the "
    "notebook stopped. Your files are kept."
)


def allowed(mode: str, profiles: Sequence[Profile], groups: Iterable[str]) -> bool:
    """Whether this user may be offered (and may ask for) a preemptible start."""
    if mode == OFF:
        return False
    if mode == ALL:
        return True
    groups = set(groups)
    return any(p.preemptible and p.gpu_choices and p.allows(groups) for p in profiles)


def refused(mode: str) -> str:
    """Why a preemptible start was refused, for the 403 naming ``user_options.preemptible``."""
    if mode == OFF:
        return "this hub does not start notebooks as preemptible on request"
    return (
        "you may not start preemptible notebooks: no profile with preemptible notebooks is "
        "open to you"
    )


def offered(asked: Mapping[str, Any] | None, preemptible: Mapping[str, Any] | None) -> bool:
    """The dry run says the notebook as asked would wait, and preemptible it would start now."""
    if asked is None or preemptible is None:
        return False
    return asked.get("outcome") == "wait" and preemptible.get("outcome") == "now"


def wait_reason(verdict: Mapping[str, Any]) -> str:
    """The scheduler's reason in a dry run's "would wait: ..." message."""
    return str(verdict.get("message") or "").removeprefix("would wait: ")


def start_words(project: str, reason: str | None) -> str:
    """The spawn page's and the log's line for a notebook started preemptible on request;
    ``reason`` the scheduler's for the wait, None when the dry run did not say it waits."""
    why = (
        f"because {project} is at its quota" + (f" ({reason})" if reason else "")
        if reason is not None
        else f"in {project}, as asked"
    )
    return (
        f"Starting as a preemptible notebook {why}. It may be stopped when others need their "
        "quota: its GPU share is then revoked and the notebook stopped; your files are kept."
    )


def normal_words(project: str, verdict: Mapping[str, Any]) -> str:
    """The line for a preemptible start asked for when the quota has room again."""
    message = str(verdict.get("message") or "")
    return (
        f"Starting as a normal (non-preemptible) notebook instead: {project}'s quota has room "
        f"now ({message})"
    )
