"""STOMP over WebSocket: the `/stomp` path of the [http] listener and the dedicated
[[websocket-listener]], with the clients web applications use: @stomp/stompjs from Node over the
`ws` package (tests/js/stomp_node.mjs) and from a page in headless Chromium (tests/js/chromium_stomp.mjs,
Debian's /usr/bin/chromium through puppeteer-core), cross-checked with python3-stomp over TCP (a
message sent over WebSocket reaches a TCP consumer and back, a NACKed or unacknowledged message
comes back, an ACKed one is gone). Then hostile input over raw WebSockets (Node's `ws`) and raw
sockets: a foreign Origin (403), a handshake without Sec-WebSocket-Key (400), a frame over
limits.max-frame-size in one message and in many, binary garbage, a client that never finishes its
handshake or never sends CONNECT (limits.connect-timeout-ms), one that promised heart-beats and
went silent; after each, other clients go on working. The counters escrow_websocket_* of /metrics
count what was accepted and refused.

Needs Node (Debian's nodejs) and tests/js/node_modules: scripts/setup runs `npm ci` in tests/js
and installs chromium. Without node_modules the module is skipped. Screenshots of the Chromium page
go to $ESCROW_ARTIFACTS (default tests/artifacts, git-ignored).

Each scenario of stomp_node.mjs prints JSON lines: {"event": ...} while it runs (the tests act on
some: "subscribed", "connected"), then {"result": ...} (exit 0) or {"error": ...} (exit 1).
"""

import base64
import hashlib
import json
import os
import queue as queues
import re
import shutil
import socket
import subprocess
import threading
import urllib.request
import time
from pathlib import Path

import pytest

from conftest import ROOT, SLOW, TIMEOUT, RawStomp, consume_all, drain, frame_bytes, look, queue, unique

JS = ROOT / "tests" / "js"
if not (JS / "node_modules").is_dir():
    pytest.skip("tests/js/node_modules is missing: run scripts/setup (it runs `npm ci` in tests/js) "
                "to test STOMP over WebSocket with @stomp/stompjs", allow_module_level=True)

from test_http import get, scrape  # noqa: E402 (after the skip: it needs python3-prometheus-client)
from test_security import hash_password  # noqa: E402
from test_tls import certs  # noqa: E402,F401  (certs: the fixture)

NODE = shutil.which("node") or "/usr/bin/node"
STOMP_NODE = JS / "stomp_node.mjs"
CHROMIUM_STOMP = JS / "chromium_stomp.mjs"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("ESCROW_ARTIFACTS", ROOT / "tests" / "artifacts"))

_HTTP = re.compile(r"http listening on 127\.0\.0\.1:(\d+)")
_WS = re.compile(r"websocket listening on 127\.0\.0\.1:(\d+)")
KINDS = ["http", "listener"]  # /stomp of the [http] listener, a [[websocket-listener]]
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


# --------------------------------------------------------------------------------------------
# escrowd with WebSocket listeners
# --------------------------------------------------------------------------------------------

def ws_config(extra="", http=True, listener=True, http_extra="", listener_extra=""):
    parts = [extra]
    if http:
        parts.append(f'[http]\nlisten = "127.0.0.1:0"\n{http_extra}')
    if listener:
        parts.append(f'[[websocket-listener]]\nlisten = "127.0.0.1:0"\n{listener_extra}')
    return "\n".join(parts) + "\n"


class WsBroker:
    """An escrowd and the ports of its HTTP listener (/stomp) and its [[websocket-listener]]."""

    def __init__(self, broker):
        self.broker = broker
        self.http_port = self._port(_HTTP)
        self.ws_port = self._port(_WS)
        for name, p in (("http", self.http_port), ("websocket", self.ws_port)):
            assert p is None or p != broker.port, \
                f"conftest took the {name} port {p} for the STOMP port: the STOMP listener's line must come first\n{broker.log}"

    def _port(self, pattern):
        runs = self.broker.log.split("----- escrowd run ")
        m = pattern.search(runs[-1])
        return int(m.group(1)) if m else None

    def port(self, kind):
        p = self.http_port if kind == "http" else self.ws_port
        assert p, f"no {kind} WebSocket port in the log:\n{self.broker.log}"
        return p

    def url(self, kind, path="/stomp"):
        return f"ws://127.0.0.1:{self.port(kind)}{path}"


@pytest.fixture
def ws_broker(broker_factory):
    """ws_broker(extra="", http=True, listener=True, http_extra="", listener_extra="",
    before_start=None) -> WsBroker; before_start(broker) runs before escrowd starts (to write files
    into its working directory)."""

    def make(extra="", before_start=None, **kw):
        b = broker_factory(config=ws_config(extra, **kw), start=False)
        if before_start:
            before_start(b)
        b.start()
        return WsBroker(b)

    return make


# --------------------------------------------------------------------------------------------
# Node
# --------------------------------------------------------------------------------------------

