"""Malformed input and broken protocol rules: ERROR naming the problem (with receipt-id when the
bad frame's receipt header was read), then the server closes and reads nothing more; other
connections keep working; nothing of the bad frame is stored."""

import re

import pytest

from conftest import TIMEOUT, assert_escaped, drain, frame_bytes, unique

LIMITS = """
[limits]
max-frame-size = 1024
max-headers = 10
max-header-length = 128
"""


def send(dest, *extra, body="bad body", receipt=True):
    headers = [("destination", dest)]
    if receipt:
        headers.insert(0, ("receipt", "bad-1"))
    return frame_bytes("SEND", headers + list(extra), body)


# id -> (bytes of the bad frame given the queue destination, patterns the ERROR message must all
#        match (case-insensitive), whether the receipt header was there to be seen)
CASES = {
    "unknown-command": (lambda q: b"FROB\nreceipt:bad-1\n\n\0", [r"FROB", r"command"], False),
    "lowercase-command": (lambda q: f"send\ndestination:{q}\n\nx\0".encode(), [r"send", r"command"], False),
    "header-without-colon": (lambda q: f"SEND\nreceipt:bad-1\ndestination:{q}\nnocolonhere\n\nx\0".encode(),
                             [r"colon|':'|nocolonhere"], True),
    "invalid-escape-tab": (lambda q: f"SEND\nreceipt:bad-1\ndestination:{q}\nx-h:a\\tb\n\nx\0".encode(),
                           [r"escape"], True),
    "invalid-escape-in-name": (lambda q: f"SEND\nreceipt:bad-1\ndestination:{q}\nx\\q:v\n\nx\0".encode(),
                               [r"escape"], True),
    "content-length-not-a-number": (lambda q: send(q, ("content-length", "abc")), [r"content-length"], True),
    "content-length-negative": (lambda q: send(q, ("content-length", "-5")), [r"content-length"], True),
    "body-longer-than-content-length": (lambda q: send(q, ("content-length", "3"), body="abcdef"),
                                        [r"content-length|NUL"], True),
    "frame-larger-than-max-frame-size": (lambda q: send(q, ("content-length", "2000"), body="z" * 2000),
                                         [r"frame", r"1024|size|large|exceed"], True),
    "unterminated-frame-over-limit": (lambda q: f"SEND\nreceipt:bad-1\ndestination:{q}\n\n".encode() + b"y" * 3000,
                                      [r"frame", r"1024|size|large|exceed"], True),
    "too-many-headers": (lambda q: send(q, *[(f"x-h{i}", "v") for i in range(20)]),
                         [r"header", r"\b10\b|many|more|exceed|limit"], True),
    "header-line-too-long": (lambda q: send(q, ("x-long", "v" * 300)), [r"header", r"128|long|length|exceed"], True),
    "send-without-destination": (lambda q: frame_bytes("SEND", [("receipt", "bad-1"), ("x-h", "1")], "x"),
                                 [r"destination"], True),
    "send-destination-header-wrong-case": (lambda q: frame_bytes("SEND", [("receipt", "bad-1"), ("Destination", q)], "x"),
                                           [r"destination"], True),
    "send-bad-destination": (lambda q: frame_bytes("SEND", [("receipt", "bad-1"), ("destination", "/foo/bar")], "x"),
                             [r"destination|/foo/bar"], True),
    "send-empty-queue-name": (lambda q: frame_bytes("SEND", [("receipt", "bad-1"), ("destination", "/queue/")], "x"),
                              [r"destination|/queue/"], True),
    "send-bad-persistent": (lambda q: send(q, ("persistent", "maybe")), [r"persistent"], True),
    "send-priority-10": (lambda q: send(q, ("priority", "10")), [r"priority"], True),
    "send-priority-not-a-number": (lambda q: send(q, ("priority", "high")), [r"priority"], True),
    "subscribe-without-id": (lambda q: frame_bytes("SUBSCRIBE", [("receipt", "bad-1"), ("destination", q)]),
                             [r"\bid\b"], True),
    "subscribe-without-destination": (lambda q: frame_bytes("SUBSCRIBE", [("receipt", "bad-1"), ("id", "s1")]),
                                      [r"destination"], True),
    "unsubscribe-without-id": (lambda q: frame_bytes("UNSUBSCRIBE", [("receipt", "bad-1")]), [r"\bid\b"], True),
    "ack-without-id": (lambda q: frame_bytes("ACK", [("receipt", "bad-1")]), [r"\bid\b"], True),
    "nack-without-id": (lambda q: frame_bytes("NACK", [("receipt", "bad-1")]), [r"\bid\b"], True),
    "ack-unknown-id": (lambda q: frame_bytes("ACK", [("receipt", "bad-1"), ("id", "999999")]),
                       [r"999999|unknown|not"], True),
    "nack-unknown-id": (lambda q: frame_bytes("NACK", [("receipt", "bad-1"), ("id", "999999")]),
                        [r"999999|unknown|not"], True),
    "server-command-message": (lambda q: frame_bytes("MESSAGE", [("receipt", "bad-1"), ("destination", q),
                                                                 ("message-id", "1"), ("subscription", "0")], "x"),
                               [r"MESSAGE"], True),
    "server-command-receipt": (lambda q: frame_bytes("RECEIPT", [("receipt", "bad-1"), ("receipt-id", "1")]),
                               [r"RECEIPT"], True),
    "server-command-connected": (lambda q: frame_bytes("CONNECTED", [("receipt", "bad-1"), ("version", "1.2")]),
                                 [r"CONNECTED"], True),
}


