"""When an idle GPU notebook is warned and when it is stopped: pure decisions, no I/O, no clock.

A notebook server holding a GPU share through an allocation with an idle limit
(``idle_timeout_seconds``, the spawner's profile limit) is judged on the activity the hub
reports for it. ``judge`` says, given the time now, whether it is

- ``FINE``: used recently enough;
- ``WARNED``: idle for ``warning_fraction`` of its limit (default 0.8, so the warning comes
  with a fifth of the limit left: 12 minutes before a one-hour limit stops the server); the
  panel shows ``warning_text`` until the server is used again or stopped;
- ``STOP``: warned, unused since, and past the stop time the warning named.

Rules, in order:

1. Activity newer than the one a warning was based on withdraws the warning.
2. A warned notebook stops at the time its warning promised, never earlier.
3. A notebook is never stopped without a warning first. If the service first notices one
   already past its limit (it was down, or checks less often than the warning window), it
   warns now and promises a stop a full warning window later: the user always gets the
   notice the warning fraction gives them.

``idle.py`` applies these decisions through the hub; this module only reads numbers. Times
are Unix seconds; ``warning_text`` formats them in UTC.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum

DEFAULT_WARNING_FRACTION = 0.8


class Verdict(str, Enum):
    FINE = "fine"
    WARNED = "warned"
    STOP = "stop"


@dataclass(frozen=True)
class GivenWarning:
    """A warning already given: the activity it was based on and the stop it promised."""

    idle_since: float
    stop_at: float


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    idle_since: float
    """The server's last activity: idle from then on."""
    stop_at: float
    """When the server is stopped if it stays idle (once warned: the promised time)."""


def judge(
    *,
    timeout: float,
    last_activity: float,
    now: float,
    warning: GivenWarning | None = None,
    warning_fraction: float = DEFAULT_WARNING_FRACTION,
) -> Judgement:
    """Judge one running notebook with an idle limit of ``timeout`` seconds.

    ``last_activity`` is the latest sign of use (the hub's, or the allocation's start if the
    hub has none newer); ``warning`` the warning given earlier, if any.
    """
    if not 0 < warning_fraction < 1:
        raise ValueError(f"warning_fraction must be between 0 and 1, got {warning_fraction}")
    if warning is not None and last_activity > warning.idle_since:
        warning = None  # used again since the warning (rule 1)
    if warning is not None:
        verdict = Verdict.STOP if now >= warning.stop_at else Verdict.WARNED
        return Judgement(verdict, warning.idle_since, warning.stop_at)
    stop_at = last_activity + timeout
    if now < last_activity + warning_fraction * timeout:
        return Judgement(Verdict.FINE, last_activity, stop_at)
    notice = (1 - warning_fraction) * timeout
    return Judgement(Verdict.WARNED, last_activity, max(stop_at, now + notice))  # rule 3


def warning_text(idle_since: float, stop_at: float, share: str, *, by_gpu: bool = False) -> str:
    """What the panel shows: "idle since 14:05 UTC; this notebook's 0.5 GPU will be released
    and the server stopped at 15:05 UTC unless it is used". ``share`` is the GPU share in
    words ("0.5 GPU", "2 GPUs"). Times show the date too when the two fall on different days.
    ``by_gpu``: judged by its GPU's activity, which it then says ("its GPU idle since").
    """
    since, stop = _utc(idle_since), _utc(stop_at)
    layout = "%H:%M UTC" if since.date() == stop.date() else "%Y-%m-%d %H:%M UTC"
    idle = "its GPU idle since" if by_gpu else "idle since"
    use = "its GPU is used" if by_gpu else "it is used"
    return (
        f"{idle} {since.strftime(layout)}; this notebook's {share} will be released and "
        f"the server stopped at {stop.strftime(layout)} unless {use}"
    )


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
