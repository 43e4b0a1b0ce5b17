"""Names and permissions shared by the hub configuration, the spawner and the service.

JupyterHub grants permissions through roles made of scopes. FracHub defines four custom
scopes and says here, once, which identity needs which scopes: every user (to use the panel,
the magics and the CLI), a notebook server's own token (so the magics act as its user), a
training job's own token (so it can say it checkpointed, and nothing more), and the
``frachub`` service itself (to learn group membership, watch server activity, stop idle GPU
notebooks, and issue and revoke the jobs' tokens).
"""

from __future__ import annotations

SERVICE_NAME = "frachub"
SERVICE_PREFIX = f"/services/{SERVICE_NAME}/"
API_PATH = "api/v1/"  # the service's REST API, under SERVICE_PREFIX
IDEMPOTENCY_HEADER = "Idempotency-Key"
"""Sent with a submission, and again with its retries: the service stores one job per key
(``scheduler/service/idempotency.py``; the client's ``submit`` sends a new one each time)."""
ACCESS_SCOPE = f"access:services!service={SERVICE_NAME}"
READ_SCOPE = "custom:frachub:read"
SUBMIT_SCOPE = "custom:frachub:submit"
ADMIN_SCOPE = "custom:frachub:admin"
JOB_SCOPE = "custom:frachub:job"
ADMIN_GROUP = "frachub-admins"  # members get the frachub-admin role

# The one table of FracHub's scopes. The hub shows these descriptions on its token and
# consent pages; the service's --FracHubService.print_scopes=True prints them; in the service
# the admin scope implies the others (scheduler/service/access.py).
CUSTOM_SCOPES = {
    READ_SCOPE: {"description": "See FracHub queues, nodes and usage, and your own workloads."},
    SUBMIT_SCOPE: {
        "description": "Submit and cancel your own FracHub workloads and hold notebook GPU "
        "allocations."
    },
    ADMIN_SCOPE: {
        "description": "See and change every FracHub workload and queue, and act for other users."
    },
    JOB_SCOPE: {
        "description": "See, and report checkpoints of, the one FracHub job the token was "
        "issued to (the service gives each job such a token)."
    },
}
# what the Training panel's OAuth token may carry (the service's oauth_client_allowed_scopes):
# the user's FracHub scopes, and "admin-ui" for those who may open the hub's admin page, so
# FracHub's pages show the hub's Admin link to them as the hub's own pages do (the hub puts
# in the token only the scopes its user holds)
PANEL_SCOPES = [*CUSTOM_SCOPES, "admin-ui"]
# every user: their own things in the hub, plus the service
# (a token can only hold scopes its owner holds: every user holds JOB_SCOPE so that the
# service can issue their jobs' tokens)
USER_SCOPES = ["self", ACCESS_SCOPE, READ_SCOPE, SUBMIT_SCOPE, JOB_SCOPE]
ADMIN_SCOPES = [ACCESS_SCOPE, READ_SCOPE, SUBMIT_SCOPE, ADMIN_SCOPE]
# a notebook server's $JUPYTERHUB_API_TOKEN: JupyterHub's defaults plus what the magics need,
# and the admin scope, which the hub puts in the token only of a user who holds it (a
# server's token gets the subset of these its user holds when the server starts), so that
# `frachub jobs --all-users` works in an admin's own terminal
SERVER_TOKEN_SCOPES = [
    "access:servers!server",
    "users:activity!user",
    ACCESS_SCOPE,
    READ_SCOPE,
    SUBMIT_SCOPE,
    ADMIN_SCOPE,
]
# a training job's $JUPYTERHUB_API_TOKEN, issued by the service for the job's owner when the
# job starts and revoked when it ends: it reaches the service and, there, only its own job
# (docs/service.md, "A job's own token")
JOB_TOKEN_SCOPES = [ACCESS_SCOPE, JOB_SCOPE]
# the frachub service in the Hub API: group membership, server activity, stopping idle
# GPU notebooks, issuing and revoking the jobs' tokens ("tokens"); and in its own API:
# acting for users (the spawner uses its token)
SERVICE_SCOPES = [
    "list:users",
    "read:users",
    "read:users:activity",
    "read:servers",
    "delete:servers",
    "list:groups",
    "read:groups",
    "tokens",
    ACCESS_SCOPE,
    READ_SCOPE,
    SUBMIT_SCOPE,
    ADMIN_SCOPE,
]

# Who the hub grants each FracHub scope to, as FracHub's hub configuration
# (hub_ext/configure.py) sets the roles up: said when a token lacks one, so that a refusal
# blames the credential and names the way to a better one, not the person.
SCOPE_HOLDERS = {
    READ_SCOPE: "every user (the hub's user role)",
    SUBMIT_SCOPE: "every user (the hub's user role)",
    ADMIN_SCOPE: (
        f"FracHub admins (the frachub-admin role: members of the hub group {ADMIN_GROUP} and "
        "the admin_users of FracHub's hub configuration)"
    ),
    JOB_SCOPE: "the token the service issues to each job",
}


def lacking(scope: str, credential: str = "this token", *, admin_group: bool = False) -> str:
    """Why a request was refused ``scope``, in words that blame the credential: the hub
    decides which scopes a token carries, and a user who holds a scope may still send a
    token without it (one made with fewer scopes, a notebook server's token from before the
    hub granted it). ``admin_group``: the user is in the admin group, so a new token would
    carry the admin scope, and the words say how to get one."""
    words = f"{credential} lacks it; the hub grants it to {SCOPE_HOLDERS.get(scope, 'nobody')}"
    if scope == ADMIN_SCOPE and admin_group:
        words += (
            f". You are in {ADMIN_GROUP}, so a new token carries it: restart your notebook "
            "server (its token is made when it starts), log in again, or make a token on the "
            "hub's Token page"
        )
    return words
