"""Replay of the Alibaba openb GPU-sharing trace (the FGD paper's benchmark).

Modules, in the order data flows:

* :mod:`~scheduler.openb.trace`: CSV files to typed ``Node``/``Pod`` records.
* :mod:`~scheduler.openb.cluster`: the replay's free-resource arrays.
* :mod:`~scheduler.openb.policies`: placement policies by name (``POLICIES``): the
  paper's baselines, and the engine's own ``pack`` and ``frachub`` scorers driven on an
  engine ledger.
* :mod:`~scheduler.openb.replay`: the paper's replay loop and its metrics.
* :mod:`~scheduler.openb.command`: ``frachub simulate openb``.
"""
