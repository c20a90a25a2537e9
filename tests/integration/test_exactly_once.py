"""Exactly-once processing with escrowd coordinating PostgreSQL itself, no transaction manager
([[coordinator.postgresql]], broker/core/coordination.cpp): a worker takes an order from a queue,
BEGINs a STOMP transaction with `coordinate:postgresql/orders` (its RECEIPT carries the pg-gid),
ACKs the order and SENDs a confirmation in it, INSERTs the order's row and ends its SQL transaction
with PREPARE TRANSACTION 'pg-gid', then COMMITs: the broker checks the gid is prepared, writes its
decision in the batch that commits the acknowledgement and the confirmation, runs COMMIT PREPARED,
and answers `database:committed`. Everything else (ABORT, a lost connection, a timeout, a refused
COMMIT, a crash before the decision) rolls both sides back, and the broker's recovery pass (at start
and every coordinator.recovery-interval-ms) commits what it decided and rolls back the rest of its
own gids (presumed abort).

The order id is the table's primary key: an order done twice fails its INSERT loudly, which is the
exactly-once check (besides rows == orders consumed == confirmations, each once). A worker whose
COMMIT got no RECEIPT does not know the outcome and never redoes the order by itself: it comes back
only as a redelivery, when the broker rolled it back.

PostgreSQL is pg.py's throwaway cluster (one per pytest process) with one database for this
module; each test has its own table there and looks only at the gids of its own brokers (their
prefix, escrow_<store id>_, comes from the store). Brokers listen on a fixed port so that workers
reconnect to a restarted one. ESCROW_EO_ORDERS overrides the number of orders of the plain run
(1000); the crash runs use a fifth of it (at least 40); ESCROW_EO_SEED repeats a crash run's random
kill points. The ESCROW_FAULTS points (commit, decided, db_committed) need a build with fault
injection (build and build-san have it).
"""

import collections
import itertools
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import psycopg2
import psycopg2.errors
import pytest
import stomp

from conftest import SLOW, TIMEOUT, Collector, RawStomp, check_store, consume_all, frame_bytes, unique
from pg import free_port, postgres  # noqa: F401  (postgres: the session fixture)

ORDERS = int(os.environ.get("ESCROW_EO_ORDERS", "1000"))
CRASH_ORDERS = max(40, ORDERS // 5)
DATABASE = "orders"  # the name in escrowd's configuration
COORDINATE = f"postgresql/{DATABASE}"
RECOVERY_MS = 200  # coordinator.recovery-interval-ms of these tests (the default is 5000)
RUN_DEADLINE = 150 * SLOW  # for a whole run of orders
# The recovery pass runs every RECOVERY_MS; what it has to do is done within a few passes.
RECOVERY_DEADLINE = TIMEOUT + 20 * RECOVERY_MS / 1000
POLL = 0.02
HERE = Path(__file__).resolve().parent


def admin_sql(pg, statement, dbname="postgres"):
    """One statement as the superuser, over psycopg2 rather than pg.sql's psql subprocess (see
    peek for a psql run seen to hang)."""
    db = psycopg2.connect(pg.conninfo(dbname))
    try:
        db.autocommit = True
        with db.cursor() as cur:
            cur.execute(statement)
    finally:
        db.close()


_databases = {}  # per PostgreSQL cluster: the one database every test of this process uses


def shared_database(pg):
    """One database per cluster (pytest process) for every test here, each with its own table:
    a CREATE DATABASE writes the whole template to the WAL, which PostgreSQL's shutdown checkpoint
    and its crash recovery after an immediate stop would then take seconds to get through."""
    if pg.port not in _databases:
        name = unique("eo").replace("-", "_")
        admin_sql(pg, f"CREATE DATABASE {name}")
        _databases[pg.port] = name
    return _databases[pg.port]


class Lost(Exception):
    """The STOMP connection went away (the broker died, or closed it) before the answer came."""


class Refused(Exception):
    """An ERROR frame: the broker refused a frame and closed the connection."""

    def __init__(self, frame):
        self.frame = frame
        self.message = frame.headers.get("message", "")
        super().__init__(f"ERROR {self.message!r} {dict(frame.headers)}")


def wait_until(predicate, what, timeout=None):
    """Polls `predicate` until it returns something true (returned) or the deadline passes."""
    deadline = time.monotonic() + (timeout or TIMEOUT)
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout or TIMEOUT:.0f} s waiting for {what}"
        time.sleep(POLL)


def order_id(i):
    return f"order-{i:05d}"


# --------------------------------------------------------------------------------------------
# STOMP: a connection for worker threads (reconnects), and frame helpers for any client object
# with .conn, .listener and .new_receipt() (conftest's Client or Conn below)
# --------------------------------------------------------------------------------------------

class Conn:
    """A python3-stomp connection to a fixed port that reports a dead broker as Lost, not as an
    assertion: what a worker thread reconnects after."""

    _ids = itertools.count(1)

    def __init__(self, port):
        self.conn = stomp.Connection12([("127.0.0.1", port)], heartbeats=(0, 0), reconnect_attempts_max=1,
                                       timeout=TIMEOUT)
        self.listener = Collector()
        self.conn.set_listener("collector", self.listener)
        self.name = f"w{next(self._ids)}"
        self._receipts = itertools.count(1)

    def open(self):
        try:
            self.conn.connect(wait=False)
        except Exception as e:
            raise Lost(f"cannot connect: {e}") from None
        lis = self.listener
        deadline = time.monotonic() + TIMEOUT
        with lis.cond:
            while lis.connected is None:
                if lis.errors or lis.disconnected:
                    raise Lost("closed before CONNECTED")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Lost("no CONNECTED")
                lis.cond.wait(min(left, 0.2))
        return self

    def new_receipt(self):
        return f"{self.name}-r{next(self._receipts)}"

    def close(self):
        try:
            self.conn.transport.disconnect_socket()
            self.conn.transport.stop()
        except Exception:
            pass


def call(fn, *args, **kwargs):
    """A python3-stomp call; a dead socket is Lost."""
    try:
        return fn(*args, **kwargs)
    except Exception as e:
        raise Lost(f"{fn.__name__}: {e!r}") from None


def answer(c, rid, timeout=None):
    """The RECEIPT `rid`; Refused on an ERROR, Lost when the connection closes first."""
    lis = c.listener
    deadline = time.monotonic() + (timeout or TIMEOUT)
    with lis.cond:
        while rid not in lis.receipt_frames:
            if lis.errors:
                raise Refused(lis.errors[0])
            if lis.disconnected:
                raise Lost(f"the connection closed before RECEIPT {rid}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no RECEIPT {rid} (nor ERROR, nor close) within {timeout or TIMEOUT:.0f} s")
            lis.cond.wait(min(left, 0.2))
        return lis.receipt_frames[rid]


def refusal(c, timeout=None):
    """The ERROR frame `c` gets (the broker then closes the connection)."""
    c.listener.wait_for(lambda: c.listener.errors, timeout or TIMEOUT, "an ERROR frame")
    return c.listener.errors[0]


def begin(c, tx, coordinate=COORDINATE, wait=True):
    """BEGIN tx coordinated with `coordinate`; returns the pg-gid of its RECEIPT."""
    rid = c.new_receipt()
    call(c.conn.send_frame, "BEGIN", {"transaction": tx, "coordinate": coordinate, "receipt": rid})
    if not wait:
        return rid
    r = answer(c, rid)
    gid = r.headers.get("pg-gid")
    assert gid, f"BEGIN's RECEIPT has no pg-gid: {dict(r.headers)}"
    return gid


