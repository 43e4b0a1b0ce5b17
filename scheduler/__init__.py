"""FracHub's scheduler: the pure engine, and the drivers that run it (scenarios, trace replay)."""
