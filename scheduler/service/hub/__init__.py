"""The service's clients of JupyterHub: its REST API (``hubapi``), who the hub's users and
groups are (``directory``), the per-job API tokens it issues (``jobtokens``) and the poller
that stops idle GPU notebooks (``idle``; its decisions are ``policies.idle_policy``)."""
