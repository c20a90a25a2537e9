"""Graceful stop on SIGTERM (docs/operations.md, "Running as a service"): with consumers holding
unacknowledged messages, producers sending with receipts and a prepared XA branch, SIGTERM stops
escrowd in bounded time with exit status 0 and a log line per step; after a restart nothing the
protocol promised is lost or duplicated: every receipted message is there exactly once (by body and
message-id), every message stored got its receipt before the socket closed, no message whose ACK was receipted comes back, the messages that were in flight come
back marked redelivered, and the prepared branch is still prepared (and commits)."""

import threading
import time

from conftest import SLOW, TIMEOUT, Client, drain, frame_bytes, new_xid, unique

# The stop waits at most 10 s for connections (broker/net/graceful_stop.h); without stuck connections
# it takes well under a second.
STOP_LIMIT_S = 5 * SLOW


class Producer(threading.Thread):
    """Sends to `destination` with receipts until stopped or disconnected, at most `window`
    receipts outstanding; `sent` is every (receipt id, body) it sent."""

    def __init__(self, client, destination, name, window=20):
        super().__init__(daemon=True, name=name)
        self.client, self.destination, self.prefix, self.window = client, destination, name, window
        self.sent = []
        self.stop = threading.Event()
        self.failure = None

    def receipted(self):
        with self.client.listener.cond:
            return set(self.client.listener.receipts)

    def run(self):
        listener = self.client.listener
        i = 0
        try:
            while not self.stop.is_set() and not listener.disconnected:
                with listener.cond:
                    outstanding = len(self.sent) - len(listener.receipts)
                if outstanding >= self.window:
                    time.sleep(0.001)
                    continue
                body = f"{self.prefix}-{i}"
                rid = self.client.send(self.destination, body, wait=False)
                self.sent.append((rid, body))
                i += 1
        except Exception as e:  # the broker closed the connection under us: expected at the stop
            self.failure = e