def run_js(args, on_event=None, timeout=None):
    """Runs `node ARGS`; calls on_event(obj) for each {"event": ...} line as it comes; returns
    (the last JSON line, exit status, stderr). The process is killed if it outlives the timeout."""
    proc = subprocess.Popen([NODE, *map(str, args)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=JS)
    lines = queues.Queue()
    err = []

    def read_out():
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    def read_err():
        err.append(proc.stderr.read())

    threads = [threading.Thread(target=read_out, daemon=True), threading.Thread(target=read_err, daemon=True)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + (timeout or 8 * TIMEOUT)
    final, seen = None, []
    try:
        while True:
            left = deadline - time.monotonic()
            try:
                line = lines.get(timeout=max(left, 0.01))
            except queues.Empty:
                raise AssertionError(f"node {args[0].name} {args[2] if len(args) > 2 else ''} did not finish in time; "
                                     f"output so far: {seen}")
            if line is None:
                break
            seen.append(line.rstrip("\n"))
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "event" in obj:
                if on_event:
                    on_event(obj)
                continue
            final = obj
        proc.wait(timeout=max(deadline - time.monotonic(), 1))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for t in threads:
            t.join(5)
    return final, proc.returncode, "".join(err)


def node(url, scenario, on_event=None, **options):
    """The result object of stomp_node.mjs's scenario; fails the test with what it saw if the
    scenario failed."""
    options.setdefault("timeout_ms", int(TIMEOUT * 1000))
    final, status, stderr = run_js([STOMP_NODE, url, scenario, json.dumps(options)], on_event)
    assert final is not None and "result" in final and status == 0, \
        f"stomp_node.mjs {scenario} failed (exit {status}):\n{json.dumps(final, indent=1)}\nstderr:\n{stderr[-3000:]}"
    return final["result"]


def error_message(frame):
    """An ERROR's message header. stompjs leaves headers escaped until CONNECTED (it unescapes only
    on a 1.2 connection), so an ERROR answering CONNECT may read 'login refused\\c ...'."""
    return frame["headers"].get("message", "").replace("\\c", ":")


def tcp_works(broker, stomp_client):
    """A python3-stomp client over TCP still sends and receives."""
    q = queue("tcp-check")
    c = stomp_client(broker)
    c.subscribe(q)
    c.send(q, "still working")
    c.wait_body("still working")
    c.disconnect()


def ws_works(url):
    """A new WebSocket connection still gets CONNECTED; its DISCONNECT's RECEIPT comes, then a
    normal close (1000)."""
    r = node(url, "raw-open")
    assert r["opened"] and r["connected"]["command"] == "CONNECTED", r
    assert r["receipt"]["headers"]["receipt-id"] == "bye" and r["closed"]["code"] == 1000, r


# --------------------------------------------------------------------------------------------
# Raw HTTP upgrades
# --------------------------------------------------------------------------------------------

class Upgrade:
    def __init__(self, sock, status, headers, body, key):
        self.sock, self.status, self.headers, self.body, self.key = sock, status, headers, body, key

    def accept_ok(self):
        expected = base64.b64encode(hashlib.sha1((self.key + WS_GUID).encode()).digest()).decode()
        return self.headers.get("sec-websocket-accept") == expected

    def closed_by_server(self, timeout):
        """True once the server closed the connection (EOF or reset) within `timeout` seconds;
        the bytes read meanwhile are discarded (the answer's body was read already)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.sock.settimeout(left)
            try:
                if not self.sock.recv(65536):
                    return True
            except socket.timeout:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True


def read_http_answer(sock, timeout):
    """(status, {lower-case name: value}, body) of one HTTP answer on `sock`."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed without a complete HTTP answer: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0") or 0)
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, headers, rest[:length]


def upgrade(port, path="/stomp", origin=None, key=True, version="13",
            protocols="v12.stomp, v11.stomp, v10.stomp", host=None, open_sockets=None, extra=()):
    """Sends a WebSocket upgrade request by hand; returns the answer (the socket stays open)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    if open_sockets is not None:
        open_sockets.append(s)
    k = base64.b64encode(os.urandom(16)).decode()
    lines = [f"GET {path} HTTP/1.1", f"Host: {host or f'127.0.0.1:{port}'}", "Upgrade: websocket",
             "Connection: Upgrade"]
    if key:
        lines.append(f"Sec-WebSocket-Key: {k}")
    if version:
        lines.append(f"Sec-WebSocket-Version: {version}")
    if protocols:
        lines.append(f"Sec-WebSocket-Protocol: {protocols}")
    if origin:
        lines.append(f"Origin: {origin}")
    lines += list(extra)
    s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    status, headers, body = read_http_answer(s, TIMEOUT)
    return Upgrade(s, status, headers, body, k)


@pytest.fixture
def sockets():
    """A list to put raw sockets in; all closed at the end."""
    socks = []
    yield socks
    for s in socks:
        try:
            s.close()
        except OSError:
            pass


# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------

def websocket_samples(http_port):
    """{(name, frozenset(labels)): value} of every sample whose name holds 'websocket'."""
    return {k: v for k, v in scrape(http_port).items() if "websocket" in k[0]}


def counter(samples, name, **labels):
    return sum(v for (n, ls), v in samples.items()
               if n == name and all(dict(ls).get(k) == val for k, val in labels.items()))


def wait_open_websockets(w, expected):
    """Waits until the gauge escrow_websocket_connections says `expected` (closes are counted when
    the broker has seen them, a moment after the client has)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        samples = websocket_samples(w.http_port)
        value = counter(samples, "escrow_websocket_connections")
        if value == expected:
            return
        assert time.monotonic() < deadline, f"escrow_websocket_connections stayed {value}, not {expected}: {samples}"
        time.sleep(0.05)


def refused_by_reason(samples):
    return {dict(ls).get("reason"): v for (n, ls), v in samples.items() if n == "escrow_websocket_refused_total"}


class Refusals:
    """What escrow_websocket_refused_total{reason} counted since this was made."""

    def __init__(self, w):
        self.port = w.http_port
        self.before = refused_by_reason(websocket_samples(self.port))

    def delta(self):
        after = refused_by_reason(websocket_samples(self.port))
        return {k: v - self.before.get(k, 0) for k, v in after.items() if v - self.before.get(k, 0)}


