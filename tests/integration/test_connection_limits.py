"""Connections that cost escrowd descriptors and places before anyone has logged in (issue 23: N5,
N6 and the HTTP part of N15; docs/security.md, "Limits" and "The HTTP endpoint"), each attack
reproduced against a real escrowd, and each new limit at its edge (the last allowed works, the next
is refused with an answer naming its key).

- N5: half-sent HTTP requests under a low RLIMIT_NOFILE (set on the running escrowd with prlimit)
  once took every descriptor; the accept loops then retried at once on EMFILE, spinning a core and
  writing a log line per retry. Now [http] max-connections caps the endpoint (the next gets 503),
  and an accept loop out of descriptors closes the waiting connections with its spare descriptor,
  logs once per interval and pauses. Measured: the broker's CPU time (/proc/PID/stat), its log
  lines, and a STOMP client that logs in while the flood holds its connections.
- N6: idle sockets that never send CONNECT once took every connection for connect-timeout-ms. Now
  limits.max-unauthenticated-per-address, limits.max-unauthenticated-connections (the rest of
  max-connections is kept for logged-in sessions) and limits.first-byte-timeout-ms. Other loopback
  addresses (127.0.0.2, ...) stand for other clients.
- N15: a request whose header section is over 8 KiB is answered 431 and closed.
"""

import os
import re
import resource
import socket
import time

import pytest

from conftest import SLOW, TIMEOUT, frame_bytes, unique
from test_config import run_escrowd
from test_http import http_port
from test_tls import certs, listener, python_tls, tls_config, tls_ports, wait_log  # noqa: F401 (certs: a fixture)

CONNECT = frame_bytes("CONNECT", [("accept-version", "1.2"), ("host", "x")])
HALF_HTTP = b"GET /health HTTP/1.1\r\nHost: localhost\r\n"  # no blank line: the request never ends
OUT_OF_DESCRIPTORS = b"message:the broker is out of file descriptors; try again later"


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------

