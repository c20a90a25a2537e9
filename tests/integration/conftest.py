"""Integration-test harness: a real escrowd process, python3-stomp clients and raw sockets.

Run from the repository root with the Debian Python (it sees python3-stomp):

    /usr/bin/python3 -m pytest -q tests/integration

ESCROWD names the broker binary (default build/broker/escrowd); ESCROW_SANITIZED=1 (set by
scripts/test for the sanitizer build) stretches every timeout.
"""

import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest
import stomp

ROOT = Path(__file__).resolve().parents[2]
ESCROWD = os.environ.get("ESCROWD", str(ROOT / "build" / "broker" / "escrowd"))
if not os.path.isabs(ESCROWD):
    ESCROWD = str(ROOT / ESCROWD)



def tool(relative, env_name):
    """A program built with the broker under test, e.g. tool("cli/escrow", "ESCROW_CLI"): the path in
    the environment variable `env_name` when set, else `relative` in the build directory ESCROWD
    lives in (build/broker/escrowd -> build). Under ESCROW_SANITIZED=1 the normal build's program is
    used when it exists (the point of that run is the sanitized broker)."""
    if os.environ.get(env_name):
        return os.environ[env_name]
    build = Path(ESCROWD).resolve().parents[1]
    if os.environ.get("ESCROW_SANITIZED") and (ROOT / "build" / relative).exists():
        build = ROOT / "build"
    return str(build / relative)


# Timeouts are generous (a loaded 2-core machine, sanitizer builds); the happy path never waits
# for them because every wait polls for its condition.
SLOW = 3.0 if os.environ.get("ESCROW_SANITIZED") else 1.0
TIMEOUT = 15.0 * SLOW


def check_store(data_dir, *args):
    """Runs the built `escrow check DATA-DIR` (the offline store checker, docs/operations.md) and
    asserts the store is consistent (exit 0), with the checker's whole output in the assertion
    message; returns its stdout. Safe while escrowd runs on `data_dir` (it only reads, in one LMDB
    read transaction). Call it after a crash: check_store(broker.data_dir); it then checks a copy
    recovered as escrowd will recover the store, and leaves the store as it was. `args` go before the
    subcommand, e.g. check_store(d, "--json")."""
    escrow = tool("cli/escrow", "ESCROW_CLI")
    assert os.path.exists(escrow), f"{escrow} not found: build it (ninja -C build cli/escrow) or set ESCROW_CLI"
    r = subprocess.run([escrow, *args, "check", str(data_dir)], stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=4 * TIMEOUT)
    assert r.returncode == 0, (f"escrow check {data_dir} exited with {r.returncode} (5: inconsistent, "
                               f"6: cannot open):\n{r.stdout}{r.stderr}")
    return r.stdout


