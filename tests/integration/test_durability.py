"""Durability points seen from a client: a persistent message whose RECEIPT arrived survives
SIGKILL; an ACK whose RECEIPT arrived stays done; non-persistent messages are memory only."""

import json
import time

import pytest

from conftest import TIMEOUT, bodies, check_store, drain, frame_bytes, unique


def send_with_receipt_window(client, destination, payloads, window=64, headers=None):
    """Sends every payload with a receipt, keeping at most `window` receipts outstanding, and
    returns when every receipt has arrived."""
    outstanding = []
    for body in payloads:
        outstanding.append(client.send(destination, body, headers=headers, wait=False))
        if len(outstanding) >= window:
            client.wait_receipt(outstanding.pop(0))
    for rid in outstanding:
        client.wait_receipt(rid)


def test_1000_persistent_messages_survive_sigkill(broker, stomp_client):
    q = f"/queue/{unique('durable')}"
    n = 1000
    payloads = [f"msg-{i:04d}-{'x' * (i % 97)}" for i in range(n)]
    p = stomp_client(broker)
    send_with_receipt_window(p, q, payloads)
    p.close()

    broker.kill9()
    broker.start()

    c = stomp_client(broker)
    sub = c.subscribe(q, ack="client-individual")
    msgs = c.wait_messages(n, timeout=2 * TIMEOUT, subscription=sub)
    got = bodies(msgs)
    missing = set(payloads) - set(got)
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
    assert len(got) == len(set(got)) == n, f"{len(got) - len(set(got))} duplicates"
    assert got == payloads  # one producer, one priority: FIFO survives the restart
    assert len({m.headers["message-id"] for m in msgs}) == n
    for m in msgs:
        c.ack(m)
    # Nothing more than the 1000 arrives.
    c.send(q, "sentinel")
    c.wait_body("sentinel")
    assert len(c.messages) == n + 1
    c.disconnect()


def test_acked_messages_stay_acked_after_sigkill(broker, stomp_client):
    q = f"/queue/{unique('acked')}"
    p = stomp_client(broker)
    for i in range(10):
        p.send(q, f"m{i}")
    c = stomp_client(broker)
    c.subscribe(q, ack="client-individual")
    msgs = c.wait_messages(10)
    for m in msgs[::2]:  # m0, m2, ...: acknowledged durably
        c.ack(m, receipt=True)
    c.close()
    p.close()

    broker.kill9()
    broker.start()

    c2 = stomp_client(broker)
    p2 = stomp_client(broker)
    before, _ = drain(c2, q, p2, ack="client-individual")
    assert bodies(before) == ["m1", "m3", "m5", "m7", "m9"]


@pytest.mark.parametrize("stop", ["sigkill once stored", "sigterm at once"])
def test_ack_without_receipt_is_stored_soon_and_at_a_graceful_stop(broker, stomp_client, stop):
    # An ACK without a receipt waits for the next write, at most a few milliseconds
    # (docs/storage.md, "Acknowledgements without a receipt"): no other write comes here, so only
    # that bound, or the graceful stop, stores it. The connection stays open until the stop.
    # Nothing tells a client when such an ACK is durable: the SIGKILL case watches the store
    # itself (escrow check reads it and writes nothing) rather than sleeping for a guessed time.
    q = f"/queue/{unique('lazyack')}"
    p = stomp_client(broker)
    for i in range(4):
        p.send(q, f"m{i}")
    c = stomp_client(broker)
    c.subscribe(q, ack="client-individual")
    msgs = c.wait_messages(4)
    c.ack(msgs[1])  # no receipt
    c.ack(msgs[2])
    # A receipted frame that writes nothing: once its receipt is here, both ACKs were handled.
    c.subscribe(q, id="probe", ack="client-individual", receipt=True)
    if stop.startswith("sigkill"):
        deadline = time.monotonic() + TIMEOUT
        while json.loads(check_store(broker.data_dir, "--json"))["counts"]["entries"] != 2:
            assert time.monotonic() < deadline, "the two ACKs without receipt were never stored"
            time.sleep(0.01)
        broker.kill9()
    else:
        broker.terminate()
    broker.start()
    c2 = stomp_client(broker)
    p2 = stomp_client(broker)
    left, _ = drain(c2, q, p2, ack="client-individual")
    assert bodies(left) == ["m0", "m3"]


