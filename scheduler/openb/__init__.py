"""Replay of the Alibaba openb GPU-sharing trace (the FGD paper's benchmark).

Modules, in the order data flows:

* :mod:`~scheduler.openb.trace`: CSV files to typed ``Node``/``Pod`` records.
* :mod:`~scheduler.openb.fastfrag`: FGD's fragmentation measure (defined once, in
  :mod:`scheduler.engine.fragmentation`) vectorised and memoised.
* :mod:`~scheduler.openb.cluster`: the replay's free-resource arrays.
* :mod:`~scheduler.openb.policies`: placement scorers by name (``POLICIES``).
* :mod:`~scheduler.openb.replay`: the paper's replay loop and its metrics.
* :mod:`~scheduler.openb.command`: ``frachub simulate openb``.
"""