def unique(prefix="t"):
    """A name no other test uses (queues, topics, subscriptions)."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# --------------------------------------------------------------------------------------------
# The broker process
# --------------------------------------------------------------------------------------------

_LISTENING = re.compile(rb"listening on 127\.0\.0\.1:(\d+)")


class BrokerStartError(RuntimeError):
    pass


class Broker:
    """One escrowd on a data directory; restart() brings it back on the same directory.

    The output of every run is kept (self.log) and shown when a test fails.
    """

    def __init__(self, data_dir=None, config=None, args=(), workdir=None, listen=True, env=None):
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="escrow-it-"))
        # data_dir=False: no --data-dir option (the configuration file or the default decides)
        self.data_dir = None if data_dir is False else Path(data_dir) if data_dir else self.workdir / "data"
        self.config_path = None
        if config is not None:
            self.config_path = self.workdir / "escrowd.toml"
            self.config_path.write_text(config)
        self.args = list(args)
        self.listen = listen
        # Extra environment for escrowd (e.g. {"ESCROW_FAULTS": "commit:2:map_full"}); settable
        # between runs, or through restart(env=...).
        self.env = dict(env or {})
        self.proc = None
        self.port = None
        self.runs = 0
        self._lines = []  # (run number, bytes) of every output line
        self._lock = threading.Lock()
        self._reader = None
        self.expect_exit = False  # set while we stop it on purpose

    # -- process control -----------------------------------------------------------------------

    def command(self):
        cmd = [ESCROWD]
        if self.listen:
            cmd += ["--listen", "127.0.0.1:0"]
        if self.data_dir is not None:
            cmd += ["--data-dir", str(self.data_dir)]
        if self.config_path is not None:
            cmd += ["--config", str(self.config_path)]
        return cmd + self.args

    def start(self, timeout=None):
        assert self.proc is None or self.proc.poll() is not None, "escrowd is already running"
        timeout = timeout or TIMEOUT
        self.runs += 1
        run = self.runs
        self.port = None
        self.expect_exit = False
        port_found = threading.Event()
        ready = threading.Event()
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, cwd=self.workdir,
                                     env={**os.environ, **self.env} if self.env else None)
        proc = self.proc

        def read():
            for line in iter(proc.stdout.readline, b""):
                with self._lock:
                    self._lines.append((run, line))
                m = _LISTENING.search(line)
                if m and self.port is None:
                    self.port = int(m.group(1))
                    port_found.set()
                if b"escrowd ready" in line:
                    ready.set()
            proc.stdout.close()
            ready.set()  # unblock the waiter: the process is gone

        self._reader = threading.Thread(target=read, name=f"escrowd-log-{run}", daemon=True)
        self._reader.start()
        ready.wait(timeout)
        if proc.poll() is not None or not ready.is_set() or not port_found.is_set():
            status = proc.poll()
            if status is None:
                self._kill_now()
            raise BrokerStartError(f"escrowd did not become ready (exit status {status}); command "
                                   f"{' '.join(self.command())}\n{self.log}")
        return self

    def _kill_now(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self._reader is not None:
            self._reader.join(5)

    def kill9(self, check=True):
        """SIGKILL: no chance to flush or clean up; the process is reaped. Then `escrow check` on
        the store it left (check=False for a test that inspects a store it broke on purpose):
        every SIGKILL of the suite also proves the store consistent."""
        assert self.running(), "escrowd is not running:\n" + self.log
        self.expect_exit = True
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self._reader.join(5)
        data_dir = self.data_dir if self.data_dir is not None else self.workdir / "escrow-data"
        if check and (Path(data_dir) / "data.mdb").exists():
            check_store(data_dir)
        return self.proc.returncode

    def terminate(self, timeout=None):
        """SIGTERM and wait; returns the exit status (SIGKILLs it if it does not stop in time)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.expect_exit = True
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout or TIMEOUT)
            except subprocess.TimeoutExpired:
                self._kill_now()
                raise AssertionError("escrowd did not stop within the timeout after SIGTERM:\n" + self.log)
        self._reader.join(5)
        return self.proc.returncode

    def restart(self, kill=False, env=None):
        """Stops it (SIGTERM, or SIGKILL with kill=True) and starts it again on the same data;
        env (a dict) replaces the extra environment for the new run ({} for none)."""
        if env is not None:
            self.env = dict(env)
        if self.running():
            if kill:
                self.kill9()
            else:
                status = self.terminate()
                assert status == 0, f"escrowd exited with {status} on SIGTERM:\n{self.log}"
        return self.start()

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def close(self):
        """Always reaps the process; safe to call twice."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.terminate()
            except AssertionError:
                pass
        self._kill_now()

    # -- output ----------------------------------------------------------------------------------

    def wait_log(self, text, timeout=None):
        """Waits until `text` is in the log. A line escrowd wrote before an answer the test has
        seen may still be in the pipe, so a log check right after the answer must wait for it."""
        deadline = time.monotonic() + (timeout or TIMEOUT)
        while text not in self.log:
            assert time.monotonic() < deadline, f"no {text!r} in escrowd's log:\n{self.log}"
            time.sleep(0.02)

    @property
    def log(self):
        with self._lock:
            lines = list(self._lines)
        out, last = [], None
        for run, line in lines:
            if run != last:
                out.append(f"----- escrowd run {run} -----")
                last = run
            out.append(line.decode("utf-8", "replace").rstrip("\n"))
        return "\n".join(out)

    @property
    def address(self):
        return ("127.0.0.1", self.port)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"_report_{report.when}", report)  # for clean_passed_tmp_path
    if report.failed:
        for i, b in enumerate(getattr(item, "_escrow_brokers", [])):
            text = b.log
            tail = "\n".join(text.splitlines()[-300:])
            report.sections.append((f"escrowd #{i} output ({ESCROWD})", tail))


@pytest.fixture(autouse=True)
def clean_passed_tmp_path(request, tmp_path):
    """Removes a passed test's temporary directory when it ends (after its brokers stopped: an
    autouse fixture is set up first and torn down last). Every escrowd allocates its commit log's
    whole ring when it starts (64 MiB by default), and pytest keeps the directories of its last
    three runs: a run of the suite would otherwise leave tens of GiB. A failed test's stays."""
    yield
    report = getattr(request.node, "_report_call", None)
    if report is not None and report.passed:
        shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.fixture