def test_full_store_refuses_a_send_and_keeps_what_is_stored_and_an_ack_without_receipt(broker_factory,
                                                                                      stomp_client, raw):
    # A full store refuses a SEND with an ERROR naming the problem; what is stored is unharmed. An
    # ACK without a receipt handled just before that SEND is stored all the same: it goes to the
    # store as a batch of its own, so the refused batch does not take it down (docs/storage.md).
    b = broker_factory(config="[storage]\nmap-size = 1048576\nmax-map-size = 1048576\n")
    q = f"/queue/{unique('full')}"
    pad = "x" * 20_000
    p = stomp_client(b)
    stored = []
    for i in range(100):  # 2 MB: more than the 1 MiB store holds
        rid = p.send(q, f"m{i:03d}-{pad}", wait=False)
        p.listener.wait_for(lambda: rid in p.listener.receipts or p.listener.errors or p.listener.disconnected,
                            TIMEOUT, f"RECEIPT {rid} or ERROR")
        if rid not in p.listener.receipts:
            break
        stored.append(f"m{i:03d}-{pad}")
    assert p.listener.errors, f"a 1 MiB store took {len(stored)} messages of 20 KB"
    message = p.listener.errors[0].headers["message"]
    assert message.startswith("message not stored: ") and "MDB_MAP_FULL" in message, message
    assert "storage.max-map-size" in message, message  # says what to do
    assert len(stored) >= 10, len(stored)

    # The ACK and the SEND in one write, so that the SEND reaches the core within the ACK's
    # deferral (a few milliseconds) and both go to the same group commit.
    c = raw(b)
    c.send(frame_bytes("CONNECT", [("accept-version", "1.2"), ("host", "x")]) +
           frame_bytes("SUBSCRIBE", [("id", "s"), ("destination", q), ("ack", "client-individual")]))
    assert c.read_frame().command == "CONNECTED"
    first, second = c.read_frame(), c.read_frame()
    assert first.command == "MESSAGE" and first.body.decode() == stored[0], first
    assert second.command == "MESSAGE" and second.body.decode() == stored[1], second
    # Some room first (a receipted ACK frees the second message's pages): the ACK below, in its
    # own nested transaction, then has what it needs, while the 60 KB SEND still does not fit.
    c.send(frame_bytes("ACK", [("id", second.headers["ack"]), ("receipt", "room")]))
    f = c.read_frame()
    while f.command == "MESSAGE":  # the rest of the stored messages, delivered meanwhile
        f = c.read_frame()
    assert f.command == "RECEIPT" and f.headers["receipt-id"] == "room", f
    c.send(frame_bytes("ACK", [("id", first.headers["ack"])]) +  # no receipt: deferred
           frame_bytes("SEND", [("destination", q), ("receipt", "big")], b"big-" + b"y" * 60_000))
    errors = [f for f in c.read_until_closed() if f.command == "ERROR"]
    assert errors and errors[0].headers["message"].startswith("message not stored: "), errors

    b.kill9()
    b.start()
    r = stomp_client(b)
    sentinel_sender = stomp_client(b)
    left, _ = drain(r, q, sentinel_sender)
    assert bodies(left) == stored[2:]  # every stored message, whole and in order; not the acked ones
    # The drain consumed them (auto ack): the store takes sends again.
    sentinel_sender.send(q, "after")


def test_client_cumulative_ack_survives_sigkill(broker, stomp_client):
    q = f"/queue/{unique('cumulative')}"
    p = stomp_client(broker)
    for i in range(6):
        p.send(q, f"m{i}")
    c = stomp_client(broker)
    c.subscribe(q, ack="client")
    msgs = c.wait_messages(6)
    c.ack(msgs[3], receipt=True)
    c.close()
    p.close()
    broker.kill9()
    broker.start()
    c2 = stomp_client(broker)
    p2 = stomp_client(broker)
    before, _ = drain(c2, q, p2)
    assert bodies(before) == ["m4", "m5"]


def test_auto_acked_messages_stay_consumed_after_restart(broker, stomp_client):
    q = f"/queue/{unique('auto')}"
    p = stomp_client(broker)
    for i in range(5):
        p.send(q, f"m{i}")
    c = stomp_client(broker)
    c.subscribe(q)
    c.wait_messages(5)
    c.disconnect()  # DISCONNECT's receipt: everything before it is done
    p.close()
    broker.restart()  # clean SIGTERM
    c2 = stomp_client(broker)
    p2 = stomp_client(broker)
    before, _ = drain(c2, q, p2)
    assert before == []


