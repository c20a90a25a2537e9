"""Topics: fan-out to every subscription, nothing kept without subscriptions, and durable
subscriptions that keep messages while their consumer is away, across restarts, until
UNSUBSCRIBE with the durable name deletes them."""

import time

import pytest

from conftest import TIMEOUT, bodies, unique


def topic():
    return f"/topic/{unique('t')}"


def test_every_subscription_gets_a_copy(broker, stomp_client):
    t = topic()
    a = stomp_client(broker)
    b = stomp_client(broker)
    sa1 = a.subscribe(t)
    sa2 = a.subscribe(t)  # two subscriptions on one connection: two copies
    sb = b.subscribe(t, ack="client-individual")
    p = stomp_client(broker)
    for i in range(3):
        p.send(t, f"m{i}", headers={"x-k": str(i)})
    for c, sub in ((a, sa1), (a, sa2), (b, sb)):
        got = c.wait_messages(3, subscription=sub)
        assert bodies(got) == ["m0", "m1", "m2"]
        assert [m.headers["x-k"] for m in got] == ["0", "1", "2"]
        assert all(m.headers["destination"] == t for m in got)
    a.settle(6)
    b.settle(3)
    # A topic consumer in client-individual mode acknowledges its copy.
    b.ack(b.messages[0], receipt=True)


def test_topic_message_with_no_subscription_is_not_kept(broker, stomp_client):
    t = topic()
    p = stomp_client(broker)
    p.send(t, "nobody listens")
    c = stomp_client(broker)
    c.subscribe(t)
    p.send(t, "after subscribe")
    c.wait_body("after subscribe")
    assert bodies(c.messages) == ["after subscribe"]


def test_unsubscribed_topic_consumer_gets_nothing_more(broker, stomp_client):
    t = topic()
    a = stomp_client(broker)
    b = stomp_client(broker)
    sa = a.subscribe(t)
    b.subscribe(t)
    p = stomp_client(broker)
    p.send(t, "one")
    a.wait_messages(1)
    a.unsubscribe(sa)
    p.send(t, "two")
    b.wait_body("two")
    a.settle(1)
    assert bodies(b.messages) == ["one", "two"]


def test_topic_unacked_copy_is_redelivered_to_same_subscription_only(broker, stomp_client):
    t = topic()
    a = stomp_client(broker)
    b = stomp_client(broker)
    sa = a.subscribe(t, ack="client-individual")
    b.subscribe(t)
    p = stomp_client(broker)
    p.send(t, "m")
    (m,) = a.wait_messages(1)
    b.wait_messages(1)
    a.nack(m)
    again = a.wait_messages(2, subscription=sa)[1]
    assert again.body == "m" and again.headers["redelivered"] == "true"
    b.settle(1)


def durable_headers(name, alias=False):
    return {("activemq.subscriptionName" if alias else "durable-subscription-name"): name}


@pytest.mark.parametrize("alias", [False, True], ids=["durable-subscription-name", "activemq.subscriptionName"])
def test_durable_subscription_keeps_messages_while_consumer_is_away(broker, stomp_client, alias):
    t = topic()
    cid, name = unique("client"), unique("dur")
    c = stomp_client(broker, headers={"client-id": cid})
    c.subscribe(t, headers=durable_headers(name, alias))
    p = stomp_client(broker)
    p.send(t, "while here")
    c.wait_messages(1)
    c.disconnect()

    for i in range(3):
        p.send(t, f"away{i}")
    # A non-durable subscriber that arrives later does not see what was sent before it.
    late = stomp_client(broker)
    late_sub = late.subscribe(t)

    c2 = stomp_client(broker, headers={"client-id": cid})
    sub = c2.subscribe(t, headers=durable_headers(name, alias))
    got = c2.wait_messages(3, subscription=sub)
    assert bodies(got) == ["away0", "away1", "away2"]
    p.send(t, "live")
    c2.wait_body("live")
    late.wait_body("live")
    assert bodies(c2.messages) == ["away0", "away1", "away2", "live"]
    assert bodies(late.wait_messages(1, subscription=late_sub)) == ["live"]


def test_durable_subscriptions_are_per_client_id(broker, stomp_client):
    t = topic()
    name = unique("dur")
    x = stomp_client(broker, headers={"client-id": unique("x")})
    y = stomp_client(broker, headers={"client-id": unique("y")})
    x.subscribe(t, headers=durable_headers(name))
    y.subscribe(t, headers=durable_headers(name))
    p = stomp_client(broker)
    p.send(t, "both")
    assert bodies(x.wait_messages(1)) == ["both"]
    assert bodies(y.wait_messages(1)) == ["both"]


