"""The ``frachub`` command and its hub-side commands: ``main`` wires the argparse tree;
``jobs`` (submit, jobs, describe, logs, cancel, quota), ``up`` (JupyterHub + FracHub on this
machine), ``backup``/``restore`` and ``helm_values`` are the commands. The top layer of the
hub side: it imports the engine, the service and the simulators only inside the commands
that drive them (``tests/unit/test_layers.py``)."""
