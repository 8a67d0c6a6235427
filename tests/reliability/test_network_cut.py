"""Fault: the network between ``incview run`` (both runners) and Postgres is cut silently, then
comes back.

A silent cut (packets dropped, no reset, no ICMP: a firewall, a link or a VM's address gone) is
the outage a client notices last: a socket waiting for an answer waits forever unless TCP
keepalives or a user timeout end it (``engine.postgres.keepalives``). The test puts
``incview run`` in its own network namespace, joined to the test's Postgres by a veth pair, and
takes the namespace's end of the link down while writers keep writing to Postgres directly. The
process must notice (its log says the database is unreachable), keep running, and once the link
is up again every view must equal its query with nothing lost or applied twice.

Needs root with CAP_NET_ADMIN (network namespaces and veth links, as CI's machine has); without
them the test is skipped with the reason.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator

import psycopg
import pytest

from engine import Engine
from tests.postgres_server import PostgresServer
from tests.reliability.incview_process import incview_run
from tests.reliability.test_postgres_restart import (
    VIEWS,
    connect_retrying,
    setup,
    wait_equal,
    write,
)

pytestmark = pytest.mark.slow

DETECT_S = 150  # keepalives end a dead connection in ~25-30 s; a hang never does


class NetworkLink:
    """A network namespace joined to the host by a veth pair, whose link can be cut."""

    def __init__(self) -> None:
        tag = os.getpid() % 10_000
        self.ns = f"incview-cut-{tag}"
        self.host_if, self.ns_if = f"icut{tag}a", f"icut{tag}b"
        subnet = 10 + tag % 240
        self.host_ip, self.ns_ip = f"10.231.{subnet}.1", f"10.231.{subnet}.2"

    def _ip(self, *args: str, in_ns: bool = False) -> None:
        cmd = ["ip", "netns", "exec", self.ns, "ip", *args] if in_ns else ["ip", *args]
        subprocess.run(cmd, check=True, capture_output=True, text=True)

    def create(self) -> None:
        self._ip("netns", "add", self.ns)
        self._ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
        self._ip("link", "set", self.ns_if, "netns", self.ns)
        self._ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
        self._ip("link", "set", self.host_if, "up")
        self._ip("addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if, in_ns=True)
        self._ip("link", "set", self.ns_if, "up", in_ns=True)
        self._ip("link", "set", "lo", "up", in_ns=True)

    def cut(self) -> None:
        """Take the namespace's end down: both directions drop silently (no reset, no ICMP)."""
        self._ip("link", "set", self.ns_if, "down", in_ns=True)

    def restore(self) -> None:
        self._ip("link", "set", self.ns_if, "up", in_ns=True)

    def destroy(self) -> None:
        for cmd in (["ip", "link", "del", self.host_if], ["ip", "netns", "del", self.ns]):
            subprocess.run(cmd, capture_output=True)

    @property
    def prefix(self) -> tuple[str, ...]:
        """Run a command inside the namespace."""
        return ("ip", "netns", "exec", self.ns)


@pytest.fixture(scope="module")
def link() -> Iterator[NetworkLink]:
    if os.geteuid() != 0:
        pytest.skip("a network namespace needs root")
    link = NetworkLink()
    try:
        link.create()
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        link.destroy()
        reason = getattr(e, "stderr", None) or str(e)
        pytest.skip(f"cannot create a network namespace and veth link here: {reason.strip()}")
    yield link
    link.destroy()


@pytest.fixture(scope="module")
def server(link: NetworkLink) -> Iterator[PostgresServer]:
    """A cluster listening on loopback and on the host's end of the link (trust from the
    namespace's address)."""
    srv = PostgresServer(
        settings={
            "synchronous_commit": "on",
            "listen_addresses": f"'127.0.0.1,{link.host_ip}'",
        }
    ).start()
    with open(os.path.join(srv.data_dir, "pg_hba.conf"), "a") as hba:
        hba.write(f"\nhost all all {link.ns_ip}/32 trust\n")
    with srv.connect(autocommit=True) as conn:
        conn.execute("SELECT pg_reload_conf()")
    yield srv
    srv.stop()


@pytest.mark.parametrize("runner", ["local", "spark"])
def test_incview_run_survives_a_silent_network_cut(link, server, tmp_path, runner):
    name = server.create_database("cut")
    try:
        local_dsn = server.dsn_for(name)
        remote_dsn = f"host={link.host_ip} port={server.port} user=pgtester dbname={name}"
        rng = random.Random(11)
        setup(local_dsn)
        state = tmp_path / "state"
        with Engine(local_dsn, state, runner="local") as eng:
            for view, sql in VIEWS.items():
                eng.create_view(view, sql)
        next_id = [1000]
        log = tmp_path / "run.log"
        with incview_run(remote_dsn, state, log, runner=runner, prefix=link.prefix) as proc:
            with connect_retrying(local_dsn) as conn:
                write(conn, rng, next_id)
            wait_equal(local_dsn, timeout_s=180)
            for _ in range(2 if runner == "local" else 1):  # one JVM restart's worth on Spark
                noticed_before = log.read_text().count("the database is unreachable")
                link.cut()
                try:
                    with psycopg.connect(local_dsn, autocommit=True) as conn:
                        write(conn, rng, next_id, n=10)
                    start = time.monotonic()
                    while log.read_text().count("the database is unreachable") <= noticed_before:
                        assert proc.poll() is None, f"incview run exited:\n{log.read_text()}"
                        assert time.monotonic() - start < DETECT_S, (
                            f"incview run did not notice the cut within {DETECT_S} s:\n"
                            f"{log.read_text()[-3000:]}"
                        )
                        time.sleep(0.5)
                finally:
                    link.restore()
                with psycopg.connect(local_dsn, autocommit=True) as conn:
                    write(conn, rng, next_id)
                wait_equal(local_dsn, timeout_s=120)
                assert proc.poll() is None, log.read_text()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0, log.read_text()
    finally:
        server.drop_database(name)
