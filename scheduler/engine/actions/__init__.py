"""The cycle's actions: start, consolidate, reclaim, preempt (docs/scheduling.md, rules 3-7).

Each action works on a ``Session`` and tries one pending workload at a time on the ledger,
keeping an attempt only if the workload starts. ``allocate.try_start`` uses idle capacity
only; the three others evict or move running work, and run only for a workload that
``try_start`` could not place, at its turn in service order. ``cycle`` says in which order.

    order        pending work in service order (rule 7)
    quota        the quota check every action makes (rule 3)
    allocate     start on idle capacity
    consolidate  move running work so that scattered free capacity comes together (rule 6)
    reclaim      take back from queues above their fair share (rule 4, across queues)
    preempt      evict lower-priority work of the claimant's own queue (rule 4, inside it)
    victims      the victim search reclaim and preempt share: candidates, loss bounds, the trial
"""
