"""How the service process runs, apart from scheduling: the heap freezer that keeps garbage
collection off the request path (``heap``), the periodic usage samples (``sampler``), the
memory watchdog's loop (``memory_watch``) and the Prometheus metrics (``metrics``)."""
