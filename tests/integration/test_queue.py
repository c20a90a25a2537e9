"""Queues: point-to-point delivery, the MESSAGE headers, each acknowledgement mode, NACK and
redelivery, unacknowledged messages of consumers that go away, competing consumers, priority and
the prefetch window."""

import time

import pytest

from conftest import TIMEOUT, assert_escaped, bodies, drain, frame_bytes, queue, unique


def sentinels_to_each(producer, q, consumers, most=20):
    """Sends sentinels to queue q, one at a time, until every consumer has received one (at most
    `most`). A queue hands out in order and a connection receives in order, so each consumer then
    has every message the queue gave it before its sentinel: what it has not got by then was not
    in the queue ahead of them. Returns the set of sentinel bodies."""
    sent = set()
    while not all(any(m.body in sent for m in c.messages) for c in consumers):
        assert len(sent) < most, f"{most} sentinels and not every consumer got one"
        body = unique("sentinel")
        sent.add(body)
        producer.send(q, body)
        consumers[0].listener.wait_for(
            lambda: any(m.body == body for c in consumers for m in c.messages), TIMEOUT, f"sentinel {body}")
    return sent


def test_send_then_receive_with_message_headers(broker, stomp_client):
    q = queue()
    producer = stomp_client(broker)
    producer.send(q, "hello escrow", headers={"x-order": "42", "content-type": "text/plain;charset=utf-8"})
    consumer = stomp_client(broker)
    sub = consumer.subscribe(q)
    (m,) = consumer.wait_messages(1)
    assert m.body == "hello escrow"
    assert m.headers["subscription"] == sub
    assert m.headers["destination"] == q
    assert m.headers["message-id"]
    assert m.headers["x-order"] == "42"
    assert m.headers["content-type"] == "text/plain;charset=utf-8"
    assert m.headers["content-length"] == str(len("hello escrow"))
    assert m.headers["redelivered"] == "false"
    assert m.headers["delivery-count"] == "1"
    assert "ack" not in m.headers  # auto mode has nothing to acknowledge


