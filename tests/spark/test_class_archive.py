"""``engine.spark.class_archive``: which flags a driver gets, and how a written archive is adopted.

(The speed-up itself, a real JVM mapping the archive, is what every Spark test's session start
does; the figures are in the module docstring.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from engine.spark import class_archive
from engine.spark.session import find_java_home


def test_writes_then_maps_one_archive_and_never_a_half_written_one(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    java = find_java_home(tmp_path)
    first = class_archive.driver_options(java)
    assert "-XX:ArchiveClassesAtExit=" in first
    written = first.split("-XX:ArchiveClassesAtExit=")[1].split()[0]
    assert written.endswith(f".{os.getpid()}")
    # while this process lives (it may still write), nobody else writes or maps one
    with open(written, "wb") as f:
        f.write(b"x" * class_archive.MIN_BYTES)
    assert class_archive.driver_options(java) == ""
    # a finished writer (its process ended, the file settled) becomes the archive
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    finished = written.rsplit(".", 1)[0] + "." + dead.stdout.strip()
    os.rename(written, finished)
    old = time.time() - 60
    os.utime(finished, (old, old))
    mapped = class_archive.driver_options(java)
    archive = written.rsplit(".", 1)[0]
    assert mapped.startswith(f"-XX:SharedArchiveFile={archive} -Xshare:auto")
    assert sorted(p.name for p in (tmp_path / "incview" / "spark-cds").iterdir()) == [
        os.path.basename(archive)
    ]


def test_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("INCVIEW_SPARK_CDS", "0")
    assert class_archive.driver_options(find_java_home(tmp_path)) == ""
