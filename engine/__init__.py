"""incview engine: incremental materialized views over PostgreSQL.

The public face, as README and the architecture's contract name it::

    from engine import Engine, ViewStatus, IncviewError, UnsupportedSQL, ViewError

``Engine`` (and ``ViewStatus``, ``split_view_name``) load on first use, so that importing a
submodule (``engine.dataflow``, ``engine.errors``) does not import the whole engine.
"""

from engine.errors import IncviewError, SourceChanged, StateError, UnsupportedSQL, ViewError

__all__ = [
    "Engine",
    "IncviewError",
    "SourceChanged",
    "StateError",
    "UnsupportedSQL",
    "ViewError",
    "ViewStatus",
    "split_view_name",
]

_LAZY = {"Engine", "ViewStatus", "split_view_name"}


def __getattr__(name: str):
    if name in _LAZY:
        from engine import engine as _engine_module

        return getattr(_engine_module, name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