# --------------------------------------------------------------------------------------------
# stompjs from Node
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_stompjs_subscribes_sends_and_receives_body_and_headers(ws_broker, kind):
    w = ws_broker()
    q = queue("ws")
    r = node(w.url(kind), "send-subscribe", destination=q, body="hello over WebSocket ✓")
    assert r["protocol"] == "v12.stomp"
    assert r["connected"]["headers"]["version"] == "1.2"
    assert r["connected"]["headers"]["server"].startswith("escrow/")
    assert r["send_receipt"]["headers"]["receipt-id"].startswith("send-")
    m = r["message"]
    assert m["body"] == "hello over WebSocket ✓"
    # Every header stompjs sent comes back unchanged: escaped on the way in (:, \n, \) and out.
    for name, value in r["sent_headers"].items():
        assert m["headers"].get(name) == value, (name, m["headers"])
    assert m["headers"]["destination"] == q
    assert m["headers"]["subscription"] and m["headers"]["message-id"]
    assert m["headers"]["redelivered"] == "false" and m["headers"]["delivery-count"] == "1"
    assert r["disconnect_receipt"]["headers"]["receipt-id"].startswith("disconnect-")
    assert r["errors"] == [] and r["unhandled"] == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_message_goes_from_websocket_to_tcp_and_back(ws_broker, stomp_client, kind):
    w = ws_broker()
    b = w.broker
    to_tcp, to_ws = queue("ws-to-tcp"), queue("tcp-to-ws")
    node(w.url(kind), "send", destination=to_tcp, bodies=["one", "two"], headers={"x-from": "websocket"})
    got = consume_all(b, to_tcp)
    assert [m.body for m in got] == ["one", "two"]
    assert all(m.headers.get("x-from") == "websocket" for m in got), [m.headers for m in got]

    tcp = stomp_client(b)

    def on_event(e):
        if e["event"] == "subscribed":
            tcp.send(to_ws, "from tcp", headers={"x-from": "tcp", "content-type": "text/plain"})

    r = node(w.url(kind), "receive", on_event, destination=to_ws, count=1, ack="client-individual")
    (m,) = r["messages"]
    assert m["body"] == "from tcp" and m["headers"]["x-from"] == "tcp"
    assert m["headers"]["content-type"] == "text/plain"
    # ACKed with a receipt over WebSocket: gone for everyone.
    assert consume_all(b, to_ws) == []


def test_client_individual_ack_and_nack_over_websocket(ws_broker, stomp_client):
    w = ws_broker(listener=False)
    b = w.broker
    q = queue("acks")
    r = node(w.url("http"), "ack-nack", destination=q)
    first, second, again = r["deliveries"]
    assert (first["body"], second["body"], again["body"]) == ("first", "second", "second")
    assert first["headers"]["redelivered"] == "false" and second["headers"]["delivery-count"] == "1"
    # The NACKed message comes back to the same subscription, marked as redelivered.
    assert again["headers"]["redelivered"] == "true"
    assert again["headers"]["delivery-count"] == "2"
    assert again["headers"]["message-id"] == second["headers"]["message-id"]
    assert r["errors"] == [] and r["unhandled"] == []
    # Over TCP: the ACKed one is gone; the redelivery left unacknowledged at DISCONNECT is back.
    left = look(b, stomp_client, q)
    assert [m.body for m in left] == ["second"]
    assert left[0].headers["redelivered"] == "true" and left[0].headers["delivery-count"] == "3"


def test_transactions_over_websocket(ws_broker, stomp_client):
    w = ws_broker(listener=False)
    b = w.broker
    q, acks = queue("tx"), queue("tx-acks")
    r = node(w.url("http"), "transactions", destination=q, ack_destination=acks)
    assert r["errors"] == [] and r["unhandled"] == []
    # A SEND in a transaction is invisible until COMMIT (the sentinel sent after it came first).
    assert r["before_commit"] == ["sentinel-1"]
    assert r["order"] == ["sentinel-1", "in-tx-committed", "sentinel-2", "ack-aborted", "ack-committed", "ack-aborted"]
    # The ABORT of an ACK returns the message to its queue, redelivered (docs/transactions.md).
    assert r["after_abort"]["headers"]["redelivered"] == "true"
    assert r["after_abort"]["headers"]["delivery-count"] == "2"
    assert r["after_abort"]["headers"]["message-id"] == r["first_delivery_of_aborted_ack"]["headers"]["message-id"]
    # The aborted SEND was never stored; the ACK in the aborted transaction did not count, the one
    # in the committed transaction did.
    assert consume_all(b, q) == []
    left = look(b, stomp_client, acks)
    assert [m.body for m in left] == ["ack-aborted"] and left[0].headers["delivery-count"] == "3"


def test_receipts_through_watch_for_receipt(ws_broker):
    w = ws_broker(listener=False)
    q = queue("receipts")
    r = node(w.url("http"), "receipts", destination=q)
    assert [f["headers"]["receipt-id"] for f in r["receipts"]] == r["asked"] == \
        ["r-subscribe", "r-send", "r-ack", "r-unsubscribe"]
    assert all(f["command"] == "RECEIPT" for f in r["receipts"])
    assert r["disconnect_receipt"]["command"] == "RECEIPT"
    assert r["errors"] == [] and r["unhandled"] == []
    assert consume_all(w.broker, q) == []  # the ACK with a receipt removed it


def test_heart_beats_keep_an_idle_stompjs_connection_up(ws_broker):
    w = ws_broker(listener=False)
    r = node(w.url("http"), "heartbeat", destination=queue("hb"), idle_ms=3500, pongs=3)
    assert r["connected"]["headers"]["heart-beat"] == "1000,1000"
    assert r["idle_ms"] >= 3500
    # The broker's heart-beats reached stompjs, at about the negotiated interval (not a flood) ...
    assert len(r["pong_times_ms"]) >= 3, r
    assert all(500 <= gap <= 2000 * SLOW for gap in r["pong_gaps_ms"]), r["pong_gaps_ms"]
    # ... and stompjs's reached the broker: silent past 1000 + grace-ms it would have been closed.
    assert r["heartbeat_lost"] == 0 and r["closes_while_idle"] == 0
    assert r["message"]["body"] == "after the silence"
    assert "heart-beat timeout" not in w.broker.log