def test_message_waits_in_queue_and_is_consumed_once(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    for i in range(5):
        p.send(q, f"m{i}")
    c = stomp_client(broker)
    c.subscribe(q)
    c.wait_messages(5)
    assert bodies(c.messages) == [f"m{i}" for i in range(5)]  # FIFO
    assert len({m.headers["message-id"] for m in c.messages}) == 5
    # auto ack: they are gone for the next consumer.
    c.disconnect()
    c2 = stomp_client(broker)
    before, _ = drain(c2, q, p)
    assert before == []


def test_message_sent_while_subscribed_is_delivered(broker, stomp_client):
    q = queue()
    c = stomp_client(broker)
    c.subscribe(q)
    c.send(q, "live")
    (m,) = c.wait_messages(1)
    assert m.body == "live"


def test_binary_body_with_nul_bytes_round_trips(broker, raw):
    q = queue()
    s = raw(broker)
    s.connect()
    body = b"\x00\x01binary\x00\xff\x00"
    s.send(frame_bytes("SEND", [("destination", q), ("content-length", len(body)), ("receipt", "r")], body))
    assert s.read_frame().command == "RECEIPT"
    s.send(frame_bytes("SUBSCRIBE", [("id", "0"), ("destination", q)]))
    m = s.read_frame()
    assert m.command == "MESSAGE" and m.body == body, m
    assert m.headers["content-length"] == str(len(body))


def test_empty_body_with_content_length_zero(broker, raw):
    q = queue()
    s = raw(broker)
    s.connect()
    s.send(frame_bytes("SEND", [("destination", q), ("content-length", "0")]))
    s.send(frame_bytes("SUBSCRIBE", [("id", "0"), ("destination", q)]))
    m = s.read_frame()
    assert m.command == "MESSAGE" and m.body == b"" and m.headers["content-length"] == "0", m


def test_repeated_header_first_occurrence_wins_and_server_headers_not_clobbered(broker, raw):
    q = queue()
    s = raw(broker)
    s.connect()
    s.send(frame_bytes("SEND", [("destination", q), ("x-dup", "first"), ("x-dup", "second"),
                                ("content-type", "application/json"), ("message-id", "forged"),
                                ("subscription", "forged"), ("redelivered", "forged"), ("receipt", "r")], "{}"))
    assert s.read_frame().command == "RECEIPT"
    s.send(frame_bytes("SUBSCRIBE", [("id", "mine"), ("destination", q)]))
    m = s.read_frame()
    assert m.command == "MESSAGE", m
    assert [v for k, v in m.header_list if k == "x-dup"][0] == "first", m.header_list
    assert m.headers["content-type"] == "application/json"
    # The broker's own headers come first (first occurrence wins on the client too) and are real.
    assert m.headers["subscription"] == "mine"
    assert m.headers["message-id"] != "forged"
    assert m.headers["redelivered"] == "false"


def test_header_names_and_values_are_case_sensitive_and_not_trimmed(broker, raw):
    q = queue()
    s = raw(broker)
    s.connect()
    s.send(frame_bytes("SEND", [("destination", q), ("X-Case", " spaced value  "), ("x-case", "lower"),
                                ("receipt", "r")], "trim"))
    assert s.read_frame().command == "RECEIPT"
    s.send(frame_bytes("SUBSCRIBE", [("id", "0"), ("destination", q)]))
    m = s.read_frame()
    assert m.command == "MESSAGE", m
    assert m.headers["X-Case"] == " spaced value  "
    assert m.headers["x-case"] == "lower"


def test_header_escapes_round_trip(broker, raw):
    q = queue()
    s = raw(broker)
    s.connect()
    # value a:b<LF>c\d<CR>e, escaped as STOMP 1.2 requires
    s.send(frame_bytes("SEND", [("destination", q), ("x-odd", "a\\cb\\nc\\\\d\\re"), ("receipt", "r")], "esc"))
    assert s.read_frame().command == "RECEIPT"
    s.send(frame_bytes("SUBSCRIBE", [("id", "0"), ("destination", q)]))
    m = s.read_frame()
    assert m.headers["x-odd"] == "a:b\nc\\d\re", m
    assert_escaped(m)
    assert b"x-odd:a\\cb\\nc\\\\d\\re\n" in s.raw  # encoded again on output


def test_auto_ack_message_is_not_redelivered(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    c = stomp_client(broker)
    c.subscribe(q, ack="auto")
    p.send(q, "once")
    c.wait_messages(1)
    c.drop()  # even a connection that drops has consumed an auto-acked message
    c2 = stomp_client(broker)
    before, _ = drain(c2, q, p)
    assert before == []


def test_client_ack_is_cumulative(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    for i in range(5):
        p.send(q, f"m{i}")
    c = stomp_client(broker)
    c.subscribe(q, ack="client")
    msgs = c.wait_messages(5)
    assert all(m.headers.get("ack") for m in msgs)
    c.ack(msgs[2], receipt=True)  # acknowledges m0, m1 and m2
    c.disconnect()
    c2 = stomp_client(broker)
    before, _ = drain(c2, q, p, ack="client")
    assert bodies(before) == ["m3", "m4"]
    assert [m.headers["redelivered"] for m in before] == ["true", "true"]
    assert [m.headers["delivery-count"] for m in before] == ["2", "2"]


def test_client_ack_is_per_subscription(broker, stomp_client):
    qa, qb = queue(), queue()
    p = stomp_client(broker)
    c = stomp_client(broker)
    sa = c.subscribe(qa, ack="client")
    sb = c.subscribe(qb, ack="client")
    p.send(qa, "a0")
    c.wait_messages(1, subscription=sa)
    p.send(qb, "b0")
    c.wait_messages(1, subscription=sb)
    p.send(qa, "a1")
    (a0, a1) = c.wait_messages(2, subscription=sa)
    c.ack(a1, receipt=True)  # cumulative on subscription a only: b0 stays unacknowledged
    c.disconnect()
    c2 = stomp_client(broker)
    left_a, _ = drain(c2, qa, p)
    left_b, _ = drain(c2, qb, p)
    assert bodies(left_a) == []
    assert bodies(left_b) == ["b0"]


def test_client_individual_ack_only_the_named_message(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    for i in range(5):
        p.send(q, f"m{i}")
    c = stomp_client(broker)
    c.subscribe(q, ack="client-individual")
    msgs = c.wait_messages(5)
    for m in (msgs[0], msgs[2], msgs[4]):
        c.ack(m, receipt=True)
    c.disconnect()
    c2 = stomp_client(broker)
    before, _ = drain(c2, q, p, ack="client-individual")
    assert bodies(before) == ["m1", "m3"]
    assert all(m.headers["redelivered"] == "true" for m in before)


def test_ack_ids_are_unique(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    c = stomp_client(broker)
    c.subscribe(q, ack="client-individual")
    c.subscribe(q, ack="client-individual")
    for i in range(6):
        p.send(q, f"m{i}")
    msgs = c.wait_messages(6)
    assert len({m.headers["ack"] for m in msgs}) == 6
    assert len({m.headers["message-id"] for m in msgs}) == 6


def test_nack_redelivers_with_raised_delivery_count(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    c = stomp_client(broker)
    c.subscribe(q, ack="client-individual")
    p.send(q, "retry me")
    (first,) = c.wait_messages(1)
    assert first.headers["redelivered"] == "false" and first.headers["delivery-count"] == "1"
    c.nack(first, receipt=True)
    second = c.wait_messages(2)[1]
    assert second.body == "retry me"
    assert second.headers["redelivered"] == "true"
    assert second.headers["delivery-count"] == "2"
    assert second.headers["message-id"] == first.headers["message-id"]
    c.nack(second)
    third = c.wait_messages(3)[2]
    assert third.headers["delivery-count"] == "3"
    c.ack(third, receipt=True)
    c.disconnect()
    c2 = stomp_client(broker)
    before, _ = drain(c2, q, p)
    assert before == []


def test_nacked_message_is_redelivered_exactly_once_among_consumers(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    a = stomp_client(broker)
    a.subscribe(q, ack="client-individual")
    p.send(q, "first")
    (m,) = a.wait_messages(1)
    b = stomp_client(broker)
    b.subscribe(q, ack="client-individual")
    a.nack(m, receipt=True)
    a.listener.wait_for(lambda: len(a.messages) + len(b.messages) >= 2, TIMEOUT, "the redelivery")
    # No second copy: had there been one, it would have come before the sentinels sent now.
    sentinels = sentinels_to_each(p, q, [a, b])
    again = [x for x in a.messages[1:] + b.messages if x.body not in sentinels]
    assert len(again) == 1, bodies(again)
    assert again[0].body == "first" and again[0].headers["redelivered"] == "true"
    assert again[0].headers["delivery-count"] == "2"


@pytest.mark.parametrize("how", ["disconnect", "drop", "unsubscribe"])
def test_unacked_messages_return_when_consumer_goes_away(broker, stomp_client, how):
    q = queue()
    p = stomp_client(broker)
    for i in range(4):
        p.send(q, f"m{i}")
    c = stomp_client(broker)
    sub = c.subscribe(q, ack="client")
    msgs = c.wait_messages(4)
    c.ack(msgs[0], receipt=True)
    if how == "disconnect":
        c.disconnect()
    elif how == "drop":
        c.drop()
    else:
        c.unsubscribe(sub)
    c2 = stomp_client(broker)
    c2.subscribe(q, ack="client-individual")
    got = c2.wait_messages(3)
    assert bodies(got) == ["m1", "m2", "m3"]  # back in their order
    assert all(m.headers["redelivered"] == "true" and m.headers["delivery-count"] == "2" for m in got)
    if how == "unsubscribe":
        c.settle(4)  # the unsubscribed consumer gets nothing more


def test_competing_consumers_round_robin(broker, stomp_client):
    q = queue()
    a = stomp_client(broker)
    b = stomp_client(broker)
    a.subscribe(q)
    b.subscribe(q)
    p = stomp_client(broker)
    n = 20
    for i in range(n):
        p.send(q, f"m{i}", receipt=(i == n - 1))
    a.listener.wait_for(lambda: len(a.messages) + len(b.messages) >= n, TIMEOUT, f"{n} messages in all")
    # Nothing more than the n: whatever else the queue held would have come before the sentinels.
    sentinels = sentinels_to_each(p, q, [a, b])
    a_got = [m for m in a.messages if m.body not in sentinels]
    b_got = [m for m in b.messages if m.body not in sentinels]
    assert (len(a_got), len(b_got)) == (n // 2, n // 2), (bodies(a_got), bodies(b_got))
    assert sorted(bodies(a_got) + bodies(b_got), key=lambda s: int(s[1:])) == [f"m{i}" for i in range(n)]
    # round robin: each consumer gets every other message
    assert {bodies(a_got)[0], bodies(b_got)[0]} == {"m0", "m1"}
    first_a = bodies(a_got)[0] == "m0"
    expected_a = [f"m{i}" for i in range(0 if first_a else 1, n, 2)]
    assert bodies(a_got) == expected_a


def test_competing_consumers_with_backlog_share_it(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    for i in range(10):
        p.send(q, f"m{i}")
    # Two client-ack consumers with window 3: both get some, no message twice.
    a = stomp_client(broker)
    b = stomp_client(broker)
    a.subscribe(q, ack="client-individual", headers={"prefetch-count": "3"})
    b.subscribe(q, ack="client-individual", headers={"prefetch-count": "3"})
    a.wait_messages(3)
    b.wait_messages(3)
    seen = []
    deadline = time.monotonic() + TIMEOUT
    acked = set()
    while len(seen) < 10 and time.monotonic() < deadline:
        for c in (a, b):
            for m in c.messages:
                if (c.name, m.headers["ack"]) not in acked:  # ack ids are per connection
                    acked.add((c.name, m.headers["ack"]))
                    seen.append(m.body)
                    c.ack(m)
        time.sleep(0.02)
    assert sorted(seen, key=lambda s: int(s[1:])) == [f"m{i}" for i in range(10)]
    assert len(a.messages) >= 3 and len(b.messages) >= 3


def test_priority_order_then_fifo(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    sent = [("a", 1), ("b", 5), ("c", 9), ("d", 5), ("e", 0), ("f", 9), ("g", None), ("h", 4)]
    for body, prio in sent:
        p.send(q, body, headers={} if prio is None else {"priority": str(prio)})
    c = stomp_client(broker)
    c.subscribe(q)
    got = c.wait_messages(len(sent))
    # 9 first, FIFO within a priority; no priority header is priority 4
    assert bodies(got) == ["c", "f", "b", "d", "g", "h", "a", "e"]
    assert got[0].headers.get("priority") == "9"


def test_prefetch_window_limits_unacked_messages(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    for i in range(5):
        p.send(q, f"m{i}")
    c = stomp_client(broker)
    c.subscribe(q, ack="client", headers={"prefetch-count": "2"})
    c.wait_messages(2)
    c.settle(2)
    c.ack(c.messages[1])  # cumulative: frees both slots
    c.wait_messages(4)
    c.settle(4)
    assert bodies(c.messages) == ["m0", "m1", "m2", "m3"]
    c.ack(c.messages[3])
    c.wait_messages(5)
    assert bodies(c.messages)[4] == "m4"


def test_activemq_prefetch_size_alias(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    for i in range(4):
        p.send(q, f"m{i}")
    c = stomp_client(broker)
    c.subscribe(q, ack="client-individual", headers={"activemq.prefetchSize": "1"})
    c.wait_messages(1)
    c.settle(1)
    c.ack(c.messages[0])
    c.wait_messages(2)
    c.settle(2)


def test_default_window_is_1000_unacked(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    n = 1005
    for i in range(n):
        p.send(q, f"m{i}", headers={"persistent": "false"}, receipt=(i == n - 1))
    c = stomp_client(broker)
    c.subscribe(q, ack="client-individual")
    c.wait_messages(1000)
    c.settle(1000)
    c.ack(c.messages[0])
    c.wait_messages(1001)
    c.settle(1001)


def test_window_frees_on_nack(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    p.send(q, "m0")
    p.send(q, "m1")
    c = stomp_client(broker)
    c.subscribe(q, ack="client-individual", headers={"prefetch-count": "1"})
    (m0,) = c.wait_messages(1)
    c.nack(m0)
    # The NACKed message goes back ahead of m1 (order kept) and the window has room again.
    got = c.wait_messages(2)
    assert got[1].body == "m0" and got[1].headers["redelivered"] == "true"


def test_expired_message_is_never_delivered(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    past = int(time.time() * 1000) - 60_000
    future = int(time.time() * 1000) + 3_600_000
    p.send(q, "expired", headers={"expires": str(past)})
    p.send(q, "fresh", headers={"expires": str(future)})
    p.send(q, "never", headers={"expires": "0"})
    c = stomp_client(broker)
    before, _ = drain(c, q, p)
    assert bodies(before) == ["fresh", "never"]


def test_ack_with_receipt_gets_receipt_and_message_stays_acked(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    p.send(q, "x")
    c = stomp_client(broker)
    c.subscribe(q, ack="client-individual")
    (m,) = c.wait_messages(1)
    c.ack(m, receipt=True)
    c.drop()
    c2 = stomp_client(broker)
    before, _ = drain(c2, q, p)
    assert before == []
