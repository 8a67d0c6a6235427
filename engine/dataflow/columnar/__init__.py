"""The columnar core: diffs as Arrow columns, pure array kernels, batch-wise state.

``arrow_types`` maps incview's SQL types onto Arrow types and converts tuple rows to columns and
back; ``kernels`` holds pure functions over arrays (grouping, key encoding, exact 128-bit sums),
each checked against a row-at-a-time reference in tests/dataflow/columnar; ``group_table`` keeps
per-group fixed-width accumulators in a collection's column family with a bounded in-memory cache.
Collections that use them live in ``engine.dataflow.collections`` like every other collection.
This package must not know about SQL text, plans or Postgres.
"""
