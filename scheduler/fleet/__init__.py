"""The fleet over days: FracHub against static GPU allocation on a multi-tenant workload.

Modules, in the order data flows:

* :mod:`~scheduler.fleet.description`: description files (YAML) to typed, validated data;
  :mod:`~scheduler.fleet.presets` holds the built-in ones.
* :mod:`~scheduler.fleet.runtimes`: the real Philly training run times (read, never copied).
* :mod:`~scheduler.fleet.workload`: seeded arrivals of notebooks and training jobs (pure).
* :mod:`~scheduler.fleet.variants`: static, pool, reclaim and frachub as engine
  configuration and request transformations.
* :mod:`~scheduler.fleet.driver`: the scenario runner, extended for days of arrivals,
  checkpoints and sampling.
* :mod:`~scheduler.fleet.metrics`: allocation, waits, evictions and fairness (pure).
* :mod:`~scheduler.fleet.report`: tables, JSON and plots.
* :mod:`~scheduler.fleet.command`: ``frachub simulate fleet``.
"""
