"""JupyterHub-side glue for FracHub: the ``frachub`` command and, later, the hub helpers."""
