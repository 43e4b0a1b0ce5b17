"""The settings of ``frachub service`` that shape scheduling decisions: the engine's policy
(placement, aging, usage-decayed fair share) and what a request that names no CPU or memory
asks for. A mixin of ``FracHubService`` (``c.FracHubService.<name>`` in the config file, as
before), kept apart so the application class holds what runs the service."""

from __future__ import annotations

from datetime import UTC, datetime

from traitlets import Bool, Dict, Float, HasTraits, Unicode, validate

from scheduler.common.limits import MILLI
from scheduler.engine import SCORERS, Aging, Policy, scorer_named
from scheduler.fields import InvalidSpec
from scheduler.service.requests import resource_defaults


def wall_clock(seconds: float) -> str:
    """How pending reasons show a time: "2026-11-22 14:05:00 UTC"."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


class PolicySettings(HasTraits):
    """Scheduling-policy settings of ``FracHubService`` (see the module)."""

    default_cpu = Dict(
        {},
        help="""CPU cores each replica of a workload asks for when its request names none, per
        kind: {"notebook": 1, "training": 4, "inference": 2}. A kind not named asks for none:
        not counted against its node's cores and not limited (the default, so nothing changes
        for a deployment that never counted CPUs). A request's own ``cpu`` wins.""",
    ).tag(config=True)

    default_memory_gib = Dict(
        {},
        help="""Memory (RAM, GiB) each replica of a workload asks for when its request names
        none, per kind: {"notebook": 8, "training": 32}. The local backend enforces what was
        asked as the job's memory limit (the kernel kills a job that goes past it); a kind not
        named asks for none (not counted, not limited). A request's own ``memory_gib`` wins.""",
    ).tag(config=True)

    @validate("default_cpu", "default_memory_gib")
    def _validate_resource_defaults(self, proposal):
        name = proposal.trait.name
        both = {"default_cpu": {}, "default_memory_gib": {}, name: proposal.value}
        try:
            resource_defaults(both["default_cpu"], both["default_memory_gib"])
        except InvalidSpec as error:
            raise ValueError(str(error)) from None
        return proposal.value

    aging_per_hour = Float(
        0.0,
        help="""Aging: priority points a pending workload gains per hour it waits, when its
        queue ranks its pending work (docs/scheduling.md, "Aging"), so higher-priority work
        arriving later cannot pass it forever. 0 (the default) turns aging off: priority
        classes mean what the admin set, and the order is first come, first served within
        one priority.""",
    ).tag(config=True)

    aging_max_priority = Float(
        None,
        allow_none=True,
        help="""With aging: the most priority points a pending workload can gain by waiting;
        None: no cap.""",
    ).tag(config=True)

    @validate("aging_per_hour", "aging_max_priority")
    def _validate_aging(self, proposal):
        name, value = proposal.trait.name, proposal.value
        if value is not None and not 0 <= value < float("inf"):
            raise ValueError(f"FracHubService.{name} must be a number >= 0, got {value}")
        return value

    interactive_reserve_gpus = Float(
        0.0,
        help="""The interactive reserve: GPUs (fractions allowed, e.g. 0.5) of idle capacity
        that preemptible work going beyond its project's quota may not borrow while some
        project has deserved quota its notebooks do not use, so a notebook inside its quota
        starts on idle GPUs at once instead of waiting out a reclaim's grace period
        (docs/scheduling.md, "The interactive reserve"; what it costs: docs/fleet.md).
        0 (the default) turns it off.""",
    ).tag(config=True)

    @validate("interactive_reserve_gpus")
    def _validate_interactive_reserve(self, proposal):
        value = proposal.value
        if not 0 <= value < float("inf"):
            raise ValueError(
                f"FracHubService.interactive_reserve_gpus must be a number of GPUs >= 0, "
                f"got {value}"
            )
        return value

    def scheduling_policy(self) -> Policy:
        """The engine's policy from the settings: the placement, wall-clock times in reasons,
        aging when ``aging_per_hour`` is above 0, and the interactive reserve."""
        aging = Aging(self.aging_per_hour, self.aging_max_priority) if self.aging_per_hour else None
        return Policy(
            scorer=scorer_named(self.placement),
            format_time=wall_clock,
            aging=aging,
            interactive_reserve=round(self.interactive_reserve_gpus * MILLI),
        )

    placement = Unicode(
        "frachub",
        help=f"""How the engine picks GPUs: one of {", ".join(sorted(SCORERS))}. "frachub"
        (FGD's fragmentation gradient, aimed at the shapes of the cluster's own recent
        requests) strands the least capacity: on the openb trace it leaves 4.7% of GPUs
        unallocated where "pack" leaves 5.6%, for a few milliseconds more per decision at
        1,000 nodes (docs/benchmarks.md). "pack" fills partly used GPUs and nodes first and
        is the cheapest; "spread" gives each workload the quietest GPU.""",
    ).tag(config=True)

    @validate("placement")
    def _validate_placement(self, proposal):
        if proposal.value not in SCORERS:
            raise ValueError(
                f"FracHubService.placement must be one of {', '.join(sorted(SCORERS))}, "
                f"got {proposal.value!r}"
            )
        return proposal.value

    fair_share_usage = Bool(
        False,
        help="""Usage-decayed fair share (docs/scheduling.md): a project's recent GPU use,
        from the usage samples, lowers its part of the GPUs beyond the deserved quotas and its
        place in the order of service; quotas are untouched. Needs usage_sample_interval > 0.
        Off by default: docs/fleet.md, "Fair over time", measures why.""",
    ).tag(config=True)

    fair_share_usage_half_life_hours = Float(
        24.0, help="Hours after which past GPU use counts half (KAI's halfLifePeriod)."
    ).tag(config=True)

    fair_share_usage_window_days = Float(
        7.0, help="Days of usage samples counted (KAI's windowSize; keep the samples as long)."
    ).tag(config=True)

    fair_share_usage_k = Float(
        1.0, help="How hard past use moves the over-quota share (KAI's kValue; 0: not at all)."
    ).tag(config=True)

    fair_share_usage_refresh_seconds = Float(
        60.0, help="Seconds between recomputations of the decayed usage from the samples."
    ).tag(config=True)

    @validate(
        "fair_share_usage_half_life_hours",
        "fair_share_usage_window_days",
        "fair_share_usage_refresh_seconds",
    )
    def _validate_usage_decay(self, proposal):
        if proposal.value <= 0:
            raise ValueError(
                f"FracHubService.{proposal.trait.name} must be > 0, got {proposal.value}"
            )
        return proposal.value

    @validate("fair_share_usage_k")
    def _validate_usage_k(self, proposal):
        if proposal.value < 0:
            raise ValueError(
                f"FracHubService.fair_share_usage_k must be >= 0, got {proposal.value}"
            )
        return proposal.value