def reconnect(broker, stomp_client, cid):
    """A client that crashed connects again with its client-id, as a client library's reconnect
    loop does: a client-id is refused while the connection that had it is live (docs/stomp.md), and
    the broker may not have seen the dropped connection close yet."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        c = stomp_client(broker, headers={"client-id": cid}, wait=False)
        c.listener.wait_for(lambda: c.listener.connected is not None or c.listener.errors or c.listener.disconnected,
                            TIMEOUT, "CONNECTED")
        if c.listener.connected is not None:
            return c
        problem = c.listener.errors[0].headers.get("message", "") if c.listener.errors else "closed"
        assert "is in use by connection" in problem and time.monotonic() < deadline, problem
        time.sleep(0.02)


def test_durable_subscription_unacked_messages_return_after_reconnect(broker, stomp_client):
    t = topic()
    cid, name = unique("client"), unique("dur")
    c = stomp_client(broker, headers={"client-id": cid})
    c.subscribe(t, ack="client-individual", headers=durable_headers(name))
    p = stomp_client(broker)
    for i in range(3):
        p.send(t, f"m{i}")
    msgs = c.wait_messages(3)
    c.ack(msgs[1], receipt=True)
    c.drop()
    c2 = reconnect(broker, stomp_client, cid)
    c2.subscribe(t, ack="client-individual", headers=durable_headers(name))
    p.send(t, "sentinel")
    got = c2.wait_body("sentinel")
    assert bodies(got) == ["m0", "m2", "sentinel"]
    assert [m.headers["redelivered"] for m in got] == ["true", "true", "false"]


@pytest.mark.parametrize("kill", [True, False], ids=["sigkill", "sigterm"])
def test_durable_subscription_survives_restart(broker, stomp_client, kill):
    t = topic()
    cid, name = unique("client"), unique("dur")
    c = stomp_client(broker, headers={"client-id": cid})
    c.subscribe(t, headers=durable_headers(name))
    c.disconnect()
    p = stomp_client(broker)
    for i in range(5):
        p.send(t, f"kept{i}")  # persistent (the default); the receipt means it is durable
    p.send(t, "volatile", headers={"persistent": "false"})
    p.close()

    broker.restart(kill=kill)

    # The subscription itself survived too: a message sent after the restart, before the
    # consumer is back, is kept for it.
    p2 = stomp_client(broker)
    p2.send(t, "after restart")
    c2 = stomp_client(broker, headers={"client-id": cid})
    c2.subscribe(t, headers=durable_headers(name))
    p2.send(t, "sentinel")
    got = c2.wait_body("sentinel")
    assert bodies(got) == [f"kept{i}" for i in range(5)] + ["after restart", "sentinel"]


def test_unsubscribe_with_durable_name_deletes_the_subscription(broker, stomp_client):
    t = topic()
    cid, name = unique("client"), unique("dur")
    c = stomp_client(broker, headers={"client-id": cid})
    sub = c.subscribe(t, headers=durable_headers(name))
    p = stomp_client(broker)
    p.send(t, "before delete")
    c.wait_messages(1)
    c.unsubscribe(sub, headers=durable_headers(name))
    c.disconnect()
    p.send(t, "nobody keeps this")
    c2 = stomp_client(broker, headers={"client-id": cid})
    c2.subscribe(t, headers=durable_headers(name))  # a new, empty subscription
    p.send(t, "sentinel")
    got = c2.wait_body("sentinel")
    assert bodies(got) == ["sentinel"]


def test_unsubscribe_by_id_only_keeps_the_durable_subscription(broker, stomp_client):
    t = topic()
    cid, name = unique("client"), unique("dur")
    c = stomp_client(broker, headers={"client-id": cid})
    sub = c.subscribe(t, headers=durable_headers(name))
    c.unsubscribe(sub)  # no durable name: the consumer stops, the subscription stays
    p = stomp_client(broker)
    p.send(t, "kept")
    c.settle(0)
    sub2 = c.subscribe(t, headers=durable_headers(name))
    assert bodies(c.wait_messages(1, subscription=sub2)) == ["kept"]


def test_deleted_durable_subscription_stays_deleted_after_restart(broker, stomp_client):
    t = topic()
    cid, name = unique("client"), unique("dur")
    c = stomp_client(broker, headers={"client-id": cid})
    sub = c.subscribe(t, headers=durable_headers(name))
    c.unsubscribe(sub, headers=durable_headers(name))
    c.disconnect()
    p = stomp_client(broker)
    p.send(t, "sent to nobody")
    p.close()
    broker.restart(kill=True)
    p2 = stomp_client(broker)
    c2 = stomp_client(broker, headers={"client-id": cid})
    c2.subscribe(t, headers=durable_headers(name))
    p2.send(t, "sentinel")
    assert bodies(c2.wait_body("sentinel")) == ["sentinel"]
