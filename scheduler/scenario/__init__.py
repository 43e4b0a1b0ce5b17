"""Scenario files: the admins' what-if tool and the policy's test harness.

``spec`` parses and validates a file, ``runner`` drives the engine through its
simulated time, ``command`` is ``frachub scenario run``.
"""

from scheduler.scenario.runner import Outcome, Unsettled, run_scenario
from scheduler.scenario.spec import InvalidSpec, Scenario, load_scenario, parse_scenario

__all__ = [
    "InvalidSpec",
    "Outcome",
    "Scenario",
    "Unsettled",
    "load_scenario",
    "parse_scenario",
    "run_scenario",
]
