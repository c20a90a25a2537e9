"""Limits a client cannot push the broker past (docs/security.md), each tested at its edge: the
last one allowed works, the next gets a precise ERROR, and other clients are unaffected. Then
hostile load: a flood of garbage connections and half-frames does not stop a well-behaved client,
and a consumer that does not read 100,000 waiting messages does not grow the broker's memory
(RssAnon from /proc) past its limits, and is disconnected as a slow consumer.
"""

import os
import re
import socket
import subprocess
import time

import pytest

from conftest import ESCROWD, SLOW, TIMEOUT, Closed, frame_bytes, new_xid, unique

CONNECT = frame_bytes("CONNECT", [("accept-version", "1.2"), ("host", "x")])


def connected(raw, broker, headers=()):
    r = raw(broker)
    r.send(frame_bytes("CONNECT", [("accept-version", "1.2"), ("host", "x"), *headers]))
    f = r.read_frame()
    return r, f


def error_of(r):
    frames = r.read_until_closed()
    errors = [f for f in frames if f.command == "ERROR"]
    assert errors, frames
    return errors[0].headers["message"]


def test_max_connections_refuses_the_next_one_with_an_error(broker_factory, raw, stomp_client):
    b = broker_factory(config="[limits]\nmax-connections = 3\n")
    held = [connected(raw, b) for _ in range(3)]
    assert all(f.command == "CONNECTED" for _, f in held)
    extra = raw(b)
    assert error_of(extra) == "too many connections (limits.max-connections)"
    b.wait_log("refused: 3 connections open (limits.max-connections)")
    # One leaves, and a new client gets in and works.
    held[0][0].close()
    deadline = time.monotonic() + TIMEOUT
    while True:
        r, f = connected(raw, b)
        if f.command == "CONNECTED" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert f.command == "CONNECTED"
    q = "/queue/" + unique()
    r.send(frame_bytes("SEND", [("destination", q), ("receipt", "r")], "x"))
    assert r.read_frame().command == "RECEIPT"


def test_max_connections_per_user(broker_factory, raw):
    b = broker_factory(config="[limits]\nmax-connections-per-user = 2\n")
    for _ in range(2):
        _, f = connected(raw, b)
        assert f.command == "CONNECTED"
    r, f = connected(raw, b)
    assert f.command == "ERROR"
    assert f.headers["message"] == "too many connections: anonymous already has 2 (limits.max-connections-per-user)"


def test_max_subscriptions_per_connection(broker_factory, raw):
    b = broker_factory(config="[limits]\nmax-subscriptions-per-connection = 2\n")
    r, _ = connected(raw, b)
    for i in range(2):
        r.send(frame_bytes("SUBSCRIBE", [("id", str(i)), ("destination", "/queue/" + unique()), ("receipt", f"s{i}")]))
        assert r.read_frame().command == "RECEIPT"
    r.send(frame_bytes("SUBSCRIBE", [("id", "2"), ("destination", "/queue/" + unique()), ("receipt", "s2")]))
    assert error_of(r) == "too many subscriptions on this connection: 2 (limits.max-subscriptions-per-connection)"


def test_max_consumer_window(broker_factory, raw):
    b = broker_factory(config="[limits]\nmax-consumer-window = 5\n")
    r, _ = connected(raw, b)
    r.send(frame_bytes("SUBSCRIBE", [("id", "a"), ("destination", "/queue/" + unique()), ("ack", "client"),
                                     ("prefetch-count", "5"), ("receipt", "ok")]))
    assert r.read_frame().command == "RECEIPT"
    r.send(frame_bytes("SUBSCRIBE", [("id", "b"), ("destination", "/queue/" + unique()), ("ack", "client"),
                                     ("prefetch-count", "6"), ("receipt", "no")]))
    assert error_of(r) == ("prefetch-count 6 is above the broker's limit of 5 unacknowledged messages per "
                           "consumer (limits.max-consumer-window)")