def healthy_round_trip(client, q):
    body = unique("ping")
    client.send(q, body)
    client.wait_body(body)


@pytest.mark.parametrize("case", list(CASES))
def test_malformed_frame(broker_factory, raw, stomp_client, case):
    make_bad, patterns, receipt_seen = CASES[case]
    broker = broker_factory(config=LIMITS)
    q = f"/queue/{unique('mal')}"

    healthy = stomp_client(broker)
    hq = f"/queue/{unique('healthy')}"
    healthy.subscribe(hq)
    healthy_round_trip(healthy, hq)

    bad = raw(broker)
    bad.connect()
    # A correct message first, on the same connection, to the same queue.
    bad.send(frame_bytes("SEND", [("destination", q), ("receipt", "good")], "good"))
    r = bad.read_frame()
    assert (r.command, r.headers.get("receipt-id")) == ("RECEIPT", "good"), r
    # Now for a client-ack subscription holding a message, so that the ACK cases have something real.
    if case.startswith(("ack", "nack")):
        aq = f"/queue/{unique('ackq')}"
        bad.send(frame_bytes("SUBSCRIBE", [("id", "s0"), ("destination", aq), ("ack", "client-individual")]))
        bad.send(frame_bytes("SEND", [("destination", aq)], "to ack"))
        m = bad.read_frame()
        assert m.command == "MESSAGE", m
    # The bad frame, and right behind it in the same write a valid SEND that must never be read.
    bad.send(make_bad(q) + frame_bytes("SEND", [("destination", q), ("receipt", "after")], "after-error"))
    frames = bad.read_until_closed()

    assert [f.command for f in frames] == ["ERROR"], frames
    error = frames[0]
    message = error.headers.get("message", "")
    for pattern in patterns:
        assert re.search(pattern, message, re.IGNORECASE), f"ERROR message {message!r} does not match {pattern!r}"
    assert_escaped(error)  # the server's own headers are escaped too (e.g. a ':' in the message)
    if receipt_seen:
        assert error.headers.get("receipt-id") == "bad-1", error
    if error.body:
        assert error.headers.get("content-length") == str(len(error.body)), error

    # Other connections were not disturbed.
    healthy_round_trip(healthy, hq)
    # Nothing partial stored: the queue holds the good message only (not the bad one, not the one
    # after the error).
    checker = stomp_client(broker)
    before, _ = drain(checker, q, healthy)
    assert [m.body for m in before] == ["good"]
    assert healthy.messages and not healthy.errors


