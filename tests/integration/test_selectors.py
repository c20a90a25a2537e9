"""SUBSCRIBE's `selector` header (docs/stomp.md, "Selectors"): on a /topic/ subscription, durable
or not, routing gives it only the messages whose headers the JMS selector selects (nothing is kept
for it otherwise; a durable one's selector is in its record, through SIGKILL); on a queue, a
consumer with a selector gets only what it picks, wherever in the queue, and what it passes over
keeps its place for the other consumers, through NACK, transactions and restarts; a selector that
does not parse gets an ERROR naming the column and what was expected. Each test ends with `escrow
check` (kill9 runs it). The language itself: tests/unit/broker/selector_test.cpp and fuzz_selector."""

import time

import pytest

from conftest import new_xid, unique
from test_address_limits import config, name, ok, show


def subscribe_selective(b, stomp_client, dest, selector, **headers):
    c = stomp_client(b)
    sub = c.subscribe(dest, headers={"selector": selector, **headers})
    return c, sub


def publish(b, stomp_client, dest, messages):
    p = stomp_client(b)
    for body, headers in messages:
        p.send(dest, body, headers=headers)
    p.close()


def test_a_topic_subscription_gets_only_what_its_selector_selects(broker_factory, stomp_client):
    b = broker_factory(config=config())
    dest = f"/topic/{name('sel')}"
    red, s_red = subscribe_selective(b, stomp_client, dest, "color = 'red' AND price > 10")
    prio, s_prio = subscribe_selective(b, stomp_client, dest, "JMSPriority >= 7 OR \"content-type\" LIKE 'text/%'")
    every, s_every = subscribe_selective(b, stomp_client, dest, "  ")  # blank: no selector (JMS)
    publish(b, stomp_client, dest, [
        ("red cheap", {"color": "red", "price": "5"}),
        ("red dear", {"color": "red", "price": "12.5"}),
        ("blue dear", {"color": "blue", "price": "99", "priority": "8"}),
        ("no price", {"color": "red"}),
        ("text", {"content-type": "text/plain"}),
        ("price not a number", {"color": "red", "price": "lots"}),
    ])
    assert [m.body for m in every.wait_messages(6, subscription=s_every)][-1] == "price not a number"
    assert [m.body for m in red.wait_messages(1, subscription=s_red)] == ["red dear"]
    assert [m.body for m in prio.wait_messages(2, subscription=s_prio)] == ["blue dear", "text"]
    red.settle(1, subscription=s_red)
    prio.settle(2, subscription=s_prio)
    for c in (red, prio, every):
        c.close()
    b.kill9()


def test_the_brokers_own_headers_can_be_selected_on(broker_factory, stomp_client):
    b = broker_factory(config=config())
    dest = f"/topic/{name('sel')}"
    c, sub = subscribe_selective(b, stomp_client, dest, "JMSDeliveryMode = 'NON_PERSISTENT' AND destination LIKE '/topic/sel.%'")
    publish(b, stomp_client, dest, [("kept", {"persistent": "true"}), ("light", {"persistent": "false"})])
    assert [m.body for m in c.wait_messages(1, subscription=sub)] == ["light"]
    c.settle(1, subscription=sub)
    c.close()
    b.kill9()


@pytest.mark.parametrize("text,needle", [
    ("color = ", "invalid selector: selector: at column 9: expected a value after '=', found end of input"),
    ("'a' < 'b'", "invalid selector: selector: at column 1:"),
    ("(" * 70 + "a = 1" + ")" * 70, "nested deeper than 64 levels"),
])
def test_a_bad_selector_gets_an_error_naming_where(broker_factory, stomp_client, text, needle):
    b = broker_factory(config=config())
    c = stomp_client(b)
    c.subscribe(f"/topic/{name('sel')}", headers={"selector": text}, receipt=False)
    e = c.wait_error()
    assert needle in e.headers.get("message", ""), dict(e.headers)
    b.kill9()


def consumer(b, stomp_client, dest, selector=None, prefetch=100, **headers):
    c = stomp_client(b, headers=headers)
    h = {"prefetch-count": str(prefetch)}
    if selector is not None:
        h["selector"] = selector
    sub = c.subscribe(dest, ack="client-individual", headers=h)
    return c, sub


def bodies(c, n, sub):
    return [m.body for m in c.wait_messages(n, subscription=sub)]


