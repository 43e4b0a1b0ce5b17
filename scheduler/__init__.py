"""FracHub's scheduler: the pure engine, and the drivers that run it (scenarios, trace replay,
the service)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("frachub")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