def test_non_persistent_messages_are_gone_after_restart(broker, stomp_client):
    q = f"/queue/{unique('mixed')}"
    p = stomp_client(broker)
    for i in range(5):
        p.send(q, f"volatile{i}", headers={"persistent": "false"})
        p.send(q, f"durable{i}", headers={"persistent": "true"})
    # Before the restart a non-persistent message is delivered like any other.
    q2 = f"/queue/{unique('live')}"
    p.send(q2, "volatile-live", headers={"persistent": "false"})
    c = stomp_client(broker)
    c.subscribe(q2)
    assert bodies(c.wait_messages(1)) == ["volatile-live"]
    c.close()
    p.close()

    broker.kill9()
    broker.start()

    c2 = stomp_client(broker)
    p2 = stomp_client(broker)
    before, _ = drain(c2, q, p2)
    assert bodies(before) == [f"durable{i}" for i in range(5)]


def test_non_persistent_messages_are_gone_after_clean_restart(broker, stomp_client):
    q = f"/queue/{unique('mixed')}"
    p = stomp_client(broker)
    p.send(q, "volatile", headers={"persistent": "false"})
    p.send(q, "durable")
    p.close()
    broker.restart()
    c = stomp_client(broker)
    p2 = stomp_client(broker)
    before, _ = drain(c, q, p2)
    assert bodies(before) == ["durable"]


def test_unacked_delivered_messages_survive_sigkill(broker, stomp_client):
    # Delivered but not acknowledged when the broker dies: still there afterwards.
    q = f"/queue/{unique('inflight')}"
    p = stomp_client(broker)
    for i in range(3):
        p.send(q, f"m{i}")
    c = stomp_client(broker)
    c.subscribe(q, ack="client-individual")
    c.wait_messages(3)
    broker.kill9()
    c.close()
    p.close()
    broker.start()
    c2 = stomp_client(broker)
    p2 = stomp_client(broker)
    before, _ = drain(c2, q, p2)
    assert bodies(before) == ["m0", "m1", "m2"]


def test_priority_order_survives_restart(broker, stomp_client):
    q = f"/queue/{unique('prio')}"
    p = stomp_client(broker)
    for body, prio in [("low", 1), ("high", 9), ("mid", 5), ("high2", 9)]:
        p.send(q, body, headers={"priority": str(prio)})
    p.close()
    broker.kill9()
    broker.start()
    c = stomp_client(broker)
    c.subscribe(q)
    assert bodies(c.wait_messages(4)) == ["high", "high2", "mid", "low"]


def test_restart_twice_keeps_message_ids_unique(broker, stomp_client):
    # Message ids handed out after a restart never repeat ones still stored.
    q = f"/queue/{unique('ids')}"
    p = stomp_client(broker)
    p.send(q, "before")
    p.close()
    broker.kill9()
    broker.start()
    p = stomp_client(broker)
    p.send(q, "after1")
    p.close()
    broker.kill9()
    broker.start()
    p = stomp_client(broker)
    p.send(q, "after2")
    c = stomp_client(broker)
    c.subscribe(q)
    msgs = c.wait_messages(3)
    assert bodies(msgs) == ["before", "after1", "after2"]
    assert len({m.headers["message-id"] for m in msgs}) == 3


def test_many_producers_all_receipted_messages_survive(broker, stomp_client):
    # Group commit: several producers at once; every receipted message is durable.
    q = f"/queue/{unique('group')}"
    producers = [stomp_client(broker) for _ in range(4)]
    sent = {i: [] for i in range(4)}
    pending = []
    for k in range(50):
        for i, p in enumerate(producers):
            body = f"p{i}-{k}"
            sent[i].append(body)
            pending.append((p, p.send(q, body, wait=False)))
    deadline = time.monotonic() + TIMEOUT
    for p, rid in pending:
        p.wait_receipt(rid, timeout=max(1, deadline - time.monotonic()))
    for p in producers:
        p.close()
    broker.kill9()
    broker.start()
    c = stomp_client(broker)
    c.subscribe(q)
    got = bodies(c.wait_messages(200))
    assert sorted(got) == sorted(b for v in sent.values() for b in v)
    for i in range(4):  # each producer's messages stay in its order
        assert [b for b in got if b.startswith(f"p{i}-")] == sent[i]


SMALL_WINDOW = "[delivery]\nqueue-memory-window = 5\n"