def broker_factory(request, tmp_path):
    """broker_factory(config=None, data_dir=None, args=(), start=True, env=None) -> Broker.

    Every broker is stopped at the end of the test; one that died on its own, or that does not
    exit 0 on SIGTERM, fails the test (a crash or a sanitizer report is a bug).
    """
    brokers = []
    request.node._escrow_brokers = brokers
    counter = itertools.count()

    def make(config=None, data_dir=None, args=(), start=True, listen=True, env=None):
        workdir = tmp_path / f"broker{next(counter)}"
        workdir.mkdir()
        b = Broker(data_dir=data_dir, config=config, args=args, workdir=workdir, listen=listen, env=env)
        brokers.append(b)
        if start:
            b.start()
        return b

    yield make

    problems = []
    for b in brokers:
        if b.proc is None:
            continue
        if b.proc.poll() is not None and not b.expect_exit:
            problems.append(f"escrowd exited by itself with status {b.proc.returncode}")
            b.close()
            continue
        if b.running():
            status = b.terminate()
            if status != 0:
                problems.append(f"escrowd exited with status {status} on SIGTERM")
        b.close()
    if problems:
        pytest.fail("; ".join(problems) + "\n" + "\n".join(b.log for b in brokers), pytrace=False)


@pytest.fixture
def broker(broker_factory):
    """A fresh escrowd with an empty temporary data directory and the default configuration."""
    return broker_factory()


# --------------------------------------------------------------------------------------------
# python3-stomp clients
# --------------------------------------------------------------------------------------------

class Collector(stomp.ConnectionListener):
    """Keeps every MESSAGE, ERROR and RECEIPT (thread-safe) and lets a test wait for them."""

    def __init__(self):
        self.cond = threading.Condition()
        self.messages = []
        self.errors = []
        self.receipts = []
        self.connected = None  # the CONNECTED frame
        self.disconnected = False
        self.heartbeats = 0
        self.receipt_frames = {}  # receipt-id -> the RECEIPT frame (headers and body)

    def on_connected(self, frame):
        with self.cond:
            self.connected = frame
            self.cond.notify_all()

    def on_message(self, frame):
        with self.cond:
            self.messages.append(frame)
            self.cond.notify_all()

    def on_error(self, frame):
        with self.cond:
            self.errors.append(frame)
            self.cond.notify_all()

    def on_receipt(self, frame):
        with self.cond:
            self.receipts.append(frame.headers.get("receipt-id"))
            self.receipt_frames[frame.headers.get("receipt-id")] = frame
            self.cond.notify_all()

    def on_heartbeat(self):
        with self.cond:
            self.heartbeats += 1

    def on_disconnected(self):
        with self.cond:
            self.disconnected = True
            self.cond.notify_all()

    def wait_for(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"timed out after {timeout:.0f} s waiting for {what}; have {len(self.messages)} "
                        f"messages, errors {[dict(e.headers) for e in self.errors]}, "
                        f"disconnected={self.disconnected}")
                self.cond.wait(min(left, 0.5))


