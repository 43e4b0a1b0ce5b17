"""The FracHub spawners (arrive with the hub integration)."""