def test_queue_longer_than_memory_window_delivers_everything_in_order(broker_factory, stomp_client):
    b = broker_factory(config=SMALL_WINDOW)
    q = f"/queue/{unique('deep')}"
    p = stomp_client(b)
    expected = []
    for i in range(40):
        persistent = "false" if i % 7 == 3 else "true"
        p.send(q, f"m{i:02d}", headers={"persistent": persistent})
        expected.append(f"m{i:02d}")
    c = stomp_client(b)
    c.subscribe(q, ack="client-individual", headers={"prefetch-count": "3"})
    deadline = time.monotonic() + TIMEOUT
    acked = 0
    while acked < 40 and time.monotonic() < deadline:
        msgs = c.messages
        while acked < len(msgs):
            c.ack(msgs[acked])
            acked += 1
        time.sleep(0.01)
    assert bodies(c.messages) == expected


@pytest.mark.parametrize("kill", [True, False], ids=["sigkill", "sigterm"])
def test_deep_queue_survives_restart_in_priority_then_fifo_order(broker_factory, stomp_client, kill):
    b = broker_factory(config=SMALL_WINDOW)
    q = f"/queue/{unique('deep')}"
    p = stomp_client(b)
    sent = []
    for i in range(30):
        prio = (0, 4, 9)[i % 3]
        p.send(q, f"p{prio}-{i:02d}", headers={"priority": str(prio)})
        sent.append((prio, i))
    p.close()
    b.restart(kill=kill)
    c = stomp_client(b)
    c.subscribe(q)
    got = bodies(c.wait_messages(30))
    expected = [f"p{prio}-{i:02d}" for prio, i in sorted(sent, key=lambda t: (-t[0], t[1]))]
    assert got == expected


def test_disconnect_receipt_covers_earlier_sends_and_acks(broker, stomp_client):
    # No receipt on the SENDs and ACKs themselves: the DISCONNECT receipt confirms them all.
    q = f"/queue/{unique('disc')}"
    qa = f"/queue/{unique('disc-ack')}"
    setup = stomp_client(broker)
    for i in range(4):
        setup.send(qa, f"a{i}")
    c = stomp_client(broker)
    c.subscribe(qa, ack="client-individual")
    msgs = c.wait_messages(4)
    for i in range(50):
        c.send(q, f"m{i}", receipt=False)
    c.ack(msgs[0])
    c.ack(msgs[3])
    c.disconnect()
    setup.close()
    broker.kill9()
    broker.start()
    c2 = stomp_client(broker)
    p2 = stomp_client(broker)
    sent, _ = drain(c2, q, p2)
    assert bodies(sent) == [f"m{i}" for i in range(50)]
    left, _ = drain(c2, qa, p2)
    assert bodies(left) == ["a1", "a2"]


def test_large_messages_and_many_queues_survive_sigkill(broker, stomp_client):
    big = "".join(chr(ord("a") + i % 26) for i in range(2 * 1024 * 1024))
    queues = [f"/queue/{unique('many')}" for _ in range(20)]
    p = stomp_client(broker)
    p.send(queues[0], big)
    for i, q in enumerate(queues):
        p.send(q, f"small{i}")
    p.close()
    broker.kill9()
    broker.start()
    c = stomp_client(broker)
    subs = [c.subscribe(q) for q in queues]
    first = c.wait_messages(2, subscription=subs[0])
    assert len(first[0].body) == len(big) and first[0].body == big
    assert first[1].body == "small0"
    for i, sub in enumerate(subs[1:], start=1):
        assert bodies(c.wait_messages(1, subscription=sub)) == [f"small{i}"]


def test_nacked_message_survives_sigkill_marked_redelivered(broker, stomp_client):
    q = f"/queue/{unique('nack')}"
    p = stomp_client(broker)
    p.send(q, "nacked")
    c = stomp_client(broker)
    c.subscribe(q, ack="client-individual")
    (m,) = c.wait_messages(1)
    # still subscribed: the NACKed message comes straight back to this consumer
    c.nack(m, receipt=True)
    again = c.wait_messages(2)[1]
    assert again.headers["delivery-count"] == "2"
    c.close()
    p.close()
    broker.kill9()
    broker.start()
    c2 = stomp_client(broker)
    c2.subscribe(q, ack="client-individual")
    (after,) = c2.wait_messages(1)
    assert after.body == "nacked"
    # It was handed out twice before the crash: a consumer must be told it may be a duplicate.
    assert after.headers["redelivered"] == "true"
    assert int(after.headers["delivery-count"]) >= 2