@pytest.mark.parametrize("kind", KINDS)
def test_a_client_that_promised_heart_beats_and_went_silent_is_closed(ws_broker, stomp_client, kind):
    w = ws_broker()
    r = node(w.url(kind), "raw-heartbeat-silent")
    # heart-beat:1000,0: the client sends every 1000 ms and wants none; the server expects 1000.
    assert r["connected"]["headers"]["heart-beat"] == "0,1000"
    errors = [f for f in r["frames"] if f["command"] == "ERROR"]
    assert errors and errors[0]["headers"]["message"].startswith("heart-beat timeout"), r
    assert r["closed"]["code"] == 1008, r["closed"]  # after an ERROR: policy violation
    # 1000 ms negotiated + 1000 ms grace: not before, and not much later.
    assert 1500 <= r["silent_ms"] <= 2000 + 3000 * SLOW, r
    tcp_works(w.broker, stomp_client)


@pytest.mark.parametrize("kind", KINDS)
def test_a_frame_split_across_messages_and_frames_packed_in_one(ws_broker, kind):
    w = ws_broker()
    q = queue("split")
    r = node(w.url(kind, "/stomp" if kind == "http" else "/any/path"), "raw-split", destination=q)
    assert r["connected"]["command"] == "CONNECTED" and r["connected"]["headers"]["version"] == "1.2"
    assert r["protocol"] == "v12.stomp"
    frames = r["frames"]
    assert [f["command"] for f in frames] == ["RECEIPT", "MESSAGE", "MESSAGE", "MESSAGE", "RECEIPT"], frames
    assert frames[0]["headers"]["receipt-id"] == "subscribed"
    assert [f.get("body") for f in frames[1:4]] == ["first", "second", "third\x00body!"]
    assert frames[4]["headers"]["receipt-id"] == "bye"
    assert r["closed"]["code"] == 1000, r["closed"]  # DISCONNECT: a normal close
    # A text message is always valid UTF-8 (a browser closes the connection otherwise).
    assert all(m["binary"] or m["utf8"] for m in r["ws_messages"]), r["ws_messages"]
    assert consume_all(w.broker, q) == []


def test_binary_bodies_cross_websocket_and_tcp_unchanged(ws_broker):
    w = ws_broker(listener=False)
    b = w.broker
    q, back = queue("bin"), queue("bin-back")
    payload = bytes([0xFF, 0x00, 0xFE, 0x80, 0xC3, 0x28, 0x0A])  # not UTF-8, with NUL and LF
    s = RawStomp(b.port)
    try:
        s.connect()
        s.send(frame_bytes("SEND", [("destination", q)], "plain text"))
        s.send(frame_bytes("SEND", [("destination", q), ("content-length", str(len(payload))), ("receipt", "r")],
                           payload))
        assert s.read_frame().headers.get("receipt-id") == "r"
    finally:
        s.close()
    sent_back = bytes(range(0x80, 0x90)) + b"\x00tail"
    r = node(w.url("http"), "raw-binary", destination=q, count=2, send_destination=back, send_hex=sent_back.hex())
    messages = [f for f in r["frames"] if f["command"] == "MESSAGE"]
    assert messages[0]["body"] == "plain text"
    assert messages[1]["body_hex"] == payload.hex()
    # Which WebSocket message carried which frame: the non-UTF-8 body came in a binary message,
    # and no text message held anything but UTF-8.
    carrying = [m for m in r["ws_messages"] if "MESSAGE" in m["frames"]]
    assert any(m["binary"] and not m["utf8"] for m in carrying), r["ws_messages"]
    assert all(m["binary"] or m["utf8"] for m in r["ws_messages"]), r["ws_messages"]
    got = RawStomp(b.port)
    try:
        got.connect()
        got.send(frame_bytes("SUBSCRIBE", [("destination", back), ("id", "1")]))
        f = got.read_frame()
        assert f.command == "MESSAGE" and f.body == sent_back, f
    finally:
        got.close()


USERS_SETTINGS = """
[security]
users-file = "users.toml"
login-backoff-max-ms = 200

[[security-settings]]
match = "#"
send = ["app"]
consume = ["app"]
"""


@pytest.fixture(scope="module")
def alice_hash():
    return hash_password("alice-secret")


@pytest.mark.parametrize("kind", KINDS)
def test_login_and_passcode_against_a_users_file(ws_broker, stomp_client, alice_hash, kind):
    w = ws_broker(USERS_SETTINGS, before_start=lambda b: (b.workdir / "users.toml").write_text(
        f'[[user]]\nname = "alice"\npassword = "{alice_hash}"\nroles = ["app"]\n'))
    url = w.url(kind)
    ok = node(url, "login", login="alice", passcode="alice-secret", destination=queue("login"))
    assert ok["connected"] is not None and ok["errors"] == [], ok
    assert ok["message"]["body"] == "logged in"

    for login, passcode in (("alice", "wrong"), ("mallory", "alice-secret")):
        bad = node(url, "login", login=login, passcode=passcode)
        assert bad["connected"] is None
        assert [error_message(e) for e in bad["errors"]] == ["login refused: unknown user or wrong passcode"], bad
        assert bad["closes"], "the broker closes the WebSocket after the ERROR"
    anonymous = node(url, "login")
    assert anonymous["connected"] is None and anonymous["errors"] and anonymous["closes"], anonymous
    w.broker.wait_log("failed login from 127.0.0.1")
    # The same users over TCP.
    c = stomp_client(w.broker, headers={"login": "alice", "passcode": "alice-secret"})
    c.disconnect()


