"""Shared fixtures: a fresh state directory per test."""

from __future__ import annotations

import pytest


@pytest.fixture
def state_dir(tmp_path):
    return tmp_path / "state"


# --- a real Postgres (tests/postgres_server.py) -----------------------------------------------


@pytest.fixture(scope="session")
def pg_server():
    """One private PostgreSQL 15 server per test session (fails loudly if it cannot start)."""
    from tests.postgres_server import PostgresServer

    server = PostgresServer()
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
    """The test session's one local[2] SparkSession; Engine(runner="spark") reuses it."""
    from engine.spark.session import get_spark

    session = get_spark({"spark.master": "local[2]"}, tmp_path_factory.mktemp("spark"))
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``scripts/test.sh`` runs ``-n 2 --dist loadgroup``) every test that
    runs Spark goes to one worker: one SparkSession (one JVM) per test run, as without xdist,
    and Spark's timing-bound tests never share the machine with a second in-process JVM."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if "spark" in item.fixturenames or "spark" in item.nodeid.lower():
            item.add_marker(pytest.mark.xdist_group("spark"))
