"""The root of the tests: it puts tests/ on the import path (the shared harnesses,
hubharness.py and service_client.py, import as top-level modules) and imports nothing but
pytest, so every level loads only what its own folder's conftest needs: tests/unit runs on
the base install alone.
"""
