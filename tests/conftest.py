"""Shared fixtures: a fresh state directory per test."""

from __future__ import annotations

import gc

import pytest


@pytest.fixture
def state_dir(tmp_path):
    return tmp_path / "state"


# --- a real Postgres (tests/postgres_server.py) -----------------------------------------------


@pytest.fixture(scope="session")
def pg_server():
    """One private PostgreSQL 15 server per test session (fails loudly if it cannot start)."""
    from tests.postgres_server import PostgresServer

    server = PostgresServer(in_memory=True)  # CREATE DATABASE per test: ~10 ms, not ~250
    try:
        server.start()
    except Exception as e:
        server.stop()
        pytest.fail(f"cannot start the test PostgreSQL server: {e}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def pg_dsn(pg_server):
    """DSN of a fresh, empty C-collation database, dropped after the test."""
    name = pg_server.create_database()
    try:
        yield pg_server.dsn_for(name)
    finally:
        pg_server.drop_database(name)


@pytest.fixture
def pg_conn(pg_dsn):
    """An autocommit psycopg connection to the test's fresh database."""
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        yield conn


# --- one SparkSession per test session (engine.spark.session) ---------------------------------


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """The test session's one local[2] SparkSession; Engine(runner="spark") reuses it.
    Population reads run as Spark tasks, as on a cluster (on a local master they would
    otherwise be the local runner's reads, tested everywhere else)."""
    from engine.spark.session import get_spark
    from engine.spark_runner import POPULATION_READS_CONF

    session = get_spark(
        {"spark.master": "local[2]", POPULATION_READS_CONF: "executors"},
        tmp_path_factory.mktemp("spark"),
    )
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


# Randomized oracles and parametrized end-to-end tests of 1-10 s per case: the first case of each stays in the fast inner loop
# (``-m "not slow"``), the others (more seeds, more shapes) run in CI's full suite only.
# Measured with ``--durations`` on the fast suite; a whole heavy test is marked in its file.
HEAVY_ORACLES = frozenset(
    {
        "tests/dataflow/test_distinct_setops.py::test_set_operation_matches_recompute",
        "tests/dataflow/test_distinct_setops.py::test_distinct_matches_recompute",
        "tests/dataflow/columnar/test_columnar_reduce.py::test_columnar_reduce_equals_row_reduce",
        "tests/dataflow/columnar/test_columnar_join.py::test_columnar_join_equals_row_join",
        "tests/dataflow/columnar/test_columnar_join.py::test_numeric_nan_in_keys_and_values",
        "tests/dataflow/test_top_k.py::test_rank_and_dense_rank_keep_ties",
        "tests/dataflow/test_top_k.py::test_global_order_by_limit_offset",
        "tests/dataflow/test_top_k.py::test_per_partition_top_k",
        "tests/dataflow/test_top_k.py::test_row_number_emitted",
        "tests/dataflow/test_window.py::test_every_kind_with_mixed_directions_and_nulls",
        "tests/dataflow/test_window.py::test_every_kind_with_order_by_and_peers",
        "tests/dataflow/test_window.py::test_every_kind_without_order_by_uses_whole_partition",
        "tests/dataflow/test_window.py::test_global_window",
        "tests/dataflow/test_joins.py::test_semi_and_anti_join",
        "tests/dataflow/test_joins.py::test_outer_join",
        "tests/dataflow/test_joins.py::test_inner_join_multi_column_hot_keys",
        "tests/dataflow/test_reduce.py::test_all_aggregates_in_one_reduce_with_filters",
        "tests/dataflow/test_reduce.py::test_min_max_survive_deletes_of_the_current_extreme",
        "tests/dataflow/test_reduce.py::test_global_aggregate_matches_recompute_through_empty_inputs",
        "tests/dataflow/columnar/test_columnar_top_k.py::test_per_partition_top_k_equals_row_top_k",
        "tests/dataflow/columnar/test_columnar_top_k.py::test_global_order_by_limit_equals_row_top_k",
        "tests/dataflow/columnar/test_columnar_top_k.py::test_negative_counts_across_times",
        "tests/dataflow/columnar/test_columnar_distinct.py::test_columnar_distinct_equals_row_distinct",
        "tests/dataflow/columnar/test_columnar_distinct.py::test_numeric_nan_and_values_past_decimal128",
        "tests/dataflow/columnar/test_columnar_join.py::test_outer_join_equals_row_outer_join",
        "tests/dataflow/columnar/test_columnar_join.py::test_semi_join_equals_row_semi_join",
        "tests/dataflow/columnar/test_columnar_join.py::test_hot_keys_move_to_row_entries",
        "tests/dataflow/columnar/test_columnar_join.py::test_residual_and_its_errors",
        "tests/dataflow/columnar/test_columnar_reduce.py::test_columnar_input_equals_row_input",
        "tests/dataflow/columnar/test_columnar_reduce.py::test_numeric_nan_in_group_keys",
        "tests/dataflow/columnar/test_columnar_reduce.py::test_numeric_nan_in_sums",
        "tests/dataflow/columnar/test_columnar_reduce.py::test_min_max_with_numeric_nan_and_infinity",
        "tests/dataflow/test_top_k.py::test_unbounded_and_empty_limits",
        "tests/dataflow/test_restart.py::test_sigkill_and_reopen_equals_uninterrupted_run",
        "tests/postgres/test_sink_arrow.py::test_random_times_leave_the_expected_multiset",
        "tests/postgres/test_sink.py::test_large_apply_streams",
        "tests/reliability/test_internal_errors.py::test_a_lost_or_corrupt_state_directory_repopulates",
    }
)


def pytest_collection_finish(session):
    """Every object the imports and the collection made (the expression corpus, thousands of
    test items) stays for the whole run: frozen out of the garbage collector's generations, so
    that a full collection (``StateStore.close`` runs one) scans only what tests make. Before,
    each close cost ~0.25 s in a worker that had collected the suite."""
    gc.freeze()


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects
def pytest_collection_modifyitems(config, items):
    """Marks ``HEAVY_ORACLES`` cases but the first ``slow``; see ``_group_spark_tests``."""
    seen: set[str] = set()
    for item in items:
        function = item.nodeid.split("[", 1)[0]
        if function in HEAVY_ORACLES:
            if function in seen:
                item.add_marker(pytest.mark.slow)
            seen.add(function)
    _group_spark_tests(config, items)


def _group_spark_tests(config, items):
    """Under pytest-xdist (``scripts/test.sh`` runs ``-n 2 --dist loadgroup``) every test that
    runs Spark goes to one worker: one SparkSession (one JVM) per test run, as without xdist,
    and Spark's timing-bound tests never share the machine with a second in-process JVM."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if "spark" in item.fixturenames or "spark" in item.nodeid.lower():
            item.add_marker(pytest.mark.xdist_group("spark"))
