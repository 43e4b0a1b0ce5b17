"""``frachub up``: JupyterHub with FracHub on this machine, in one command.

It writes two config files into the data directory — ``jupyterhub_config.py`` (the hub, its
proxy, the FracHub spawner, the log-in) and ``frachub_config.py`` (the scheduler service:
projects, the local backend, the GPUs) — from the command line's choices, then runs the hub,
which starts the scheduler as a managed service. Both files are written again on every
start; settings of one's own go in ``jupyterhub_config_extra.py`` and
``frachub_config_extra.py`` beside them, which are loaded last and never touched.

GPUs come from NVML when the NVIDIA driver answers, else from a declared inventory
(``--gpus``, ``--gpu-memory-gib``): the scheduler then shares pretend GPUs, which is enough to
try everything but the GPU itself.

Two ways to log in (``--auth``):

* ``pam`` (the default when run as root, without ``--demo``): the machine's own accounts.
  Notebooks and jobs run as the user's system account, in that account's home; the users are
  the members named in ``--projects`` and the ``--admin`` accounts, and more can be added on
  the hub's admin page. This is the mode for a team (docs/operations.md). It refuses to start
  when one of those accounts (or ``nobody``, standing in for users not named yet) could not
  execute the hub's Python (``reach``).
* ``shared-password`` (``--demo``, or when not run as root): hub-only users with one shared
  password (generated once, kept in the data directory, printed). Servers and jobs run as
  this Unix user, each user's home under ``<data>/home``: no isolation between users, which
  is right for one person's workstation or a demo and wrong for a shared machine; the banner
  and the login page say so.

Operations: the hub's and the service's logs go to ``<data>/hub-logs/`` (rotated) as well as
the terminal; the data directory is private (0700, 0711 with system accounts so that jobs
reach their own directories) with its databases and secrets 0600. A ``frachub up`` started
on a data directory whose previous run was killed stops what that run left behind (hub,
scheduler service, proxy) before starting; notebook servers still running are adopted by the
new hub from its database.
"""
