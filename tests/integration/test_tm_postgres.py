"""Two-phase commit of Escrow and PostgreSQL by our test transaction manager (tests/tm, escrow-tm),
through escrow_xa_switch and libpq: take an order from a queue, insert its row, send a
confirmation, all or nothing, while escrowd is SIGKILLed, the manager is SIGKILLed and PostgreSQL
restarts at the named points of two-phase commit (tests/tm/crash_points.h). Afterwards every order
is there exactly once: rows == orders consumed == confirmations, nothing left in the input queue,
no prepared branch in either resource.

PostgreSQL is a throwaway cluster (pg.py) started once per session. escrow-tm is found next to the
broker's build (build/broker/escrowd -> build/tests/tm/escrow-tm) or in ESCROW_TM; under
ESCROW_SANITIZED=1 the normal build's escrow-tm is used when it exists (the point of that run is
the sanitized broker). ESCROW_TM_ORDERS overrides the number of orders (1000).
"""

import os
import queue as queue_module
import subprocess
import threading
import time

import pytest

from conftest import SLOW, consume_all, tool, unique
from pg import free_port, postgres  # noqa: F401  (postgres: the session fixture)


TM = tool("tests/tm/escrow-tm", "ESCROW_TM")
ORDERS = int(os.environ.get("ESCROW_TM_ORDERS", "1000"))
# A branch lives a few round trips from start to prepare, even on a sanitized broker; while a
# resource is down, the manager rolls back at once rather than wait with a branch open.
BRANCH_TIMEOUT_MS = 3000
# A worker stops when no order came for this long: longer than the branch timeout, so that orders
# held by a crashed manager's unprepared branches are back before the last run ends.
IDLE_EXIT_MS = BRANCH_TIMEOUT_MS + int(2000 * SLOW)
RMID = 1


def switch_trailer(resource, branch=""):
    """The 5 bytes escrow_xa_switch appends to a bqual, in hex (docs/xa.md, "Branch identity"):
    0xe6 and FNV-1a (32 bits) of the resource name, a NUL and the branch qualifier."""
    h = 2166136261
    for byte in resource.encode() + b"\0" + branch.encode():
        h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
    return "e6%08x" % h


@pytest.fixture(autouse=True)
def need_tm():
    if not os.path.exists(TM):
        pytest.fail(f"{TM} not found: build it (ninja -C build tests/tm/escrow-tm) or set ESCROW_TM")


class Setup:
    """One test's broker (on a fixed port, so the manager's open string survives restarts), its
    own PostgreSQL database, queues and decision log."""

    def __init__(self, broker_factory, pg, tmp_path):
        self.port = free_port()
        # A manager that dies before prepare leaves its branches idle (or rollback-only) in the
        # broker, holding the orders they consumed, until the broker's transaction timeout rolls
        # them back (nobody else may: docs/xa.md, "When the manager dies"). Keep it short here.
        self.broker = broker_factory(config=f"[transactions]\ntimeout-ms = {BRANCH_TIMEOUT_MS}\n", listen=False,
                                     args=["--listen", f"127.0.0.1:{self.port}"])
        self.pg = pg
        self.db = unique("tm").replace("-", "_")
        pg.sql(f"CREATE DATABASE {self.db}")
        self.input = f"/queue/{unique('orders')}"
        self.output = f"/queue/{unique('confirmations')}"
        self.log = tmp_path / "tm.log"
        self.tm_output = tmp_path / "tm-output.txt"
        self.runs = []  # (args, exit status, stdout lines, stderr text)

    def sql(self, statement):
        return self.pg.sql(statement, dbname=self.db)

    def tm_command(self, *extra, threads=4):
        return [TM, "--escrow", f"host=127.0.0.1 port={self.port} timeout={int(10000 * SLOW)}",
                "--pg", self.pg.conninfo(self.db), "--log", str(self.log), "--threads", str(threads),
                "--input", self.input, "--output", self.output, "--idle-exit-ms", str(IDLE_EXIT_MS),
                *map(str, extra)]

    def run_tm(self, *extra, threads=4, on_pause=None, timeout=None):
        """Runs escrow-tm to its end; on_pause(point, n) is called for each "paused POINT N" line
        (the manager waits until it returns). Returns (exit status, stdout lines)."""
        cmd = self.tm_command(*extra, threads=threads)
        err = open(self.tm_output, "ab")
        err.write(f"\n=== {' '.join(cmd)}\n".encode())
        err.flush()
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        lines = queue_module.Queue()

        def read():
            for raw in iter(p.stdout.readline, b""):
                lines.put(raw.decode(errors="replace").rstrip("\n"))
            lines.put(None)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        out = []
        deadline = time.monotonic() + (timeout or 120 * SLOW)
        try:
            while True:
                left = deadline - time.monotonic()
                assert left > 0, f"escrow-tm did not finish in time; output so far {out}\n{self.tm_log()}"
                try:
                    line = lines.get(timeout=left)
                except queue_module.Empty:
                    continue
                if line is None:
                    break
                out.append(line)
                if line.startswith("paused "):
                    _, point, n = line.split()
                    if on_pause:
                        on_pause(point, int(n))
                    p.stdin.write(b"go\n")
                    p.stdin.flush()
            p.wait(timeout=max(1, deadline - time.monotonic()))
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            err.close()
        self.runs.append((extra, p.returncode, out))
        return p.returncode, out

    def tm_log(self):
        try:
            return self.tm_output.read_text(errors="replace")[-20000:]
        except OSError:
            return ""

    def load_orders(self, client, n):
        for i in range(n):
            client.send(self.input, f"order {i}", headers={"order-id": f"order-{i:05d}", "persistent": "true"},
                        receipt=(i == n - 1))

    def escrow_prepared(self, client):
        r = client.xa("RECOVER", None, "TMSTARTRSCAN|TMENDRSCAN", count=100000)
        assert r.result == "XA_OK", r
        return r.xids

    def pg_prepared(self):
        return [row[0] for row in self.sql("SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")]

    def rows(self):
        if not self.sql("SELECT to_regclass('orders') IS NOT NULL")[0][0] == "t":
            return []
        return [row[0] for row in self.sql("SELECT id FROM orders ORDER BY id")]