def test_a_queue_consumer_gets_only_what_it_selects_and_the_rest_keep_their_place(broker_factory, stomp_client):
    b = broker_factory(config=config())
    dest = f"/queue/{name('sel')}"
    red, s_red = consumer(b, stomp_client, dest, "color = 'red'")
    big, s_big = consumer(b, stomp_client, dest, "size > 10")
    publish(b, stomp_client, dest, [
        ("r1", {"color": "red"}), ("b1", {"color": "blue"}), ("big1", {"size": "11"}),
        ("n1", {}), ("r2", {"color": "red", "persistent": "false"}), ("b2", {"color": "blue"}),
        ("r3", {"color": "red", "priority": "9"}),
    ])
    assert bodies(red, 3, s_red) == ["r1", "r2", "r3"]
    assert bodies(big, 1, s_big) == ["big1"]
    # What both passed over waits in its place for a consumer that takes anything.
    every, s_every = consumer(b, stomp_client, dest)
    assert bodies(every, 3, s_every) == ["b1", "n1", "b2"]
    for c, n, sub in ((red, 3, s_red), (big, 1, s_big), (every, 3, s_every)):
        c.settle(n, subscription=sub)
    for c in (every, red, big):
        c.close()
    assert show(b, stomp_client, dest[7:])["depth"] == 7  # none acknowledged: all back in the queue
    b.kill9()


