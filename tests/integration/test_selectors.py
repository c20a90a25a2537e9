"""SUBSCRIBE's `selector` header (docs/stomp.md, "Selectors"): on a non-durable /topic/
subscription, routing gives it only the messages whose headers the JMS selector selects (nothing is
kept for it otherwise); a selector that does not parse gets an ERROR naming the column and what was
expected; on a queue or a durable subscription a selector is refused (not supported yet) rather
than ignored. The language itself: tests/unit/broker/selector_test.cpp and fuzz_selector."""

import pytest

from test_address_limits import config, name


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


@pytest.mark.parametrize("where", ["queue", "durable"])
def test_a_selector_on_a_queue_or_durable_subscription_is_refused_not_ignored(broker_factory, stomp_client, where):
    b = broker_factory(config=config())
    c = stomp_client(b, headers={"client-id": "sel-client"})
    headers = {"selector": "color = 'red'"}
    dest = f"/queue/{name('sel')}"
    if where == "durable":
        dest = f"/topic/{name('sel')}"
        headers["durable-subscription-name"] = "d"
    c.subscribe(dest, headers=headers, receipt=False)
    e = c.wait_error()
    what = "a queue" if where == "queue" else "a durable subscription"
    assert f"selector on {what}: not supported yet" in e.headers.get("message", ""), dict(e.headers)
    b.kill9()
