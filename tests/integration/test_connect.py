"""Connecting: version negotiation, CONNECTED headers, the frames allowed before and after
CONNECT, heart-beat header validation, receipts and DISCONNECT."""

import time

import pytest

from conftest import SLOW, assert_escaped, frame_bytes, unique


def test_connect_12_answers_connected_with_version_server_session_heartbeat(broker, raw):
    s = raw(broker)
    connected = s.connect("accept-version:1.2\nhost:localhost\n")
    assert connected.headers["version"] == "1.2"
    assert connected.headers.get("server"), connected
    assert connected.headers.get("session"), connected
    assert "heart-beat" in connected.headers, connected
    sx, sy = connected.headers["heart-beat"].split(",")
    assert sx.isdigit() and sy.isdigit()


def test_stomp_command_is_accepted_like_connect(broker, raw):
    s = raw(broker)
    connected = s.connect("accept-version:1.2\nhost:localhost\n", command="STOMP")
    assert connected.headers["version"] == "1.2"


def test_python_stomp_client_connects(broker, stomp_client):
    c = stomp_client(broker)  # stomp.py sends STOMP with accept-version 1.2
    assert c.listener.connected.headers["version"] == "1.2"


def test_sessions_are_distinct(broker, raw):
    a = raw(broker).connect()
    b = raw(broker).connect()
    assert a.headers["session"] != b.headers["session"]


@pytest.mark.parametrize("offered,chosen", [
    ("1.0,1.1,1.2", "1.2"),
    ("1.2,1.0", "1.2"),
    ("1.1", "1.1"),
    ("1.0,1.1", "1.1"),
    ("1.0", "1.0"),
    ("1.1,2.0", "1.1"),
])
def test_version_is_highest_common(broker, raw, offered, chosen):
    connected = raw(broker).connect(f"accept-version:{offered}\nhost:localhost\n")
    assert connected.headers.get("version") == chosen


def test_no_accept_version_is_a_10_client(broker, raw):
    s = raw(broker)
    connected = s.connect("host:localhost\n")
    assert connected.headers.get("version", "1.0") == "1.0"
    # A 1.0 client may SUBSCRIBE without id and gets its messages.
    q = f"/queue/{unique()}"
    s.send(frame_bytes("SUBSCRIBE", [("destination", q), ("receipt", "s1")]))
    r = s.read_frame()
    assert r.command == "RECEIPT" and r.headers["receipt-id"] == "s1", r
    s.send(frame_bytes("SEND", [("destination", q)], "hello 1.0"))
    m = s.read_frame()
    assert m.command == "MESSAGE" and m.body == b"hello 1.0", m


@pytest.mark.parametrize("offered", ["2.0", "0.9,3.1", "1.3"])
def test_no_common_version_is_error_with_version_header_then_close(broker, raw, offered):
    s = raw(broker)
    s.send(f"CONNECT\naccept-version:{offered}\nhost:localhost\n\n\0")
    frames = s.read_until_closed()
    assert [f.command for f in frames] == ["ERROR"], frames
    assert frames[0].headers.get("version") == "1.0,1.1,1.2"


def test_second_connect_is_error_and_close(broker, raw):
    s = raw(broker)
    s.connect()
    s.send("CONNECT\naccept-version:1.2\nhost:localhost\nreceipt:again\n\n\0")
    frames = s.read_until_closed()
    assert [f.command for f in frames] == ["ERROR"], frames
    assert "CONNECT" in frames[0].headers.get("message", ""), frames[0]
    assert frames[0].headers.get("receipt-id") == "again"


@pytest.mark.parametrize("command", ["SEND", "SUBSCRIBE", "DISCONNECT", "ACK"])
def test_frame_before_connect_is_error_and_close(broker, raw, stomp_client, command):
    q = f"/queue/{unique()}"
    s = raw(broker)
    s.send(frame_bytes(command, [("destination", q), ("id", "1"), ("receipt", "early")], "too early"))
    frames = s.read_until_closed()
    assert [f.command for f in frames] == ["ERROR"], frames
    assert "CONNECT" in frames[0].headers.get("message", ""), frames[0]
    assert frames[0].headers.get("receipt-id") == "early", frames[0]
    if command == "SEND":
        # Nothing was stored by the refused SEND.
        c = stomp_client(broker)
        c.subscribe(q)
        c.send(q, "only")
        c.wait_body("only")
        assert [m.body for m in c.messages] == ["only"]


@pytest.mark.parametrize("value", ["abc", "1000", "1000,", ",1000", "-1,1000", "1000;1000", "1000,1000,1000", " 1000,1000"])
def test_malformed_heart_beat_on_connect_is_error(broker, raw, value):
    s = raw(broker)
    s.send(f"CONNECT\naccept-version:1.2\nhost:localhost\nheart-beat:{value}\n\n\0")
    frames = s.read_until_closed()
    assert [f.command for f in frames] == ["ERROR"], frames
    assert "heart-beat" in frames[0].headers.get("message", ""), frames[0]


