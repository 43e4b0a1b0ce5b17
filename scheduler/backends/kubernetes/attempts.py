"""An attempt of a training workload: what the backend remembers of it, the handle the
service stores for it, and how it ends, read from the watch caches. Pure: no I/O.

- an attempt ends when its Jobs complete (0), one fails (its pod's exit code; the rest of a
  gang is stopped first), its stop has left no pod running, or its Jobs vanish (``None``:
  lost);
- a failure is a disruption (evicted, drained, preempted, node gone: ``None``, requeued in
  its place) or the program's exit code, from its pods while they are there, else from the
  condition the Job's ``podFailurePolicy`` gave it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.backends.base import Handle
from scheduler.backends.kubernetes.gpus import parse_shares, shares_text_raw
from scheduler.backends.kubernetes.labels import STOPPED
from scheduler.backends.kubernetes.pods import Obj, condition, pod_exit_code, pod_live, pod_phase

HANDLE_KIND = "kubernetes"
FAILED = ("FailureTarget", "Failed")
COMPLETE = ("SuccessCriteriaMet", "Complete")
"""A Job has failed or succeeded once it has the interim condition: Kubernetes 1.31+ adds
the terminal one (Failed, Complete) only after every pod of it has terminated."""

POLICY_MATCH = re.compile(
    r"(?:failed with exit code (?P<code>\d+)|has condition (?P<condition>\w+)) matching FailJob"
)
"""The Job controller's words for the podFailurePolicy rule a pod matched."""


@dataclass
class Attempt:
    """One attempt the backend watches: its Jobs (and a gang's Service), the GPU shares it
    holds, and what has been seen of it so far."""

    workload_id: int
    name: str
    jobs: list[str]
    service: str | None
    shares: list[tuple[str, int, int]] = field(default_factory=list)
    stopping: bool = False
    seen: set[str] = field(default_factory=set)
    failure: tuple[int | None, str] | None = None
    last_codes: dict[str, int] = field(default_factory=dict)
    stuck: bool = False  # ended because a pod could not start (its Jobs are deleted)
    pending_since: dict[str, float] = field(default_factory=dict)  # pod -> first seen Pending
    attach_checked: dict[str, float] = field(default_factory=dict)  # pod -> events last read
    # pod -> (when its Multi-Attach error was first seen, the error's words)
    attach_error: dict[str, tuple[float, str]] = field(default_factory=dict)
    # the home claims its pods mount: before the pods reach the watch cache, these say
    # where a ReadWriteOnce claim is already wanted (attempts started moments ago)
    claims: frozenset[str] = frozenset()

    def handle(self, namespace: str) -> Handle:
        """What the service stores to find this attempt again (``from_handle``)."""
        return {
            "backend": HANDLE_KIND,
            "namespace": namespace,
            "workload_id": self.workload_id,
            "attempt": self.name,
            "jobs": list(self.jobs),
            "service": self.service,
            "shares": shares_text_raw(self.shares),
        }

    @classmethod
    def from_handle(cls, workload_id: int, handle: Handle) -> Attempt | None:
        """The attempt a handle names; None when it is not a well-formed handle of ours."""
        try:
            if handle.get("backend") != HANDLE_KIND:
                return None
            jobs = [str(name) for name in handle["jobs"]]
            name = str(handle["attempt"])
            service = handle.get("service")
            shares = parse_shares(str(handle.get("shares") or ""))
        except (AttributeError, KeyError, TypeError, ValueError):
            return None
        if not jobs:
            return None
        return cls(workload_id, name, jobs, str(service) if service else None, shares)


class AttemptBook:
    """The attempts the backend watches, by token (the attempt's name), and which of them
    a poll must look at: those whose Jobs or pods changed, and those ``needs_look`` keeps
    under watch. With 4,000 attempts, a poll every 0.1 s that walked them all was the
    backend's largest cost in benchmarks/kai_scale.py's fill."""

    def __init__(self) -> None:
        self.attempts: dict[str, Attempt] = {}
        self._token_of_job: dict[str, str] = {}
        self._watched: set[str] = set()

    def track(self, token: str, attempt: Attempt) -> None:
        """Watch ``attempt`` from now on; the next poll looks at it whatever changed."""
        self.attempts[token] = attempt
        for name in attempt.jobs:
            self._token_of_job[name] = token
        self._watched.add(token)

    def untrack(self, token: str) -> None:
        attempt = self.attempts.pop(token)
        for name in attempt.jobs:
            if self._token_of_job.get(name) == token:
                del self._token_of_job[name]
        self._watched.discard(token)

    def look_again(self, token: str) -> None:
        """The next poll looks at this attempt (a stop was sent) whatever changed."""
        if token in self.attempts:
            self._watched.add(token)

    def to_look_at(self, changed: set[str], everything: bool) -> list[tuple[str, Attempt]]:
        """The attempts a poll looks at: all (``everything``), else those with a Job in
        ``changed`` (Job names whose Job or pods changed) and those under watch."""
        if everything:
            return list(self.attempts.items())
        tokens = self._watched | {
            self._token_of_job[name] for name in changed if name in self._token_of_job
        }
        return [(token, self.attempts[token]) for token in sorted(tokens) if token in self.attempts]

    def looked_at(self, token: str, attempt: Attempt) -> None:
        """After a poll looked at it: keep it under watch while ``needs_look`` says so."""
        if needs_look(attempt):
            self._watched.add(token)
        else:
            self._watched.discard(token)

    def clear(self) -> None:
        self.attempts.clear()
        self._token_of_job.clear()
        self._watched.clear()