def cpu_seconds(pid):
    """User plus system CPU time the process has used (/proc/PID/stat, fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_descriptors(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def limit_descriptors(broker, n):
    """RLIMIT_NOFILE of the running escrowd (what prlimit --nofile does)."""
    resource.prlimit(broker.proc.pid, resource.RLIMIT_NOFILE, (n, n))


def accept_queue(port):
    """Connections waiting in the accept queue of the loopback listener on `port` (/proc/net/tcp:
    for a listening socket, rx_queue is that queue's length)."""
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[1] == f"0100007F:{port:04X}" and fields[3] == "0A":
                return int(fields[4].split(":")[1], 16)
    raise AssertionError(f"no listener on 127.0.0.1:{port} in /proc/net/tcp")


def log_lines(broker):
    return broker.log.splitlines()


def connect_from(address, port):
    """A TCP connection to escrowd's port from a loopback `address` of our choice (another client)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(TIMEOUT)
    s.bind((address, 0))
    s.connect(("127.0.0.1", port))
    return s


class Peer:
    """What one socket has received, read without blocking, and whether the other side closed."""

    def __init__(self, sock):
        self.sock = sock
        self.data = b""
        self.closed = False

    def poll(self):
        if self.closed:
            return
        self.sock.setblocking(False)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    self.closed = True
                    break
                self.data += chunk
        except BlockingIOError:
            pass
        except (ConnectionResetError, BrokenPipeError):
            self.closed = True
        finally:
            self.sock.settimeout(TIMEOUT)

    def wait_closed(self, timeout=None):
        deadline = time.monotonic() + (timeout or TIMEOUT)
        while not self.closed and time.monotonic() < deadline:
            self.poll()
            time.sleep(0.01)
        self.poll()
        return self.closed

    def error_message(self):
        m = re.search(rb"^message:(.*)$", self.data, re.M)
        return m.group(1).decode() if m else None


def poll_until(peers, condition, timeout=None):
    """Polls every peer until condition(peers) holds or the timeout passes; returns whether it held."""
    deadline = time.monotonic() + (timeout or TIMEOUT)
    while True:
        for p in peers:
            p.poll()
        if condition(peers):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def stomp_login(sock):
    """Sends CONNECT on `sock`; returns the first frame's command line (CONNECTED, ERROR) or "" at close."""
    sock.sendall(CONNECT)
    data = b""
    while b"\0" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data, data.split(b"\n", 1)[0].decode()


def http_answer(sock, timeout=None):
    """Everything the server sends on `sock` until it closes (or the timeout passes)."""
    p = Peer(sock)
    p.wait_closed(timeout)
    return p.data


def half_sent_http(port, n):
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        s.sendall(HALF_HTTP)
        socks.append(s)
    return socks


def close_all(socks):
    for s in socks:
        s.close()


# --------------------------------------------------------------------------------------------
# N5: the HTTP endpoint and running out of descriptors
# --------------------------------------------------------------------------------------------

def test_half_sent_http_requests_under_a_descriptor_limit_leave_stomp_working(broker_factory, raw):
    b = broker_factory(config='[http]\nlisten = "127.0.0.1:0"\n')  # [http] max-connections: 64, the default
    port, pid = http_port(b), b.proc.pid
    limit_descriptors(b, 400)
    lines_before, cpu_before = len(log_lines(b)), cpu_seconds(pid)
    flood = [Peer(s) for s in half_sent_http(port, 420)]
    try:
        # Once escrowd has taken every flood connection it will (none waits to be accepted), or has
        # no descriptor left, a STOMP client comes while the flood holds its connections: it logs
        # in and works.
        deadline = time.monotonic() + TIMEOUT
        while accept_queue(port) > 0 and open_descriptors(pid) < 399 and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        client = raw(b)
        client.send(CONNECT)
        first = client.read_frame()
        login_seconds = time.monotonic() - started
        for p in flood:
            p.poll()
        closed_unanswered = sum(1 for p in flood if p.closed and not p.data)
        client.send(frame_bytes("SEND", [("destination", "/queue/" + unique("n5")), ("receipt", "r")], "x"))
        receipt = client.read_frame().command
        # Every connection over the cap is answered 503 and closed; the 64 others are held.
        poll_until(flood, lambda ps: sum(1 for p in ps if p.closed) >= 420 - 64, timeout=TIMEOUT)
        refused = [p for p in flood if p.data.startswith(b"HTTP/1.1 503 Service Unavailable")]
        held = [p for p in flood if not p.closed]
        cpu = cpu_seconds(pid) - cpu_before
        new_lines = log_lines(b)[lines_before:]
        figures = (f"STOMP login {login_seconds:.2f} s ({first.command}), flood connections closed without an "
                   f"answer by then {closed_unanswered}, answered 503: {len(refused)}, held: {len(held)}, "
                   f"CPU {cpu:.2f} s, log lines {len(new_lines)}")
        print(figures)
        assert first.command == "CONNECTED" and receipt == "RECEIPT", figures
        assert closed_unanswered == 0, "the client got in only once the flood had timed out: " + figures
        assert len(refused) == 420 - 64 and len(held) == 64, figures
        assert b"[http] max-connections" in refused[0].data
        assert len(new_lines) <= 10, figures + "\n" + "\n".join(new_lines[:20])
        assert cpu < 1.0 * SLOW, figures
    finally:
        close_all(p.sock for p in flood)


def test_http_max_connections_at_its_edge(broker_factory):
    b = broker_factory(config='[http]\nlisten = "127.0.0.1:0"\nmax-connections = 3\n')
    port = http_port(b)
    held = half_sent_http(port, 3)
    try:
        extra = half_sent_http(port, 1)[0]
        answer = http_answer(extra)
        assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), answer
        assert b"Connection: close" in answer and b"Retry-After: 1" in answer
        assert answer.endswith(b"service unavailable: 3 HTTP connections are open, the most this endpoint serves at "
                               b"once ([http] max-connections); try again later\n"), answer
        b.wait_log("3 HTTP connections are open ([http] max-connections)")
        # The third, the last allowed, is served when its request ends.
        held[2].sendall(b"\r\n")
        reply = held[2].recv(4096)
        assert reply.startswith(b"HTTP/1.1 200 OK\r\n"), reply
        # One leaves: the next new connection is served (the broker sees the close on its own time).
        held[0].close()
        deadline = time.monotonic() + TIMEOUT
        while True:
            s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            answer = http_answer(s)
            s.close()
            if answer.startswith(b"HTTP/1.1 200") or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"ok\n"), answer
    finally:
        close_all(held)