class Client:
    """A python3-stomp Connection12 with a Collector; helper methods wait for receipts."""

    _ids = itertools.count(1)

    def __init__(self, broker, headers=None, heartbeats=(0, 0), wait=True):
        self.broker = broker
        self.conn = stomp.Connection12([broker.address], heartbeats=heartbeats, reconnect_attempts_max=1,
                                       timeout=TIMEOUT)
        self.listener = Collector()
        self.conn.set_listener("collector", self.listener)
        self.name = f"c{next(self._ids)}"
        self._receipts = itertools.count(1)
        self.conn.connect(wait=False, headers=dict(headers or {}))
        if wait:
            self.listener.wait_for(lambda: self.listener.connected is not None or self.listener.errors
                                   or self.listener.disconnected, TIMEOUT, "CONNECTED")
            assert self.listener.connected is not None, \
                f"no CONNECTED; errors {[dict(e.headers) for e in self.listener.errors]}"

    # -- frames ----------------------------------------------------------------------------------

    def new_receipt(self):
        return f"{self.name}-r{next(self._receipts)}"

    def wait_receipt(self, rid, timeout=None):
        self.listener.wait_for(lambda: rid in self.listener.receipts or self.listener.errors
                               or self.listener.disconnected, timeout or TIMEOUT, f"RECEIPT {rid}")
        assert rid in self.listener.receipts, \
            f"no RECEIPT {rid}; errors {[(dict(e.headers), e.body) for e in self.listener.errors]}"

    def send(self, destination, body, headers=None, receipt=True, wait=True):
        headers = dict(headers or {})
        rid = None
        if receipt:
            rid = self.new_receipt()
            headers["receipt"] = rid
        self.conn.send(destination, body, headers=headers)
        if rid and wait:
            self.wait_receipt(rid)
        return rid

    def subscribe(self, destination, id=None, ack="auto", headers=None, receipt=True):
        id = id or unique("sub")
        headers = dict(headers or {})
        rid = self.new_receipt() if receipt else None
        if rid:
            headers["receipt"] = rid
        self.conn.subscribe(destination, id, ack=ack, headers=headers)
        if rid:
            self.wait_receipt(rid)
        return id

    def unsubscribe(self, id, headers=None, receipt=True):
        headers = dict(headers or {})
        rid = self.new_receipt() if receipt else None
        if rid:
            headers["receipt"] = rid
        self.conn.unsubscribe(id, headers=headers)
        if rid:
            self.wait_receipt(rid)

    def ack(self, msg, receipt=False, transaction=None):
        ack_id = msg.headers["ack"] if hasattr(msg, "headers") else msg
        rid = self.new_receipt() if receipt else None
        self.conn.ack(ack_id, transaction=transaction, receipt=rid)
        if rid:
            self.wait_receipt(rid)

    def nack(self, msg, receipt=False, transaction=None):
        ack_id = msg.headers["ack"] if hasattr(msg, "headers") else msg
        rid = self.new_receipt() if receipt else None
        self.conn.nack(ack_id, transaction=transaction, receipt=rid)
        if rid:
            self.wait_receipt(rid)

    # -- transactions ----------------------------------------------------------------------------

    def _tx_frame(self, command, transaction, receipt, wait):
        rid = self.new_receipt() if receipt else None
        headers = {"transaction": transaction}
        if rid:
            headers["receipt"] = rid
        self.conn.send_frame(command, headers)
        if rid and wait:
            self.wait_receipt(rid)
        return rid

    def begin(self, transaction, receipt=True, wait=True):
        return self._tx_frame("BEGIN", transaction, receipt, wait)

    def commit(self, transaction, receipt=True, wait=True):
        return self._tx_frame("COMMIT", transaction, receipt, wait)

    def abort(self, transaction, receipt=True, wait=True):
        return self._tx_frame("ABORT", transaction, receipt, wait)

    def xa(self, verb, xid=None, flags=None, wait=True, timeout=None, **headers):
        """Sends an XA frame (verb "START" or "XA-START", ...) with a receipt and returns the
        RECEIPT as an XAReply (result, headers, body, xids). wait=False returns the receipt id;
        collect it later with xa_reply()."""
        command = verb if verb.upper().startswith("XA-") else "XA-" + verb
        command = command.upper()
        hdrs = {k.replace("_", "-"): str(v) for k, v in headers.items()}
        if xid is not None:
            hdrs["xid"] = str(xid)
        if flags is not None:
            hdrs["flags"] = flags if isinstance(flags, str) else "|".join(flags)
        rid = self.new_receipt()
        hdrs["receipt"] = rid
        self.conn.send_frame(command, hdrs)
        if not wait:
            return rid
        return self.xa_reply(rid, timeout)

    def xa_reply(self, rid, timeout=None):
        self.wait_receipt(rid, timeout)
        with self.listener.cond:
            f = self.listener.receipt_frames[rid]
        return XAReply(dict(f.headers), f.body)

    def disconnect(self):
        """DISCONNECT with a receipt: everything sent before it is done when this returns."""
        if self.conn.is_connected():
            rid = self.new_receipt()
            self.conn.disconnect(receipt=rid)
            # stomp.py waits for the receipt itself and then closes the socket.
        self.close()

    def drop(self):
        """Closes the TCP connection without DISCONNECT (a crashed client)."""
        self.close()

    def close(self):
        try:
            self.conn.transport.disconnect_socket()
            self.conn.transport.stop()
        except Exception:
            pass

    # -- waiting ---------------------------------------------------------------------------------

    @property
    def messages(self):
        with self.listener.cond:
            return list(self.listener.messages)

    @property
    def errors(self):
        with self.listener.cond:
            return list(self.listener.errors)

    def wait_messages(self, n, timeout=None, subscription=None):
        """Waits until at least n messages (of one subscription, if given) arrived; returns them."""
        def matching():
            return [m for m in self.listener.messages
                    if subscription is None or m.headers.get("subscription") == subscription]
        # A closed connection gets nothing more: stop waiting (a crashed broker fails fast).
        self.listener.wait_for(lambda: len(matching()) >= n or self.listener.errors or self.listener.disconnected,
                               timeout or TIMEOUT, f"{n} messages")
        with self.listener.cond:
            got = matching()
        assert not self.listener.errors, f"ERROR frames: {[(dict(e.headers), e.body) for e in self.listener.errors]}"
        assert len(got) >= n, f"connection closed after {len(got)} of {n} messages"
        return got

    def wait_body(self, body, timeout=None):
        """Waits until a message with this body arrived; returns every message so far."""
        self.listener.wait_for(lambda: any(m.body == body for m in self.listener.messages) or self.listener.errors
                               or self.listener.disconnected, timeout or TIMEOUT, f"message {body!r}")
        assert not self.listener.errors, f"ERROR frames: {[(dict(e.headers), e.body) for e in self.listener.errors]}"
        assert any(m.body == body for m in self.messages), f"connection closed before message {body!r} arrived"
        return self.messages

    def wait_error(self, timeout=None):
        self.listener.wait_for(lambda: self.listener.errors, timeout or TIMEOUT, "an ERROR frame")
        return self.errors[0]

    def wait_disconnected(self, timeout=None):
        self.listener.wait_for(lambda: self.listener.disconnected, timeout or TIMEOUT, "the server to close")

    def settle(self, count, subscription=None):
        """Asserts that exactly `count` messages (of one subscription, if given) have arrived once
        the broker has answered a later frame on this connection: the BEGIN and ABORT of a
        throwaway local transaction (used where no sentinel can prove absence, e.g. a full prefetch
        window). The broker handles a connection's frames in order and writes to it in order, so
        every MESSAGE it gave this connection before it handled that ABORT arrived before the
        ABORT's RECEIPT. That covers deliveries caused by what the test has already seen done (a
        RECEIPT or a message, on any connection); one a timer would cause needs its own wait."""
        name = unique("settle")
        self.begin(name, receipt=False)
        self.abort(name)
        got = [m for m in self.messages if subscription is None or m.headers.get("subscription") == subscription]
        assert len(got) == count, f"expected {count} messages, got {len(got)}: {[m.body for m in got]}"