def status(line_prefix, lines):
    for line in lines:
        if line.startswith(line_prefix):
            return dict(kv.split("=") for kv in line.split()[1:])
    return None


def check_exactly_once(s, client_factory, expected_ids):
    """rows == consumed orders == confirmations == expected, nothing prepared or left over."""
    c = client_factory(s.broker)
    assert s.escrow_prepared(c) == [], "prepared branches left in escrowd"
    assert s.pg_prepared() == [], "prepared transactions left in PostgreSQL"
    rows = s.rows()
    assert len(rows) == len(set(rows)) == len(expected_ids), f"{len(rows)} rows for {len(expected_ids)} orders"
    assert set(rows) == set(expected_ids), f"missing rows: {sorted(set(expected_ids) - set(rows))[:10]}"
    confirmations = consume_all(s.broker, s.output)
    ids = [m.headers.get("order-id") for m in confirmations]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    assert not duplicates, f"confirmed twice: {duplicates[:10]}"
    assert set(ids) == set(expected_ids), \
        f"{len(ids)} confirmations; missing {sorted(set(expected_ids) - set(ids))[:10]}"
    left = consume_all(s.broker, s.input)
    assert left == [], f"{len(left)} orders left in {s.input}"
    assert "DUPLICATE" not in s.tm_log()


@pytest.fixture
def setup(broker_factory, postgres, tmp_path):  # noqa: F811
    return Setup(broker_factory, postgres, tmp_path)


def test_one_phase_commit_when_only_escrow_works(setup, stomp_client):
    """--no-db: only Escrow does work, so the manager commits with TMONEPHASE and logs nothing."""
    p = stomp_client(setup.broker)
    setup.load_orders(p, 20)
    rc, out = setup.run_tm("--no-db", threads=2)
    assert rc == 0, setup.tm_log()
    assert status("finished", out) == {"committed": "20", "rolled_back": "0"}, out
    assert setup.log.stat().st_size == 0, "a one-phase commit wrote to the decision log"
    c = stomp_client(setup.broker)
    assert len(consume_all(setup.broker, setup.output)) == 20
    assert setup.escrow_prepared(c) == []


@pytest.mark.parametrize("point, recovered", [
    ("before-prepare", {"committed": "0", "rolled_back": "0"}),     # nothing prepared anywhere
    ("between-prepares", {"committed": "0", "rolled_back": "1"}),   # Escrow prepared, no decision
    ("after-log", {"committed": "2", "rolled_back": "0"}),          # both prepared, decision logged
    ("during-commit", {"committed": "1", "rolled_back": "0"}),      # PostgreSQL committed, Escrow not
])
def test_manager_crash_at_each_point_is_recovered(setup, stomp_client, point, recovered):
    """One worker, the manager SIGKILLs itself at the first transaction reaching `point`; the next
    start recovers exactly what the log and presumed abort say, then finishes the orders."""
    p = stomp_client(setup.broker)
    setup.load_orders(p, 5)
    rc, out = setup.run_tm("--crash-at", f"{point}:1", threads=1)
    assert rc == -9, f"escrow-tm exited {rc}, expected SIGKILL at {point}\n{setup.tm_log()}"
    c = stomp_client(setup.broker)
    escrow = setup.escrow_prepared(c)
    pg = setup.pg_prepared()
    # What each point leaves prepared (tests/tm/crash_points.h): Escrow prepares first, PostgreSQL
    # second, and PostgreSQL commits first.
    escrow_prepared, pg_prepared = {"before-prepare": (0, 0), "between-prepares": (1, 0), "after-log": (1, 1),
                                    "during-commit": (1, 0)}[point]
    assert len(escrow) == escrow_prepared, escrow
    assert len(pg) == pg_prepared, pg
    if point == "after-log":
        # The broker's xid is the manager's XID with the switch's trailer on the bqual: what an
        # operator matches against the gid. The open string has no login and no resource=: the
        # resource is "default".
        assert escrow[0] == pg[0] + switch_trailer("default"), (escrow, pg)
    rc, out = setup.run_tm(threads=1)
    assert rc == 0, setup.tm_log()
    assert status("recovered", out) == recovered, out
    check_exactly_once(setup, stomp_client, [f"order-{i:05d}" for i in range(5)])