def commit(c, tx, timeout=None):
    """COMMIT tx with a receipt; returns the RECEIPT frame (Refused / Lost otherwise)."""
    rid = c.new_receipt()
    call(c.conn.send_frame, "COMMIT", {"transaction": tx, "receipt": rid})
    return answer(c, rid, timeout)


def abort(c, tx):
    rid = c.new_receipt()
    call(c.conn.send_frame, "ABORT", {"transaction": tx, "receipt": rid})
    return answer(c, rid)


def subscribe(c, destination):
    """client-individual, one message at a time (a worker that dies holds one order)."""
    rid = c.new_receipt()
    sub = unique("sub")
    call(c.conn.subscribe, destination, sub, ack="client-individual",
         headers={"prefetch-count": "1", "receipt": rid})
    answer(c, rid)
    return sub


def next_message(c, seen, timeout):
    """The message after the first `seen` ones, or None after `timeout`; Lost if the connection
    closed."""
    lis = c.listener
    deadline = time.monotonic() + timeout
    with lis.cond:
        while len(lis.messages) <= seen:
            if lis.errors:
                raise Refused(lis.errors[0])
            if lis.disconnected:
                raise Lost("the connection closed")
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            lis.cond.wait(min(left, 0.2))
        return lis.messages[seen]


def work(c, tx, msg, output):
    """The STOMP half of an order: ACK it and SEND its confirmation, both in tx."""
    oid = msg.headers["order-id"]
    call(c.conn.ack, msg.headers["ack"], transaction=tx)
    call(c.conn.send, output, f"confirmed {oid}",
         headers={"transaction": tx, "order-id": oid, "persistent": "true"})


# --------------------------------------------------------------------------------------------
# PostgreSQL: the worker's own connection (autocommit off in SQL terms: BEGIN ... PREPARE)
# --------------------------------------------------------------------------------------------

def pg_connect(conninfo):
    db = psycopg2.connect(conninfo, options=f"-c statement_timeout={int(60000 * SLOW)}")
    db.autocommit = True  # the transactions are written out: BEGIN ... PREPARE TRANSACTION
    return db


def insert(db, table, oid, worker):
    """BEGIN and the order's row: the SQL transaction is open, not prepared."""
    with db.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute(f"INSERT INTO {table} (id, worker) VALUES (%s, %s)", (oid, worker))


def prepare(db, gid):
    with db.cursor() as cur:
        cur.execute("PREPARE TRANSACTION %s", (gid,))


def rollback_quietly(db):
    try:
        with db.cursor() as cur:
            cur.execute("ROLLBACK")
    except psycopg2.Error:
        pass


# --------------------------------------------------------------------------------------------
# One test's world: its database, broker, queues
# --------------------------------------------------------------------------------------------