@pytest.mark.skipif(os.environ.get("ESCROW_SANITIZED") == "1",
                    reason="UBSan's vptr check opens a pipe the first time it meets a type "
                           "(IsAccessibleMemoryRange); with no descriptor left that fails and is reported as an "
                           "invalid vptr of whatever object the broker touches next (a shared_ptr, an "
                           "error_category): this test runs the broker out of descriptors, so it runs in the "
                           "normal build only")
def test_stomp_listener_out_of_descriptors_closes_what_waits_and_pauses(broker_factory, raw):
    b = broker_factory()  # the defaults: the 40 connections held below are within every limit
    pid = b.proc.pid
    survivor = raw(b)
    survivor.connect()
    limit_descriptors(b, open_descriptors(pid) + 40)
    lines_before, cpu_before = len(log_lines(b)), cpu_seconds(pid)
    flood = [Peer(socket.create_connection(b.address, timeout=TIMEOUT)) for _ in range(80)]
    try:
        # About 40 are accepted and held (until limits.first-byte-timeout-ms); the others wait for
        # a descriptor: each is accepted with the spare one and closed with an ERROR, instead of
        # waiting in the listen queue while the accept loop retries.
        shed = lambda ps: [p for p in ps if OUT_OF_DESCRIPTORS in p.data]  # noqa: E731
        poll_until(flood, lambda ps: len(shed(ps)) >= 30, timeout=TIMEOUT)
        closed = shed(flood)
        # A logged-in client goes on meanwhile.
        survivor.send(frame_bytes("SEND", [("destination", "/queue/" + unique("n5")), ("receipt", "r")], "x"))
        receipt = survivor.read_frame().command
        cpu = cpu_seconds(pid) - cpu_before
        new_lines = log_lines(b)[lines_before:]
        accept_lines = [line for line in new_lines if "accept failed" in line]
        figures = (f"closed while waiting: {len(closed)} of 80, CPU {cpu:.2f} s, log lines {len(new_lines)} "
                   f"('accept failed': {len(accept_lines)})")
        print(figures)
        assert len(closed) >= 30 and all(p.closed for p in closed), figures
        assert receipt == "RECEIPT"
        assert 1 <= len(accept_lines) <= 2, figures + "\n" + "\n".join(new_lines[:20])
        assert "no file descriptor left" in accept_lines[0] and "pauses accepting for 100 ms" in accept_lines[0]
        assert len(new_lines) <= 10, figures
        assert cpu < 1.0 * SLOW, figures
    finally:
        close_all(p.sock for p in flood)
    # Descriptors back: a new client logs in (once escrowd has seen the closes).
    deadline = time.monotonic() + TIMEOUT
    while True:
        s = socket.create_connection(b.address, timeout=TIMEOUT)
        data, command = stomp_login(s)
        s.close()
        if command == "CONNECTED" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert command == "CONNECTED", data


# --------------------------------------------------------------------------------------------
# N6: connections that have not logged in
# --------------------------------------------------------------------------------------------

