"""incview engine: incremental materialized views over PostgreSQL.

The public face, as README and the architecture's contract name it::

    from engine import Engine, ViewStatus, IncviewError, UnsupportedSQL, ViewError

and what the Dagster integration (``incview_dagster``) and other tools built on the engine need,
so that they never reach into ``engine.postgres``, ``engine.spark`` or ``engine.sql``:
``ViewRecord`` and ``view_records(conn)`` (the catalog ``incview.views``), ``lsn_text`` (an LSN
as Postgres writes it), ``EmbeddedPostgres`` (the private server of the embedded default),
``spark_session`` (incview's configured SparkSession), ``parse_query`` (a view's SQL as
sqlglot's tree, with incview's checks) and ``install_schema(dsn)`` (the ``incview`` schema with
its SQL procedures, ``CALL incview.create_view``: ``engine.commander``) and ``MEMORY_MB_ENV``
(the environment variable of ``Engine(memory_mb=...)``, for processes launched with a budget).

Everything but the error classes loads on first use, so that importing a submodule
(``engine.dataflow``, ``engine.errors``) does not import the whole engine.
"""

from engine.errors import IncviewError, SourceChanged, StateError, UnsupportedSQL, ViewError

__all__ = [
    "EmbeddedPostgres",
    "Engine",
    "IncviewError",
    "MEMORY_MB_ENV",
    "SourceChanged",
    "StateError",
    "UnsupportedSQL",
    "ViewError",
    "ViewRecord",
    "ViewStatus",
    "install_schema",
    "lsn_text",
    "parse_query",
    "spark_session",
    "split_view_name",
    "view_records",
]

# public name -> (module, name there)
_LAZY = {
    "Engine": ("engine.engine", "Engine"),
    "ViewStatus": ("engine.engine", "ViewStatus"),
    "split_view_name": ("engine.engine", "split_view_name"),
    "ViewRecord": ("engine.postgres.view_catalog", "ViewRecord"),
    "view_records": ("engine.postgres.view_catalog", "view_records"),
    "lsn_text": ("engine.postgres.view_catalog", "int_to_lsn"),
    "install_schema": ("engine.commander", "install"),
    "EmbeddedPostgres": ("engine.postgres.embedded", "EmbeddedPostgres"),
    "spark_session": ("engine.spark.session", "get_spark"),
    "parse_query": ("engine.sql.parse", "parse_query"),
    "MEMORY_MB_ENV": ("engine.memory_setting", "MEMORY_MB_ENV"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
