"""Who gets which message among a queue's consumers (docs/stomp.md, "Consumer priority" and
"Exclusive consumers"): consumer priority (activemq.priority, RabbitMQ's x-priority) serves the
highest-priority consumers with room first, round robin among equals; an exclusive consumer
(activemq.exclusive:true on SUBSCRIBE, or `exclusive = true` in the address settings, Artemis's
exclusive queues) receives alone, and the next one takes over, in order, when it leaves. Through
NACK, transactions and a restart. Each test ends with `escrow check` (kill9 runs it)."""

import pytest

from conftest import new_xid, unique
from test_address_limits import config, fill, limit, name, ok, show
from test_failure_paths import error_message


def subscribe(b, stomp_client, dest, prefetch, headers=None):
    c = stomp_client(b)
    h = {"prefetch-count": str(prefetch), **(headers or {})}
    sub = c.subscribe(dest, ack="client-individual", headers=h)
    return c, sub


def bodies(c, n, sub):
    return [m.body for m in c.wait_messages(n, subscription=sub)]


@pytest.mark.parametrize("header", ["x-priority", "activemq.priority"])
def test_higher_priority_consumers_are_served_first_and_lower_ones_only_when_they_are_full(
        broker_factory, stomp_client, header):
    b = broker_factory(config=config())
    q = name("prio")
    dest = f"/queue/{q}"
    low = stomp_client(b)
    low_sub = low.subscribe(dest, ack="client-individual", headers={"prefetch-count": "10", header: "1"})
    high = stomp_client(b)
    high_sub = high.subscribe(dest, ack="client-individual", headers={"prefetch-count": "2", header: "5"})
    fill(b, stomp_client, dest, [f"m{i}" for i in range(5)])
    got_high = high.wait_messages(2, subscription=high_sub)
    assert [m.body for m in got_high] == ["m0", "m1"]
    assert bodies(low, 3, low_sub) == ["m2", "m3", "m4"]
    # Room again at the higher priority: it gets the next one.
    high.ack(got_high[0], receipt=True)
    fill(b, stomp_client, dest, ["m5"])
    assert bodies(high, 3, high_sub)[2] == "m5"
    assert [m.body for m in low.messages] == ["m2", "m3", "m4"]
    detail = {c["subscription"]: c for c in show(b, stomp_client, q)["consumers_detail"]}
    assert sorted(c["priority"] for c in detail.values()) == [1, 5]
    low.close()
    high.close()
    b.kill9()


def test_equal_priorities_share_round_robin_and_negative_ones_come_last(broker_factory, stomp_client):
    b = broker_factory(config=config())
    dest = f"/queue/{name('rr')}"
    a, sa = subscribe(b, stomp_client, dest, 100, headers={"x-priority": "3"})
    c, sc = subscribe(b, stomp_client, dest, 100, headers={"x-priority": "3"})
    last, sl = subscribe(b, stomp_client, dest, 100, headers={"x-priority": "-7"})
    fill(b, stomp_client, dest, [f"m{i}" for i in range(6)])
    assert bodies(a, 3, sa) == ["m0", "m2", "m4"]
    assert bodies(c, 3, sc) == ["m1", "m3", "m5"]
    last.settle(0, subscription=sl)
    for x in (a, c, last):
        x.close()
    b.kill9()


@pytest.mark.parametrize("header,value,needle", [
    ("x-priority", "high", "invalid x-priority header 'high': use an integer (higher is served first)"),
    ("activemq.priority", "1.5", "invalid activemq.priority header '1.5': use an integer"),
    ("x-priority", "99999999999", "invalid x-priority header '99999999999'"),
    ("activemq.exclusive", "yes", "invalid activemq.exclusive header 'yes': use true or false"),
])
def test_a_bad_priority_or_exclusive_header_gets_an_error(broker_factory, stomp_client, header, value, needle):
    b = broker_factory(config=config())
    c = stomp_client(b)
    c.subscribe(f"/queue/{name('bad')}", headers={header: value}, receipt=False)
    got = c.wait_error()
    assert needle in error_message(got), got
    b.kill9()