def test_idle_sockets_from_one_address_do_not_lock_others_out(broker_factory, raw):
    # The defaults but max-connections: 64 not logged in per address, 100 (half of max-connections)
    # in all, 5 s for a first byte.
    b = broker_factory(config="[limits]\nmax-connections = 200\n")
    lines_before = len(log_lines(b))
    idle = [Peer(connect_from("127.0.0.2", b.port)) for _ in range(250)]
    try:
        # A client from another address, after them, logs in and works.
        client = raw(b)
        client.send(CONNECT)
        first = client.read_frame()
        assert first.command == "CONNECTED", first
        client.send(frame_bytes("SEND", [("destination", "/queue/" + unique("n6")), ("receipt", "r")], "x"))
        assert client.read_frame().command == "RECEIPT"
        # 186 were refused at once; the 64 admitted are closed after the first-byte timeout.
        assert poll_until(idle, lambda ps: all(p.closed for p in ps)), \
            f"{sum(1 for p in idle if not p.closed)} idle connections still open"
        messages = [p.error_message() for p in idle]
        assert messages.count("too many connections not logged in yet from this address "
                              "(limits.max-unauthenticated-per-address)") == 186, messages
        assert messages.count("nothing received within 5000 ms of connecting (limits.first-byte-timeout-ms)") == 64
        b.wait_log("(limits.first-byte-timeout-ms); closed")
        new_lines = log_lines(b)[lines_before:]
        refusals = [line for line in new_lines if "refused" in line]
        timeouts = [line for line in new_lines if "first-byte-timeout-ms" in line]
        assert len(refusals) == 1 and "127.0.0.2" in refusals[0], "\n".join(new_lines)
        assert len(timeouts) <= 2, "\n".join(new_lines)
    finally:
        close_all(p.sock for p in idle)


def test_max_unauthenticated_per_address_at_its_edge(broker_factory, raw):
    b = broker_factory(config="[limits]\nmax-unauthenticated-per-address = 3\nfirst-byte-timeout-ms = 600000\n"
                              "connect-timeout-ms = 600000\n")
    held = [raw(b) for _ in range(3)]
    extra = Peer(socket.create_connection(b.address, timeout=TIMEOUT))
    assert extra.wait_closed()
    assert extra.error_message() == ("too many connections not logged in yet from this address "
                                     "(limits.max-unauthenticated-per-address)"), extra.data
    b.wait_log("connection from 127.0.0.1 refused: 3 connections from 127.0.0.1 are not logged in yet "
               "(limits.max-unauthenticated-per-address)")
    # Another address has places of its own.
    other = connect_from("127.0.0.2", b.port)
    assert stomp_login(other)[1] == "CONNECTED"
    other.close()
    # The last admitted logs in, which gives its place back: logged-in connections do not count.
    held[2].connect()
    again = raw(b)
    again.connect()


def test_max_unauthenticated_connections_at_its_edge_keeps_room_for_logged_in_sessions(broker_factory, raw):
    b = broker_factory(config="[limits]\nmax-connections = 6\nmax-unauthenticated-connections = 3\n"
                              "first-byte-timeout-ms = 600000\nconnect-timeout-ms = 600000\n")
    for _ in range(2):
        raw(b).connect()
    idle = [connect_from(f"127.0.0.{i}", b.port) for i in (2, 3, 4)]
    try:
        extra = Peer(connect_from("127.0.0.5", b.port))
        assert extra.wait_closed()
        assert extra.error_message() == "too many connections not logged in yet (limits.max-unauthenticated-connections)"
        b.wait_log("connection from 127.0.0.5 refused: 3 connections are not logged in yet "
                   "(limits.max-unauthenticated-connections)")
        # One of the three logs in: a place for one more not logged in.
        assert stomp_login(idle[0])[1] == "CONNECTED"
        last = connect_from("127.0.0.5", b.port)
        assert stomp_login(last)[1] == "CONNECTED"
        # Six open: max-connections refuses the next, whoever it is.
        over = Peer(connect_from("127.0.0.6", b.port))
        assert over.wait_closed()
        assert over.error_message() == "too many connections (limits.max-connections)"
    finally:
        close_all(idle)


