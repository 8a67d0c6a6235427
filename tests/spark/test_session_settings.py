"""``engine.spark.session.session_settings``: incview's Spark defaults merged with the user's
conf, and the Python daemon kept exactly where Spark tasks run Python (no session started)."""

from __future__ import annotations

import pytest

from engine.spark.session import CDC_READS_CONF, POPULATION_READS_CONF, session_settings

DAEMON = "spark.python.use.daemon"


@pytest.mark.parametrize(
    ("conf", "daemon"),
    [
        ({"spark.master": "local[2]"}, "false"),  # reads on the driver: no task runs Python
        ({"spark.master": "local[*]", CDC_READS_CONF: "driver"}, "false"),
        ({"spark.master": "local[2]", POPULATION_READS_CONF: "executors"}, None),
        ({"spark.master": "local[2]", CDC_READS_CONF: "executors"}, None),
        ({"spark.master": "spark://127.0.0.1:7077"}, None),  # a cluster: tasks read
        ({"spark.master": "local[2]", DAEMON: "true"}, "true"),  # the user's word wins
    ],
)
def test_python_daemon_only_where_tasks_run_python(tmp_path, conf, daemon):
    settings = session_settings(tmp_path, conf)
    assert settings.get(DAEMON) == daemon
    assert settings["spark.master"] == conf["spark.master"]
    assert settings["spark.ui.enabled"] == "false"  # incview's defaults stay under the conf


def test_only_the_driver_gets_the_small_heap(tmp_path):
    """The driver JVM (with reads on the driver, no data lives in it) starts its heap small and
    gives freed memory back; executors, which read and hold data on a cluster, keep Spark's."""
    settings = session_settings(tmp_path, {"spark.master": "spark://127.0.0.1:7077"})
    driver = settings["spark.driver.extraJavaOptions"].split()
    executor = settings["spark.executor.extraJavaOptions"].split()
    assert "-Xms16m" in driver and "-XX:MaxHeapFreeRatio=20" in driver
    assert not any(o.startswith(("-Xms", "-XX:MaxHeapFreeRatio")) for o in executor)
    assert "-XX:+UseSerialGC" in driver and "-XX:+UseSerialGC" in executor