def test_a_selective_consumer_finds_its_matches_deep_in_storage_in_order(broker_factory, stomp_client):
    # A window of 5 entries in memory: the matches are found in LMDB; 4,500 matches is more than the
    # 4,096 keys a selector's index holds at once, so the scan stops and goes on as they are taken.
    b = broker_factory(config=config(head="[delivery]\nqueue-memory-window = 5\n"))
    q = name("sel")
    dest = f"/queue/{q}"
    n = 9000
    p = stomp_client(b)
    for i in range(n):
        headers = {"n": str(i)}
        if i % 2 == 0:
            headers["color"] = "red"
        if i % 10 == 3:
            headers["persistent"] = "false"
        p.send(dest, str(i), headers=headers, receipt=(i == n - 1))
    p.close()
    c, sub = consumer(b, stomp_client, dest, "color = 'red' AND n >= 0", prefetch=500)
    got = []
    while len(got) < n // 2:
        for m in c.wait_messages(len(got) + 1, subscription=sub)[len(got):]:
            got.append(int(m.body))
            c.ack(m)
    assert got == list(range(0, n, 2))
    c.settle(n // 2, subscription=sub)
    rest, s_rest = consumer(b, stomp_client, dest, prefetch=500)
    got = []
    while len(got) < n // 2:
        for m in rest.wait_messages(len(got) + 1, subscription=s_rest)[len(got):]:
            got.append(int(m.body))
            rest.ack(m)
    assert got == list(range(1, n, 2))
    c.close()
    rest.close()
    b.kill9()


def test_a_returned_message_is_classified_again_by_its_delivery_count(broker_factory, stomp_client):
    b = broker_factory(config=config())
    dest = f"/queue/{name('sel')}"
    first, s_first = consumer(b, stomp_client, dest, "JMSXDeliveryCount = 1")
    again, s_again = consumer(b, stomp_client, dest, "JMSRedelivered = TRUE AND \"delivery-count\" = 2")
    publish(b, stomp_client, dest, [("m1", {}), ("m2", {})])
    m1, m2 = first.wait_messages(2, subscription=s_first)
    first.nack(m1, receipt=True)
    (back,) = again.wait_messages(1, subscription=s_again)
    assert back.body == "m1" and back.headers["delivery-count"] == "2"
    # Acknowledged in a local transaction that aborts, and in an XA branch that rolls back: back,
    # counted, so to the other consumer again only if it still selects it (count 3: nobody does).
    first.begin("t")
    first.ack(m2, transaction="t")
    first.abort("t")
    (back2,) = [m for m in again.wait_messages(2, subscription=s_again) if m.body == "m2"]
    x = new_xid(gtrid=unique("g").encode())
    ok(again, "START", x)
    again.ack(back2)
    ok(again, "END", x, "TMSUCCESS")
    ok(again, "ROLLBACK", x)
    again.settle(2, subscription=s_again)
    first.settle(2, subscription=s_first)
    every, s_every = consumer(b, stomp_client, dest)
    got = every.wait_messages(1, subscription=s_every)
    assert got[0].body == "m2" and got[0].headers["delivery-count"] == "3"
    for c in (first, again, every):
        c.close()
    b.kill9()


def test_selective_consumers_of_a_queue_after_sigkill(broker_factory, stomp_client):
    b = broker_factory(config=config())
    dest = f"/queue/{name('sel')}"
    publish(b, stomp_client, dest, [(f"{c}{i}", {"color": c}) for i in range(3) for c in ("red", "blue")])
    red, s_red = consumer(b, stomp_client, dest, "color = 'red'")
    assert bodies(red, 3, s_red) == ["red0", "red1", "red2"]
    red.ack(red.messages[0], receipt=True)
    b.kill9()
    b.start()
    blue, s_blue = consumer(b, stomp_client, dest, "color <> 'red'")
    assert bodies(blue, 3, s_blue) == ["blue0", "blue1", "blue2"]
    red, s_red = consumer(b, stomp_client, dest, "color = 'red'")
    assert bodies(red, 2, s_red) == ["red1", "red2"]
    for c, n, sub in ((blue, 3, s_blue), (red, 2, s_red)):
        c.settle(n, subscription=sub)
        c.close()
    b.kill9()


def connect_as(b, stomp_client, client_id):
    """A connection with `client_id`, once the broker has let go of the last one an ERROR closed."""
    deadline = time.monotonic() + 10
    while True:
        c = stomp_client(b, headers={"client-id": client_id}, wait=False)
        c.listener.wait_for(lambda: c.listener.connected is not None or c.listener.errors, 10, "CONNECTED")
        if c.listener.connected is not None:
            return c
        assert "is in use" in c.errors[0].headers["message"] and time.monotonic() < deadline, c.errors[0].headers
        c.close()


def test_a_durable_subscription_keeps_only_what_its_selector_selects_through_sigkill(broker_factory, stomp_client):
    b = broker_factory(config=config())
    topic = name("sel")
    dest = f"/topic/{topic}"
    durable = {"durable-subscription-name": "s"}
    d = stomp_client(b, headers={"client-id": f"{topic}-c"})
    d.subscribe(dest, id="d", headers={"selector": "color = 'red'", **durable})
    d.close()
    publish(b, stomp_client, dest, [("r1", {"color": "red"}), ("b1", {"color": "blue"})])
    b.kill9()
    b.start()
    publish(b, stomp_client, dest, [("b2", {"color": "blue"}), ("r2", {"color": "red"})])
    assert show(b, stomp_client, f"{topic}-c.s")["depth"] == 2  # nothing stored for what it does not select
    d = stomp_client(b, headers={"client-id": f"{topic}-c"})
    d.subscribe(dest, id="d", ack="client-individual", headers={"selector": "color = 'red'", **durable})
    assert bodies(d, 2, "d") == ["r1", "r2"]
    d.settle(2, subscription="d")
    d.close()
    # Another selector (or none) is another subscription: refused until the old one is ended.
    for other in ({"selector": "color = 'blue'"}, {}):
        e = connect_as(b, stomp_client, f"{topic}-c")
        e.subscribe(dest, id="d", headers={**other, **durable}, receipt=False)
        assert "was made with selector 'color = 'red''" in e.wait_error().headers["message"]
    e = connect_as(b, stomp_client, f"{topic}-c")
    e.unsubscribe("d", headers=durable)
    e.subscribe(dest, id="d", headers={"selector": "color = 'blue'", **durable})
    publish(b, stomp_client, dest, [("r3", {"color": "red"}), ("b3", {"color": "blue"})])
    assert bodies(e, 1, "d") == ["b3"]
    e.settle(1, subscription="d")
    e.close()
    b.kill9()


def test_a_selective_consumer_takes_groups_as_any_consumer_does(broker_factory, stomp_client):
    b = broker_factory(config=config())
    dest = f"/queue/{name('sel')}"
    red, s_red = consumer(b, stomp_client, dest, "color = 'red'")
    publish(b, stomp_client, dest, [("a1", {"color": "red", "JMSXGroupID": "A"}),
                                    ("a2", {"color": "red", "JMSXGroupID": "A"}),
                                    ("n1", {"JMSXGroupID": "N"})])
    assert bodies(red, 2, s_red) == ["a1", "a2"]
    every, s_every = consumer(b, stomp_client, dest)
    assert bodies(every, 1, s_every) == ["n1"]
    publish(b, stomp_client, dest, [("a3", {"color": "red", "JMSXGroupID": "A"})])
    assert bodies(red, 3, s_red)[2] == "a3"  # its group's holder
    every.settle(1, subscription=s_every)
    red.close()
    every.close()
    b.kill9()