def test_first_byte_timeout_closes_a_silent_connection_not_a_slow_one(broker_factory, raw):
    b = broker_factory(config="[limits]\nfirst-byte-timeout-ms = 1000\nconnect-timeout-ms = 600000\n")
    silent = Peer(socket.create_connection(b.address, timeout=TIMEOUT))
    slow = raw(b)
    slow.send(b"CONN")  # it has spoken: only connect-timeout-ms applies to it now
    assert silent.wait_closed(), "the silent connection is still open"
    assert silent.error_message() == "nothing received within 1000 ms of connecting (limits.first-byte-timeout-ms)"
    b.wait_log("nothing received within 1000 ms of connecting (limits.first-byte-timeout-ms); closed")
    slow.send(CONNECT[4:])
    assert slow.read_frame().command == "CONNECTED"


def test_first_byte_timeout_on_a_tls_listener(broker_factory, certs):  # noqa: F811 (the fixture)
    b = broker_factory(config=tls_config(listener(certs.server, certs.server_key),
                                         extra="[limits]\nfirst-byte-timeout-ms = 1000\nconnect-timeout-ms = 600000\n"))
    [port] = tls_ports(b)
    silent = Peer(socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT))
    client = python_tls(port, certs)  # its ClientHello is its first byte
    try:
        assert silent.wait_closed() and silent.data == b"", "the silent TLS connection is still open"
        wait_log(b, r"nothing received within 1000 ms of connecting \(limits\.first-byte-timeout-ms\); closed",
                 "the first-byte timeout")
        client.sendall(CONNECT)
        assert client.recv(4096).startswith(b"CONNECTED\n")
    finally:
        client.close()


@pytest.mark.parametrize("table,line,expected", [
    ("limits", "max-unauthenticated-per-address = 0", "limits.max-unauthenticated-per-address must be at least 1"),
    ("limits", "first-byte-timeout-ms = 0", "limits.first-byte-timeout-ms must be at least 1"),
    ("limits", "max-unauthenticated-connections = -1", "limits.max-unauthenticated-connections must be at least 0"),
    ("http", "max-connections = 0", "http.max-connections must be at least 1"),
])
def test_a_bad_connection_limit_stops_escrowd_naming_the_key(tmp_path, table, line, expected):
    (tmp_path / "escrowd.toml").write_text(f"[{table}]\n{line}\n")
    r = run_escrowd(["--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"), "--config",
                     str(tmp_path / "escrowd.toml")], tmp_path)
    assert r.returncode == 2 and f"escrowd.toml:2: {expected}" in r.stderr, r.stderr


# --------------------------------------------------------------------------------------------
# N15: a header section over 8 KiB
# --------------------------------------------------------------------------------------------

def request_of_header_size(size):
    head, tail = b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Pad: ", b"\r\n\r\n"
    return head + b"a" * (size - len(head) - len(tail)) + tail


@pytest.mark.parametrize("size", [8193, 20000])
def test_a_header_section_over_8_kib_is_answered_431(broker_factory, size):
    b = broker_factory(config='[http]\nlisten = "127.0.0.1:0"\n')
    port = http_port(b)
    at_limit = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    at_limit.sendall(request_of_header_size(8192))  # request line, fields and blank line: 8 KiB exactly
    assert at_limit.recv(4096).startswith(b"HTTP/1.1 200 OK\r\n")
    at_limit.close()
    over = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    over.sendall(request_of_header_size(size))
    answer = http_answer(over)
    over.close()
    assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), answer
    assert answer.endswith(b"request header fields too large: at most 8192 bytes of headers\n"), answer
    b.wait_log("its header section is over 8192 bytes (431)")
