"""Names and defaults the engine's modules share: the slot and publication, population times.

Kept apart so that ``engine.engine`` and the modules it is assembled from (``view_runtime``,
``applying``, ``recovery``, ``spark_runner``) import them without importing each other.
"""

from __future__ import annotations

SLOT = "incview_slot"
PUBLICATION = "incview_pub"
POPULATION_TIME = 1
# changes per poll of the slot: every peek decodes the WAL from the slot's restart point, so
# fewer, larger polls cost less (a transaction always comes whole, however large)
POLL_CHANGES = 100_000
# diffs of one source transaction held in memory at once (CDC buffering, a time's buffered input,
# the sink's consolidator); past it they go to disk (docs/reliability.md, huge transactions).
# Engine(max_buffered_changes=...) or this environment variable; 0: no bound
MAX_BUFFERED_CHANGES = 100_000
MAX_BUFFERED_CHANGES_ENV = "INCVIEW_MAX_BUFFERED_CHANGES"
# source rows per population time (bounds memory). Measured at TPC-H SF 0.1 (2026-11-26), all
# 11 views: 200k -> 100k rows cut the engine's peak RSS (Q18's population) 958/963 -> 896/889 MB
# at the same population time (19.1/19.3 vs 23.4/18.3 s, noise); 50k rows cut more but made
# population ~15% slower (groups touched by many chunks are read, rewritten and retracted in the
# sink per chunk)
POPULATION_CHUNK = 100_000
# ... except for a source table estimated under SMALL_TABLE_ROWS rows: SMALL_TABLE_CHUNK rows a
# time, so a key of a join on an unclustered column (orders by o_custkey) is read and rewritten
# in fewer times. Measured at TPC-H SF 1 (2026-11-26, quiet): orders and customer at 400k rows
# cut population Q13 8.9 -> 4.6 s, Q3 9.8 -> 7.6 s, Q22 2.5 -> 1.4 s, the others within noise;
# 400k rows for lineitem too made Q1, Q5 and Q18 slower (4.3 -> 4.9, 9.5 -> 10.8, 11.3 -> 12.8 s)
# and raised their peak RSS by 300-330 MB; the whole of orders in one time put Q18 at 1.7 GB
SMALL_TABLE_ROWS = 2_000_000
SMALL_TABLE_CHUNK = 400_000
ADVANCE_EVERY_S = 0.5  # Spark: the slot advances at most this often
REPOPULATE_MARKER = "repopulating"  # file in a view's dir while it is re-populated
SOURCES_FILE = "sources.json"  # the columns of its sources a view reads (engine.source_schema)
# the partitions and inheritance children below each source, as the last population read them
TREE_FILE = "tree.json"
