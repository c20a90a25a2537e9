"""STOMP local transactions (BEGIN, COMMIT, ABORT; the `transaction` header on SEND, ACK and
NACK), as docs/transactions.md describes them: a branch holds its sends and its consumed messages
until COMMIT releases them or ABORT (or the connection going away) rolls them back."""

import pytest

from conftest import TIMEOUT, bodies, drain, new_xid, queue, unique, xa


def error_text(frame):
    return f"{dict(frame.headers)} {frame.body!r}"


# --------------------------------------------------------------------------------------------
# Sends
# --------------------------------------------------------------------------------------------

def test_commit_makes_all_sends_visible_only_after_commit(broker, stomp_client):
    q = queue()
    consumer = stomp_client(broker)
    sub = consumer.subscribe(q)
    p = stomp_client(broker)
    p.begin("t1")
    for i in range(5):
        p.send(q, f"m{i}", headers={"transaction": "t1"})  # each RECEIPT: held in the branch
    # Nothing of the transaction is visible yet: a plain send after it arrives alone.
    p.send(q, "outside")
    consumer.wait_body("outside")
    consumer.settle(1, subscription=sub)
    assert bodies(consumer.messages) == ["outside"]
    # A second consumer that subscribes now does not see them either.
    other = stomp_client(broker)
    before, _ = drain(other, q, p)
    assert before == []
    # DISCONNECT with a receipt: gone before the COMMIT, or its auto-ack subscription would take
    # its turn of the committed messages (a race the sanitized broker lost once).
    other.disconnect()

    p.commit("t1")  # the RECEIPT comes after the commit is durable
    got = consumer.wait_messages(6, subscription=sub)
    assert bodies(got) == ["outside", "m0", "m1", "m2", "m3", "m4"]
    assert all(m.headers["redelivered"] == "false" for m in got)
    consumer.settle(6, subscription=sub)


