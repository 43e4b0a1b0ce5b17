"""Who may do what: the custom scopes and project membership.

Scopes (defined once, with their descriptions, in ``scheduler/common/scopes.py``; granted through
JupyterHub roles; the admin scope implies the others):

- ``custom:frachub:read``   see queues, nodes, usage, metrics and one's own workloads
- ``custom:frachub:submit`` submit and cancel one's own workloads, hold notebook allocations
- ``custom:frachub:admin``  see and change everything, act for other users, edit queues
- ``custom:frachub:job``    see and checkpoint the one job the token was issued to: the
  service gives each job such a token (``scheduler/service/hub/jobtokens.py``) and knows it by
  the token's id, which the hub reports with its owner

Every token must also carry ``access:services!service=frachub`` (checked by ``HubAuth``).
A user belongs to a project when they are in the JupyterHub group of the same name or listed
in the project's ``members``. Another user's workload answers 404, as the hub does, so a
caller cannot tell forbidden from missing; a missing scope answers 403 naming it.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.common.scopes import ADMIN_SCOPE as ADMIN
from scheduler.common.scopes import JOB_SCOPE as JOB
from scheduler.common.scopes import READ_SCOPE as READ
from scheduler.common.scopes import SUBMIT_SCOPE as SUBMIT

__all__ = ["ADMIN", "JOB", "READ", "SUBMIT", "Caller"]


@dataclass(frozen=True)
class Caller:
    """The identity behind a request, as the hub reported it for the token."""

    name: str
    scopes: frozenset[str]
    groups: frozenset[str]
    kind: str = "user"
    token_id: str | None = None
    """The hub's id of the token the request came with (None for a browser session)."""

    @property
    def is_admin(self) -> bool:
        return ADMIN in self.scopes

    def has(self, scope: str) -> bool:
        return scope in self.scopes or self.is_admin

    def is_token_of(self, token_id: str | None) -> bool:
        """This request comes with the job token ``token_id`` (one with the job scope)."""
        return token_id is not None and JOB in self.scopes and self.token_id == token_id