class XAReply:
    """The RECEIPT answering an XA frame."""

    def __init__(self, headers, body):
        self.headers = headers
        self.body = body.decode() if isinstance(body, bytes) else (body or "")
        self.result = headers.get("xa-result")
        self.message = headers.get("message")

    @property
    def xids(self):
        """The xids of an XA-RECOVER answer, in order."""
        return [line for line in self.body.split("\n") if line]

    @property
    def count(self):
        return int(self.headers["xa-count"]) if "xa-count" in self.headers else None

    def __repr__(self):
        return f"XAReply({self.result!r}, {self.headers!r}, {self.body!r})"


def xa(client, verb, xid=None, flags=None, **headers):
    """xa(client, "PREPARE", xid) -> XAReply: one XA frame with a receipt, answered."""
    return client.xa(verb, xid, flags, **headers)


_xid_serial = itertools.count(1)


def new_xid(format_id=4242, gtrid=None, bqual=b"\x01"):
    """A fresh xid text 'formatID:gtrid-hex:bqual-hex' (unique gtrid unless one is given)."""
    if gtrid is None:
        gtrid = f"gtrid-{uuid.uuid4().hex[:12]}-{next(_xid_serial)}".encode()
    if isinstance(gtrid, str):
        gtrid = gtrid.encode()
    if isinstance(bqual, str):
        bqual = bqual.encode()
    return f"{format_id}:{gtrid.hex()}:{bqual.hex()}"