def needs_look(attempt: Attempt) -> bool:
    """Whether a poll must look at ``attempt`` even when none of its Jobs or pods changed:
    a timer runs (a pending pod, a volume's attach error), a stop or a failure is under
    way, or some of its Jobs were never seen yet."""
    return bool(
        attempt.stopping
        or attempt.failure is not None
        or attempt.pending_since
        or attempt.attach_error
        or len(attempt.seen) < len(attempt.jobs)
    )


def job_dead(job: Obj) -> bool:
    """Whether a Job has ended, been stopped or is being deleted: no attempt to take over."""
    annotations = job["metadata"].get("annotations") or {}
    return (
        condition(job, *COMPLETE, *FAILED) is not None
        or STOPPED in annotations
        or bool(job["metadata"].get("deletionTimestamp"))
    )


def outcome(
    attempt: Attempt,
    jobs: dict[str, Obj],
    by_job: Mapping[str, list[Obj]],
    exit_codes: dict[str, dict[str, int]],
    disrupted: dict[str, Obj],
) -> tuple[int | None, str, bool] | None:
    """None while the attempt runs; else (code, message, needs_stop). ``jobs`` and
    ``by_job`` (Job name -> its pods) are the caches; ``exit_codes`` and ``disrupted`` what
    the watch kept of pods that have left them."""
    pods = [pod for name in attempt.jobs for pod in by_job.get(name, [])]
    live = [pod for pod in pods if pod_live(pod)]
    for pod in pods:
        code = pod_exit_code(pod)
        if code is not None:
            attempt.last_codes[pod["metadata"]["name"]] = code
    for name in attempt.jobs:
        attempt.last_codes.update(exit_codes.get(name, {}))
    missing = []
    for name in attempt.jobs:
        if name in jobs:
            attempt.seen.add(name)
        elif name in attempt.seen:
            missing.append(name)
    if attempt.failure is None and not attempt.stopping:
        # a Job FracHub is stopping may fail because of the pods it deleted itself (the
        # Job controller counts them): that is the stop, not the workload's failure
        for name in attempt.jobs:
            job = jobs.get(name)
            failed = condition(job, *FAILED) if job is not None else None
            if failed is not None:
                attempt.failure = failure(
                    attempt, name, by_job.get(name, []), failed, disrupted.get(name)
                )
                break
    if attempt.failure is not None:
        if live:  # stop the rest, then wait for them to go
            return None if attempt.stopping else (None, attempt.failure[1], True)
        return (attempt.failure[0], attempt.failure[1], False)
    if attempt.stopping:
        suspended = all(
            name not in jobs or jobs[name]["spec"].get("suspend") or job_dead(jobs[name])
            for name in attempt.jobs
        )
        if live or not suspended:
            return None
        code = max(attempt.last_codes.values()) if attempt.last_codes else None
        if all(name in jobs and condition(jobs[name], *COMPLETE) for name in attempt.jobs):
            return (0, "exited with code 0 before it was stopped", False)
        return (code, "stopped" + (f" (code {code})" if code is not None else ""), False)
    if missing:
        return (None, f"its job {missing[0]} was deleted", False)
    if all(name in jobs and condition(jobs[name], *COMPLETE) for name in attempt.jobs):
        return (0, "exited with code 0", False)
    return None


def failure(
    attempt: Attempt,
    job_name: str,
    pods: list[Obj],
    failed: Obj,
    disrupted: Obj | None,
) -> tuple[int | None, str]:
    """(exit code, words) of a failed Job, whose condition is ``failed``: from its pods while
    they are there, else from the condition its podFailurePolicy gave it (a scheduler
    restarted after the pods went keeps the exit code; a disruption stays a disruption).
    ``disrupted`` is the DisruptionTarget condition the watch saw on a pod of it, if any."""
    failed_pods = [
        pod
        for pod in pods
        if pod_phase(pod) == "Failed" and not pod["metadata"].get("deletionTimestamp")
    ]
    failed_pods.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""))
    disruptions = [condition(pod, "DisruptionTarget") for pod in pods]
    disruptions.append(disrupted)
    matched = POLICY_MATCH.search(failed.get("message") or "")
    if failed.get("reason") == "PodFailurePolicy" and matched and matched["condition"]:
        disruptions.append({"reason": matched["condition"], "message": ""})  # pod gone
    for disruption in disruptions:
        if disruption is not None:
            # evicted, drained, preempted by kube-scheduler, node gone: not the program's
            # failure; None makes the service requeue the workload in its place
            why = disruption.get("reason") or "DisruptionTarget"
            detail = disruption.get("message") or ""
            return None, f"its pod was disrupted ({why}{': ' + detail if detail else ''})"
    for pod in failed_pods:
        code = pod_exit_code(pod)
        if code is not None:
            index = (pod["metadata"].get("labels") or {}).get(
                "batch.kubernetes.io/job-completion-index", "0"
            )
            prefix = (
                f"replica of {job_name} index {index} "
                if len(attempt.jobs) > 1 or (attempt.service)
                else ""
            )
            return code, f"{prefix}exited with code {code}"
    if failed.get("reason") == "PodFailurePolicy" and matched and matched["code"]:
        code = int(matched["code"])
        return code, f"exited with code {code}"
    return None, f"job {job_name} failed without an exit code (evicted or deleted)"