class Setup:
    """A broker on a fixed port coordinating the shared database (as `conninfo` says, by default
    as the superuser), a new orders table there (or `share`'s: a second broker of the same test,
    whose gids are the test's too), an input and an output queue."""

    _PREFIX = re.compile(r"this broker's gids start with (escrow_[0-9a-f]+_)")

    def __init__(self, broker_factory, pg, *, share=None, conninfo=None, coordinator=None, transactions=None,
                 env=None):
        self.pg = pg
        self.db = share.db if share else shared_database(pg)
        if share:
            self.table, self.scope = share.table, share.scope
        else:
            self.table = unique("orders").replace("-", "_")
            admin_sql(pg, f"CREATE TABLE {self.table} (id text PRIMARY KEY, worker text NOT NULL)", self.db)
            self.scope = []  # the gid prefixes of this test's brokers: the test looks at no other gid
        self.conninfo = pg.conninfo(self.db)
        self.port = free_port()
        settings = {"recovery-interval-ms": RECOVERY_MS, **(coordinator or {})}
        config = ""
        if transactions:
            config += "[transactions]\n" + "".join(f"{k} = {v}\n" for k, v in transactions.items())
        config += "[coordinator]\n" + "".join(f"{k} = {v}\n" for k, v in settings.items())
        config += f'[[coordinator.postgresql]]\nname = "{DATABASE}"\nconninfo = "{conninfo or self.conninfo}"\n'
        self.broker = broker_factory(config=config, listen=False, args=["--listen", f"127.0.0.1:{self.port}"],
                                     env=env)
        m = self._PREFIX.search(self.broker.log)
        assert m, "escrowd did not log its gid prefix:\n" + self.broker.log
        self.prefix = m.group(1)
        self.scope.append(self.prefix)
        self.input = f"/queue/{unique('orders')}"
        self.output = f"/queue/{unique('confirmations')}"
        self._db = None
        self._db_lock = threading.Lock()

    def insert(self, db, oid, worker):
        insert(db, self.table, oid, worker)

    # -- the database, seen from the test (its own connection, reconnected after a restart) ----

    def query(self, statement, params=()):
        with self._db_lock:
            for attempt in (1, 2):
                try:
                    if self._db is None or self._db.closed:
                        self._db = psycopg2.connect(self.conninfo)
                        self._db.autocommit = True
                    with self._db.cursor() as cur:
                        cur.execute(statement, params)
                        return cur.fetchall() if cur.description else None
                except (psycopg2.OperationalError, psycopg2.InterfaceError):
                    try:
                        self._db.close()
                    except Exception:
                        pass
                    self._db = None
                    if attempt == 2:
                        raise

    def prepared(self):
        """The gids of this test's brokers prepared in the database (pg_prepared_xacts), sorted."""
        return [r[0] for r in self.query("SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND "
                                         "EXISTS (SELECT FROM unnest(%s) p WHERE starts_with(gid, p)) ORDER BY gid",
                                         (list(self.scope),))]

    def rows(self):
        return [r[0] for r in self.query(f"SELECT id FROM {self.table} ORDER BY id")]

    def count(self):
        return self.query(f"SELECT count(*) FROM {self.table}")[0][0]

    def wait_prepared(self, expected=(), what=None):
        expected = sorted(expected)
        wait_until(lambda: self.prepared() == expected,
                   what or f"pg_prepared_xacts to hold exactly {expected} (has {self.prepared()})",
                   RECOVERY_DEADLINE)

    def decisions(self):
        """The decisions stored and not yet finished (escrow check's counts.decisions); safe while
        escrowd runs, and after a SIGKILL (then it counts a recovered copy)."""
        return json.loads(check_store(self.broker.data_dir, "--json"))["counts"]["decisions"]

    def wait_no_decisions(self):
        wait_until(lambda: self.decisions() == 0, "the stored decisions to be finished and forgotten",
                   RECOVERY_DEADLINE)

    # -- the broker ----------------------------------------------------------------------------

    def wait_died(self, timeout=None):
        """The broker killed itself (an ESCROW_FAULTS kill point): reaped, then `escrow check`."""
        b = self.broker
        wait_until(lambda: b.proc.poll() is not None, "escrowd to kill itself at its fault point",
                   timeout or RUN_DEADLINE)
        b.expect_exit = True
        b._reader.join(5)
        assert b.proc.returncode == -signal.SIGKILL, f"escrowd exited with {b.proc.returncode}:\n{b.log}"
        check_store(b.data_dir)

    def restart(self, env=None):
        """SIGKILL (escrow check on what it left) if it runs, then start on the same port and data."""
        if env is not None:
            self.broker.env = dict(env)
        if self.broker.running():
            self.broker.kill9()
        self.broker.start()

    # -- queues --------------------------------------------------------------------------------

    def load(self, n, start=0):
        """n persistent orders (order-id headers) in the input queue, stored when this returns."""
        ids = [order_id(i) for i in range(start, start + n)]
        s = RawStomp(self.port)
        try:
            s.connect()
            frames = [frame_bytes("SEND", [("destination", self.input), ("order-id", oid), ("persistent", "true")]
                                  + ([("receipt", "loaded")] if k == n - 1 else []), f"order {oid}")
                      for k, oid in enumerate(ids)]
            s.send(b"".join(frames))
            f = s.read_frame(timeout=8 * TIMEOUT)
            assert (f.command, f.headers.get("receipt-id")) == ("RECEIPT", "loaded"), f
        finally:
            s.close()
        return ids

    def take(self, client):
        """Subscribes `client` to the input queue and returns the first order it gets."""
        subscribe(client, self.input)
        m = next_message(client, 0, TIMEOUT)
        assert m is not None, f"no order came from {self.input}"
        return m

    def do_order(self, client, msg, db, tx=None):
        """One whole order on `client` and `db`; returns COMMIT's RECEIPT."""
        tx = tx or unique("tx")
        gid = begin(client, tx)
        work(client, tx, msg, self.output)
        self.insert(db, msg.headers["order-id"], "test")
        prepare(db, gid)
        return commit(client, tx)

    def finish_remaining(self, stomp_client, expected_ids, after_outage=False):
        """Does the orders still in the input queue by hand (one consumer) until every expected id
        has its row. after_outage (PostgreSQL was down just before): a COMMIT answered
        database:pending counts (its row comes when the recovery pass commits it), and one refused
        because the broker could not check the gid is rolled back and comes again (both what
        test_commits_go_through_once_postgres_is_back shows the broker does for a while)."""
        c = stomp_client(self.broker)
        subscribe(c, self.input)
        db = pg_connect(self.conninfo)
        done = []  # the messages whose order it did
        try:
            seen = 0
            while set(self.rows()) != set(expected_ids):
                m = next_message(c, seen, TIMEOUT)
                assert m is not None, f"rows {self.rows()}: no more orders came"
                seen += 1
                try:
                    r = self.do_order(c, m, db)
                except Refused as e:
                    if not (after_outage and "cannot say whether" in e.message):
                        raise
                    c.close()
                    c = stomp_client(self.broker)
                    subscribe(c, self.input)
                    seen = 0
                    continue
                if after_outage and r.headers.get("database") == "pending":
                    gid = r.headers["pg-gid"]
                    wait_until(lambda: gid not in self.prepared(), f"the recovery pass to commit {gid}",
                               RECOVERY_DEADLINE)
                    done.append(m)
                    continue
                assert r.headers.get("database") == "committed", dict(r.headers)
                done.append(m)
        finally:
            db.close()
            c.disconnect()
        return done

    def check_exactly_once(self, expected_ids, stop=True):
        """rows == orders consumed == confirmations == expected, each exactly once; nothing
        prepared in PostgreSQL, nothing left in the input queue or the DLQ, no decision left;
        `escrow check` clean. With stop, the broker is stopped (SIGTERM, exit 0) and the store
        checked offline too."""
        self.wait_prepared((), "the recovery pass to leave nothing prepared in PostgreSQL")
        rows = self.rows()
        assert len(rows) == len(set(rows)) == len(expected_ids), f"{len(rows)} rows for {len(expected_ids)} orders"
        assert set(rows) == set(expected_ids), f"missing rows: {sorted(set(expected_ids) - set(rows))[:10]}"
        confirmations = consume_all(self.broker, self.output)
        ids = [m.headers.get("order-id") for m in confirmations]
        duplicates = sorted(i for i, n in collections.Counter(ids).items() if n > 1)
        assert not duplicates, f"confirmed twice: {duplicates[:10]}"
        assert set(ids) == set(expected_ids), \
            f"{len(ids)} confirmations; missing {sorted(set(expected_ids) - set(ids))[:10]}"
        left = consume_all(self.broker, self.input)
        assert left == [], \
            f"{len(left)} orders left in {self.input}: {[m.headers.get('order-id') for m in left][:10]}"
        dead = [m for m in consume_all(self.broker, "/queue/DLQ") if m.headers.get("order-id")]
        assert dead == [], f"{len(dead)} orders dead-lettered: {[m.headers.get('order-id') for m in dead][:10]}"
        self.wait_no_decisions()
        if stop:
            assert self.broker.terminate() == 0, self.broker.log
            out = json.loads(check_store(self.broker.data_dir, "--json"))
            assert out["counts"]["decisions"] == 0, out
            assert out["counts"]["prepared_branches"] == 0, out
        else:
            check_store(self.broker.data_dir)


@pytest.fixture
def setup(broker_factory, postgres):  # noqa: F811
    return Setup(broker_factory, postgres)


def admin_status(broker):
    """The ADMIN status JSON (store commits, ...)."""
    c = Conn(broker.port).open()
    try:
        rid = c.new_receipt()
        call(c.conn.send_frame, "ADMIN", {"admin-command": "status", "receipt": rid})
        f = answer(c, rid)
        assert f.headers.get("admin-status") == "ok", (dict(f.headers), f.body)
        return json.loads(f.body)
    finally:
        c.close()


def peek(port, destination):
    """The order ids of the messages in `destination`, none consumed: a raw connection takes them
    (client-individual) up to a sentinel, acknowledges only the sentinel, and goes away, so the
    rest return. (Not conftest's look(): the receiver threads of the python3-stomp connections it
    closes linger until their 15 s socket timeout, and a psql run right after it was seen to hang,
    its process gone, until just then.)"""
    sentinel = unique("sentinel")
    s = RawStomp(port)
    try:
        s.connect()
        s.send(frame_bytes("SUBSCRIBE", [("destination", destination), ("id", "peek"),
                                         ("ack", "client-individual")]))
        s.send(frame_bytes("SEND", [("destination", destination), ("persistent", "false")], sentinel))
        ids = []
        while True:
            f = s.read_frame()
            assert f.command == "MESSAGE", f
            if f.body == sentinel.encode():
                s.send(frame_bytes("ACK", [("id", f.headers["ack"]), ("receipt", "peeked")]))
                while s.read_frame().headers.get("receipt-id") != "peeked":
                    pass
                return ids
            ids.append(f.headers.get("order-id"))
    finally:
        s.close()


# --------------------------------------------------------------------------------------------
# Worker threads
# --------------------------------------------------------------------------------------------

class Trap:
    """Stops the first worker that reaches a step: `hit` is set, and the worker waits for `go`
    (while the test SIGKILLs the broker)."""

    def __init__(self, step):
        self.step = step
        self.hit = threading.Event()
        self.go = threading.Event()
        self.order = None

    def reached(self, oid):
        self.order = oid
        self.hit.set()
        self.go.wait(4 * TIMEOUT)