def test_an_exclusive_consumer_receives_alone_and_the_next_takes_over_in_order(broker_factory, stomp_client):
    b = broker_factory(config=config())
    q = name("excl")
    dest = f"/queue/{q}"
    first, s1 = subscribe(b, stomp_client, dest, 2, headers={"activemq.exclusive": "true"})
    second, s2 = subscribe(b, stomp_client, dest, 100, headers={"activemq.exclusive": "true"})
    plain, s3 = subscribe(b, stomp_client, dest, 100)
    fill(b, stomp_client, dest, [f"m{i}" for i in range(5)])
    got = first.wait_messages(2, subscription=s1)
    assert [m.body for m in got] == ["m0", "m1"]
    # Full, it still receives alone: the others get nothing.
    first.ack(got[0], receipt=True)
    assert bodies(first, 3, s1)[2] == "m2"
    assert second.messages == [] and plain.messages == []
    detail = {c["subscription"]: c for c in show(b, stomp_client, q)["consumers_detail"]}
    assert [(c["exclusive"], c["receiving"]) for c in detail.values()].count((True, True)) == 1
    # It leaves with m1 and m2 unacknowledged: they come back first, in order, to the next exclusive one.
    first.close()
    assert bodies(second, 4, s2) == ["m1", "m2", "m3", "m4"]
    assert plain.messages == []
    for m in second.messages:
        second.ack(m, receipt=True)
    second.close()
    # No exclusive consumer left: the plain one gets what comes.
    fill(b, stomp_client, dest, ["m5"])
    assert bodies(plain, 1, s3) == ["m5"]
    plain.close()
    b.kill9()


def test_an_exclusive_queue_by_its_settings_serves_one_consumer_through_nack_transactions_and_restart(
        broker_factory, stomp_client):
    b = broker_factory(config=config(limit("exq.#", exclusive=True), limit("exq2.#", default_exclusive_queue=True)))
    q = name("exq")
    dest = f"/queue/{q}"
    one, s1 = subscribe(b, stomp_client, dest, 10)
    fill(b, stomp_client, dest, ["a"])
    one.wait_messages(1, subscription=s1)
    # One of a higher priority that comes later does not take over: the owner stays until it leaves.
    two, s2 = subscribe(b, stomp_client, dest, 10, headers={"x-priority": "9"})
    fill(b, stomp_client, dest, ["b", "c"])
    got = one.wait_messages(3, subscription=s1)
    assert [m.body for m in got] == ["a", "b", "c"]
    # A NACK gives it back to the same consumer.
    one.nack(got[0], receipt=True)
    again = one.wait_messages(4, subscription=s1)[3]
    assert (again.body, again.headers.get("redelivered")) == ("a", "true")
    # An acknowledgement in an aborted transaction too.
    one.begin("t")
    one.ack(got[1], transaction="t")
    one.abort("t")
    assert one.wait_messages(5, subscription=s1)[4].body == "b"
    assert two.messages == []
    # XA: consumed in a branch rolled back, it comes back to the owner.
    x = new_xid(gtrid=unique("g").encode())
    ok(one, "START", x)
    one.ack(got[2])
    ok(one, "END", x, "TMSUCCESS")
    ok(one, "ROLLBACK", x)
    assert one.wait_messages(6, subscription=s1)[5].body == "c"
    assert two.messages == []
    one.close()
    two.close()
    b.kill9()
    b.start()
    # After a restart the rule holds as configured: the first consumer to be handed a message is
    # the owner, and a full owner still receives alone.
    three, s3 = subscribe(b, stomp_client, dest, 1)
    four, s4 = subscribe(b, stomp_client, dest, 10)
    (a,) = three.wait_messages(1, subscription=s3)
    four.settle(0, subscription=s4)
    three.ack(a, receipt=True)
    assert bodies(three, 2, s3) == ["a", "b"]
    four.settle(0, subscription=s4)
    three.close()
    four.close()
    q2 = name("exq2")
    five, s5 = subscribe(b, stomp_client, f"/queue/{q2}", 10)
    six, s6 = subscribe(b, stomp_client, f"/queue/{q2}", 10)
    fill(b, stomp_client, f"/queue/{q2}", ["x", "y"])
    assert bodies(five, 2, s5) == ["x", "y"]
    six.settle(0, subscription=s6)
    five.close()
    six.close()
    b.kill9()


def test_the_highest_priority_consumer_present_becomes_the_exclusive_owner(broker_factory, stomp_client):
    b = broker_factory(config=config(limit("exp.#", exclusive=True)))
    dest = f"/queue/{name('exp')}"
    # Both subscribe before anything is sent: the owner is chosen when the first message comes. It
    # has room for one only: exclusive, the other gets nothing even so.
    low, sl = subscribe(b, stomp_client, dest, 10, headers={"x-priority": "1"})
    high, sh = subscribe(b, stomp_client, dest, 1, headers={"x-priority": "2"})
    fill(b, stomp_client, dest, ["m0", "m1"])
    (m0,) = high.wait_messages(1, subscription=sh)
    assert m0.body == "m0"
    low.settle(0, subscription=sl)
    high.ack(m0, receipt=True)
    assert bodies(high, 2, sh)[1] == "m1"
    low.settle(0, subscription=sl)
    low.close()
    high.close()
    b.kill9()
