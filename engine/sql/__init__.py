"""The SQL front end: parsing and validation, the typed logical plan, rewrite rules, physical
planning and the scalar expression compiler (``types``, ``expression_compiler``, ``functions``).

It turns a view's SQL into a graph of dataflow collections; it must not execute queries against
Postgres or hold any runtime state.
"""
