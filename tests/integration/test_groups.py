"""Message groups (docs/stomp.md, "Message groups"): every message of a group (JMSXGroupID, or
Artemis's _AMQ_GROUP_ID) goes to the one consumer that holds the group, in queue order; new groups
spread over the consumers as their first messages come (priority, then round robin among those
with room); a message whose group's consumer is full waits while other groups' messages behind it
go on; when the consumer leaves, its unacknowledged messages come back first and the group moves;
JMSXGroupSeq -1 closes a group; an operator sees and resets who holds what. Through NACK,
transactions and a restart. Each test ends with `escrow check` (kill9 runs it)."""

import time

import pytest

from conftest import new_xid, unique
from conftest import RawStomp, frame_bytes
from test_address_limits import config, limit, name, ok, show
from test_failure_paths import admin


def consumer(b, stomp_client, dest, prefetch=100):
    c = stomp_client(b)
    sub = c.subscribe(dest, ack="client-individual", headers={"prefetch-count": str(prefetch)})
    return c, sub


def send(b, stomp_client, dest, items, header="JMSXGroupID"):
    """(group or None, body[, extra headers]) in order, each answered by its RECEIPT."""
    p = stomp_client(b)
    for item in items:
        group, body = item[0], item[1]
        headers = dict(item[2]) if len(item) > 2 else {}
        if group is not None:
            headers[header] = group
        p.send(dest, body, headers=headers)
    p.close()


def bodies(c, n, sub):
    return [m.body for m in c.wait_messages(n, subscription=sub)]


def groups_of(b, stomp_client, q):
    detail = show(b, stomp_client, q)["consumers_detail"]
    return {c["subscription"]: sorted(c["group_ids"]) for c in detail}


@pytest.mark.parametrize("header", ["JMSXGroupID", "_AMQ_GROUP_ID"])
def test_each_group_goes_to_one_consumer_in_order_and_new_groups_spread(broker_factory, stomp_client, header):
    b = broker_factory(config=config())
    q = name("grp")
    dest = f"/queue/{q}"
    c1, s1 = consumer(b, stomp_client, dest)
    c2, s2 = consumer(b, stomp_client, dest)
    send(b, stomp_client, dest, [("A", "a0"), ("B", "b0"), ("A", "a1"), ("C", "c0"), ("B", "b1"), ("A", "a2"),
                                 (None, "x0"), (None, "x1")], header=header)
    got1, got2 = bodies(c1, 5, s1), bodies(c2, 3, s2)
    # A to the first, B to the second, C to the first again (round robin of new groups); the
    # ungrouped ones round robin as before.
    assert [x for x in got1 if x[0] != "x"] == ["a0", "a1", "c0", "a2"]
    assert [x for x in got2 if x[0] != "x"] == ["b0", "b1"]
    assert sorted(x for x in got1 + got2 if x[0] == "x") == ["x0", "x1"]
    assert groups_of(b, stomp_client, q) == {s1: ["A", "C"], s2: ["B"]}
    c1.close()
    c2.close()
    b.kill9()


def test_a_full_groups_message_waits_while_other_groups_behind_it_go_on(broker_factory, stomp_client):
    b = broker_factory(config=config())
    dest = f"/queue/{name('grp')}"
    c1, s1 = consumer(b, stomp_client, dest, prefetch=1)
    c2, s2 = consumer(b, stomp_client, dest, prefetch=100)
    send(b, stomp_client, dest, [("A", "a0"), ("B", "b0"), ("A", "a1"), ("B", "b1"), ("B", "b2")])
    (m,) = c1.wait_messages(1, subscription=s1)
    assert m.body == "a0"
    # a1 waits for c1 (full); b1 and b2, behind it, go to c2 meanwhile.
    assert bodies(c2, 3, s2) == ["b0", "b1", "b2"]
    assert len(c1.messages) == 1
    c1.ack(m, receipt=True)
    assert bodies(c1, 2, s1)[1] == "a1"
    c1.close()
    c2.close()
    b.kill9()


