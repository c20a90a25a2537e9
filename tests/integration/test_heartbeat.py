"""Heart-beats: the server sends EOLs at the negotiated interval while otherwise quiet, closes a
client that promised heart-beats and went silent, and returns that client's unacknowledged
messages to the queue."""

import os
import time

from conftest import SLOW, TIMEOUT, frame_bytes, unique

FAST = """
[heartbeat]
send-ms = 300
receive-ms = 300
grace-ms = 300
"""


def connect(s, heart_beat):
    return s.connect(f"accept-version:1.2\nhost:localhost\nheart-beat:{heart_beat}\n")


def eol_gaps(s, seconds):
    s.eols.clear()
    frames = s.pump(seconds)
    assert frames == [], frames
    t = s.eols
    return [b - a for a, b in zip(t, t[1:])]


def next_eols(s, count):
    """Reads until `count` more heart-beat EOLs (and no frame) have arrived, however long that takes
    on this machine (up to TIMEOUT); returns the gaps between them. The gaps are what is asserted:
    a fixed window would also count how late each one came."""
    s.eols.clear()
    deadline = time.monotonic() + TIMEOUT
    frames = []
    while len(s.eols) < count:
        left = deadline - time.monotonic()
        assert left > 0 and not s.closed, f"{len(s.eols)} of {count} EOLs in {TIMEOUT:.0f} s (closed: {s.closed})"
        frames += s.pump(min(left, 0.05))
    assert frames == [], frames
    t = s.eols
    return [b - a for a, b in zip(t, t[1:])]


def test_connected_offers_default_heart_beats(broker, raw):
    c = connect(raw(broker), "1000,1000")
    assert c.headers["heart-beat"] == "1000,1000"


def test_server_sends_eols_at_negotiated_interval_default(broker, raw):
    # Client asks for heart-beats every 500 ms, the server offers 1000: max(500, 1000) = 1000 ms.
    s = raw(broker)
    connected = connect(s, "0,500")
    sx = int(connected.headers["heart-beat"].split(",")[0])
    assert sx == 1000
    start = time.monotonic()
    gaps = next_eols(s, 3)
    assert s.eols[0] - start < 1.5 * SLOW
    # Not faster than the interval (the client asked for 500 ms, the server may not send at 500),
    # and not much slower.
    assert all(0.75 <= g <= 1.6 * SLOW for g in gaps), gaps


def test_server_interval_is_the_larger_of_both_sides(broker_factory, raw):
    b = broker_factory(config=FAST)
    s = raw(b)
    connected = connect(s, "0,600")  # the server could send every 300; the client wants no more than every 600
    assert connected.headers["heart-beat"].split(",")[0] == "300"
    gaps = next_eols(s, 3)
    assert all(0.45 <= g <= 1.2 * SLOW for g in gaps), gaps


def test_no_heart_beats_when_client_does_not_want_them(broker_factory, raw):
    b = broker_factory(config=FAST)
    s = raw(b)
    connected = connect(s, "0,0")
    assert connected.headers["heart-beat"].split(",")[0] == "0"
    eol_gaps(s, 1.0)
    assert s.eols == []
    s2 = raw(b)
    s2.connect()  # no heart-beat header: 0,0
    eol_gaps(s2, 0.1)
    assert s2.eols == []


def test_busy_connection_needs_no_heart_beats(broker_factory, raw, stomp_client):
    # EOLs are sent only when nothing else was sent for the interval.
    b = broker_factory(config=FAST)
    q = f"/queue/{unique('busy')}"
    p = stomp_client(b)  # first: its connecting is no quiet time on s
    s = raw(b)
    connect(s, "0,300")
    s.send(frame_bytes("SUBSCRIBE", [("id", "0"), ("destination", q)]))
    s.eols.clear()
    for i in range(15):
        p.send(q, f"m{i}", headers={"persistent": "false"}, receipt=False)
        time.sleep(0.1)
    # Every message, however late it comes; the test itself may stall past 300 ms once or twice.
    frames = [s.read_frame() for _ in range(15)]
    assert [(f.command, f.body) for f in frames] == [("MESSAGE", f"m{i}".encode()) for i in range(15)], frames
    assert len(s.eols) <= 2, len(s.eols)


def test_silent_client_is_closed_after_interval_plus_grace_default(broker, raw):
    # The client promises a heart-beat every 500 ms: interval max(500, 1000) = 1000, grace 1000.
    s = raw(broker)
    start = time.monotonic()  # before the CONNECT, the last thing the broker reads from s
    connected = connect(s, "500,0")
    assert connected.headers["heart-beat"].split(",")[1] == "1000"
    frames = s.read_until_closed(timeout=10 * SLOW)
    elapsed = time.monotonic() - start
    assert [f.command for f in frames] == ["ERROR"], frames
    assert "heart-beat" in frames[0].headers.get("message", "")
    assert 1.8 <= elapsed <= 4 * SLOW, elapsed