@pytest.fixture
def stomp_client(request):
    """stomp_client(broker, headers=None, heartbeats=(0, 0)) -> Client; all closed at the end."""
    clients = []

    def make(broker, headers=None, heartbeats=(0, 0), wait=True):
        c = Client(broker, headers=headers, heartbeats=heartbeats, wait=wait)
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()


def drain(client, destination, sentinel_sender, ack="auto", headers=None, timeout=None):
    """Subscribes `client` to `destination`, sends a sentinel through `sentinel_sender` and returns
    the bodies received before the sentinel (in order). On a queue with one consumer, FIFO order
    means everything stored before the sentinel has arrived once the sentinel has."""
    sub = client.subscribe(destination, ack=ack, headers=headers)
    sentinel = unique("sentinel")
    sentinel_sender.send(destination, sentinel)
    client.wait_body(sentinel, timeout=timeout)
    msgs = [m for m in client.messages if m.headers.get("subscription") == sub]
    bodies = [m.body for m in msgs]
    assert bodies.count(sentinel) == 1
    index = bodies.index(sentinel)
    return msgs[:index], sub


# --------------------------------------------------------------------------------------------
# Raw sockets
# --------------------------------------------------------------------------------------------

class Frame:
    def __init__(self, command, header_list, body, raw_header_lines=()):
        self.command = command
        self.raw_header_lines = list(raw_header_lines)  # the header lines as they came, escaped
        self.header_list = header_list  # every (name, value) in order, unescaped
        self.headers = {}
        for k, v in header_list:
            self.headers.setdefault(k, v)  # the first occurrence wins
        self.body = body  # bytes

    def __repr__(self):
        return f"Frame({self.command!r}, {self.header_list!r}, {self.body[:200]!r})"


_UNESCAPE = {b"\\r": b"\r", b"\\n": b"\n", b"\\c": b":", b"\\\\": b"\\"}


def _unescape(raw):
    return re.sub(rb"\\.", lambda m: _UNESCAPE.get(m.group(0), m.group(0)), raw)


class Closed(Exception):
    pass