class Workers:
    """`count` threads, each with its own STOMP connection (client-individual, prefetch 1) and
    PostgreSQL connection, doing orders from s.input until stopped. A worker that loses its STOMP
    connection rolls back its SQL transaction if it is not prepared, drops the order it held (a
    COMMIT without a RECEIPT has an unknown outcome: the order is not redone, it comes back only
    as a redelivery if the broker rolled it back) and reconnects, retrying until the broker is
    back."""

    def __init__(self, s, count=4):
        self.s = s
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.outcomes = collections.Counter()  # database header of COMMIT receipts; "no-receipt"; ...
        self.receipts = collections.defaultdict(list)  # order id -> database header of each RECEIPT
        self.unanswered = []  # orders whose COMMIT got no RECEIPT
        self.duplicates = []  # orders whose INSERT found the row already there
        self.failures = []  # anything a worker did not expect (tracebacks)
        self.traps = {}
        self.trace = []  # (time, worker, order id, what, detail, broker run): for a failure's message
        self.deadline = time.monotonic() + RUN_DEADLINE
        self.threads = [threading.Thread(target=self._run, args=(f"w{i}",), name=f"eo-worker-{i}", daemon=True)
                        for i in range(count)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def arm(self, step):
        trap = Trap(step)
        with self.lock:
            self.traps[step] = trap
        return trap

    def _trace(self, name, oid, what, detail=""):
        with self.lock:
            self.trace.append((round(time.monotonic(), 3), name, oid, what, detail, self.s.broker.runs))

    def history(self, oid):
        with self.lock:
            return "\n".join(" ".join(map(str, t)) for t in self.trace if t[2] in (oid, "*"))

    def check(self):
        with self.lock:
            duplicates = list(self.duplicates)
        assert not duplicates, (f"orders done twice (their INSERT hit the primary key): {duplicates}; what the "
                                f"workers did with them:\n" + "\n".join(self.history(o) for o in duplicates))
        with self.lock:
            assert not self.failures, "a worker failed:\n" + "\n".join(self.failures)

    def join(self):
        self.stop.set()
        with self.lock:
            traps = list(self.traps.values())
        for t in traps:
            t.go.set()
        for t in self.threads:
            t.join(4 * TIMEOUT)
            assert not t.is_alive(), f"{t.name} did not stop"

    def _step(self, step, oid):
        with self.lock:
            trap = self.traps.pop(step, None)
        if trap:
            trap.reached(oid)

    def _note(self, what):
        with self.lock:
            self.outcomes[what] += 1

    def _run(self, name):
        db = None
        try:
            while not self.stop.is_set():
                assert time.monotonic() < self.deadline, f"{name}: the run did not end in time"
                c = Conn(self.s.port)
                try:
                    c.open()
                except Lost:
                    c.close()
                    time.sleep(POLL)  # the broker is down: try again shortly
                    continue
                try:
                    subscribe(c, self.s.input)
                    seen = 0
                    while not self.stop.is_set():
                        m = next_message(c, seen, 0.1)
                        if m is None:
                            continue
                        seen += 1
                        db = self._order(c, m, db, name, seen)
                except Lost:
                    self._note("connection lost")
                finally:
                    c.close()
        except Exception:
            with self.lock:
                self.failures.append(f"{name}: {traceback.format_exc()}")
        finally:
            if db is not None:
                db.close()

    def _order(self, c, m, db, name, n):
        """One order; returns the PostgreSQL connection to go on with. Lost propagates."""
        oid = m.headers["order-id"]
        tx = f"{name}-{n}-{oid}"
        self._trace(name, oid, "received", f"redelivered={m.headers.get('redelivered')} "
                                           f"count={m.headers.get('delivery-count')} tx={tx}")
        try:
            gid = begin(c, tx)
        except Refused as e:
            raise AssertionError(f"BEGIN refused: {e}") from None
        except Lost:
            self._trace(name, oid, "lost at BEGIN")
            raise
        run = self.s.broker.runs  # the broker incarnation this transaction lives in
        self._trace(name, oid, "begun", gid)
        self._step("begun", oid)
        if db is None or db.closed:
            db = pg_connect(self.s.conninfo)
        try:
            work(c, tx, m, self.s.output)
            self.s.insert(db, oid, name)
        except psycopg2.errors.UniqueViolation:
            rollback_quietly(db)
            if c.listener.disconnected or self.s.broker.runs != run:
                # A stale attempt: this worker's INSERT waited on the row lock of another
                # transaction of the order (an orphan, prepared before a crash, until a recovery
                # pass rolled it back) while the broker died under it; meanwhile the order was
                # redelivered and done. Its own transaction died with that broker: nothing twice.
                self._trace(name, oid, "stale INSERT of a dead broker's transaction", gid)
                raise Lost("stale") from None
            self._trace(name, oid, "DUPLICATE", gid)
            with self.lock:
                self.duplicates.append(oid)
            abort(c, tx)
            return db
        except Lost:
            self._trace(name, oid, "lost before PREPARE", gid)
            rollback_quietly(db)  # not prepared: the SQL transaction is the worker's to roll back
            raise
        prepare(db, gid)
        self._trace(name, oid, "prepared", gid)
        self._step("prepared", oid)
        try:
            r = commit(c, tx)
        except Lost:
            self._trace(name, oid, "COMMIT unanswered", gid)
            with self.lock:
                self.unanswered.append(oid)
                self.outcomes["no-receipt"] += 1
            raise
        except Refused as e:
            raise AssertionError(f"COMMIT refused: {e}") from None
        database = r.headers.get("database")
        self._trace(name, oid, "RECEIPT", f"{gid} database:{database}")
        with self.lock:
            self.outcomes[database] += 1
            self.receipts[oid].append(database)
        if database != "committed":
            raise AssertionError(f"COMMIT of {oid} answered {dict(r.headers)}")
        return db


def run_until_done(s, workers, n, on_progress=None):
    """Waits (polling) until n rows are committed; on_progress(rows) is called on each poll."""
    deadline = time.monotonic() + RUN_DEADLINE
    while True:
        workers.check()
        rows = s.count()
        if rows >= n:
            return
        if on_progress:
            on_progress(rows)
        assert time.monotonic() < deadline, \
            f"{rows} of {n} rows after {RUN_DEADLINE:.0f} s; outcomes {dict(workers.outcomes)}"
        time.sleep(0.05)


# --------------------------------------------------------------------------------------------
# 1. The plain run
# --------------------------------------------------------------------------------------------

def test_thousand_orders_four_workers_exactly_once(setup):
    """ORDERS orders, four workers: every COMMIT answered database:committed, each order's row,
    consumption and confirmation exactly once, nothing prepared or decided left."""
    started = time.monotonic()
    ids = setup.load(ORDERS)
    w = Workers(setup).start()
    try:
        run_until_done(setup, w, ORDERS)
    finally:
        w.join()
    w.check()
    assert w.outcomes["committed"] == ORDERS, dict(w.outcomes)
    assert set(w.outcomes) == {"committed"}, dict(w.outcomes)
    assert all(v == ["committed"] for v in w.receipts.values()) and len(w.receipts) == ORDERS
    setup.check_exactly_once(ids)
    print(f"{ORDERS} orders, 4 workers: {time.monotonic() - started:.1f} s")


# --------------------------------------------------------------------------------------------
# 2. escrowd SIGKILLed
# --------------------------------------------------------------------------------------------

def test_orders_through_broker_crashes_at_every_step(setup):
    """CRASH_ORDERS orders, four workers; escrowd dies at the k-th decision (decided: durable,
    COMMIT PREPARED not sent), at the k-th database commit (db_committed: before the RECEIPT),
    right after a worker's BEGIN, right after a worker's PREPARE TRANSACTION, and twice at random
    points; each time it restarts on the same port and data and the workers reconnect. Its
    recovery passes resolve every prepared transaction; every order is done exactly once."""
    started = time.monotonic()
    n = CRASH_ORDERS
    k = max(3, n // 10)
    seed = int(os.environ.get("ESCROW_EO_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    print(f"random kill points: seed {seed} (ESCROW_EO_SEED={seed} repeats them)")
    ids = setup.load(n)
    events = []
    setup.restart(env={"ESCROW_FAULTS": f"decided:{k}:kill"})
    w = Workers(setup).start()
    try:
        for point in ("decided", "db_committed"):
            setup.wait_died()
            w._trace("main", "*", f"escrowd killed itself at {point}:{k}")
            events.append((point, setup.count()))
            setup.restart(env={"ESCROW_FAULTS": f"db_committed:{k}:kill"} if point == "decided" else {})
        for step in ("begun", "prepared"):
            trap = w.arm(step)
            wait_until(lambda: trap.hit.is_set() or w.check(), f"a worker to reach {step}", RUN_DEADLINE)
            setup.broker.kill9()
            w._trace("main", "*", f"escrowd killed at {step} of {trap.order}")
            events.append((step, trap.order, setup.count()))
            trap.go.set()  # the worker carries on into a dead broker
            setup.broker.start()
        for _ in range(2):
            target = min(n - 5, setup.count() + rng.randint(3, max(4, n // 8)))
            wait_until(lambda: setup.count() >= target or w.check(), f"{target} rows", RUN_DEADLINE)
            setup.broker.kill9()
            w._trace("main", "*", "escrowd killed at random")
            events.append(("random", setup.count()))
            setup.broker.start()
        run_until_done(setup, w, n)
    finally:
        w.join()
    w.check()
    assert "unknown" not in w.outcomes and "pending" not in w.outcomes, dict(w.outcomes)
    assert len(events) == 6, events
    setup.check_exactly_once(ids)
    print(f"{n} orders through {len(events)} broker crashes (seed {seed}): {time.monotonic() - started:.1f} s; "
          f"events {events}; outcomes {dict(w.outcomes)}")


@pytest.mark.parametrize("point", ["begun", "prepared", "decided", "db_committed"])
def test_broker_killed_at_one_step(setup, stomp_client, point):
    """One order, escrowd SIGKILLed at one step of it; after the restart the recovery pass
    resolves its prepared transaction the only right way: rolled back (and the order redelivered)
    when nothing was decided, committed (and not redelivered) when the decision was durable."""
    ids = setup.load(3)
    if point in ("decided", "db_committed"):
        setup.restart(env={"ESCROW_FAULTS": f"{point}:1:kill"})
    c = stomp_client(setup.broker)
    m = setup.take(c)
    oid = m.headers["order-id"]
    db = pg_connect(setup.conninfo)
    tx = unique("tx")
    gid = begin(c, tx)
    work(c, tx, m, setup.output)
    setup.insert(db, oid, "test")
    if point == "begun":
        setup.broker.kill9()
        prepare(db, gid)  # the worker does not know yet: its PREPARE outlives the broker's transaction
    if point == "prepared":
        prepare(db, gid)
        setup.broker.kill9()
    if point in ("begun", "prepared"):
        with pytest.raises(Lost):
            commit(c, tx)
        assert setup.prepared() == [gid]
        setup.broker.start()
        # Presumed abort: no decision for gid, so the pass rolls it back; the order comes back.
        setup.wait_prepared(())
        assert setup.rows() == []
    else:
        prepare(db, gid)
        with pytest.raises(Lost):
            commit(c, tx)  # escrowd dies before its RECEIPT
        setup.wait_died()
        if point == "decided":
            assert setup.prepared() == [gid], "COMMIT PREPARED ran before the decided point"
            assert setup.rows() == []
            assert setup.decisions() == 1
        else:
            assert setup.prepared() == [] and setup.rows() == [oid]
        setup.restart(env={})
        # The decision was durable: the pass commits gid (or finds it committed) and forgets it.
        setup.wait_prepared(())
        assert setup.rows() == [oid]
        setup.wait_no_decisions()
    c.close()
    db.close()
    done = [m.headers["order-id"] for m in setup.finish_remaining(stomp_client, ids)]
    if point in ("begun", "prepared"):
        assert oid in done, f"{oid} was rolled back but did not come back: {done}"
    else:
        assert oid not in done, f"{oid} was committed but came back: {done}"
    setup.check_exactly_once(ids)


# --------------------------------------------------------------------------------------------
# 3. A worker SIGKILLed
# --------------------------------------------------------------------------------------------

WORKER_SCRIPT = r"""
import fcntl, struct, sys, termios
sys.path.insert(0, sys.argv[1])
import psycopg2
from conftest import RawStomp, frame_bytes

port, source, output, conninfo, table = int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]

def step(name, *details):
    # How many bytes from the broker wait unread in the socket: a process killed with unread data
    # resets its connection (RST) instead of closing it (FIN).
    unread = struct.unpack("i", fcntl.ioctl(s.sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
    print("STEP", name, *details, unread, flush=True)
    sys.stdin.readline()  # killed here

def frame(s):
    f = s.read_frame(timeout=60)
    assert f.command in ("MESSAGE", "RECEIPT"), f
    return f

s = RawStomp(port, timeout=60)
s.connect()
s.send(frame_bytes("SUBSCRIBE", [("destination", source), ("id", "w"), ("ack", "client-individual"),
                                 ("prefetch-count", "1")]))
m = frame(s)
oid = m.headers["order-id"]
s.send(frame_bytes("BEGIN", [("transaction", "T"), ("coordinate", "postgresql/orders"), ("receipt", "b")]))
r = frame(s)
gid = r.headers["pg-gid"]
s.send(frame_bytes("ACK", [("id", m.headers["ack"]), ("transaction", "T")]))
s.send(frame_bytes("SEND", [("destination", output), ("order-id", oid), ("transaction", "T"),
                            ("persistent", "true")], "confirmed " + oid))
db = psycopg2.connect(conninfo)
db.autocommit = True
cur = db.cursor()
cur.execute("BEGIN")
cur.execute(f"INSERT INTO {table} (id, worker) VALUES (%s, 'subprocess')", (oid,))
step("begun", oid, gid)
cur.execute("PREPARE TRANSACTION %s", (gid,))
step("prepared", oid, gid)
s.send(frame_bytes("COMMIT", [("transaction", "T"), ("receipt", "c")]))
step("commit-sent", oid, gid)
print("DONE", flush=True)
"""


def run_worker_until(s, tmp_path, step):
    """Runs WORKER_SCRIPT (one order) and SIGKILLs it at `step`; returns (order id, gid, unread
    bytes at the kill)."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER_SCRIPT)
    p = subprocess.Popen([sys.executable, str(script), str(HERE), str(s.port), s.input, s.output, s.conninfo,
                          s.table],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        while True:
            line = p.stdout.readline().decode().split()
            if not line or line[0] != "STEP":
                p.kill()
                raise AssertionError(f"worker said {line}; stderr {p.stderr.read().decode()}")
            if line[1] == step:
                break
            p.stdin.write(b"go\n")
            p.stdin.flush()
        os.kill(p.pid, signal.SIGKILL)
        p.wait(TIMEOUT)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == -signal.SIGKILL, p.returncode
    return line[2], line[3], int(line[4])


@pytest.mark.parametrize("step", ["begun", "prepared", "commit-sent", "commit-sent-reset"])
def test_worker_killed_at_one_step(setup, stomp_client, tmp_path, step):
    """A worker process (its own STOMP and PostgreSQL connections) SIGKILLed at a step of an order.
    begun: after BEGIN, its ACK and SEND, and its INSERT (SQL transaction open): both sides roll
    back (PostgreSQL sees its session go), the order comes back. prepared: after PREPARE
    TRANSACTION: the broker sees the connection go, rolls back and runs ROLLBACK PREPARED
    (presumed abort), the order comes back. commit-sent: after COMMIT was sent, before its
    RECEIPT, with nothing unread (the connection closes with a FIN after the COMMIT): the broker
    carries the COMMIT out, committed on both sides, the order is not redelivered.
    commit-sent-reset: the same, but the next order is waiting unread in the worker's socket (the
    ACK freed its window), so the kill resets the connection: the broker may drop the COMMIT it
    had not handled yet; either outcome must be whole (committed, or rolled back on both sides and
    redelivered) and exactly once."""
    if step == "commit-sent":
        ids = setup.load(1)  # nothing more to deliver to the worker: its socket has nothing unread
    else:
        ids = setup.load(3)
    oid, gid, unread = run_worker_until(setup, tmp_path, "commit-sent" if step.startswith("commit") else step)
    if step == "commit-sent":
        # Nothing but the COMMIT's RECEIPT could have been unread at the kill, and it comes after
        # the commit: the broker handled the COMMIT.
        wait_until(lambda: setup.rows() == [oid], f"{oid}'s row, committed by the broker after the worker died",
                   RECOVERY_DEADLINE)
        setup.wait_prepared(())
        assert consume_all(setup.broker, setup.input) == [], "the committed order came back"
        assert peek(setup.port, setup.output) == [oid]
        setup.wait_no_decisions()
        ids += setup.load(2, start=1)
    elif step == "commit-sent-reset":
        # Whole either way: the prepared transaction is committed or rolled back, never left.
        setup.wait_prepared((), f"{gid} to be committed or rolled back after its worker died")
        print(f"{step}: {unread} bytes unread at the kill; {oid} " +
              ("committed" if setup.rows() == [oid] else "rolled back"))
    elif step == "prepared":
        # Presumed abort: the broker rolls the prepared transaction back once the connection is gone.
        setup.wait_prepared((), f"{gid} to be rolled back after its worker died")
    done = setup.finish_remaining(stomp_client, ids)
    if step in ("begun", "prepared"):
        # The order came back redelivered (not necessarily first: the next order, which the ACK let
        # the broker deliver to the dead worker, came back too) and was done once, by the test.
        again = [m for m in done if m.headers["order-id"] == oid]
        assert len(again) == 1 and again[0].headers.get("redelivered") == "true", [dict(m.headers) for m in again]
        assert setup.query(f"SELECT worker FROM {setup.table} WHERE id = %s", (oid,)) == [("test",)]
    setup.check_exactly_once(ids)


# --------------------------------------------------------------------------------------------
# 4. PostgreSQL restarted, or refusing COMMIT PREPARED for a while
# --------------------------------------------------------------------------------------------

def test_decision_finished_after_postgres_immediate_restart(broker_factory, postgres, stomp_client):  # noqa: F811
    """escrowd dies with a decision durable and COMMIT PREPARED not sent (decided:1:kill);
    PostgreSQL stops in immediate mode (a crash) and escrowd restarts while it is down: its
    recovery pass fails and retries; PostgreSQL starts (the prepared transaction survived its
    crash) and the pass commits it. Exactly once, nothing left."""
    s = Setup(broker_factory, postgres, env={"ESCROW_FAULTS": "decided:1:kill"})
    ids = s.load(3)
    c = stomp_client(s.broker)
    m = s.take(c)
    oid = m.headers["order-id"]
    db = pg_connect(s.conninfo)
    with pytest.raises(Lost):
        s.do_order(c, m, db)
    db.close()
    s.wait_died()
    gids = s.prepared()
    assert len(gids) == 1 and s.rows() == [], (gids, s.rows())
    assert s.decisions() == 1
    try:
        admin_sql(postgres, "CHECKPOINT")  # only so that its crash recovery has little to replay
        postgres.stop("immediate")
        s.broker.env = {}
        s.broker.start()  # ready without its database
        s.broker.wait_log("cannot list the prepared transactions of database 'orders'", RECOVERY_DEADLINE)
        assert s.decisions() == 1
    finally:
        if not postgres.running:
            postgres.start()
    s.wait_prepared((), "the recovery pass to commit the decided transaction once PostgreSQL is back")
    assert s.rows() == [oid]
    s.wait_no_decisions()
    c.close()
    s.finish_remaining(stomp_client, ids, after_outage=True)
    s.check_exactly_once(ids)


def test_commit_answered_pending_until_the_database_allows_it(broker_factory, postgres, stomp_client):  # noqa: F811
    """The broker's role may check pg_prepared_xacts but not COMMIT PREPARED what another role
    prepared (PostgreSQL: superuser or the preparing role only): COMMIT is answered
    database:pending with a message, the decision stays stored, the transaction prepared. Once the
    role may (ALTER ROLE ... SUPERUSER), the recovery pass commits it and forgets the decision."""
    role = unique("coord").replace("-", "_")
    admin_sql(postgres, f"CREATE ROLE {role} LOGIN")
    conninfo = postgres.conninfo(shared_database(postgres)).replace("user=postgres", f"user={role}")
    s = Setup(broker_factory, postgres, conninfo=conninfo)
    ids = s.load(2)
    c = stomp_client(s.broker)
    m = s.take(c)
    oid = m.headers["order-id"]
    db = pg_connect(s.conninfo)
    r = s.do_order(c, m, db)
    assert r.headers.get("database") == "pending", dict(r.headers)
    assert "COMMIT PREPARED" in r.headers.get("message", ""), dict(r.headers)
    gid = r.headers.get("pg-gid")
    assert s.prepared() == [gid] and s.rows() == []
    assert s.decisions() == 1
    # The broker's side is committed: the confirmation is there, the order consumed.
    assert peek(s.port, s.output) == [oid]
    admin_sql(postgres, f"ALTER ROLE {role} SUPERUSER")
    s.wait_prepared((), "the recovery pass to commit the pending decision")
    assert s.rows() == [oid]
    s.wait_no_decisions()
    # The next COMMIT goes straight through.
    m2 = next_message(c, 1, TIMEOUT)
    assert m2 is not None
    assert s.do_order(c, m2, db).headers.get("database") == "committed"
    db.close()
    c.disconnect()
    s.check_exactly_once(ids)


def test_commits_go_through_once_postgres_is_back(setup, stomp_client):
    """PostgreSQL is down for a while (stopped in immediate mode: the broker's passes fail and its
    connections back off), then starts. Once escrowd says it is connected again, COMMITs go
    through: none refused, none answered database:pending for want of a connection."""
    ids = setup.load(10)
    admin_sql(setup.pg, "CHECKPOINT")  # only so that its crash recovery has little to replay
    setup.pg.stop("immediate")
    try:
        setup.broker.wait_log("cannot list the prepared transactions of database 'orders'", RECOVERY_DEADLINE)
        time.sleep(2 * SLOW)  # the outage (not a wait for an event): the connections' backoff grows
    finally:
        setup.pg.start()
    setup.broker.wait_log("connected to database 'orders' again", RECOVERY_DEADLINE)
    c = stomp_client(setup.broker)
    subscribe(c, setup.input)
    db = pg_connect(setup.conninfo)
    answers = []
    try:
        for k in range(len(ids)):
            m = next_message(c, k, TIMEOUT)
            assert m is not None
            try:
                r = setup.do_order(c, m, db)
            except Refused as e:
                raise AssertionError(f"COMMIT {k + 1} after PostgreSQL came back refused: {e.message}; "
                                     f"answers before: {answers}") from None
            answers.append(r.headers.get("database"))
            assert r.headers.get("database") == "committed", \
                f"COMMIT {k + 1} after PostgreSQL came back: {dict(r.headers)}; answers before: {answers}"
    finally:
        db.close()
    c.disconnect()
    setup.check_exactly_once(ids)


# --------------------------------------------------------------------------------------------
# 5. The store refuses the decision's batch
# --------------------------------------------------------------------------------------------

def commit_under_fault(broker_factory, postgres, stomp_client, fault):  # noqa: F811
    """One order taken, ACKed and confirmed in a coordinated transaction, its SQL prepared, and its
    COMMIT sent to a broker whose ESCROW_FAULTS rule `fault` (POINT:{k}:FAULT) hits the COMMIT's
    batch: the 4th commit and sync of a new store (1: the start-up queues; 2: the order; 3: the
    SEND in the transaction, whose message is stored at once and staged until the commit; 4: the
    COMMIT's batch, with the decision; each waited for, so that no two share a group commit).
    Returns the Setup, the order ids, the database connection, the gid and the COMMIT's refusal."""
    k = 4
    s = Setup(broker_factory, postgres, env={"ESCROW_FAULTS": fault.format(k=k)})
    wait_until(lambda: admin_status(s.broker)["store"]["commits"] >= 1, "the start-up commit")
    ids = s.load(1)
    c = stomp_client(s.broker)
    m = s.take(c)
    oid = m.headers["order-id"]
    db = pg_connect(s.conninfo)
    tx = unique("tx")
    gid = begin(c, tx)
    call(c.conn.ack, m.headers["ack"], transaction=tx)
    rid = c.new_receipt()
    call(c.conn.send, s.output, f"confirmed {oid}",
         headers={"transaction": tx, "order-id": oid, "persistent": "true", "receipt": rid})
    answer(c, rid)
    s.insert(db, oid, "test")
    prepare(db, gid)
    commits = admin_status(s.broker)["store"]["commits"]
    assert commits == k - 1, f"{commits} commits before the COMMIT: the fault would not hit its batch"
    with pytest.raises(Refused) as refused:
        commit(c, tx)
    return s, ids, db, gid, tx, refused.value.message


def test_store_refusing_the_decision_rolls_both_sides_back(broker_factory, postgres, stomp_client):  # noqa: F811
    """ESCROW_FAULTS commit:K:enospc, K the commit that carries the decision with the transaction's
    ack and send: COMMIT gets an ERROR, PostgreSQL's side is rolled back, nothing took effect,
    and the order comes back (and then goes through)."""
    s, ids, db, gid, tx, message = commit_under_fault(broker_factory, postgres, stomp_client, "commit:{k}:enospc")
    assert f"COMMIT of transaction '{tx}' refused" in message and "store" in message, message
    s.wait_prepared((), f"{gid} to be rolled back after the store refused the decision")
    assert s.rows() == []
    assert s.decisions() == 0
    db.close()
    ids += s.load(1, start=1)
    done = s.finish_remaining(stomp_client, ids)  # the order comes back
    assert [m.headers["order-id"] for m in done] == ids, [dict(m.headers) for m in done]
    s.check_exactly_once(ids)


def test_a_failed_sync_of_the_decision_leaves_both_sides_to_the_restart(broker_factory, postgres, stomp_client):  # noqa: F811
    """ESCROW_FAULTS sync:K:eio, K the sync of the COMMIT's batch: the write reached the log file but
    its sync failed, so whether it is durable is not known. The broker must not roll the database
    back (the batch, decision included, may be replayed at restart): the COMMIT gets an ERROR
    saying the outcome is unknown, the gid stays prepared, and the restart decides both sides from
    the store. Here the log holds the batch, so both commit, exactly once."""
    s, ids, db, gid, tx, message = commit_under_fault(broker_factory, postgres, stomp_client, "sync:{k}:eio")
    assert "outcome unknown" in message and "restarts" in message, message
    db.close()
    # What is asserted is an absence: over five recovery passes, none rolls the gid back.
    s.broker.wait_log("may or may not be on disk")
    time.sleep(5 * RECOVERY_MS / 1000)
    assert s.prepared() == [gid]
    s.restart(env={})
    s.check_exactly_once(ids)


# --------------------------------------------------------------------------------------------
# 6. Refusals and rollbacks
# --------------------------------------------------------------------------------------------

def test_begin_refusals(setup, stomp_client):
    """coordinate naming an unconfigured database, a coordinate that is not postgresql/NAME, and a
    coordinated BEGIN without a receipt (nowhere to put the pg-gid): each an ERROR."""
    c = stomp_client(setup.broker)
    rid = begin(c, "T", coordinate="postgresql/billing", wait=False)
    e = refusal(c)
    message = e.headers["message"]
    assert "'billing' is not configured" in message and "orders" in message, dict(e.headers)
    assert e.headers.get("receipt-id") == rid
    c = stomp_client(setup.broker)
    begin(c, "T", coordinate="mysql/orders", wait=False)
    e = refusal(c)
    assert "invalid coordinate header 'mysql/orders'" in e.headers["message"], dict(e.headers)
    c = stomp_client(setup.broker)
    c.conn.send_frame("BEGIN", {"transaction": "T", "coordinate": COORDINATE})
    e = refusal(c)
    assert "needs a receipt header" in e.headers["message"], dict(e.headers)
    setup.check_exactly_once([])


def test_max_transactions(broker_factory, postgres, stomp_client):  # noqa: F811
    """coordinator.max-transactions = 2: a third coordinated BEGIN is refused naming the setting;
    after an ABORT there is room again."""
    s = Setup(broker_factory, postgres, coordinator={"max-transactions": 2})
    holder = stomp_client(s.broker)
    g1 = begin(holder, "T1")
    g2 = begin(holder, "T2")
    assert g1 != g2
    other = stomp_client(s.broker)
    begin(other, "T3", wait=False)
    e = refusal(other)
    assert "coordinator.max-transactions" in e.headers["message"], dict(e.headers)
    abort(holder, "T1")
    g3 = begin(holder, "T3")
    assert g3 not in (g1, g2)
    # A plain local transaction does not count.
    holder.begin("plain")
    holder.abort("plain")
    abort(holder, "T2")
    abort(holder, "T3")
    holder.disconnect()
    s.check_exactly_once([])


def test_commit_without_prepare_is_refused_and_nothing_commits(setup, stomp_client):
    """The SQL transaction was not prepared (still open): COMMIT gets an ERROR naming the gid; the
    broker's side is rolled back (no confirmation, the order comes back) and PostgreSQL has nothing."""
    ids = setup.load(1)
    c = stomp_client(setup.broker)
    m = setup.take(c)
    oid = m.headers["order-id"]
    db = pg_connect(setup.conninfo)
    tx = unique("tx")
    gid = begin(c, tx)
    work(c, tx, m, setup.output)
    setup.insert(db, oid, "test")
    with pytest.raises(Refused) as refused:
        commit(c, tx)
    message = refused.value.message
    assert f"COMMIT of transaction '{tx}' refused" in message, message
    assert "not prepared" in message and gid in message, message
    rollback_quietly(db)
    assert setup.rows() == [] and setup.prepared() == []
    assert consume_all(setup.broker, setup.output) == []
    db.close()
    setup.finish_remaining(stomp_client, ids)
    setup.check_exactly_once(ids)


def test_abort_after_prepare_rolls_back_the_database(setup, stomp_client):
    """ABORT after PREPARE TRANSACTION: the broker runs ROLLBACK PREPARED and the order is
    redelivered. A PREPARE that comes after its transaction's ABORT (a late client) is rolled back
    by the recovery pass (presumed abort)."""
    ids = setup.load(1)
    c = stomp_client(setup.broker)
    m = setup.take(c)
    oid = m.headers["order-id"]
    db = pg_connect(setup.conninfo)
    tx = unique("tx")
    gid = begin(c, tx)
    work(c, tx, m, setup.output)
    setup.insert(db, oid, "test")
    prepare(db, gid)
    abort(c, tx)
    setup.wait_prepared((), f"{gid} to be rolled back after ABORT")
    m = next_message(c, 1, TIMEOUT)
    assert m is not None and m.headers["order-id"] == oid and m.headers.get("redelivered") == "true"
    # Late: ABORT first, PREPARE after.
    tx = unique("tx")
    gid = begin(c, tx)
    work(c, tx, m, setup.output)
    abort(c, tx)
    setup.insert(db, oid, "late")
    prepare(db, gid)  # PostgreSQL took it (it raises otherwise); the broker may roll it back at once
    setup.wait_prepared((), f"the recovery pass to roll back {gid}, prepared after its ABORT")
    assert setup.rows() == []
    c.disconnect()
    db.close()
    setup.finish_remaining(stomp_client, ids)
    setup.check_exactly_once(ids)


def test_local_timeout_after_prepare_rolls_back_both_sides(broker_factory, postgres, stomp_client):  # noqa: F811
    """transactions.local-timeout-ms passes with the transaction prepared in PostgreSQL and no
    COMMIT: the broker rolls it back (an ERROR says so), runs ROLLBACK PREPARED, the order comes
    back."""
    s = Setup(broker_factory, postgres, transactions={"local-timeout-ms": int(1500 * SLOW)})
    ids = s.load(1)
    c = stomp_client(s.broker)
    m = s.take(c)
    oid = m.headers["order-id"]
    db = pg_connect(s.conninfo)
    tx = unique("tx")
    gid = begin(c, tx)
    work(c, tx, m, s.output)
    s.insert(db, oid, "test")
    prepare(db, gid)
    e = refusal(c, timeout=TIMEOUT + 2 * SLOW)
    assert f"transaction '{tx}' was open for more than" in e.headers["message"], dict(e.headers)
    s.wait_prepared((), f"{gid} to be rolled back after the timeout")
    assert s.rows() == []
    db.close()
    s.finish_remaining(stomp_client, ids)
    s.check_exactly_once(ids)


# --------------------------------------------------------------------------------------------
# 7. Two brokers on one database
# --------------------------------------------------------------------------------------------

def fake_prepared(s, gid, oid):
    """A transaction prepared under `gid` by the test: what a gid of a past incarnation looks like."""
    db = pg_connect(s.conninfo)
    try:
        s.insert(db, oid, "fake")
        prepare(db, gid)
    finally:
        db.close()


def test_two_brokers_never_touch_each_others_transactions(broker_factory, postgres, stomp_client):  # noqa: F811
    """Brokers A and B (two stores, two store ids, two gid prefixes) on one database, each with a
    live prepared transaction. A is SIGKILLed: its transaction is an orphan now, which B's passes
    leave alone (as they leave a prefix-A gid the test prepared), while B's own orphan-looking gid
    of another incarnation goes. A restarts: its pass rolls back its orphans, B's live transaction
    stays, and B commits it."""
    a = Setup(broker_factory, postgres)
    b = Setup(broker_factory, postgres, share=a)
    ca, cb = stomp_client(a.broker), stomp_client(b.broker)
    ga, gb = begin(ca, "TA"), begin(cb, "TB")
    prefix_a, prefix_b = ga.rsplit("_", 2)[0] + "_", gb.rsplit("_", 2)[0] + "_"
    assert (prefix_a, prefix_b) == (a.prefix, b.prefix) and prefix_a != prefix_b, (ga, gb, a.prefix, b.prefix)
    dba, dbb = pg_connect(a.conninfo), pg_connect(b.conninfo)
    a.insert(dba, "row-a", "A")
    prepare(dba, ga)
    cb.conn.send(b.output, "from B", headers={"transaction": "TB", "persistent": "true"})
    b.insert(dbb, "row-b", "B")
    prepare(dbb, gb)
    a.broker.kill9()
    ca.close()
    fake_prepared(a, prefix_a + "00000000000000aa_1", "fake-a")
    fake_prepared(b, prefix_b + "00000000000000bb_1", "fake-b")
    # B's pass rolls back its own fake (not live, not decided) ...
    wait_until(lambda: prefix_b + "00000000000000bb_1" not in a.prepared(), "B's pass to roll back B's orphan",
               RECOVERY_DEADLINE)
    # ... and another pass after it, to be sure: a second orphan of B's.
    fake_prepared(b, prefix_b + "00000000000000bb_2", "fake-b")
    wait_until(lambda: prefix_b + "00000000000000bb_2" not in a.prepared(), "B's pass to roll back B's orphan",
               RECOVERY_DEADLINE)
    assert a.prepared() == sorted([ga, gb, prefix_a + "00000000000000aa_1"]), "B touched A's transactions"
    a.broker.start()
    a.wait_prepared([gb], "A's pass to roll back A's orphans and leave B's transaction")
    fake_prepared(a, prefix_a + "00000000000000aa_2", "fake-a")
    a.wait_prepared([gb], "A's next pass to roll back A's new orphan and leave B's transaction")
    r = commit(cb, "TB")
    assert r.headers.get("database") == "committed", dict(r.headers)
    assert a.rows() == ["row-b"]
    dba.close()
    dbb.close()
    cb.disconnect()
    assert [m.body for m in consume_all(b.broker, b.output)] == ["from B"]
    a.wait_no_decisions()
    b.wait_no_decisions()
    for s in (a, b):
        assert s.broker.terminate() == 0
        check_store(s.broker.data_dir)