@pytest.mark.parametrize("delay", [0, 30000])
def test_when_the_holder_leaves_its_messages_come_back_first_and_the_group_moves(broker_factory, stomp_client,
                                                                                delay):
    """With a redelivery delay too: a leaving holder's messages come back at once, not after it."""
    b = broker_factory(config=config(limit("grp.#", redelivery_delay=delay)))
    q = name("grp")
    dest = f"/queue/{q}"
    c1, s1 = consumer(b, stomp_client, dest)
    c2, s2 = consumer(b, stomp_client, dest)
    send(b, stomp_client, dest, [("A", "a0"), ("B", "b0"), ("A", "a1")])
    assert bodies(c1, 2, s1) == ["a0", "a1"]
    assert bodies(c2, 1, s2) == ["b0"]
    c1.close()  # a0 and a1 unacknowledged
    deadline = time.monotonic() + 15
    while show(b, stomp_client, q)["consumers"] != 1:  # its close is handled: a2 comes after
        assert time.monotonic() < deadline
        time.sleep(0.02)
    send(b, stomp_client, dest, [("A", "a2")])
    got = c2.wait_messages(4, subscription=s2)[1:]
    assert [m.body for m in got] == ["a0", "a1", "a2"]
    assert [m.headers.get("redelivered") for m in got] == ["true", "true", "false"]
    c2.close()
    b.kill9()


def test_jmsxgroupseq_minus_one_closes_the_group(broker_factory, stomp_client):
    b = broker_factory(config=config())
    q = name("grp")
    dest = f"/queue/{q}"
    c1, s1 = consumer(b, stomp_client, dest)
    c2, s2 = consumer(b, stomp_client, dest)
    send(b, stomp_client, dest, [("A", "a0", {"JMSXGroupSeq": "1"}), ("A", "a1", {"JMSXGroupSeq": "-1"})])
    assert bodies(c1, 2, s1) == ["a0", "a1"]
    assert groups_of(b, stomp_client, q) == {s1: [], s2: []}
    # The next message of A starts the group anew: the next consumer in turn holds it.
    send(b, stomp_client, dest, [("A", "a2")])
    assert bodies(c2, 1, s2) == ["a2"]
    assert groups_of(b, stomp_client, q) == {s1: [], s2: ["A"]}
    c1.close()
    c2.close()
    b.kill9()


def test_an_operator_sees_and_resets_who_holds_which_group(broker_factory, stomp_client, tmp_path):
    b = broker_factory(config=config())
    q = name("grp")
    dest = f"/queue/{q}"
    c1, s1 = consumer(b, stomp_client, dest)
    c2, s2 = consumer(b, stomp_client, dest)
    send(b, stomp_client, dest, [("A", "a0"), ("B", "b0"), ("C", "c0")])
    bodies(c1, 2, s1)
    bodies(c2, 1, s2)
    assert groups_of(b, stomp_client, q) == {s1: ["A", "C"], s2: ["B"]}
    a = stomp_client(b)
    assert admin(a, "group-reset", name=q, group="C") == {"queue": q, "released": 1}
    assert groups_of(b, stomp_client, q) == {s1: ["A"], s2: ["B"]}
    assert admin(a, "group-reset", name=q) == {"queue": q, "released": 2}
    assert groups_of(b, stomp_client, q) == {s1: [], s2: []}
    a.close()
    # The escrow command shows them too.
    from test_admin import escrow
    send(b, stomp_client, dest, [("D", "d0")])
    c1.listener.wait_for(lambda: len(c1.messages) + len(c2.messages) == 4, 15, "d0")
    shown = escrow(b, "queue", "show", q).stdout
    assert "GROUPS" in shown and " D" in shown, shown
    out = escrow(b, "queue", "reset-groups", q, "--group", "D").stdout
    assert out == f"released 1 message group of {q}\n", out
    c1.close()
    c2.close()
    b.kill9()