def test_frame_over_the_default_10_mib_limit(broker, raw, stomp_client):
    q = f"/queue/{unique('big')}"
    healthy = stomp_client(broker)
    healthy.subscribe(q)
    # Just under the limit is fine...
    ok = raw(broker)
    ok.connect()
    body = b"a" * (10 * 1024 * 1024 - 200)
    ok.send(frame_bytes("SEND", [("destination", q), ("content-length", len(body)), ("receipt", "r")], body))
    r = ok.read_frame(timeout=2 * TIMEOUT)
    assert r.command == "RECEIPT", r
    m = healthy.wait_messages(1, timeout=2 * TIMEOUT)[0]
    assert len(m.body) == len(body)
    # ...one byte over is an ERROR.
    s = raw(broker)
    s.connect()
    body = b"b" * (10 * 1024 * 1024 + 1)
    s.send(frame_bytes("SEND", [("receipt", "big"), ("destination", q), ("content-length", len(body))], body))
    frames = s.read_until_closed(timeout=2 * TIMEOUT)
    assert [f.command for f in frames] == ["ERROR"], frames
    assert re.search(r"frame|size|large|exceed", frames[0].headers.get("message", ""), re.I), frames[0]
    assert frames[0].headers.get("receipt-id") == "big"
    healthy_round_trip(healthy, q)
    assert len(healthy.messages) == 2  # the big one and the ping; the refused frame was not stored


def test_malformed_connect_frame(broker, raw):
    s = raw(broker)
    s.send(b"CONNECT\naccept-version 1.2\n\n\0")
    frames = s.read_until_closed()
    assert [f.command for f in frames] == ["ERROR"], frames


def test_garbage_instead_of_stomp(broker, raw, stomp_client):
    healthy = stomp_client(broker)
    q = f"/queue/{unique('h')}"
    healthy.subscribe(q)
    s = raw(broker)
    s.send(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
    frames = s.read_until_closed()
    assert [f.command for f in frames] == ["ERROR"], frames
    s2 = raw(broker)
    s2.send(bytes(range(256)) * 4)
    frames = s2.read_until_closed()
    assert [f.command for f in frames] == ["ERROR"], frames
    healthy_round_trip(healthy, q)


def test_error_after_many_frames_in_one_write(broker, raw, stomp_client):
    # Frames before the bad one in the same read are processed; nothing after it.
    q = f"/queue/{unique('batch')}"
    s = raw(broker)
    s.connect()
    data = b"".join(frame_bytes("SEND", [("destination", q)], f"ok{i}") for i in range(5))
    data += b"\n\r\n"  # heart-beat EOLs between frames are fine
    data += b"BOGUS\n\n\0" + frame_bytes("SEND", [("destination", q)], "late")
    s.send(data)
    frames = s.read_until_closed()
    assert [f.command for f in frames] == ["ERROR"], frames
    c = stomp_client(broker)
    before, _ = drain(c, q, c)
    assert [m.body for m in before] == [f"ok{i}" for i in range(5)]


def test_unacked_messages_of_a_connection_closed_by_error_return(broker, raw, stomp_client):
    q = f"/queue/{unique('err')}"
    p = stomp_client(broker)
    p.send(q, "m0")
    s = raw(broker)
    s.connect()
    s.send(frame_bytes("SUBSCRIBE", [("id", "0"), ("destination", q), ("ack", "client")]))
    m = s.read_frame()
    assert m.command == "MESSAGE" and m.body == b"m0"
    s.send(b"NOPE\n\n\0")
    assert [f.command for f in s.read_until_closed()] == ["ERROR"]
    c = stomp_client(broker)
    c.subscribe(q)
    (again,) = c.wait_messages(1)
    assert again.body == "m0" and again.headers["redelivered"] == "true"
