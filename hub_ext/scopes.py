"""Names and permissions shared by the hub configuration, the spawner and the service.

JupyterHub grants permissions through roles made of scopes. FracHub defines three custom
scopes and says here, once, which identity needs which scopes: every user (to use the panel,
the magics and the CLI), a notebook server's own token (so the magics act as its user), and
the ``frachub`` service itself (to learn group membership, watch server activity and stop
idle GPU notebooks).
"""

from __future__ import annotations

SERVICE_NAME = "frachub"
SERVICE_PREFIX = f"/services/{SERVICE_NAME}/"
API_PATH = "api/v1/"  # the service's REST API, under SERVICE_PREFIX
ACCESS_SCOPE = f"access:services!service={SERVICE_NAME}"
READ_SCOPE = "custom:frachub:read"
SUBMIT_SCOPE = "custom:frachub:submit"
ADMIN_SCOPE = "custom:frachub:admin"
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
}
# every user: their own things in the hub, plus the service
USER_SCOPES = ["self", ACCESS_SCOPE, READ_SCOPE, SUBMIT_SCOPE]
ADMIN_SCOPES = [ACCESS_SCOPE, READ_SCOPE, SUBMIT_SCOPE, ADMIN_SCOPE]
# a notebook server's $JUPYTERHUB_API_TOKEN: JupyterHub's defaults plus what the magics need
SERVER_TOKEN_SCOPES = [
    "access:servers!server",
    "users:activity!user",
    ACCESS_SCOPE,
    READ_SCOPE,
    SUBMIT_SCOPE,
]
# the frachub service in the Hub API: group membership, server activity, stopping idle
# GPU notebooks; and in its own API: acting for users (the spawner uses its token)
SERVICE_SCOPES = [
    "list:users",
    "read:users",
    "read:users:activity",
    "read:servers",
    "delete:servers",
    "list:groups",
    "read:groups",
    ACCESS_SCOPE,
    READ_SCOPE,
    SUBMIT_SCOPE,
    ADMIN_SCOPE,
]
