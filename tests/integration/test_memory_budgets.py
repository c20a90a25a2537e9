"""Memory is bounded in bytes, not only in counts (docs/security.md, "Limits"; issue 23, N3):
non-persistent messages per queue (refused, or the oldest dropped and counted) and per user; the
unacknowledged bytes of a subscription; the bodies of stored messages a queue keeps in memory; the
subscriptions of one user over all its connections. Each test floods as the attacker of the
finding did, and holds what another user relies on: her SENDs and RECEIPTs go on, RSS stays bounded.
"""

import os
import socket
import threading
import time

import pytest

from conftest import SLOW, TIMEOUT, frame_bytes, unique
from test_admin import ok_json, queue_row
from test_limits import CONNECT, connected, rss_anon_kib

SANITIZED = os.environ.get("ESCROW_SANITIZED") == "1"  # ASan's own memory makes RSS figures meaningless


def flood(broker, destination, count, body=b"x" * 10, headers=()):
    """`count` non-persistent SENDs of `body` to `destination` in one write, then a SEND with a
    receipt: returns the first answer (the RECEIPT, or the ERROR that stopped the flood)."""
    s = socket.create_connection(broker.address, timeout=TIMEOUT)
    try:
        s.sendall(CONNECT)
        one = frame_bytes("SEND", [("destination", destination), ("persistent", "false"), *headers], body)
        try:
            for _ in range(count // 10000):
                s.sendall(one * 10000)
            s.sendall(frame_bytes("SEND", [("destination", destination), ("persistent", "false"),
                                           ("receipt", "end")], body))
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused and closed: the answer says why
        s.settimeout(120 * SLOW)
        data = b""
        try:
            while data.count(b"\0") < 2:  # CONNECTED, then the answer
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        except ConnectionResetError:
            pass
        frames = [f.lstrip(b"\r\n") for f in data.split(b"\0")]
        return frames[1].decode(errors="replace") if len(frames) > 1 else "closed without an answer"
    finally:
        s.close()


def receipted_send(raw, broker, destination, persistent="true"):
    c, f = connected(raw, broker)
    assert f.command == "CONNECTED", f
    c.send(frame_bytes("SEND", [("destination", destination), ("persistent", persistent), ("receipt", "r")], b"hi"))
    answer = c.read_frame()
    c.close()
    return answer


def test_a_flood_of_tiny_non_persistent_sends_is_refused_at_the_queue_budget(broker_factory, raw):
    # The finding: 2,086,000 tiny non-persistent SENDs to one's own queue took RssAnon to 1,056 MiB.
    # Now the queue holds at most max-memory-bytes-per-queue of them (here 16 MiB): the SEND past
    # it gets an ERROR naming the limit, and memory stays bounded.
    b = broker_factory(config="[limits]\nmax-memory-bytes-per-queue = 16777216\n")
    before = rss_anon_kib(b.proc.pid)
    answer = flood(b, "/queue/" + unique("flood"), 1_000_000)
    grown_mib = (rss_anon_kib(b.proc.pid) - before) / 1024
    print(f"1,000,000 tiny non-persistent SENDs: answer {answer.splitlines()[0:2]}, RssAnon grew {grown_mib:.0f} MiB")
    assert answer.startswith("ERROR"), answer
    assert "would pass limits.max-memory-bytes-per-queue (16777216)" in answer, answer
    # Another client's persistent SEND and RECEIPT go on.
    assert receipted_send(raw, b, "/queue/" + unique("other")).command == "RECEIPT"
    if not SANITIZED:
        # 16 MiB of budget at ~280 counted bytes a message is ~60,000 messages; each costs a few
        # hundred bytes more in the allocator. 1,000,000 of them took ~500 MiB before.
        assert grown_mib < 120, f"RssAnon grew {grown_mib:.0f} MiB"


def test_non_persistent_messages_of_one_user_are_bounded_over_all_queues(broker_factory, raw):
    # 16 MiB per queue, 24 MiB per user: the second queue's flood stops at the user's budget.
    b = broker_factory(config="[limits]\nmax-memory-bytes-per-queue = 16777216\nmax-memory-bytes-per-user = 25165824\n")
    first = flood(b, "/queue/" + unique("a"), 200_000, body=b"x" * 100)
    assert "limits.max-memory-bytes-per-queue" in first, first
    second = flood(b, "/queue/" + unique("b"), 200_000, body=b"x" * 100)
    assert "non-persistent messages hold" in second and "would pass limits.max-memory-bytes-per-user (25165824)" \
        in second, second
    # Persistent messages are not in this budget (the store's quota bounds them).
    assert receipted_send(raw, b, "/queue/" + unique("c")).command == "RECEIPT"
    answer = receipted_send(raw, b, "/queue/" + unique("c"), persistent="false")
    assert answer.command == "ERROR" and "limits.max-memory-bytes-per-user" in answer.headers["message"], answer


def test_the_edge_of_the_queue_budget_and_drop_oldest(broker_factory, raw):
    # Each message of a 744-byte body counts 256 + 744 + its destination + 64 and the name and value
    # of each header it keeps (persistent:false); with a budget of exactly
    # ten of them the tenth is allowed, the eleventh refused (policy "refuse") ...
    q = "/queue/" + unique("edge")
    per_message = 256 + 744 + len(q) + 64 + len("persistent") + len("false")  # queue.h, memory_bytes()
    b = broker_factory(config=f"[limits]\nmax-memory-bytes-per-queue = {10 * per_message}\n")
    c, _ = connected(raw, b)
    for i in range(10):
        c.send(frame_bytes("SEND", [("destination", q), ("persistent", "false"), ("receipt", f"r{i}")], b"x" * 744))
        assert c.read_frame().command == "RECEIPT"
    c.send(frame_bytes("SEND", [("destination", q), ("persistent", "false"), ("receipt", "over")], b"x" * 744))
    f = c.read_frame()
    assert f.command == "ERROR" and "limits.max-memory-bytes-per-queue" in f.headers["message"], f
    # ... and with "drop-oldest" the eleventh goes in and the first is dropped, counted.
    b2 = broker_factory(config=f"[limits]\nmax-memory-bytes-per-queue = {10 * per_message}\n"
                               'memory-full-policy = "drop-oldest"\n')
    c2, _ = connected(raw, b2)
    for i in range(11):
        c2.send(frame_bytes("SEND", [("destination", q), ("persistent", "false"), ("receipt", f"r{i}")],
                            b"%03d" % i + b"x" * 741))
        assert c2.read_frame().command == "RECEIPT"
    row = queue_row(b2, q[len("/queue/"):])
    assert (row["depth"], row["dropped"]) == (10, 1), row
    c2.send(frame_bytes("SUBSCRIBE", [("id", "s"), ("destination", q)]))
    first = c2.read_frame()
    assert first.command == "MESSAGE" and first.body.startswith(b"001"), first


def test_a_subscriber_that_does_not_read_cannot_make_a_publisher_refused(broker_factory, raw):
    # bob subscribes to the topic and never acknowledges: his subscription keeps at most the budget
    # (the oldest dropped, counted) and alice's publishing is never refused.
    # The user budget is set low too: messages held only by subscriptions are not charged to the
    # publisher, or bob's unread subscription would use it up.
    b = broker_factory(config="[limits]\nmax-memory-bytes-per-queue = 1048576\nmax-memory-bytes-per-user = 4194304\n")
    topic = "/topic/" + unique("news")
    bob, _ = connected(raw, b, headers=[("client-id", "bob")])
    bob.send(frame_bytes("SUBSCRIBE", [("id", "s"), ("destination", topic), ("ack", "client"),
                                       ("prefetch-count", "1"), ("durable-subscription-name", "slow"),
                                       ("receipt", "sub")]))
    assert bob.read_frame().command == "RECEIPT"
    answer = flood(b, topic, 20_000, body=b"x" * 1000)
    assert answer.startswith("RECEIPT"), answer
    subs = [q for q in ok_json(b, "queues")["queues"] if q["kind"] == "durable-subscription"]
    assert len(subs) == 1 and subs[0]["dropped"] > 18_000 and subs[0]["depth"] < 1100, subs


def test_unacknowledged_bytes_of_a_subscription_are_bounded(broker_factory, raw):
    # Ten persistent messages of 256 KiB, a window of 100 messages, and max-consumer-window-bytes of
    # 1 MiB: the fourth delivery takes the subscription to 1 MiB, so exactly four are in flight.
    # One acknowledgement lets exactly one more come.
    b = broker_factory(config="[limits]\nmax-consumer-window-bytes = 1048576\n")
    name = unique("big")
    q = "/queue/" + name
    p, _ = connected(raw, b)
    for i in range(10):
        p.send(frame_bytes("SEND", [("destination", q), ("receipt", f"r{i}")], b"x" * 262144))
        assert p.read_frame().command == "RECEIPT"
    c, _ = connected(raw, b)
    c.send(frame_bytes("SUBSCRIBE", [("id", "s"), ("destination", q), ("ack", "client-individual"),
                                     ("prefetch-count", "100"), ("receipt", "sub")]))
    got = []
    while len(got) < 4:
        f = c.read_frame(timeout=TIMEOUT)
        if f.command == "MESSAGE":
            got.append(f)
    assert queue_row(b, name)["in_flight"] == 4
    c.send(frame_bytes("ACK", [("id", got[0].headers["ack"]), ("receipt", "a")]))
    while True:
        f = c.read_frame(timeout=TIMEOUT)
        if f.command == "MESSAGE":
            got.append(f)
        if f.command == "RECEIPT" and f.headers.get("receipt-id") == "a":
            break
    assert queue_row(b, name)["in_flight"] == 4


def test_a_queue_keeps_at_most_queue_memory_bytes_of_stored_bodies(broker_factory, raw):
    # The finding: 300 persistent 1 MiB messages held 238 MiB of RAM (a window of 1000 entries).
    # Now a queue keeps at most [delivery] queue-memory-bytes (8 MiB) of their bodies; the rest is
    # read from the store when a consumer gets there, intact and in order.
    b = broker_factory()
    q = "/queue/" + unique("big")
    before = rss_anon_kib(b.proc.pid)
    p, _ = connected(raw, b)
    for i in range(200):
        p.send(frame_bytes("SEND", [("destination", q), ("receipt", f"r{i}")], b"%04d" % i + b"y" * (1 << 20)))
        assert p.read_frame(timeout=TIMEOUT).command == "RECEIPT"
    grown_mib = (rss_anon_kib(b.proc.pid) - before) / 1024
    print(f"200 persistent 1 MiB messages: RssAnon grew {grown_mib:.0f} MiB")
    if not SANITIZED:
        assert grown_mib < 100, f"RssAnon grew {grown_mib:.0f} MiB"
    c, _ = connected(raw, b)
    c.send(frame_bytes("SUBSCRIBE", [("id", "s"), ("destination", q)]))
    for i in range(200):
        f = c.read_frame(timeout=TIMEOUT)
        assert f.command == "MESSAGE" and f.body[:4] == b"%04d" % i and len(f.body) == 4 + (1 << 20), f.headers


def test_subscriptions_are_bounded_per_user_over_all_connections(broker_factory, raw):
    b = broker_factory(config="[limits]\nmax-subscriptions-per-user = 3\n")
    one, _ = connected(raw, b)
    two, _ = connected(raw, b)
    for i, c in enumerate((one, one, two)):
        c.send(frame_bytes("SUBSCRIBE", [("id", f"s{i}"), ("destination", f"/queue/q{i}"), ("receipt", f"r{i}")]))
        assert c.read_frame().command == "RECEIPT"
    two.send(frame_bytes("SUBSCRIBE", [("id", "s9"), ("destination", "/queue/q9"), ("receipt", "r9")]))
    f = two.read_frame()
    assert f.command == "ERROR", f
    assert "already has 3 over all its connections (limits.max-subscriptions-per-user)" in f.headers["message"], f
    # UNSUBSCRIBE gives one back: the next is the last allowed again.
    one.send(frame_bytes("UNSUBSCRIBE", [("id", "s0"), ("receipt", "u")]))
    assert one.read_frame().command == "RECEIPT"
    one.send(frame_bytes("SUBSCRIBE", [("id", "s5"), ("destination", "/queue/q5"), ("receipt", "r5")]))
    assert one.read_frame().command == "RECEIPT"
    # Closing a connection gives its subscriptions back (once the broker has seen it close).
    one.close()
    deadline = time.monotonic() + TIMEOUT
    while True:
        three, _ = connected(raw, b)
        three.send(frame_bytes("SUBSCRIBE", [("id", "t"), ("destination", "/queue/t"), ("receipt", "t")]))
        f = three.read_frame()
        if f.command == "RECEIPT":
            break
        assert time.monotonic() < deadline, f
        time.sleep(0.05)


@pytest.mark.skipif(SANITIZED, reason="ASan's shadow memory makes resident memory no measure of the broker's")
def test_the_memory_watermark_stops_reading_producers_while_consumers_go_on(broker_factory, raw):
    # RabbitMQ's memory alarm: the queue and user budgets are set out of the way, the watermark 48
    # MiB above what the broker holds at start. A producer floods; once resident memory passes the
    # watermark its connection is not read, so memory stops growing, while a consumer on another
    # connection takes everything; then the alarm clears and the producer's last SEND is answered.
    probe = broker_factory()
    start_rss = rss_anon_kib(probe.proc.pid) * 1024
    probe.terminate()
    watermark = start_rss + (48 << 20)
    b = broker_factory(config=f"[limits]\nmax-memory-bytes-per-queue = 4294967296\n"
                              f"max-memory-bytes-per-user = 4294967296\nmemory-high-watermark = {watermark}\n")
    q = "/queue/" + unique("alarm")
    count = 600_000
    peak = [0]
    done = threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], rss_anon_kib(b.proc.pid) * 1024)
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    answer = []
    producer = threading.Thread(target=lambda: answer.append(flood(b, q, count, body=b"z" * 100)), daemon=True)
    producer.start()
    b.wait_log("memory alarm set: resident memory", timeout=60 * SLOW)
    assert not answer, "the producer's last SEND was answered while the alarm was set"
    # A consumer is read and served while the alarm is set.
    c, _ = connected(raw, b)
    c.send(frame_bytes("SUBSCRIBE", [("id", "s"), ("destination", q)]))
    received = 0
    while received < count + 1:
        f = c.read_frame(timeout=TIMEOUT)
        assert f.command == "MESSAGE", f
        received += 1
    producer.join(60 * SLOW)
    done.set()
    assert answer and answer[0].startswith("RECEIPT"), answer
    assert "memory alarm cleared" in b.log
    over_mib = (peak[0] - watermark) / (1 << 20)
    print(f"watermark {watermark >> 20} MiB: peak RssAnon {peak[0] >> 20} MiB ({over_mib:+.0f} MiB)")
    assert over_mib < 64, f"resident memory went {over_mib:.0f} MiB past the watermark"