def test_client_that_sends_heart_beats_stays_connected(broker_factory, raw):
    b = broker_factory(config=FAST)
    s = raw(b)
    connect(s, "300,0")
    deadline = time.monotonic() + 1.3  # twice interval + grace
    while time.monotonic() < deadline:
        s.send(b"\n")
        time.sleep(0.15)
    assert not s.closed
    s.send(frame_bytes("SUBSCRIBE", [("id", "0"), ("destination", "/queue/x"), ("receipt", "alive")]))
    f = s.read_frame()
    assert (f.command, f.headers.get("receipt-id")) == ("RECEIPT", "alive"), f


def test_client_sending_frames_stays_connected(broker_factory, raw):
    # Any frame counts as a sign of life, not only EOLs.
    b = broker_factory(config=FAST)
    q = f"/queue/{unique('alive')}"
    s = raw(b)
    connect(s, "300,0")
    for i in range(8):
        s.send(frame_bytes("SEND", [("destination", q), ("persistent", "false")], f"m{i}"))
        time.sleep(0.15)
    s.send(frame_bytes("SUBSCRIBE", [("id", "0"), ("destination", q), ("receipt", "alive")]))
    f = s.read_frame()
    assert (f.command, f.headers.get("receipt-id")) == ("RECEIPT", "alive"), f


def test_silent_client_unacked_messages_return_to_queue(broker_factory, raw, stomp_client):
    b = broker_factory(config=FAST)
    q = f"/queue/{unique('silent')}"
    p = stomp_client(b)
    for i in range(3):
        p.send(q, f"m{i}")
    s = raw(b)
    connected = connect(s, "300,0")
    assert connected.headers["heart-beat"].split(",")[1] == "300"
    s.send(frame_bytes("SUBSCRIBE", [("id", "0"), ("destination", q), ("ack", "client-individual")]))
    msgs = [s.read_frame() for _ in range(3)]
    assert [m.body for m in msgs] == [b"m0", b"m1", b"m2"]
    start = time.monotonic()  # before the ACK, the last thing the broker reads from s
    s.send(frame_bytes("ACK", [("id", msgs[0].headers["ack"])]))
    frames = s.read_until_closed(timeout=10 * SLOW)
    elapsed = time.monotonic() - start
    assert [f.command for f in frames] == ["ERROR"], frames
    assert "heart-beat" in frames[0].headers["message"]
    assert 0.5 <= elapsed <= 3 * SLOW, elapsed
    c = stomp_client(b)
    c.subscribe(q)
    got = c.wait_messages(2)
    assert [m.body for m in got] == ["m1", "m2"]
    assert all(m.headers["redelivered"] == "true" for m in got)
    c.settle(2)


def test_stomp_py_client_with_heart_beats_stays_connected(broker_factory, stomp_client):
    b = broker_factory(config=FAST)
    q = f"/queue/{unique('hb')}"
    c = stomp_client(b, heartbeats=(300, 300))
    c.subscribe(q)
    time.sleep(1.0)
    c.send(q, "still here")
    c.wait_body("still here")
    assert not c.listener.disconnected
    # The server's EOLs reached stomp.py (three or so by now; waited for, not counted in a window).
    c.listener.wait_for(lambda: c.listener.heartbeats >= 2, TIMEOUT, "two heart-beats from escrowd")


def cpu_seconds(pid):
    """User + system CPU of process `pid` so far (/proc/PID/stat, fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_huge_heart_beat_values_are_clamped_not_overflowed(broker, raw):
    # heart-beat:0,10000000000000 once overflowed the writer's timer (EOLs without pause), and
    # 9223372035854,0 the watchdog's deadline (re-armed at once, forever): one connection burned a
    # core. Values above heartbeat.max-ms (an hour) now count as an hour.
    flood = raw(broker)
    connect(flood, "0,10000000000000")
    spin = raw(broker)
    connect(spin, "9223372035854,0")
    before = cpu_seconds(broker.proc.pid)
    flood.eols.clear()
    assert flood.pump(1.0) == [] and spin.pump(0.01) == []
    used = cpu_seconds(broker.proc.pid) - before
    assert len(flood.eols) <= 1, f"{len(flood.eols)} heart-beat EOLs in a second, asked for one an hour"
    # Idle, escrowd takes a few milliseconds of CPU a second; a spinning timer takes the whole second.
    assert used < 0.5, f"escrowd used {used:.2f} s of CPU in a second with two idle connections"
    # Both connections still work.
    for s in (flood, spin):
        s.send(frame_bytes("SEND", [("destination", f"/queue/{unique('hb')}"), ("receipt", "r")], "x"))
        assert s.read_frame().command == "RECEIPT"


def test_heart_beat_max_ms_at_its_edge(broker_factory, raw):
    # A client value at heartbeat.max-ms is taken as it is, one above counts as max-ms: with max-ms
    # 300 and a client that wants a heart-beat every 100000 ms, the server sends one every 300 ms.
    b = broker_factory(config=FAST + "max-ms = 300\n")
    for asked in ("0,300", "0,100000"):
        s = raw(b)
        connect(s, asked)
        gaps = next_eols(s, 3)
        assert all(0.2 < g < 0.3 + 0.5 * SLOW for g in gaps), (asked, gaps)
        s.close()
