"""TPC-H benchmark of incview against ``REFRESH MATERIALIZED VIEW`` and ``CREATE TABLE AS``.

``python -m bench.tpch`` (see ``__main__``): data (``datagen``, ``load``, ``schema``), the views
(``queries``), the refresh streams (``streams``, ``writer``), the measurements (``benchmark``,
``scaling``, ``phase_times``, ``process_memory``) and the output (``report``). docs/benchmarks.md
explains the method and holds the figures. Engine code must not import this package.
"""