def ws_send_text(sock, payload):
    """One masked text message (a client's frames must be masked, RFC 6455 5.3)."""
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big"))
    sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))


def ws_read_stomp_frame(sock):
    """The payload of the server's messages up to the end of one STOMP frame (a NUL)."""
    data = b""

    def take(n):
        nonlocal buf
        while len(buf) < n:
            chunk = sock.recv(65536)
            assert chunk, f"closed after {data!r}"
            buf += chunk
        out, buf = buf[:n], buf[n:]
        return out

    buf = b""
    sock.settimeout(TIMEOUT)
    while b"\0" not in data:
        b0, b1 = take(2)
        n = b1 & 0x7F
        if n == 126:
            n = int.from_bytes(take(2), "big")
        elif n == 127:
            n = int.from_bytes(take(8), "big")
        payload = take(n)
        if b0 & 0x0F in (1, 2, 0):
            data += payload
    return data.lstrip(b"\n")


def test_a_console_session_logs_its_websocket_in_as_its_user(ws_broker, stomp_client, alice_hash):
    """A page of the console opens /stomp with the session's cookie: its CONNECT without a login
    is the session's user (here its sends carry _AMQ_VALIDATED_USER alice); without the cookie the
    same CONNECT is refused."""
    w = ws_broker(USERS_SETTINGS.replace("[security]\n", "[security]\npopulate-validated-user = true\n"), listener=False,
                  before_start=lambda b: (b.workdir / "users.toml").write_text(
                      f'[[user]]\nname = "alice"\npassword = "{alice_hash}"\nroles = ["app"]\n'))
    req = urllib.request.Request(f"http://127.0.0.1:{w.http_port}/api/v1/login", method="POST",
                                 data=json.dumps({"user": "alice", "password": "alice-secret"}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=TIMEOUT) as answer:
        cookie = answer.headers["Set-Cookie"].split(";")[0]
        assert json.load(answer)["user"] == "alice"
    q = queue("console-ws")
    u = upgrade(w.http_port, extra=[f"Cookie: {cookie}"])
    assert u.status == 101 and u.accept_ok(), (u.status, u.body)
    ws_send_text(u.sock, b"CONNECT\naccept-version:1.2\nhost:escrow\n\n\0")
    assert ws_read_stomp_frame(u.sock).startswith(b"CONNECTED\n")
    ws_send_text(u.sock, f"SEND\ndestination:{q}\nreceipt:r1\n\nfrom the console page\0".encode())
    assert ws_read_stomp_frame(u.sock).startswith(b"RECEIPT\nreceipt-id:r1\n")
    u.sock.close()
    c = stomp_client(w.broker, headers={"login": "alice", "passcode": "alice-secret"})
    [m], _ = drain(c, q, c)
    assert m.headers["_AMQ_VALIDATED_USER"] == "alice" and m.body == "from the console page"

    # A page of another local server (same site: the browser sends the cookie) gets no login.
    local_page = upgrade(w.http_port, origin="http://127.0.0.1:3000", extra=[f"Cookie: {cookie}"])
    assert local_page.status == 101
    ws_send_text(local_page.sock, b"CONNECT\naccept-version:1.2\nhost:escrow\n\n\0")
    assert ws_read_stomp_frame(local_page.sock).startswith(b"ERROR\n")
    local_page.sock.close()

    stranger = upgrade(w.http_port)
    assert stranger.status == 101
    ws_send_text(stranger.sock, b"CONNECT\naccept-version:1.2\nhost:escrow\n\n\0")
    assert ws_read_stomp_frame(stranger.sock).startswith(b"ERROR\n")
    stranger.sock.close()


def test_stompjs_reconnects_after_a_broker_restart_on_the_same_port(ws_broker, stomp_client):
    w = ws_broker(listener=False)
    b = w.broker
    port = w.http_port
    # The restart must come back on this port: write it into the configuration.
    b.config_path.write_text(b.config_path.read_text().replace('listen = "127.0.0.1:0"', f'listen = "127.0.0.1:{port}"'))
    q, before, reply = queue("reconnect"), queue("before"), queue("reply")
    restarted = []

    def on_event(e):
        if e["event"] == "connected" and e["n"] == 1:
            b.restart()
            assert WsBroker(b).http_port == port, b.log
            restarted.append(True)
            c = stomp_client(b)
            c.send(q, "after-restart")
            c.disconnect()

    r = node(w.url("http"), "reconnect", on_event, destination=q, before_destination=before, reply_destination=reply)
    assert restarted
    assert r["connects"] == 2 and r["closes_before_reconnect"] >= 1
    # The graceful stop closed the WebSocket normally (1000), after writing every receipt due.
    assert r["closes"][0]["code"] == 1000, r["closes"]
    assert r["message"]["body"] == "after-restart"
    assert r["errors"] == []
    # What stompjs sent before the restart (with a receipt: durable) and after it.
    assert [m.body for m in consume_all(b, before)] == ["before-restart"]
    assert [m.body for m in consume_all(b, reply)] == ["reply-from-node"]


# --------------------------------------------------------------------------------------------
# Handshakes and origins
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_the_upgrade_answer_and_subprotocol_choice(ws_broker, sockets, kind):
    w = ws_broker()
    port = w.port(kind)
    u = upgrade(port, protocols="v10.stomp, v12.stomp, v11.stomp", open_sockets=sockets)
    assert u.status == 101, (u.status, u.headers, u.body)
    assert u.headers.get("upgrade", "").lower() == "websocket" and u.accept_ok(), u.headers
    assert u.headers.get("sec-websocket-protocol") == "v12.stomp", "the best version offered is chosen"
    u = upgrade(port, protocols="v10.stomp", open_sockets=sockets)
    assert u.status == 101 and u.headers.get("sec-websocket-protocol") == "v10.stomp", u.headers
    u = upgrade(port, protocols=None, open_sockets=sockets)
    assert u.status == 101 and "sec-websocket-protocol" not in u.headers, u.headers
    # The same from a real client: ws picks up the chosen subprotocol; none offered works too.
    assert node(w.url(kind), "raw-open", protocols=["v11.stomp"])["protocol"] == "v11.stomp"
    r = node(w.url(kind), "raw-open", protocols=[])
    assert r["opened"] and r["protocol"] == "" and r["connected"]["command"] == "CONNECTED"


@pytest.mark.parametrize("kind", KINDS)
def test_a_foreign_origin_is_refused_with_403(ws_broker, stomp_client, sockets, kind):
    w = ws_broker()
    before = websocket_samples(w.http_port)
    refusals = Refusals(w)
    u = upgrade(w.port(kind), origin="https://evil.example", open_sockets=sockets)
    assert u.status == 403, (u.status, u.headers, u.body)
    assert "sec-websocket-accept" not in u.headers
    assert u.closed_by_server(TIMEOUT), "the refused connection is closed"
    r = node(w.url(kind), "raw-open", origin="https://evil.example")
    assert not r["opened"] and r["response"]["status"] == 403, r
    # Loopback origins (any port) and none at all are allowed by default.
    for origin in ("http://127.0.0.1:3000", "http://localhost:8080", "https://[::1]:9", None):
        assert node(w.url(kind), "raw-open", origin=origin)["opened"], origin
    assert b"allowed-origins" in u.body, u.body  # the answer says what an operator may change
    assert refusals.delta() == {"origin": 2}
    wait_open_websockets(w, 0)  # the four that opened have closed; the refused never counted
    after = websocket_samples(w.http_port)
    status, _, body = get(w.http_port, "/status")  # the same numbers in /status
    ws = json.loads(body)["websocket"]
    assert status == 200 and ws["events"]["origin"] == counter(after, "escrow_websocket_refused_total", reason="origin")
    assert ws["accepted"] == counter(after, "escrow_websocket_upgrades_total") and ws["open"] == 0, ws
    assert counter(after, "escrow_websocket_upgrades_total") - \
        counter(before, "escrow_websocket_upgrades_total") == 4, after
    tcp_works(w.broker, stomp_client)


def test_allowed_origins_and_the_same_origin_rule(ws_broker, sockets):
    w = ws_broker(http_extra='allowed-origins = ["https://app.example"]\nallowed-hosts = ["broker.example"]\n',
                  listener_extra='allowed-origins = ["https://app.example"]\n')
    for kind in KINDS:
        port = w.port(kind)
        assert node(w.url(kind), "raw-open", origin="https://app.example")["opened"], kind
        assert node(w.url(kind), "raw-open", origin="https://app.example.evil.example")["response"]["status"] == 403
        assert node(w.url(kind), "raw-open", origin="http://app.example")["response"]["status"] == 403
        # An Origin whose host:port is the request's Host: the page came from this server, at
        # /stomp, whose Host is checked (allowed-hosts). A dedicated listener checks no Host, so
        # there the same pair is what a page whose name was re-pointed here (DNS rebinding) sends.
        same = upgrade(port, host=f"broker.example:{port}", origin=f"http://broker.example:{port}",
                       open_sockets=sockets)
        if kind == "http":
            assert same.status == 101 and same.accept_ok(), (kind, same.status, same.body)
        else:
            assert same.status == 403, (kind, same.status, same.body)
        rebound = upgrade(port, host=f"attacker.example:{port}", origin=f"http://attacker.example:{port}",
                          open_sockets=sockets)
        # /stomp: the Host check answers first (421, or the upgrade is not taken); the listener: 403.
        assert rebound.status in ((421,) if kind == "http" else (403,)), (kind, rebound.status, rebound.body)
        other = upgrade(port, host=f"broker.example:{port}", origin=f"http://broker.example:{port + 1}",
                        open_sockets=sockets)
        assert other.status == 403, (kind, other.status)


def test_allowed_origins_star_allows_any(ws_broker):
    w = ws_broker(http_extra='allowed-origins = ["*"]\n', listener_extra='allowed-origins = ["*"]\n')
    for kind in KINDS:
        assert node(w.url(kind), "raw-open", origin="https://anything.example")["opened"], kind


@pytest.mark.parametrize("kind", KINDS)
def test_a_handshake_without_sec_websocket_key_gets_400(ws_broker, stomp_client, sockets, kind):
    w = ws_broker()
    refusals = Refusals(w)
    u = upgrade(w.port(kind), key=False, open_sockets=sockets)
    assert u.status == 400, (u.status, u.headers, u.body)
    assert "sec-websocket-accept" not in u.headers
    assert u.closed_by_server(TIMEOUT), "a refused upgrade is closed"
    assert refusals.delta() == {"handshake": 1}
    ws_works(w.url(kind))
    tcp_works(w.broker, stomp_client)


@pytest.mark.parametrize("kind", KINDS)
def test_an_upgrade_offering_only_other_subprotocols_is_refused(ws_broker, sockets, kind):
    w = ws_broker()
    refusals = Refusals(w)
    u = upgrade(w.port(kind), protocols="mqtt, wamp.2.json", open_sockets=sockets)
    assert u.status == 400 and "sec-websocket-accept" not in u.headers, (u.status, u.headers, u.body)
    assert b"v12.stomp" in u.body, u.body  # the answer says what to offer
    assert refusals.delta() == {"handshake": 1}
    ws_works(w.url(kind))


def test_websocket_off_and_other_paths_of_the_http_listener_do_not_upgrade(ws_broker, sockets):
    w = ws_broker(listener=False)
    u = upgrade(w.http_port, path="/stompx", open_sockets=sockets)
    assert u.status == 404, (u.status, u.headers)
    status, headers, _ = get(w.http_port, "/stomp")  # a plain GET: not an upgrade
    assert status == 426, (status, dict(headers))
    w2 = ws_broker(listener=False, http_extra="websocket = false\n")
    u = upgrade(w2.http_port, open_sockets=sockets)
    assert u.status == 404, (u.status, u.headers)


@pytest.mark.parametrize("kind", KINDS)
def test_an_upgrade_over_max_connections_gets_503(ws_broker, stomp_client, sockets, kind):
    w = ws_broker("[limits]\nmax-connections = 1\n")
    refusals = Refusals(w)
    holder = stomp_client(w.broker)  # takes the one place
    u = upgrade(w.port(kind), open_sockets=sockets)
    assert u.status == 503 and b"max-connections" in u.body, (u.status, u.headers, u.body)
    assert refusals.delta() == {"limits": 1}
    holder.disconnect()
    ws_works(w.url(kind))


# --------------------------------------------------------------------------------------------
# Hostile input
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_a_frame_over_max_frame_size(ws_broker, stomp_client, kind):
    w = ws_broker("[limits]\nmax-frame-size = 65536\n")
    refusals = Refusals(w)
    q = queue("big")
    # In one WebSocket message: an ERROR naming the limit, or a close 1009 (message too big).
    one = node(w.url(kind), "raw-oversize", destination=q, max_frame_size=65536)
    errors = [f for f in one["frames"] if f["command"] == "ERROR"]
    assert one["closed"] is not None
    assert (errors and errors[0]["headers"]["message"] == "frame exceeds 65536 bytes" and
            one["closed"]["code"] == 1008) or one["closed"]["code"] == 1009, one
    # In many small messages, each far below the limit: the frame's own size counts.
    many = node(w.url(kind), "raw-oversize", destination=q, max_frame_size=65536, chunk=4096)
    errors = [f for f in many["frames"] if f["command"] == "ERROR"]
    assert errors and errors[0]["headers"]["message"] == "frame exceeds 65536 bytes", many
    assert not [f for f in many["frames"] if f["command"] == "RECEIPT"], many
    assert many["closed"]["code"] == 1008, many["closed"]
    # One WebSocket message over max-frame-size plus 64 KiB: Beast closes with 1009.
    huge = node(w.url(kind), "raw-oversize", destination=q, max_frame_size=65536, excess=65536 + 1000)
    assert huge["closed"] is not None and huge["closed"]["code"] == 1009, huge
    assert consume_all(w.broker, q) == []  # nothing of it stored
    assert refusals.delta() == {"frame-error": 2, "too-big": 1}
    ws_works(w.url(kind))
    tcp_works(w.broker, stomp_client)


@pytest.mark.parametrize("after_connect", [False, True], ids=["before-connect", "after-connect"])
@pytest.mark.parametrize("kind", KINDS)
def test_binary_garbage_gets_an_error_then_a_close(ws_broker, stomp_client, kind, after_connect):
    w = ws_broker()
    refusals = Refusals(w)
    r = node(w.url(kind), "raw-garbage", after_connect=after_connect)
    assert [f["command"] for f in r["frames"]] == ["ERROR"], r
    assert r["frames"][0]["headers"].get("message"), r
    assert r["closed"]["code"] == 1008, r["closed"]
    assert sum(refusals.delta().values()) == 1, refusals.delta()
    ws_works(w.url(kind))
    tcp_works(w.broker, stomp_client)


@pytest.mark.parametrize("kind", KINDS)
def test_a_websocket_that_never_sends_connect_is_closed_after_connect_timeout(ws_broker, stomp_client, kind):
    w = ws_broker("[limits]\nconnect-timeout-ms = 2000\n")
    r = node(w.url(kind), "raw-no-connect")
    assert [f["command"] for f in r["frames"]] == ["ERROR"], r
    assert r["frames"][0]["headers"]["message"] == "no CONNECT frame within 2000 ms", r
    assert r["closed"]["code"] == 1008, r["closed"]
    assert 1500 <= r["open_ms"] <= 2000 + 3000 * SLOW, r
    tcp_works(w.broker, stomp_client)


def _closed_within(sock, seconds):
    """Seconds until the server closed `sock` (EOF or reset), or None if it did not in `seconds`."""
    start = time.monotonic()
    deadline = start + seconds
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        sock.settimeout(left)
        try:
            data = sock.recv(65536)
        except socket.timeout:
            return None
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - start
        if not data:
            return time.monotonic() - start


def test_a_client_that_never_completes_the_handshake_is_closed_while_others_work(ws_broker, stomp_client, sockets):
    """The dedicated listener is a STOMP listener: limits.first-byte-timeout-ms (nothing sent) and
    limits.connect-timeout-ms (a request sent halfway) bound how long a connection may take."""
    w = ws_broker("[limits]\nconnect-timeout-ms = 2000\nfirst-byte-timeout-ms = 1000\n")
    refusals = Refusals(w)
    port = w.ws_port
    started = time.monotonic()
    silent = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    half = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    sockets += [silent, half]
    half.sendall(f"GET /stomp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n".encode())
    # Meanwhile another client does its work on the same listener.
    r = node(w.url("listener"), "send-subscribe", destination=queue("meanwhile"))
    assert r["message"]["body"] == "hello over WebSocket"
    limit = 2.0 + 3.0 * SLOW
    for name, s in (("silent", silent), ("half-sent", half)):
        took = _closed_within(s, max(limit - (time.monotonic() - started), 0.1))
        assert took is not None, f"the {name} connection was not closed within {limit:.1f} s of opening"
    assert refusals.delta() == {"timeout": 2}
    tcp_works(w.broker, stomp_client)
    ws_works(w.url("listener"))


def test_a_half_sent_upgrade_on_the_http_listener_is_closed(ws_broker, stomp_client, sockets):
    """The HTTP listener gives a request sent halfway 10 s (docs/configuration.md, [http])."""
    w = ws_broker(listener=False)
    port = w.http_port
    half = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    sockets.append(half)
    half.sendall(f"GET /stomp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n".encode())
    ws_works(w.url("http"))
    assert _closed_within(half, 10.0 + 5.0 * SLOW) is not None, "a half-sent upgrade request was kept open"
    tcp_works(w.broker, stomp_client)


# --------------------------------------------------------------------------------------------
# Chromium
# --------------------------------------------------------------------------------------------

def chromium(url, **options):
    assert os.path.exists(CHROMIUM), f"{CHROMIUM} is missing: scripts/setup installs Debian's chromium"
    options.setdefault("timeout_ms", int(TIMEOUT * 1000))
    options.setdefault("chromium", CHROMIUM)
    final, status, stderr = run_js([CHROMIUM_STOMP, url, json.dumps(options)], timeout=12 * TIMEOUT)
    assert final is not None and "result" in final, \
        f"chromium_stomp.mjs failed (exit {status}):\n{json.dumps(final, indent=1)}\nstderr:\n{stderr[-3000:]}"
    return final, status


def test_a_page_in_chromium_acks_one_message_and_the_other_comes_back(ws_broker, stomp_client):
    w = ws_broker(listener=False)
    b = w.broker
    q = queue("browser")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "chromium-stomp.png"
    shot.unlink(missing_ok=True)
    final, status = chromium(w.url("http"), destination=q, mode="ack", screenshot=str(shot))
    r = final["result"]
    assert status == 0 and r["ok"], json.dumps(final, indent=1)
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", r["origin"]), r["origin"]
    assert r["protocol"] == "v12.stomp"
    assert r["connected"][0]["version"] == "1.2"
    assert [m["body"] for m in r["messages"]] == ["acked-in-browser", "left-unacked"]
    assert r["errors"] == []
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The browser is gone (its WebSocket dropped without DISCONNECT): the ACKed message is gone
    # for good, the unacknowledged one is back, marked as redelivered.
    c = stomp_client(b)
    c.subscribe(q, ack="client-individual")
    c.wait_body("left-unacked")
    sentinel = unique("sentinel")
    c.send(q, sentinel)
    c.wait_body(sentinel)
    msgs = c.messages
    assert [m.body for m in msgs] == ["left-unacked", sentinel]
    assert msgs[0].headers["redelivered"] == "true" and msgs[0].headers["delivery-count"] == "2"


def test_a_page_on_a_foreign_origin_cannot_open_a_websocket(ws_broker, stomp_client):
    w = ws_broker(listener=False)
    refusals = Refusals(w)
    final, status = chromium(w.url("http"), destination=queue("evil"), mode="refused")
    r = final["result"]
    assert r["origin"].startswith("http://evil.example:"), r
    assert r["connected"] is False and r["closes"][0]["code"] == 1006, r
    # Chromium saw the broker's answer (not a network error).
    assert any("403" in line for line in final["console"]), final["console"]
    assert refusals.delta() == {"origin": 1}
    tcp_works(w.broker, stomp_client)


# --------------------------------------------------------------------------------------------
# wss: a [[websocket-listener]] with TLS
# --------------------------------------------------------------------------------------------

_WSS = re.compile(r"websocket listening on 127\.0\.0\.1:(\d+) \(wss\)")


def test_stompjs_over_wss_with_the_listeners_certificate(broker_factory, stomp_client, certs):
    """A [[websocket-listener]] with certificate-chain and private-key speaks wss://: stompjs
    trusting the test CA sends and receives through it; a client that trusts another CA does not
    get in, and the broker goes on serving."""
    config = (f'[[websocket-listener]]\nlisten = "127.0.0.1:0"\ncertificate-chain = "{certs.server}"\n'
              f'private-key = "{certs.server_key}"\n[http]\nlisten = ""\n')
    broker = broker_factory(config=config)
    m = _WSS.search(broker.log)
    assert m, broker.log
    url = f"wss://127.0.0.1:{m.group(1)}/"
    q = queue("wss")
    r = node(url, "send-subscribe", destination=q, body="over wss", ca_file=certs.ca)
    assert r["protocol"] == "v12.stomp"
    assert r["message"]["body"] == "over wss"
    final, status, _ = run_js([STOMP_NODE, url, "send-subscribe",
                               json.dumps({"destination": q, "ca_file": certs.untrusted, "timeout_ms": 5000})])
    assert status != 0, final
    # The message sent over wss is durable like any other: a TCP client reads a second one.
    node(url, "send", destination=q, bodies=["second"], ca_file=certs.ca)
    assert [m.body for m in consume_all(broker, q, expected=1)] == ["second"]


@pytest.mark.parametrize("kind", KINDS)
def test_connections_that_close_mid_handshake_give_back_their_place_at_once(ws_broker, sockets, kind):
    """A client that connects and closes before (or while) sending its upgrade frees its place among
    the connections not logged in at once, not after connect-timeout-ms: with 4 places per address,
    40 such clients one after another leave room for a real one."""
    w = ws_broker('[limits]\nmax-unauthenticated-per-address = 4\nconnect-timeout-ms = 30000\n')
    port = w.port(kind)
    for i in range(40):
        s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        if i % 2:
            s.sendall(b"GET /stomp HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # half a request, then gone
        s.close()
    deadline = time.monotonic() + 5  # well below connect-timeout-ms
    while True:
        r = node(w.url(kind), "raw-open")
        if r.get("opened") and r.get("connected"):
            break
        assert time.monotonic() < deadline, f"no room for a real client after the closed ones: {r}\n{w.broker.log}"