class RawStomp:
    """A STOMP connection over a plain socket: send any bytes, read and roughly parse frames."""

    def __init__(self, port, timeout=None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout or TIMEOUT)
        self.buf = b""
        self.closed = False
        self.eols = []  # monotonic arrival times of heart-beat EOLs between frames
        self.raw = bytearray()  # everything received (a bytearray: appending to bytes copies it all)

    def send(self, data):
        """Sends bytes; returns False if the server had already closed (EPIPE / reset)."""
        if isinstance(data, str):
            data = data.encode()
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    def _recv(self, timeout):
        self.sock.settimeout(max(timeout, 0.001))
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return None
        except ConnectionResetError:
            data = b""
        if not data:
            self.closed = True
            return b""
        self.raw += data
        self.buf += data
        return data

    def _parse(self):
        """One frame from the buffer, or None if incomplete. EOLs before it count as heart-beats."""
        while True:
            if self.buf.startswith(b"\r\n"):
                self.buf = self.buf[2:]
            elif self.buf.startswith(b"\n"):
                self.buf = self.buf[1:]
            else:
                break
            self.eols.append(time.monotonic())
        end = re.search(rb"\r?\n\r?\n", self.buf)
        if not end:
            return None
        head = self.buf[:end.start()]
        lines = re.split(rb"\r?\n", head)
        command = lines[0].decode()
        header_list = []
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if command != "CONNECTED":
                name, value = _unescape(name), _unescape(value)
            header_list.append((name.decode("utf-8", "replace"), value.decode("utf-8", "replace")))
        start = end.end()
        length = next((v for k, v in header_list if k == "content-length"), None)
        if length is not None:
            n = int(length)
            if len(self.buf) < start + n + 1:
                return None
            assert self.buf[start + n:start + n + 1] == b"\0", f"no NUL after content-length body: {self.buf!r}"
            body = self.buf[start:start + n]
            self.buf = self.buf[start + n + 1:]
        else:
            nul = self.buf.find(b"\0", start)
            if nul < 0:
                return None
            body = self.buf[start:nul]
            self.buf = self.buf[nul + 1:]
        return Frame(command, header_list, body, lines[1:])

    def read_frame(self, timeout=None):
        """The next frame; raises Closed if the server closed first, TimeoutError on timeout."""
        deadline = time.monotonic() + (timeout or TIMEOUT)
        while True:
            f = self._parse()
            if f is not None:
                return f
            if self.closed:
                raise Closed(f"server closed the connection; unparsed {self.buf[:300]!r}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no frame within the timeout; buffered {self.buf[:300]!r}")
            self._recv(left)

    def read_until_closed(self, timeout=None):
        """Every frame until the server closes; fails if it does not close within the timeout."""
        frames = []
        deadline = time.monotonic() + (timeout or TIMEOUT)
        while True:
            f = self._parse()
            if f is not None:
                frames.append(f)
                continue
            if self.closed:
                return frames
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"the server did not close the connection within {timeout or TIMEOUT:.0f} s; "
                                     f"frames so far {frames}, buffered {self.buf[:300]!r}")
            self._recv(left)

    def pump(self, seconds):
        """Reads (and parses) whatever arrives for `seconds`; returns the frames."""
        frames = []
        deadline = time.monotonic() + seconds
        while not self.closed:
            f = self._parse()
            if f is not None:
                frames.append(f)
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._recv(left)
        while (f := self._parse()) is not None:
            frames.append(f)
        return frames

    def connect(self, headers="accept-version:1.2\nhost:localhost\n", command="CONNECT"):
        """Sends CONNECT and returns the CONNECTED frame."""
        self.send(f"{command}\n{headers}\n\0")
        f = self.read_frame()
        assert f.command == "CONNECTED", f"expected CONNECTED, got {f}"
        return f

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


@pytest.fixture
def raw(request):
    """raw(broker_or_port) -> RawStomp; all closed at the end."""
    socks = []

    def make(target, timeout=None):
        port = target if isinstance(target, int) else target.port
        s = RawStomp(port, timeout)
        socks.append(s)
        return s

    yield make
    for s in socks:
        s.close()


def assert_escaped(frame):
    """A STOMP 1.2 frame other than CONNECTED: every header line has one ':' (the separator) and
    only the escapes \\r \\n \\c \\\\."""
    for line in frame.raw_header_lines:
        name, _, value = line.partition(b":")
        assert b":" not in value, f"unescaped ':' in header line {line!r} of {frame.command}"
        for part in (name, value):
            assert re.fullmatch(rb"(?:[^\\]|\\[rnc\\])*", part, re.S), \
                f"invalid escape in header line {line!r} of {frame.command}"