def test_max_branches_per_connection_counts_local_and_xa(broker_factory, raw):
    b = broker_factory(config="[limits]\nmax-branches-per-connection = 2\n")
    r, _ = connected(raw, b)
    r.send(frame_bytes("BEGIN", [("transaction", "t1"), ("receipt", "b1")]))
    assert r.read_frame().command == "RECEIPT"
    x = new_xid()
    r.send(frame_bytes("XA-START", [("xid", x), ("receipt", "x1")]))
    assert r.read_frame().headers["xa-result"] == "XA_OK"
    r.send(frame_bytes("XA-END", [("xid", x), ("flags", "TMSUCCESS"), ("receipt", "x2")]))
    assert r.read_frame().headers["xa-result"] == "XA_OK"
    # A prepared branch is no longer open: room for one more. This one did nothing, so its prepare
    # answers XA_RDONLY (finished and forgotten), which frees its place all the same.
    r.send(frame_bytes("XA-PREPARE", [("xid", x), ("receipt", "x3")]))
    assert r.read_frame().headers["xa-result"] == "XA_RDONLY"
    r.send(frame_bytes("BEGIN", [("transaction", "t2"), ("receipt", "b2")]))
    assert r.read_frame().command == "RECEIPT"
    r.send(frame_bytes("XA-START", [("xid", new_xid()), ("receipt", "x4")]))
    assert error_of(r) == ("too many open transactions on this connection: 2 begun or started and not yet prepared "
                           "or finished (limits.max-branches-per-connection)")


@pytest.mark.parametrize("line,expected", [
    ("max-connections = 0", "limits.max-connections must be at least 1"),
    ("max-consumer-window = 4294967296", "limits.max-consumer-window must be at most 4294967295"),
    ("max-branches-per-connection = -1", "limits.max-branches-per-connection must be at least 1"),
    ("max-branches-per-user = 0", "limits.max-branches-per-user must be at least 1"),
    ("max-prepared-branches-per-user = 0", "limits.max-prepared-branches-per-user must be at least 1"),
    ("max-transaction-bytes = 0", "limits.max-transaction-bytes must be at least 1"),
    ("max-transaction-bytes-per-user = 0", "limits.max-transaction-bytes-per-user must be at least 1"),
    ("max-queues-per-user = 0", "limits.max-queues-per-user must be at least 1"),
])
def test_a_bad_limit_value_stops_escrowd(tmp_path, line, expected):
    (tmp_path / "escrowd.toml").write_text(f"[limits]\n{line}\n")
    r = subprocess.run([ESCROWD, "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"), "--config",
                        str(tmp_path / "escrowd.toml")], capture_output=True, text=True, timeout=60 * SLOW)
    assert r.returncode == 2 and expected in r.stderr, r.stderr


def test_a_flood_of_garbage_and_half_frames_does_not_stop_a_good_client(broker_factory, raw, stomp_client):
    b = broker_factory(config="[limits]\nconnect-timeout-ms = 2000\n")
    good = stomp_client(b)
    sub = stomp_client(b)
    q = "/queue/" + unique("flood")
    sub.subscribe(q)
    garbage = [b"\x00\xff" * 50, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"CONNECT\naccept-version:9.9\n\n\0",
               b"SEND\ndestination:/queue/x\ncontent-length:99999999999\n\n", b"\x16\x03\x01\x02\x00"]
    half = [CONNECT + b"SEND\ndestination:" + q.encode() + b"\ncontent-length:1000\n\npartial",
            CONNECT + b"SUBSCRIBE\nid:1\ndestin", b"CONN"]
    socks = []  # (socket, what it sent)
    sent = []
    for round_ in range(20):
        for data in garbage + half:
            s = socket.create_connection(b.address, timeout=TIMEOUT)
            try:
                s.sendall(data)
            except OSError:
                pass
            socks.append((s, data))
        body = f"good-{round_}"
        good.send(q, body)
        sent.append(body)
    sub.wait_messages(len(sent))
    assert [m.body for m in sub.messages] == sent
    # Half-frames never became messages.
    assert all(m.body.startswith("good-") for m in sub.messages)
    # The connections that never finished a CONNECT were closed by the broker, not left to pile
    # up: each one reads the end of the stream (after an ERROR frame, for some) within the connect
    # timeout and a margin. "CONN" is a CONNECT cut short: only the timeout closes it.
    deadline = time.monotonic() + 2.0 * SLOW + TIMEOUT
    never_connected = [(s, data) for s, data in socks if not data.startswith(CONNECT)]
    assert len(never_connected) == 20 * (len(garbage) + 1)
    for s, data in never_connected:
        assert closed_by_server(s, deadline), f"the broker left open a connection that sent {data[:40]!r}"
    b.wait_log("no CONNECT within 2000 ms; closing")
    for s, _ in socks:
        s.close()


