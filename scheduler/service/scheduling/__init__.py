"""The scheduling loop, the only place in the service that runs the engine (``loop``), and
its parts: the active rows and their indexes (``roster``), carrying out the lifecycle's
effects on the store and the backend (``effects``), the fast arrival path (``arrivals``), the
group commit of submissions (``submissions``) and milestones in a job's log (``joblog``)."""