def test_recovery_under_another_rmid_finds_and_commits(setup, stomp_client):
    """The manager prepares under rmid 1 and dies after logging its decision; it comes back with
    its resource managers renumbered (Escrow is rmid 0 now): recovery still finds the prepared
    branch (its identity is the resource, not the rmid) and commits it, then finishes the orders."""
    p = stomp_client(setup.broker)
    setup.load_orders(p, 3)
    rc, out = setup.run_tm("--rmid", 1, "--crash-at", "after-log:1", threads=1)
    assert rc == -9, f"escrow-tm exited {rc}, expected SIGKILL at after-log\n{setup.tm_log()}"
    assert len(setup.escrow_prepared(stomp_client(setup.broker))) == 1
    rc, out = setup.run_tm("--rmid", 0, threads=1)
    assert rc == 0, setup.tm_log()
    assert status("recovered", out) == {"committed": "2", "rolled_back": "0"}, out
    check_exactly_once(setup, stomp_client, [f"order-{i:05d}" for i in range(3)])


def test_manager_started_before_the_broker_waits_for_it(setup, stomp_client):
    """The broker is stopped when the manager starts: its xa_open (recovery, on the main thread)
    answers XAER_RMERR, which it retries, as managers do, until the broker is back; then XA_OK on
    the same thread, and the orders go through."""
    p = stomp_client(setup.broker)
    setup.load_orders(p, 5)
    p.close()
    assert setup.broker.terminate() == 0

    def start_when_refused():
        deadline = time.monotonic() + 60 * SLOW
        while "XAER_RMERR" not in setup.tm_log() and time.monotonic() < deadline:
            time.sleep(0.05)
        setup.broker.start()

    starter = threading.Thread(target=start_when_refused, daemon=True)
    starter.start()
    rc, out = setup.run_tm("--no-db", "--retry-seconds", 90, threads=1)
    starter.join(60 * SLOW)
    assert rc == 0, setup.tm_log()
    log = setup.tm_log()
    assert "xa_open on rmid 1: XAER_RMERR" in log, log
    assert "XAER_RMFAIL" not in log, log
    assert status("finished", out) == {"committed": "5", "rolled_back": "0"}, out


def test_thousand_orders_through_every_crash(setup, stomp_client):
    """ORDERS orders, four workers. The manager is SIGKILLed at each of the four points (four
    runs); then one run in which escrowd is SIGKILLed at each of the four points (the manager
    paused there, resumed while the broker is down, the broker restarted) and PostgreSQL is
    restarted once with a transaction prepared and decided; that run finishes the orders."""
    started = time.monotonic()
    p = stomp_client(setup.broker)
    setup.load_orders(p, ORDERS)
    p.close()
    step = max(10, ORDERS // 20)
    crash_runs = 0
    for i, point in enumerate(["before-prepare", "between-prepares", "after-log", "during-commit"]):
        rc, out = setup.run_tm("--crash-at", f"{point}:{step}")
        assert rc == -9, f"escrow-tm exited {rc}, expected SIGKILL at {point}\n{setup.tm_log()}"
        crash_runs += 1

    events = []

    def on_pause(point, n):
        if point == "after-log" and n == 5 * step:
            setup.pg.restart()  # the decided transaction's PREPARE must survive it
            events.append(("postgres restarted", point, n))
            return
        setup.broker.kill9()
        events.append(("escrowd killed", point, n))

        def start_later():  # the manager runs into the dead broker first, then it comes back
            time.sleep(0.5)
            setup.broker.start()

        threading.Thread(target=start_later, daemon=True).start()
        time.sleep(0.05)

    pauses = []
    for k, point in enumerate(["before-prepare", "between-prepares", "after-log", "during-commit"]):
        pauses += ["--pause-at", f"{point}:{(k + 1) * step}"]
    pauses += ["--pause-at", f"after-log:{5 * step}"]
    rc, out = setup.run_tm(*pauses, on_pause=on_pause, timeout=240 * SLOW)
    assert rc == 0, f"escrow-tm exited {rc}\n{setup.tm_log()}"
    assert len(events) == 5, f"{events}; escrow-tm said {out}"
    while not setup.broker.running():
        time.sleep(0.1)
    # A last start: recovery has nothing left to do.
    rc, out = setup.run_tm("--recover-only")
    assert rc == 0 and status("recovered", out) == {"committed": "0", "rolled_back": "0"}, out
    check_exactly_once(setup, stomp_client, [f"order-{i:05d}" for i in range(ORDERS)])
    print(f"{ORDERS} orders, {crash_runs} manager crashes, {len(events)} pauses: "
          f"{time.monotonic() - started:.1f} s; events {events}")