def test_committed_sends_survive_sigkill(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    p.begin("t")
    for i in range(3):
        p.send(q, f"m{i}", headers={"transaction": "t"})
    p.commit("t")
    p.close()
    broker.kill9()
    broker.start()
    c = stomp_client(broker)
    p2 = stomp_client(broker)
    before, _ = drain(c, q, p2)
    assert bodies(before) == ["m0", "m1", "m2"]


@pytest.mark.parametrize("how", ["local", "xa-one-phase", "xa-two-phase"])
def test_committed_sends_are_not_overwritten_by_sends_after_a_restart(broker, stomp_client, how):
    # Regression: a committed transaction did not store the message id counter, so after a
    # restart the broker handed the same ids out again and new messages overwrote committed ones.
    q = queue()
    p = stomp_client(broker)
    if how == "local":
        p.begin("t")
        for i in range(3):
            p.send(q, f"a{i}", headers={"transaction": "t"})
        p.commit("t")
    else:
        x = new_xid()
        assert xa(p, "START", x).result == "XA_OK"
        for i in range(3):
            p.send(q, f"a{i}")
        assert xa(p, "END", x, "TMSUCCESS").result == "XA_OK"
        if how == "xa-two-phase":
            assert xa(p, "PREPARE", x).result == "XA_OK"
            assert xa(p, "COMMIT", x).result == "XA_OK"
        else:
            assert xa(p, "COMMIT", x, "TMONEPHASE").result == "XA_OK"
    p.close()
    broker.kill9()
    broker.start()
    p = stomp_client(broker)
    p.send(q, "b0")
    c = stomp_client(broker)
    sub = c.subscribe(q)
    got = c.wait_messages(4, subscription=sub)
    assert sorted(bodies(got)) == ["a0", "a1", "a2", "b0"]
    assert len({m.headers["message-id"] for m in got}) == 4


def test_transactional_send_to_topic_reaches_subscribers_at_commit(broker, stomp_client):
    t = f"/topic/{unique('txt')}"
    s = stomp_client(broker)
    sub = s.subscribe(t)
    p = stomp_client(broker)
    p.begin("t")
    p.send(t, "held", headers={"transaction": "t"})
    p.send(t, "plain")
    s.wait_body("plain")
    s.settle(1, subscription=sub)
    p.commit("t")
    s.wait_body("held")
    assert bodies(s.messages) == ["plain", "held"]


def test_abort_drops_the_sends(broker, stomp_client):
    q = queue()
    consumer = stomp_client(broker)
    sub = consumer.subscribe(q)
    p = stomp_client(broker)
    p.begin("t1")
    for i in range(3):
        p.send(q, f"m{i}", headers={"transaction": "t1"})
    p.abort("t1")
    p.send(q, "after")
    consumer.wait_body("after")
    consumer.settle(1, subscription=sub)
    assert bodies(consumer.messages) == ["after"]
    # "after" was auto-acknowledged: its removal is written after the delivery. The DISCONNECT
    # receipt comes once it is durable, so the SIGKILL below cannot bring it back.
    consumer.disconnect()
    # Nothing of it comes back after a restart either.
    p.close()
    broker.kill9()
    broker.start()
    c = stomp_client(broker)
    p2 = stomp_client(broker)
    before, _ = drain(c, q, p2)
    assert before == []


def test_name_can_be_reused_after_commit_and_abort(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    p.begin("t")
    p.send(q, "first", headers={"transaction": "t"})
    p.commit("t")
    p.begin("t")
    p.send(q, "second", headers={"transaction": "t"})
    p.abort("t")
    p.begin("t")
    p.send(q, "third", headers={"transaction": "t"})
    p.commit("t")
    c = stomp_client(broker)
    before, _ = drain(c, q, p)
    assert bodies(before) == ["first", "third"]


# --------------------------------------------------------------------------------------------
# ACK and NACK
# --------------------------------------------------------------------------------------------

def test_ack_in_transaction_then_commit_removes_the_message(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    for i in range(3):
        p.send(q, f"m{i}")
    c = stomp_client(broker)
    c.subscribe(q, ack="client-individual")
    msgs = c.wait_messages(3)
    c.begin("t")
    c.ack(msgs[1], receipt=True, transaction="t")
    c.commit("t")
    c.close()  # m0 and m2 were never acknowledged: they return
    c2 = stomp_client(broker)
    before, _ = drain(c2, q, p, ack="client-individual")
    assert bodies(before) == ["m0", "m2"]
    for m in c2.messages:
        if m.body.startswith("sentinel"):
            c2.ack(m, receipt=True)
    c2.close()
    p.close()
    broker.kill9()
    broker.start()
    c3 = stomp_client(broker)
    p3 = stomp_client(broker)
    before, _ = drain(c3, q, p3)
    assert bodies(before) == ["m0", "m2"]  # m1 stays gone after a restart


def test_ack_in_transaction_then_abort_returns_the_message(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    p.send(q, "m")
    a = stomp_client(broker)
    sub_a = a.subscribe(q, ack="client-individual")
    (m,) = a.wait_messages(1)
    assert m.headers["delivery-count"] == "1"
    a.begin("t")
    a.ack(m, receipt=True, transaction="t")

    # While the transaction holds it nobody gets it: not a new consumer, not the first one.
    b = stomp_client(broker)
    sub_b = b.subscribe(q, ack="client-individual")
    b.settle(0, subscription=sub_b)
    a.settle(1, subscription=sub_a)

    a.abort("t")
    # It returns to the queue, redelivered, with its delivery count raised; exactly one copy.
    b.listener.wait_for(lambda: len(b.listener.messages) + len(a.listener.messages) >= 2, TIMEOUT,
                        "the rolled-back message")
    again = [x for x in a.messages[1:] + b.messages]
    assert len(again) == 1, bodies(again)
    assert again[0].body == "m"
    assert again[0].headers["redelivered"] == "true"
    assert again[0].headers["delivery-count"] == "2"
    assert again[0].headers["message-id"] == m.headers["message-id"]
    a.settle(1, subscription=sub_a)
    b.settle(len(b.messages), subscription=sub_b)


def test_ack_held_by_transaction_does_not_return_when_consumer_unsubscribes(broker, stomp_client):
    # The ACK moved the message from the consumer to the branch: the subscription going away does
    # not hand it back; the transaction decides.
    q = queue()
    p = stomp_client(broker)
    p.send(q, "m0")
    p.send(q, "m1")
    a = stomp_client(broker)
    sub = a.subscribe(q, ack="client-individual")
    m0, m1 = a.wait_messages(2)
    a.begin("t")
    a.ack(m0, receipt=True, transaction="t")
    a.unsubscribe(sub)  # m1 (not acknowledged) returns; m0 stays in the transaction
    b = stomp_client(broker)
    before, _ = drain(b, q, p, ack="client-individual")
    assert bodies(before) == ["m1"]
    a.commit("t")
    b2 = stomp_client(broker)
    before, _ = drain(b2, q, p, ack="client-individual")
    assert "m0" not in bodies(before)


def test_ack_in_transaction_frees_the_consumer_window(broker, stomp_client):
    # docs: a message ACKed inside a transaction stops counting against the consumer's window.
    q = queue()
    p = stomp_client(broker)
    p.send(q, "w0")
    p.send(q, "w1")
    c = stomp_client(broker)
    sub = c.subscribe(q, ack="client-individual", headers={"prefetch-count": "1"})
    (m,) = c.wait_messages(1, subscription=sub)
    c.settle(1, subscription=sub)  # window full
    c.begin("t")
    c.ack(m, receipt=True, transaction="t")
    got = c.wait_messages(2, subscription=sub)
    assert bodies(got) == ["w0", "w1"]
    c.commit("t")


def test_transaction_holds_with_a_small_queue_memory_window(broker_factory, stomp_client):
    # Refills from the store must skip what a transaction holds, and a commit of many sends must
    # not deliver any of them twice.
    b = broker_factory(config="[delivery]\nqueue-memory-window = 2\n")
    q, qout = queue(), queue()
    p = stomp_client(b)
    for i in range(10):
        p.send(q, f"n{i}")
    c = stomp_client(b)
    c.subscribe(q, ack="client-individual")
    msgs = c.wait_messages(10)
    c.begin("t")
    for m in msgs[:5]:
        c.ack(m, receipt=True, transaction="t")
    for i in range(10):
        c.send(qout, f"s{i}", headers={"transaction": "t"})
    c.unsubscribe(c.messages[0].headers["subscription"])  # n5..n9 return; n0..n4 stay held
    r = stomp_client(b)
    before, _ = drain(r, q, p, ack="client-individual")
    assert bodies(before) == [f"n{i}" for i in range(5, 10)]
    r.ack(r.messages[-1], receipt=True)  # the sentinel; n5..n9 return with r
    r.close()
    c.commit("t")
    r2 = stomp_client(b)
    before, _ = drain(r2, qout, p)
    assert bodies(before) == [f"s{i}" for i in range(10)]
    r3 = stomp_client(b)
    before, _ = drain(r3, q, p)
    assert bodies(before) == [f"n{i}" for i in range(5, 10)]


def test_non_persistent_send_in_transaction(broker, stomp_client):
    q = queue()
    c = stomp_client(broker)
    c.begin("t")
    c.send(q, "volatile", headers={"transaction": "t", "persistent": "false"})
    c.send(q, "durable", headers={"transaction": "t"})
    c.commit("t")
    r = stomp_client(broker)
    before, _ = drain(r, q, c, ack="client-individual")
    assert bodies(before) == ["volatile", "durable"]


def test_nack_in_transaction_commit_redelivers(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    p.send(q, "m")
    c = stomp_client(broker)
    sub = c.subscribe(q, ack="client-individual")
    (m,) = c.wait_messages(1)
    c.begin("t")
    c.nack(m, receipt=True, transaction="t")
    c.settle(1, subscription=sub)  # held by the transaction: not redelivered yet
    c.commit("t")
    msgs = c.wait_messages(2, subscription=sub)
    assert msgs[1].body == "m"
    assert msgs[1].headers["redelivered"] == "true"
    assert msgs[1].headers["delivery-count"] == "2"
    c.ack(msgs[1], receipt=True)
    c.settle(2, subscription=sub)


def test_nack_in_transaction_abort_returns_message(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    p.send(q, "m")
    c = stomp_client(broker)
    sub = c.subscribe(q, ack="client-individual")
    (m,) = c.wait_messages(1)
    c.begin("t")
    c.nack(m, receipt=True, transaction="t")
    c.settle(1, subscription=sub)
    c.abort("t")
    msgs = c.wait_messages(2, subscription=sub)
    assert msgs[1].body == "m"
    assert msgs[1].headers["redelivered"] == "true"
    assert msgs[1].headers["delivery-count"] == "2"
    c.settle(2, subscription=sub)


def test_cumulative_client_ack_in_transaction_commit(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    for i in range(5):
        p.send(q, f"m{i}")
    c = stomp_client(broker)
    c.subscribe(q, ack="client")
    msgs = c.wait_messages(5)
    c.begin("t")
    c.ack(msgs[2], receipt=True, transaction="t")  # m0, m1, m2
    c.commit("t")
    c.close()
    c2 = stomp_client(broker)
    before, _ = drain(c2, q, p)
    assert bodies(before) == ["m3", "m4"]


def test_cumulative_client_ack_in_transaction_abort(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    for i in range(5):
        p.send(q, f"m{i}")
    c = stomp_client(broker)
    sub = c.subscribe(q, ack="client")
    msgs = c.wait_messages(5)
    c.begin("t")
    c.ack(msgs[2], receipt=True, transaction="t")
    c.abort("t")
    c.close()
    c2 = stomp_client(broker)
    before, _ = drain(c2, q, p)
    # Everything is back, in its place.
    assert bodies(before) == [f"m{i}" for i in range(5)]
    assert all(m.headers["redelivered"] == "true" for m in before)
    assert sub  # (the first subscription is gone with its connection)


def test_send_and_ack_in_one_transaction(broker, stomp_client):
    # Consume from one queue and produce to another, atomically.
    qin, qout = queue(), queue()
    p = stomp_client(broker)
    p.send(qin, "request")
    c = stomp_client(broker)
    c.subscribe(qin, ack="client-individual")
    (m,) = c.wait_messages(1)
    c.begin("t")
    c.send(qout, "reply", headers={"transaction": "t"})
    c.ack(m, receipt=True, transaction="t")
    c.commit("t")
    c.close()
    r = stomp_client(broker)
    before, _ = drain(r, qout, p)
    assert bodies(before) == ["reply"]
    r2 = stomp_client(broker)
    before, _ = drain(r2, qin, p)
    assert before == []


# --------------------------------------------------------------------------------------------
# Several transactions, connections going away
# --------------------------------------------------------------------------------------------

def test_several_transactions_open_on_one_connection(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    for i in range(3):
        p.send(q, f"in{i}")
    c = stomp_client(broker)
    c.subscribe(q, ack="client-individual")
    ins = c.wait_messages(3)
    for t in ("ta", "tb", "tc"):
        c.begin(t)
    c.send(q, "a1", headers={"transaction": "ta"})
    c.send(q, "b1", headers={"transaction": "tb"})
    c.send(q, "c1", headers={"transaction": "tc"})
    c.ack(ins[0], receipt=True, transaction="ta")
    c.ack(ins[1], receipt=True, transaction="tb")
    c.ack(ins[2], receipt=True, transaction="tc")
    c.send(q, "b2", headers={"transaction": "tb"})
    c.commit("tb")
    c.abort("ta")
    c.commit("tc")
    c.close()
    r = stomp_client(broker)
    before, _ = drain(r, q, p)
    # ta rolled back: in0 is back (in its place, first), a1 never appears; tb and tc committed.
    assert sorted(bodies(before)) == sorted(["in0", "b1", "b2", "c1"])
    assert bodies(before)[0] == "in0"
    assert bodies(before).index("b1") < bodies(before).index("b2")


@pytest.mark.parametrize("how", ["drop", "disconnect"])
def test_connection_going_away_rolls_back_open_transaction(broker, stomp_client, how):
    q, qout = queue(), queue()
    p = stomp_client(broker)
    p.send(q, "in0")
    p.send(q, "in1")
    c = stomp_client(broker)
    c.subscribe(q, ack="client-individual")
    ins = c.wait_messages(2)
    c.begin("t")
    c.send(qout, "never", headers={"transaction": "t"})
    c.ack(ins[0], receipt=True, transaction="t")
    c.ack(ins[1], receipt=True)  # outside the transaction: really consumed
    if how == "drop":
        c.drop()
    else:
        c.disconnect()
    r = stomp_client(broker)
    before, _ = drain(r, q, p)
    assert bodies(before) == ["in0"]
    assert before[0].headers["redelivered"] == "true"
    r2 = stomp_client(broker)
    before, _ = drain(r2, qout, p)
    assert before == []


# --------------------------------------------------------------------------------------------
# Errors: unknown names, duplicates, other connections' names
# --------------------------------------------------------------------------------------------

def test_send_naming_unknown_transaction_is_error_and_stores_nothing(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    p.send(q, "x", headers={"transaction": "nope"}, wait=False)
    err = p.wait_error()
    assert "nope" in error_text(err)
    p.wait_disconnected()
    p2 = stomp_client(broker)
    c = stomp_client(broker)
    before, _ = drain(c, q, p2)
    assert before == []


def test_ack_naming_unknown_transaction_is_error_and_acks_nothing(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    p.send(q, "m")
    c = stomp_client(broker)
    c.subscribe(q, ack="client-individual")
    (m,) = c.wait_messages(1)
    c.ack(m, transaction="nope")
    c.wait_error()
    c.wait_disconnected()
    c2 = stomp_client(broker)
    before, _ = drain(c2, q, p)
    assert bodies(before) == ["m"]  # not acknowledged: back with the connection gone


def test_nack_naming_unknown_transaction_is_error(broker, stomp_client):
    q = queue()
    p = stomp_client(broker)
    p.send(q, "m")
    c = stomp_client(broker)
    c.subscribe(q, ack="client-individual")
    (m,) = c.wait_messages(1)
    c.nack(m, transaction="nope")
    c.wait_error()


def test_begin_of_existing_name_is_error(broker, stomp_client):
    c = stomp_client(broker)
    c.begin("t")
    rid = c.begin("t", wait=False)
    err = c.wait_error()
    assert "t" in error_text(err)
    assert rid not in c.listener.receipts
    c.wait_disconnected()


def test_begin_without_transaction_header_is_error(broker, stomp_client):
    c = stomp_client(broker)
    c.conn.send_frame("BEGIN", {"receipt": "r-begin"})
    c.wait_error()
    assert "r-begin" not in c.listener.receipts


@pytest.mark.parametrize("command", ["COMMIT", "ABORT"])
def test_commit_or_abort_of_unknown_transaction_is_error(broker, stomp_client, command):
    c = stomp_client(broker)
    rid = c._tx_frame(command, "unknown", receipt=True, wait=False)
    err = c.wait_error()
    assert "unknown" in error_text(err)
    assert rid not in c.listener.receipts


def test_commit_of_finished_transaction_is_error(broker, stomp_client):
    q = queue()
    c = stomp_client(broker)
    c.begin("t")
    c.send(q, "once", headers={"transaction": "t"})
    c.commit("t")
    c.commit("t", wait=False)
    c.wait_error()
    p = stomp_client(broker)
    r = stomp_client(broker)
    before, _ = drain(r, q, p)
    assert bodies(before) == ["once"]


def test_transaction_names_are_per_connection(broker, stomp_client):
    q = queue()
    a = stomp_client(broker)
    a.begin("shared")
    a.send(q, "from-a", headers={"transaction": "shared"})
    b = stomp_client(broker)
    b.send(q, "from-b", headers={"transaction": "shared"}, wait=False)
    b.wait_error()  # b never began "shared"
    b.wait_disconnected()
    b2 = stomp_client(broker)
    rid = b2.commit("shared", wait=False)
    b2.wait_error()
    assert rid not in b2.listener.receipts
    # a's transaction is untouched by all of that.
    a.send(q, "from-a-2", headers={"transaction": "shared"})
    a.commit("shared")
    p = stomp_client(broker)
    r = stomp_client(broker)
    before, _ = drain(r, q, p)
    assert bodies(before) == ["from-a", "from-a-2"]


def test_same_name_on_two_connections_are_two_transactions(broker, stomp_client):
    q = queue()
    a = stomp_client(broker)
    b = stomp_client(broker)
    a.begin("t")
    b.begin("t")  # no clash: names are per connection
    a.send(q, "a", headers={"transaction": "t"})
    b.send(q, "b", headers={"transaction": "t"})
    a.abort("t")
    b.commit("t")
    p = stomp_client(broker)
    r = stomp_client(broker)
    before, _ = drain(r, q, p)
    assert bodies(before) == ["b"]


# --------------------------------------------------------------------------------------------
# A commit the store refuses
# --------------------------------------------------------------------------------------------

def test_commit_refused_by_full_store_is_error_and_nothing_takes_effect(broker_factory, stomp_client):
    b = broker_factory(config="[storage]\nmap-size = 1048576\nmax-map-size = 1048576\n")
    q, qin = queue(), queue()
    p = stomp_client(b)
    p.send(qin, "in0")
    c = stomp_client(b)
    c.subscribe(qin, ack="client-individual")
    (m,) = c.wait_messages(1)
    c.begin("t")
    c.ack(m, receipt=True, transaction="t")
    for i in range(6):  # 1.2 MB: more than the 1 MiB store holds
        c.send(q, f"big{i}-" + "x" * 200_000, headers={"transaction": "t"})
    rid = c.commit("t", wait=False)
    err = c.wait_error()
    assert rid not in c.listener.receipts
    assert "t" in error_text(err)
    c.wait_disconnected()
    # Nothing of it: no big message, in0 back in the queue; the broker goes on.
    r = stomp_client(b)
    before, _ = drain(r, q, p)
    assert before == []
    r2 = stomp_client(b)
    before, _ = drain(r2, qin, p)
    assert bodies(before) == ["in0"]
    r.close()
    r2.close()
    p.send(q, "small")
    r3 = stomp_client(b)
    r3.subscribe(q)
    assert bodies(r3.wait_messages(1)) == ["small"]