def test_sigterm_loses_and_duplicates_nothing(broker, stomp_client):
    q, held_q, xa_q = (f"/queue/{unique(p)}" for p in ("stop", "stop-held", "stop-xa"))
    feeder = stomp_client(broker)
    preload = [f"pre-{i}" for i in range(200)]
    for body in preload:
        feeder.send(q, body)
    feeder.send(held_q, "xa-consumed")

    # Consumers holding unacknowledged messages: a acks 10 with receipts (those must not come back)
    # and holds 30, b holds 20 (client mode).
    a = stomp_client(broker)
    a_sub = a.subscribe(q, ack="client-individual", headers={"prefetch-count": "30"})
    first = a.wait_messages(30)
    acked = first[:10]
    for m in acked:
        a.ack(m, receipt=True)
    a.wait_messages(40)
    b = stomp_client(broker)
    b.subscribe(q, ack="client", headers={"prefetch-count": "20"})
    b.wait_messages(20)
    held = {m.body: m.headers["message-id"] for m in a.messages[10:40] + b.messages[:20]}
    assert len(held) == 50

    # A prepared branch that sent one message and consumed another.
    x = new_xid()
    t = stomp_client(broker)
    t.subscribe(held_q, ack="client-individual")
    (consumed,) = t.wait_messages(1)
    assert t.xa("START", x).result == "XA_OK"
    t.send(xa_q, "xa-sent")
    t.ack(consumed, receipt=True)
    assert t.xa("END", x, "TMSUCCESS").result == "XA_OK"
    assert t.xa("PREPARE", x).result == "XA_OK"

    # Producers mid-stream.
    producers = [Producer(stomp_client(broker), q, f"p{i}") for i in range(2)]
    for p in producers:
        p.start()
    deadline = time.monotonic() + TIMEOUT
    while any(len(p.receipted()) < 100 for p in producers):
        assert time.monotonic() < deadline, "producers got no receipts"
        time.sleep(0.01)

    started = time.monotonic()
    status = broker.terminate()
    took = time.monotonic() - started
    for p in producers:
        p.stop.set()
        p.join(TIMEOUT)
    assert status == 0, broker.log
    assert took < STOP_LIMIT_S, f"the stop took {took:.1f} s"
    log = broker.log
    steps = ["SIGTERM (signal 15): stopping gracefully", "listeners closed; new connections are refused",
             "stopping: closing", "stopping: every connection closed",
             "prepared transaction branches left prepared in the store: 1 ", "stopping: store closed cleanly",
             "stopped"]
    at = [log.find(s) for s in steps]
    assert all(i >= 0 for i in at) and at == sorted(at), f"log steps {list(zip(steps, at))}:\n{log}"

    receipted, unreceipted = set(preload), set()
    for p in producers:
        got = p.receipted()
        for rid, body in p.sent:
            (receipted if rid in got else unreceipted).add(body)
    acked_bodies = {m.body for m in acked}
    expected = receipted - acked_bodies

    broker.start()
    sender, reader = Client(broker), Client(broker)
    try:
        back, _ = drain(reader, q, sender)
        bodies = [m.body for m in back]
        ids = [m.headers["message-id"] for m in back]
        assert len(bodies) == len(set(bodies)), "duplicated messages after the restart"
        assert len(ids) == len(set(ids)), "duplicated message ids after the restart"
        lost = expected - set(bodies)
        assert not lost, f"{len(lost)} receipted messages lost, e.g. {sorted(lost)[:5]}"
        assert not acked_bodies & set(bodies), "messages whose ACK was receipted came back"
        assert set(bodies) <= expected | unreceipted, f"unknown messages {set(bodies) - expected - unreceipted}"
        # The stop writes the receipt of every message it stored before it closes the socket
        # (and handles no frame read after the signal): stored means receipted.
        unanswered = set(bodies) & unreceipted
        assert not unanswered, f"{len(unanswered)} messages stored whose RECEIPT was never written, e.g. {sorted(unanswered)[:5]}"
        # What was in flight returned to its queue, counted as a delivery, with its id.
        by_body = {m.body: m for m in back}
        for body, message_id in held.items():
            assert by_body[body].headers["message-id"] == message_id
            assert by_body[body].headers["redelivered"] == "true", by_body[body].headers

        # The prepared branch is still prepared: it holds what it consumed, and commits.
        before, _ = drain(reader, held_q, sender)
        assert before == [], "a message consumed by the prepared branch was delivered"
        r = reader.xa("RECOVER", None, "TMSTARTRSCAN|TMENDRSCAN", count=100)
        assert x in r.xids, r
        assert reader.xa("COMMIT", x).result == "XA_OK"
        after, _ = drain(reader, xa_q, sender)
        assert [m.body for m in after] == ["xa-sent"]
    finally:
        sender.close()
        reader.close()


def test_sigterm_right_after_start_while_depths_are_counted_exits_0(broker, raw):
    # At start a background thread counts the stored messages of each queue from a read snapshot
    # (broker/core/metrics_collect.cpp). A SIGTERM before it is done must wait for it, not close the
    # store under it: that crashed escrowd (SIGSEGV after "stopped") before the fix.
    q = "/queue/" + unique("counted")
    r = raw(broker)
    r.send(frame_bytes("CONNECT", [("accept-version", "1.2"), ("host", "x")]))
    assert r.read_frame().command == "CONNECTED"
    batch = frame_bytes("SEND", [("destination", q)], b"m") * 1000
    for _ in range(200):  # 200,000 entries: counting them takes tens of milliseconds
        r.send(batch)
    r.send(frame_bytes("SEND", [("destination", q), ("receipt", "last")], b"last"))
    f = r.read_frame(timeout=120 * SLOW)
    assert f.command == "RECEIPT", f
    r.close()
    assert broker.terminate() == 0, broker.log
    # Each start is stopped at once, until one stop comes before the count has ended (or the test
    # proved nothing); every stop must exit 0.
    for attempt in range(20):
        broker.start()
        status = broker.terminate()
        assert status == 0, f"escrowd exited with {status} on SIGTERM:\n{broker.log}"
        if "counted " not in broker.log.rsplit("----- escrowd run", 1)[1]:
            break
    else:
        raise AssertionError("the count always ended before the stop: nothing was tested\n" + broker.log)
