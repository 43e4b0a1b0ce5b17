"""Replay of the Alibaba openb GPU-sharing trace (the FGD paper's benchmark).

Modules, in the order data flows:

* :mod:`~scheduler.openb.trace`: CSV files to typed ``Node``/``Pod`` records.
* :mod:`~scheduler.openb.fragmentation`: FGD's fragmentation measure, pure; the
  one definition the engine shares.
* :mod:`~scheduler.openb.fastfrag`: the same measure vectorised and memoised.
* :mod:`~scheduler.openb.cluster`: the replay's free-resource arrays.
* :mod:`~scheduler.openb.policies`: placement scorers by name (``POLICIES``).
* :mod:`~scheduler.openb.replay`: the paper's replay loop and its metrics.
* :mod:`~scheduler.openb.command`: ``frachub simulate openb``.
"""