def frame_bytes(command, headers=(), body=b""):
    """Encodes a frame without escaping (tests write escapes themselves when they mean to)."""
    if isinstance(body, str):
        body = body.encode()
    lines = [command] + [f"{k}:{v}" for k, v in headers]
    return ("\n".join(lines) + "\n\n").encode() + body + b"\0"


# --------------------------------------------------------------------------------------------
# Queues: naming, filling, looking, emptying
# --------------------------------------------------------------------------------------------

def queue(prefix="q"):
    """A queue destination no other test uses: /queue/<prefix>-<random>."""
    return f"/queue/{unique(prefix)}"


def bodies(msgs):
    """The bodies of python3-stomp messages or of the frames consume_all returns, in order."""
    return [m.body for m in msgs]


def preload(broker, q, payloads):
    """Sends `payloads` (persistent) to q in one write on a raw connection of its own, only the last
    with a receipt, and returns once it is answered: then every one is stored (a connection's sends
    are stored in order). Fast enough for tens of thousands."""
    *rest, last = payloads
    s = RawStomp(broker.port)
    try:
        s.connect()
        s.send(b"".join(frame_bytes("SEND", [("destination", q)], body) for body in rest) +
               frame_bytes("SEND", [("destination", q), ("receipt", "preloaded")], last))
        f = s.read_frame(timeout=8 * TIMEOUT)
        assert (f.command, f.headers.get("receipt-id")) == ("RECEIPT", "preloaded"), f
    finally:
        s.close()


def look(broker, stomp_client, q):
    """The messages (python3-stomp frames) a fresh consumer finds in q, up to a sentinel, consuming
    none of them: client-individual, only the sentinel is acknowledged (with a receipt), and the
    connection then goes away, so everything else returns to q."""
    p = stomp_client(broker)
    c = stomp_client(broker)
    before, _ = drain(c, q, p, ack="client-individual")
    for m in c.messages:
        if m.body.startswith("sentinel-"):
            c.ack(m, receipt=True)
    c.close()
    p.close()
    return before


def consume_all(broker, destination, expected=0, timeout=None):
    """Empties `destination`: every message a new auto-ack consumer of it gets, in order, up to a
    sentinel sent after it subscribed and, with `expected`, after that many messages arrived (for
    messages a timer or another connection puts there later: expiry, dead letters). Messages that
    arrive after the sentinel, before the connection's DISCONNECT receipt, are consumed too and come
    last. Returns them as Frames with text bodies (headers unescaped, as python3-stomp gives them)
    once their removal is durable: auto-acknowledged removals are written behind the deliveries,
    and the DISCONNECT receipt comes only once every earlier write of the connection is durable, so
    a SIGKILL after consume_all cannot bring them back. A raw socket: python3-stomp takes too long
    for 20,000 messages."""
    deadline = time.monotonic() + (timeout or 8 * TIMEOUT)
    sentinel = unique("sentinel")
    s = RawStomp(broker.port)
    got = []

    def keep(f):
        got.append(Frame(f.command, f.header_list, f.body.decode(), f.raw_header_lines))

    def next_frame(what):
        left = deadline - time.monotonic()
        assert left > 0, f"{what} from {destination} did not come; {len(got)} messages so far"
        f = s.read_frame(timeout=left)
        assert f.command != "ERROR", f"{destination}: {f}"
        return f

    try:
        s.connect()
        s.send(frame_bytes("SUBSCRIBE", [("destination", destination), ("id", "all"), ("ack", "auto")]))
        while len(got) < expected:
            f = next_frame(f"message {len(got) + 1} of {expected}")
            if f.command == "MESSAGE":
                keep(f)
        s.send(frame_bytes("SEND", [("destination", destination), ("persistent", "false")], sentinel))
        while True:
            f = next_frame("the sentinel")
            if f.command == "MESSAGE":
                if f.body == sentinel.encode():
                    break
                keep(f)
        s.send(frame_bytes("DISCONNECT", [("receipt", "drained")]))
        while True:
            f = next_frame("the DISCONNECT receipt")
            if f.command == "RECEIPT" and f.headers.get("receipt-id") == "drained":
                break
            if f.command == "MESSAGE":
                keep(f)
    finally:
        s.close()
    return got