def test_groups_hold_through_nack_transactions_and_restart(broker_factory, stomp_client):
    b = broker_factory(config=config())
    dest = f"/queue/{name('grp')}"
    c1, s1 = consumer(b, stomp_client, dest)
    c2, s2 = consumer(b, stomp_client, dest)
    send(b, stomp_client, dest, [("A", "a0"), ("B", "b0")])
    (a0,) = c1.wait_messages(1, subscription=s1)
    (b0,) = c2.wait_messages(1, subscription=s2)
    c1.nack(a0, receipt=True)
    assert c1.wait_messages(2, subscription=s1)[1].body == "a0"  # back to the group's holder
    # Acknowledged in a transaction that aborts: back to the holder too.
    c2.begin("t")
    c2.ack(b0, transaction="t")
    c2.abort("t")
    assert c2.wait_messages(2, subscription=s2)[1].body == "b0"
    # XA: a branch that rolls back gives it back to the holder.
    b1_sender = [("B", "b1")]
    send(b, stomp_client, dest, b1_sender)
    b1 = c2.wait_messages(3, subscription=s2)[2]
    x = new_xid(gtrid=unique("g").encode())
    ok(c2, "START", x)
    c2.ack(b1)
    ok(c2, "END", x, "TMSUCCESS")
    ok(c2, "ROLLBACK", x)
    assert c2.wait_messages(4, subscription=s2)[3].body == "b1"
    assert [m.body for m in c1.messages] == ["a0", "a0"]
    c1.close()
    c2.close()
    b.kill9()
    b.start()
    # Stored messages keep their group across a restart: a new consumer holds them afresh (the first
    # to come takes both groups), and one that comes next gets neither.
    c3, s3 = consumer(b, stomp_client, dest)
    assert bodies(c3, 3, s3) == ["a0", "b0", "b1"]
    c4, s4 = consumer(b, stomp_client, dest)
    send(b, stomp_client, dest, [("B", "b2"), ("N", "n0")])
    assert bodies(c4, 1, s4) == ["n0"]
    assert bodies(c3, 4, s3)[3] == "b2"
    c3.close()
    c4.close()
    b.kill9()


def test_beyond_max_groups_per_queue_new_groups_share_buckets_and_stay_together(broker_factory, stomp_client):
    b = broker_factory(config=config(head="[limits]\nmax-groups-per-queue = 2\n"))
    q = name("grp")
    dest = f"/queue/{q}"
    c1, s1 = consumer(b, stomp_client, dest)
    c2, s2 = consumer(b, stomp_client, dest)
    send(b, stomp_client, dest, [(g, f"{g}{i}") for i in range(3) for g in "ABCDE"])
    c1.listener.wait_for(lambda: len(c1.messages) + len(c2.messages) == 15, 15, "15 messages")
    got1, got2 = [m.body for m in c1.messages], [m.body for m in c2.messages]
    for g in "ABCDE":
        mine = [x for x in got1 if x[0] == g], [x for x in got2 if x[0] == g]
        assert [] in mine, (g, got1, got2)  # every group on one consumer
        assert sum(mine, []) == [f"{g}{i}" for i in range(3)]  # in order
    b.wait_log("holds 2 message groups (limits.max-groups-per-queue): new groups share 2 buckets")
    c1.close()
    c2.close()
    b.kill9()


def test_a_group_id_of_any_bytes_is_shown_and_held_apart_from_the_buckets(broker_factory, stomp_client):
    """Ids that look like the broker's own slots, and one longer than 256 bytes (held by its hash)."""
    b = broker_factory(config=config())
    q = name("grp")
    dest = f"/queue/{q}"
    c1, s1 = consumer(b, stomp_client, dest)
    long_id = "L" * 1000
    s = RawStomp(b.port)
    s.connect()
    for i, g in enumerate(["\x01", "\x01bucket 3", "b3", long_id]):
        s.send(frame_bytes("SEND", [("destination", dest), ("JMSXGroupID", g), ("receipt", str(i))], b"x"))
        assert s.read_frame().command == "RECEIPT"
    s.close()
    bodies(c1, 4, s1)
    (ids,) = groups_of(b, stomp_client, q).values()
    assert sorted(ids) == sorted(["\x01", "\x01bucket 3", "b3", "L" * 64 + "..."])
    a = stomp_client(b)
    assert admin(a, "group-reset", name=q, group=long_id)["released"] == 1
    a.close()
    c1.close()
    b.kill9()


def test_with_delivery_counts_stored_first_mixed_messages_reach_the_consumer_in_order(broker_factory,
                                                                                     stomp_client):
    """persist-delivery-count-before-delivery: a non-persistent message behind a persistent one
    whose count is being stored waits for it, so a cumulative ACK covers only what was sent."""
    b = broker_factory(config=config(head="[delivery]\npersist-delivery-count-before-delivery = true\n"))
    q = name("grp")
    dest = f"/queue/{q}"
    c = stomp_client(b)
    sub = c.subscribe(dest, ack="client", headers={"prefetch-count": "100"})
    send(b, stomp_client, dest, [(None, f"m{i}", {"persistent": "false"} if i % 2 else {}) for i in range(10)])
    got = c.wait_messages(10, subscription=sub)
    assert [m.body for m in got] == [f"m{i}" for i in range(10)]
    c.ack(got[-1], receipt=True)
    assert show(b, stomp_client, q)["depth"] == 0
    c.close()
    b.kill9()
