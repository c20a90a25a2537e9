"""A throwaway PostgreSQL 15 cluster for tests: initdb in a temporary folder, one free loopback port,
trust authentication on loopback, max_prepared_transactions=100, fsync on.

PostgreSQL refuses to run as root, so when the tests run as root (CI) initdb, pg_ctl and the
server run as the `postgres` user (runuser) in a folder that user owns. Use it through the
session-scoped `postgres` fixture (tests/integration/conftest.py does not know about it; modules
that need PostgreSQL import the fixture from here):

    from pg import postgres  # noqa: F401  (the fixture)

    def test_x(postgres):
        postgres.sql("SELECT 1")      # psql over TCP, returns the rows as lists of strings
        postgres.restart()            # pg_ctl restart -m fast (prepared transactions survive)

PG_BIN overrides where the binaries are (default /usr/lib/postgresql/15/bin).
"""

import os
import pwd
import random
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

PG_BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))


def free_port():
    """A free loopback port below the kernel's ephemeral range, for a server that restarts on the
    same port: while it is down, no port-0 listener of another test (nor an outgoing connection
    to it, which could connect to itself) can take a port outside that range."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(200):
        port = random.randint(10000, max(10001, low - 1))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise PostgresError(f"no free port between 10000 and {low}")


class PostgresError(RuntimeError):
    pass


class Postgres:
    """One cluster: start(), stop(), restart(), sql(); close() stops it and removes its folder."""

    def __init__(self, max_prepared=100):
        if not (PG_BIN / "initdb").exists():
            raise PostgresError(f"{PG_BIN}/initdb not found: install postgresql (scripts/setup) or set PG_BIN")
        self.root = Path(tempfile.mkdtemp(prefix="escrow-pg-"))
        self.data = self.root / "data"
        self.log_path = self.root / "server.log"
        self.port = free_port()
        self.max_prepared = max_prepared
        self.running = False
        self.as_pg = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self.as_pg = ["runuser", "-u", "postgres", "--"]
        os.chmod(self.root, 0o700)
        self._run([str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
                   "-E", "UTF8", "--locale=C", "--no-sync"], "initdb")

    def _run(self, cmd, what, timeout=120):
        r = subprocess.run(self.as_pg + cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout, cwd=self.root)
        if r.returncode != 0:
            raise PostgresError(f"{what} failed (exit {r.returncode}): {r.stdout.decode(errors='replace')}\n"
                                f"server log:\n{self.server_log()}")
        return r.stdout.decode(errors="replace")

    def options(self):
        return (f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.root} "
                f"-c max_prepared_transactions={self.max_prepared} -c fsync=on -c synchronous_commit=on "
                f"-c max_connections=100 -c shared_buffers=32MB")

    def start(self):
        self._run([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log_path), "-w", "-t", "60",
                   "-o", self.options(), "start"], "pg_ctl start")
        self.running = True
        return self

    def stop(self, mode="fast"):
        if self.running:
            self._run([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop"],
                      "pg_ctl stop")
            self.running = False

    def restart(self):
        """Stops (fast: open sessions are cut, prepared transactions stay) and starts again."""
        self.stop("fast")
        self.start()

    def conninfo(self, dbname="postgres"):
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname} connect_timeout=10"

    def sql(self, statement, dbname="postgres"):
        """Runs SQL with psql over TCP; returns the rows, each a list of column strings."""
        r = subprocess.run([str(PG_BIN / "psql"), "-X", "-q", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1",
                            "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", dbname,
                            "-c", statement], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        if r.returncode != 0:
            raise PostgresError(f"psql {statement!r} failed: {r.stderr.decode(errors='replace')}")
        out = r.stdout.decode()
        return [line.split("\t") for line in out.splitlines() if line != ""]

    def server_log(self):
        try:
            return self.log_path.read_text(errors="replace")[-20000:]
        except OSError:
            return "(no server log)"

    def close(self):
        try:
            self.stop("fast")
        except Exception:
            try:
                self.stop("immediate")
            except Exception:
                pass
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL cluster for the whole session, stopped and removed at the end."""
    pg = Postgres()
    try:
        pg.start()
        yield pg
    finally:
        pg.close()