def closed_by_server(s, deadline):
    """Reads `s` until the server closes it (True) or the deadline passes (False)."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        s.settimeout(left)
        try:
            if not s.recv(65536):
                return True
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True


def rss_anon_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon in /proc status")


def test_a_consumer_that_does_not_read_100000_messages_keeps_memory_bounded(broker_factory, raw):
    # The consumer asks for all 100,000 at once (window raised to allow it); what bounds the
    # broker is max-pending-bytes per connection, then slow-consumer-timeout-ms closes it.
    b = broker_factory(config="[limits]\nmax-consumer-window = 200000\nmax-pending-bytes = 1048576\n"
                              "slow-consumer-timeout-ms = 3000\n")
    q = "/queue/" + unique("slow")
    body = b"x" * 1024
    producer, _ = connected(raw, b)
    count = 100_000
    one = frame_bytes("SEND", [("destination", q), ("persistent", "true")], body)
    batch = one * 1000
    for _ in range(count // 1000):
        assert producer.send(batch)
    producer.send(frame_bytes("SEND", [("destination", "/queue/" + unique()), ("receipt", "last")], b"end"))
    f = producer.read_frame(timeout=120 * SLOW)
    assert f.command == "RECEIPT", f
    time.sleep(0.5)
    before = rss_anon_kib(b.proc.pid)

    slow = socket.create_connection(b.address, timeout=TIMEOUT)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.sendall(CONNECT + frame_bytes("SUBSCRIBE", [("id", "s"), ("destination", q), ("ack", "client"),
                                                     ("prefetch-count", str(count))]))
    peak = before
    deadline = time.monotonic() + 60 * SLOW
    while "disconnected as a slow consumer" not in b.log and time.monotonic() < deadline:
        peak = max(peak, rss_anon_kib(b.proc.pid))
        time.sleep(0.1)
    assert "disconnected as a slow consumer" in b.log
    grown_mib = (peak - before) / 1024
    print(f"slow consumer: RssAnon {before} KiB before, peak {peak} KiB, grew {grown_mib:.1f} MiB")
    # 100,000 x 1 KiB would be 100 MiB if the broker buffered what the consumer did not read;
    # the limit is 1 MiB of unsent frames per connection plus the queue's memory window.
    assert grown_mib < 40, f"RssAnon grew by {grown_mib:.1f} MiB (before {before} KiB, peak {peak} KiB)"
    slow.close()

    # Nothing was lost: the messages the slow consumer held went back, and a good consumer gets all.
    # (Counted straight off the socket: every frame after CONNECTED ends in the NUL that ends a
    # MESSAGE, and the bodies hold none.)
    drain = socket.create_connection(b.address, timeout=60 * SLOW)
    drain.sendall(CONNECT + frame_bytes("SUBSCRIBE", [("id", "d"), ("destination", q), ("ack", "auto")]))
    nuls = 0
    while nuls < count + 1:
        chunk = drain.recv(1 << 20)
        assert chunk, f"closed after {nuls - 1} messages"
        nuls += chunk.count(b"\0")
    assert nuls - 1 == count
    drain.close()


def test_a_producer_faster_than_the_disk_is_paused_and_loses_nothing(broker_factory):
    # 1 MiB of received-but-unstored frames at most: a producer sending 50,000 persistent 1 KiB
    # messages without receipts outruns the group commit, the broker stops reading from it
    # (TCP slows it down), and every message is stored in the end.
    b = broker_factory(config="[limits]\nmax-unstored-bytes = 1048576\n", args=["--log-level", "debug"])
    q = "/queue/" + unique("fast")
    count = 50_000
    before = rss_anon_kib(b.proc.pid)
    producer = socket.create_connection(b.address, timeout=60 * SLOW)
    producer.sendall(CONNECT)
    one = frame_bytes("SEND", [("destination", q), ("persistent", "true")], b"y" * 1024)
    for _ in range(count // 1000):
        producer.sendall(one * 1000)
    producer.sendall(frame_bytes("SEND", [("destination", q), ("receipt", "last")], b"end"))
    data = b""
    while b"receipt-id:last" not in data:
        chunk = producer.recv(65536)
        assert chunk, "closed before the last receipt"
        data += chunk
    grown_mib = (rss_anon_kib(b.proc.pid) - before) / 1024
    # Under ASan and UBSan the broker's own handling of each frame is slower than the group commit,
    # so the limit may never be reached there, and ASan keeps freed memory in its quarantine (256 MiB
    # by default), so RssAnon says nothing about what escrowd holds: both are checked in the normal
    # build only. That every message is stored is checked in both.
    if not os.environ.get("ESCROW_SANITIZED"):
        assert "reading paused: received frames wait for the core or the disk" in b.log
        assert grown_mib < 40, f"RssAnon grew by {grown_mib:.1f} MiB"
    drain = socket.create_connection(b.address, timeout=60 * SLOW)
    drain.sendall(CONNECT + frame_bytes("SUBSCRIBE", [("id", "d"), ("destination", q), ("ack", "auto")]))
    nuls = 0
    while nuls < count + 2:  # CONNECTED, the messages, "end"
        chunk = drain.recv(1 << 20)
        assert chunk, f"closed after {nuls - 1} messages"
        nuls += chunk.count(b"\0")
    assert nuls == count + 2


# --------------------------------------------------------------------------------------------
# Per-user limits (docs/security.md, "Tenants"): anonymous counts as one user, so two anonymous
# connections share them. test_tenants.py shows that another user is not affected.
# --------------------------------------------------------------------------------------------

def test_max_branches_per_user_counts_every_connection_of_the_user(broker_factory, raw):
    b = broker_factory(config="[limits]\nmax-branches-per-user = 2\n")
    first, _ = connected(raw, b)
    first.send(frame_bytes("BEGIN", [("transaction", "t1"), ("receipt", "b1")]))
    assert first.read_frame().command == "RECEIPT"
    second, _ = connected(raw, b)
    x = new_xid()
    second.send(frame_bytes("XA-START", [("xid", x), ("receipt", "x1")]))
    assert second.read_frame().headers["xa-result"] == "XA_OK"
    third, _ = connected(raw, b)
    third.send(frame_bytes("BEGIN", [("transaction", "t2"), ("receipt", "b2")]))
    assert error_of(third) == ("too many open transactions: anonymous has 2 begun or started and not yet prepared "
                               "or finished, over all connections (limits.max-branches-per-user)")
    # One ends: room again.
    first.send(frame_bytes("ABORT", [("transaction", "t1"), ("receipt", "a1")]))
    assert first.read_frame().command == "RECEIPT"
    fourth, _ = connected(raw, b)
    fourth.send(frame_bytes("BEGIN", [("transaction", "t3"), ("receipt", "b3")]))
    assert fourth.read_frame().command == "RECEIPT"


def prepare_one(r, queue, tag):
    x = new_xid()
    r.send(frame_bytes("XA-START", [("xid", x), ("receipt", f"s{tag}")]))
    assert r.read_frame().headers["xa-result"] == "XA_OK"
    r.send(frame_bytes("SEND", [("destination", queue), ("receipt", f"m{tag}")], "work"))
    assert r.read_frame().command == "RECEIPT"
    r.send(frame_bytes("XA-END", [("xid", x), ("flags", "TMSUCCESS"), ("receipt", f"e{tag}")]))
    assert r.read_frame().headers["xa-result"] == "XA_OK"
    r.send(frame_bytes("XA-PREPARE", [("xid", x), ("receipt", f"p{tag}")]))
    return x, r.read_frame()


def test_max_prepared_branches_per_user_answers_xaer_rmerr_and_leaves_the_branch_idle(broker_factory, raw):
    b = broker_factory(config="[limits]\nmax-prepared-branches-per-user = 1\n")
    q = "/queue/" + unique("prep")
    r, _ = connected(raw, b)
    x1, reply = prepare_one(r, q, 1)
    assert reply.headers["xa-result"] == "XA_OK"
    x2, reply = prepare_one(r, q, 2)
    assert reply.headers["xa-result"] == "XAER_RMERR"
    assert "(limits.max-prepared-branches-per-user)" in reply.headers["message"], reply.headers
    # The refused branch is still idle: its manager rolls it back.
    r.send(frame_bytes("XA-ROLLBACK", [("xid", x2), ("receipt", "rb")]))
    assert r.read_frame().headers["xa-result"] == "XA_OK"
    # Once the first is decided, the next prepare goes through; the refused SEND never became visible.
    r.send(frame_bytes("XA-COMMIT", [("xid", x1), ("receipt", "c1")]))
    assert r.read_frame().headers["xa-result"] == "XA_OK"
    _, reply = prepare_one(r, q, 3)
    assert reply.headers["xa-result"] == "XA_OK"
    # After a restart the prepared branch still counts.
    b.kill9()
    b.restart()
    r, _ = connected(raw, b)
    _, reply = prepare_one(r, q, 4)
    assert reply.headers["xa-result"] == "XAER_RMERR"


def test_max_transaction_bytes_refuses_the_send_that_goes_over(broker_factory, raw):
    # Each SEND counts its body and its header lines (name, value, 2): here 1000 + 46.
    headers = [("destination", "/queue/tx-bytes"), ("transaction", "t"), ("receipt", "r")]
    per_send = 1000 + sum(len(n) + len(v) + 2 for n, v in headers)
    b = broker_factory(config=f"[limits]\nmax-transaction-bytes = {3 * per_send}\n")
    r, _ = connected(raw, b)
    r.send(frame_bytes("BEGIN", [("transaction", "t"), ("receipt", "b")]))
    assert r.read_frame().command == "RECEIPT"
    for _ in range(3):
        r.send(frame_bytes("SEND", headers, b"x" * 1000))
        assert r.read_frame().command == "RECEIPT"
    r.send(frame_bytes("SEND", headers, b"x"))
    assert error_of(r) == (f"SEND refused: the transaction would hold {3 * per_send + 1 + per_send - 1000} bytes of "
                           f"messages, above limits.max-transaction-bytes ({3 * per_send}); commit in smaller "
                           "transactions")


def test_max_transaction_bytes_per_user_counts_every_open_transaction_and_frees_on_commit(broker_factory, raw):
    headers = [("destination", "/queue/" + unique("txu")), ("transaction", "t"), ("receipt", "r")]
    per_send = 1000 + sum(len(n) + len(v) + 2 for n, v in headers)
    b = broker_factory(config=f"[limits]\nmax-transaction-bytes-per-user = {2 * per_send}\n")
    one, _ = connected(raw, b)
    two, _ = connected(raw, b)
    for r in (one, two):
        r.send(frame_bytes("BEGIN", [("transaction", "t"), ("receipt", "b")]))
        assert r.read_frame().command == "RECEIPT"
        r.send(frame_bytes("SEND", headers, b"x" * 1000))
        assert r.read_frame().command == "RECEIPT"
    # Both hold one each: the user is at the limit. A commit frees its share.
    one.send(frame_bytes("COMMIT", [("transaction", "t"), ("receipt", "c")]))
    assert one.read_frame().command == "RECEIPT"
    two.send(frame_bytes("SEND", headers, b"x" * 1000))
    assert two.read_frame().command == "RECEIPT"
    two.send(frame_bytes("SEND", headers, b"x" * 1000))
    assert error_of(two).startswith(f"SEND refused: anonymous's open transactions would hold {3 * per_send} bytes")


def test_max_queues_per_user_counts_what_its_frames_created_across_a_restart(broker_factory, raw):
    b = broker_factory(config="[limits]\nmax-queues-per-user = 3\n")
    r, _ = connected(raw, b)
    names = [unique("own") for _ in range(2)]
    for i, name in enumerate(names):
        r.send(frame_bytes("SEND", [("destination", f"/queue/{name}"), ("receipt", f"r{i}")], "x"))
        assert r.read_frame().command == "RECEIPT"
    # A SUBSCRIBE that creates a queue counts too: the third.
    r.send(frame_bytes("SUBSCRIBE", [("id", "s"), ("destination", f"/queue/{unique('sub')}"), ("receipt", "s")]))
    assert r.read_frame().command == "RECEIPT"
    r.send(frame_bytes("SEND", [("destination", f"/queue/{unique('fourth')}"), ("receipt", "r4")], "x"))
    assert error_of(r) == ("no new queue: anonymous has created 3 queues and durable subscriptions "
                           "(limits.max-queues-per-user); use an existing one, or ask an operator to delete unused ones")
    # Existing queues take messages as before, and the count survives a restart (it is stored).
    b.kill9()
    b.restart()
    r, _ = connected(raw, b)
    r.send(frame_bytes("SEND", [("destination", f"/queue/{names[0]}"), ("receipt", "again")], "x"))
    assert r.read_frame().command == "RECEIPT"
    r.send(frame_bytes("SEND", [("destination", f"/queue/{unique('fifth')}"), ("receipt", "r5")], "x"))
    assert "(limits.max-queues-per-user)" in error_of(r)


def test_a_local_transaction_open_past_its_timeout_is_rolled_back_and_the_client_told(broker_factory, raw):
    b = broker_factory(config="[transactions]\nlocal-timeout-ms = 200\n")
    q = "/queue/" + unique("slow-tx")
    r, _ = connected(raw, b)
    # BEGIN and SEND in one write: the SEND is in the transaction before its 200 ms can run out,
    # however slowly a round trip goes here.
    r.send(frame_bytes("BEGIN", [("transaction", "t"), ("receipt", "b")]) +
           frame_bytes("SEND", [("destination", q), ("transaction", "t"), ("receipt", "s")], "never"))
    assert [(f.command, f.headers.get("receipt-id")) for f in (r.read_frame(), r.read_frame())] == \
        [("RECEIPT", "b"), ("RECEIPT", "s")]
    # The broker's expiry pass (every second) rolls it back and says so.
    assert error_of(r) == ("transaction 't' was open for more than 200 ms (transactions.local-timeout-ms): "
                           "rolled back; nothing of it took effect")
    b.wait_log("transaction 't' open for more than 200 ms: rolled back")
    # Nothing of it is visible; a sentinel sent after it is the first message a consumer gets.
    c, _ = connected(raw, b)
    c.send(frame_bytes("SEND", [("destination", q), ("receipt", "p")], "sentinel"))
    assert c.read_frame().command == "RECEIPT"
    c.send(frame_bytes("SUBSCRIBE", [("id", "1"), ("destination", q)]))
    assert c.read_frame().body == b"sentinel"


def test_prepares_sent_without_waiting_cannot_pass_max_prepared_branches_per_user(broker_factory, stomp_client):
    b = broker_factory(config="[limits]\nmax-prepared-branches-per-user = 2\n")
    c = stomp_client(b)
    q = "/queue/" + unique("burst")
    xids = []
    for i in range(6):
        x = new_xid()
        assert c.xa("START", x).result == "XA_OK"
        c.send(q, f"m{i}")
        assert c.xa("END", x, "TMSUCCESS").result == "XA_OK"
        xids.append(x)
    # All six prepares are on their way before the first is answered.
    rids = [c.xa("PREPARE", x, wait=False) for x in xids]
    results = [c.xa_reply(r).result for r in rids]
    assert results.count("XA_OK") == 2 and results.count("XAER_RMERR") == 4, results
    assert len(c.xa("RECOVER", flags="TMSTARTRSCAN|TMENDRSCAN", count=100).body.split()) == 2
