"""Model management: the catalog, downloads and their bookkeeping, the local store, the hardware
probe, the planner, nesting discovery and verification, and the `models` command.

The inference core (the rest of `runtime/`, minus the command line) never imports this package:
the store hands the engine what it needs (a folder, a submodel table) and the core runs it.
`tests/test_store_boundary.py` checks that.
"""