def test_connect_headers_are_not_unescaped_or_rejected(broker, raw):
    # CONNECT values are literal: a backslash sequence that would be an invalid escape elsewhere is
    # fine in CONNECT (STOMP 1.2).
    s = raw(broker)
    connected = s.connect("accept-version:1.2\nhost:localhost\nlogin:us\\ter\npasscode:a:b\\c\n")
    assert connected.headers["version"] == "1.2"


def test_connect_with_crlf_line_endings(broker, raw):
    s = raw(broker)
    s.send(b"CONNECT\r\naccept-version:1.2\r\nhost:localhost\r\n\r\n\0")
    f = s.read_frame()
    assert f.command == "CONNECTED" and f.headers["version"] == "1.2", f
    q = f"/queue/{unique()}"
    s.send(f"SUBSCRIBE\r\nid:0\r\ndestination:{q}\r\n\r\n\0SEND\r\ndestination:{q}\r\n\r\ncrlf\0".encode())
    m = s.read_frame()
    assert m.command == "MESSAGE" and m.body == b"crlf", m


def test_receipt_for_every_kind_of_frame(broker, raw):
    s = raw(broker)
    s.connect()
    q = f"/queue/{unique()}"
    s.send(frame_bytes("SUBSCRIBE", [("id", "s"), ("destination", q), ("ack", "client-individual"),
                                     ("receipt", "r-sub")]))
    assert s.read_frame().headers == {"receipt-id": "r-sub"}
    s.send(frame_bytes("SEND", [("destination", q), ("receipt", "r-send")], "x"))
    got = [s.read_frame(), s.read_frame()]
    receipts = [f for f in got if f.command == "RECEIPT"]
    msgs = [f for f in got if f.command == "MESSAGE"]
    assert [r.headers["receipt-id"] for r in receipts] == ["r-send"] and len(msgs) == 1, got
    s.send(frame_bytes("ACK", [("id", msgs[0].headers["ack"]), ("receipt", "r-ack")]))
    assert s.read_frame().headers == {"receipt-id": "r-ack"}
    s.send(frame_bytes("UNSUBSCRIBE", [("id", "s"), ("receipt", "r-unsub")]))
    assert s.read_frame().headers == {"receipt-id": "r-unsub"}


def test_disconnect_with_receipt_answers_receipt_then_closes(broker, raw):
    s = raw(broker)
    s.connect()
    q = f"/queue/{unique()}"
    s.send(frame_bytes("SEND", [("destination", q)], "before disconnect"))
    s.send(frame_bytes("DISCONNECT", [("receipt", "bye")]))
    frames = s.read_until_closed()
    assert [(f.command, f.headers.get("receipt-id")) for f in frames] == [("RECEIPT", "bye")], frames
    # Everything before DISCONNECT was done: the message is there.
    c = raw(broker)
    c.connect()
    c.send(frame_bytes("SUBSCRIBE", [("id", "0"), ("destination", q)]))
    m = c.read_frame()
    assert m.command == "MESSAGE" and m.body == b"before disconnect"


def test_connect_timeout_closes_a_silent_socket(broker_factory, raw):
    b = broker_factory(config="[limits]\nconnect-timeout-ms = 300\n")
    start = time.monotonic()  # before the connection, whose accept starts the broker's clock
    s = raw(b)
    frames = s.read_until_closed(timeout=10 * SLOW)
    elapsed = time.monotonic() - start
    assert [f.command for f in frames] == ["ERROR"], frames
    assert 0.25 <= elapsed < 5 * SLOW, elapsed
    # A connection that does CONNECT in time is unaffected.
    ok = raw(b)
    ok.connect()
    time.sleep(0.5)
    ok.send(frame_bytes("SUBSCRIBE", [("id", "0"), ("destination", "/queue/x"), ("receipt", "r")]))
    assert ok.read_frame().command == "RECEIPT"


def test_receipt_id_is_escaped_like_any_header(broker, raw):
    s = raw(broker)
    s.connect()
    # receipt value "r:1\\x" (escaped on the wire as r\c1\\x) comes back in receipt-id
    s.send(frame_bytes("SUBSCRIBE", [("id", "0"), ("destination", "/queue/esc"), ("receipt", "r\\c1\\\\x")]))
    r = s.read_frame()
    assert r.command == "RECEIPT" and r.headers["receipt-id"] == "r:1\\x", r
    assert_escaped(r)


def test_destination_with_escaped_colon(broker, raw):
    s = raw(broker)
    s.connect()
    s.send(frame_bytes("SUBSCRIBE", [("id", "0"), ("destination", "/queue/a\\cb")]))
    s.send(frame_bytes("SEND", [("destination", "/queue/a\\cb")], "colon"))
    m = s.read_frame()
    assert m.command == "MESSAGE" and m.headers["destination"] == "/queue/a:b", m
    assert_escaped(m)
