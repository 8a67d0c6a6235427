"""incview engine: incremental materialized views over PostgreSQL.

The public API (``Engine``, ``ViewStatus``) arrives with the Postgres slice; today the package
exposes the dataflow core (``engine.dataflow``) and the error classes (``engine.errors``).
"""

from engine.errors import IncviewError, StateError, UnsupportedSQL, ViewError

__all__ = ["IncviewError", "StateError", "UnsupportedSQL", "ViewError"]
