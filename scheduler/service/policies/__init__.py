"""Pure decisions the service makes around the engine, no I/O: which of a cycle's decisions
still hold (``decisions``), when an idle notebook is warned and stopped (``idle_policy``),
what a workload holding more GPU memory than its share gets (``memory_watch``), and how a
sweep expands and how many of its jobs run at once (``sweeps``). What a dry run would do is
the engine's own decision: ``scheduler/engine/dryrun.py``."""
