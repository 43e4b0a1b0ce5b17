"""Unit tests of the parts that need an extra's packages: the service's modules (tornado,
SQLAlchemy, traitlets, JupyterHub's), the spawners' (KubeSpawner) and the magics (IPython).
Like tests/unit they are pure or in-process (no hub, no proxy, no network); unlike
tests/unit, which runs on the base install alone, they need ``pip install -e .[hub]``
(the test extra holds it).
"""
