"""One tenant cannot make the operator's views unusable (issue 15): the list answers of the ADMIN
frame come in pages ([admin] max-page-size, max-page-bytes; docs/operations.md, "Paged answers")
that the `escrow` command follows to the end, and /metrics keeps per-queue series for at most
[http] max-queue-metrics queues (the deepest, ties by name) with escrow_queue_metrics_omitted
counting the rest and the broker-wide totals exact. Thousands of queues are made the way the
report made them: SENDs to new names on a raw socket, each with a receipt."""

import json

from conftest import frame_bytes, new_xid, unique
from test_admin import escrow, ok_json, ok_text
from test_http import get, http_port, scrape
from test_reload import hangup, wait_log

# No expiry or dead letter queues: the only queues are the test's own.
NO_UNDELIVERED_QUEUES = """
[[address-settings]]
match = "#"
dead-letter-address = ""
expiry-address = ""
"""

PER_QUEUE = ["escrow_queue_messages_enqueued_total", "escrow_queue_messages_delivered_total",
             "escrow_queue_messages_acknowledged_total", "escrow_queue_messages_expired_total",
             "escrow_queue_messages_dead_lettered_total", "escrow_queue_messages_redelivered_total",
             "escrow_queue_depth", "escrow_queue_in_flight", "escrow_queue_consumers"]


def config(admin="", http=None):
    text = NO_UNDELIVERED_QUEUES
    if http is not None:
        text = f'[http]\nlisten = "127.0.0.1:0"\n{http}\n' + text
    if admin:
        text = f"[admin]\n{admin}\n" + text
    return text


def send_to(raw, broker, destinations, headers=()):
    """One SEND (body "x") to each of `destinations` (names; a name twice: two messages), all in one
    write on a raw connection, each with a receipt; returns once every receipt has come back."""
    s = raw(broker)
    s.connect()
    s.send(b"".join(frame_bytes("SEND", [("destination", f"/queue/{d}"), ("receipt", f"r{i}"), *headers], b"x")
                    for i, d in enumerate(destinations)))
    for i in range(len(destinations)):
        f = s.read_frame()
        assert (f.command, f.headers.get("receipt-id")) == ("RECEIPT", f"r{i}"), f
    s.close()


def admin(s, command, *headers):
    """One ADMIN frame on the raw connection `s`; (admin-status, message, JSON body or None, body bytes)."""
    s.send(frame_bytes("ADMIN", [("admin-command", command), ("receipt", "a"), *headers]))
    f = s.read_frame()
    assert (f.command, f.headers.get("receipt-id")) == ("RECEIPT", "a"), f
    body = f.body if f.headers.get("content-type") == "application/json" else b""
    return f.headers["admin-status"], f.headers.get("message", ""), json.loads(body) if body else None, body


def pages(s, command, *headers):
    """Every page of a list, following next; [(JSON, body bytes)]."""
    out, after = [], ()
    while True:
        status, message, page, body = admin(s, command, *headers, *after)
        assert status == "ok", message
        out.append((page, body))
        if not page["more"]:
            assert "next" not in page
            return out
        after = (("after", page["next"]),)


def series(samples, name):
    """{queue name: value} of a per-queue family."""
    return {dict(labels)["queue"]: v for (n, labels), v in samples.items() if n == name}


def test_thousands_of_queues_list_in_pages_and_metrics_keep_the_deepest(broker_factory, raw):
    b = broker_factory(config=config(admin="max-page-size = 100", http="max-queue-metrics = 50"))
    prefix = unique("many")
    names = [f"{prefix}-{i:04d}" for i in range(3000)]
    deep = names[7::60]  # 50 queues scattered through the name order get a second message
    assert len(deep) == 50
    send_to(raw, b, names + deep)

    # A raw page holds the default page size, and says where the next starts.
    s = raw(b)
    s.connect()
    status, _, first, body = admin(s, "queues")
    assert status == "ok" and len(first["queues"]) == 100 and first["more"] is True
    assert first["next"] == "q/" + first["queues"][-1]["name"]
    got = [q["name"] for page, _ in pages(s, "queues") for q in page["queues"]]
    assert got == sorted(names)  # every queue exactly once, in name order

    # The command follows the pages: --json is the merged list, the table has every row.
    listed = ok_json(b, "queues")
    assert set(listed) == {"queues"}
    assert sorted(q["name"] for q in listed["queues"]) == sorted(names)
    assert len(listed["queues"]) == len(names)
    assert {q["name"]: q["depth"] for q in listed["queues"] if q["depth"] == 2} == {n: 2 for n in deep}
    rows = ok_text(b, "queues").splitlines()
    assert rows[0].startswith("NAME") and sorted(r.split()[0] for r in rows[1:]) == sorted(names)

    # /metrics: the 50 deepest queues have series; the other 2950 are counted; the totals are exact.
    port = http_port(b)
    samples = scrape(port)
    for family in PER_QUEUE:
        assert set(series(samples, family)) == set(deep), family
    assert samples[("escrow_queue_metrics_omitted", frozenset())] == 2950
    assert samples[("escrow_queues", frozenset({"kind": "queue"}.items()))] == 3000
    assert samples[("escrow_messages_depth", frozenset())] == 3050
    assert samples[("escrow_messages_enqueued_total", frozenset())] == 3050
    status, _, text = get(port, "/metrics")
    assert status == 200 and len(text) < 200_000, len(text)
    status, _, body = get(port, "/status")
    doc = json.loads(body)
    assert {q["name"] for q in doc["queues"]} == set(deep) and doc["queues_omitted"] == 2950
    assert doc["totals"]["queues"] == 3000 and doc["totals"]["depth"] == 3050
    st = ok_json(b, "status")
    assert st["totals"]["queues"] == 3000 and st["totals"]["depth"] == 3050


def test_max_queue_metrics_edge_n_present_then_one_omitted_deepest_kept_ties_by_name(broker_factory, raw):
    b = broker_factory(config=config(http="max-queue-metrics = 5"))
    port = http_port(b)
    p = unique("mq")
    send_to(raw, b, [f"{p}-a{i}" for i in range(5)])
    samples = scrape(port)
    for family in PER_QUEUE:
        assert set(series(samples, family)) == {f"{p}-a{i}" for i in range(5)}, family
    assert samples[("escrow_queue_metrics_omitted", frozenset())] == 0

    # One more queue, and the deepest: it is kept; of the five with one message each, the last by
    # name makes room.
    send_to(raw, b, [f"{p}-b"] * 3)
    samples = scrape(port)
    kept = {f"{p}-b", f"{p}-a0", f"{p}-a1", f"{p}-a2", f"{p}-a3"}
    for family in PER_QUEUE:
        assert set(series(samples, family)) == kept, family
    assert series(samples, "escrow_queue_depth")[f"{p}-b"] == 3
    assert samples[("escrow_queue_metrics_omitted", frozenset())] == 1
    assert samples[("escrow_queues", frozenset({"kind": "queue"}.items()))] == 6
    assert samples[("escrow_queues", frozenset({"kind": "durable-subscription"}.items()))] == 0
    assert samples[("escrow_messages_depth", frozenset())] == 8
    status, _, body = get(port, "/status")
    doc = json.loads(body)
    assert {q["name"] for q in doc["queues"]} == kept and doc["queues_omitted"] == 1
    assert doc["totals"]["queues"] == 6 and doc["totals"]["depth"] == 8 and doc["totals"]["enqueued"] == 8

    # SIGHUP changes the limit at once; 0 leaves only the broker-wide series.
    mark = hangup(b, config(http="max-queue-metrics = 0"))
    wait_log(b, "SIGHUP: reloaded", mark)
    assert "http.max-queue-metrics 0" in b.log[mark:]
    samples = scrape(port)
    assert all(not series(samples, family) for family in PER_QUEUE)
    assert samples[("escrow_queue_metrics_omitted", frozenset())] == 6
    assert samples[("escrow_messages_depth", frozenset())] == 8


def test_max_page_size_edge_and_the_paging_headers(broker_factory, raw):
    b = broker_factory(config=config(admin="max-page-size = 4"))
    p = unique("pg")
    send_to(raw, b, [f"{p}-{i}" for i in range(4)])
    s = raw(b)
    s.connect()
    status, _, page, _ = admin(s, "queues")
    assert status == "ok" and [q["name"] for q in page["queues"]] == [f"{p}-{i}" for i in range(4)]
    assert page["more"] is False and "next" not in page

    send_to(raw, b, [f"{p}-4"])
    status, _, page, _ = admin(s, "queues")
    assert [q["name"] for q in page["queues"]] == [f"{p}-{i}" for i in range(4)]
    assert page["more"] is True and page["next"] == f"q/{p}-3"
    status, _, rest, _ = admin(s, "queues", ("after", page["next"]))
    assert [q["name"] for q in rest["queues"]] == [f"{p}-4"] and rest["more"] is False
    assert [q["name"] for q in ok_json(b, "queues")["queues"]] == [f"{p}-{i}" for i in range(5)]

    # limit asks for fewer; more than admin.max-page-size is lowered to it.
    _, _, two, _ = admin(s, "queues", ("limit", "2"))
    assert [q["name"] for q in two["queues"]] == [f"{p}-0", f"{p}-1"] and two["next"] == f"q/{p}-1"
    _, _, two, _ = admin(s, "queues", ("limit", "2"), ("after", two["next"]))
    assert [q["name"] for q in two["queues"]] == [f"{p}-2", f"{p}-3"] and two["more"] is True
    _, _, capped, _ = admin(s, "queues", ("limit", "1000"))
    assert len(capped["queues"]) == 4 and capped["more"] is True
    # A cursor past the end, or of a queue deleted since: the page starts after where it would be.
    _, _, after_all, _ = admin(s, "queues", ("after", "q/~"))
    assert after_all == {"queues": [], "more": False}
    _, _, between, _ = admin(s, "queues", ("after", f"q/{p}-2x"))
    assert [q["name"] for q in between["queues"]] == [f"{p}-3", f"{p}-4"]
    for bad in [("limit", "0"), ("limit", "x"), ("limit", "-1")]:
        status, message, _, _ = admin(s, "queues", bad)
        assert status == "invalid" and "admin.max-page-size" in message, (bad, message)
    status, message, _, _ = admin(s, "queues", ("after", "q/%zz"))
    assert status == "invalid" and "cursor" in message
    status, message, _, _ = admin(s, "connections", ("after", "seven"))
    assert status == "invalid" and "cursor" in message
    status, message, _, _ = admin(s, "subscriptions", ("after", "x:1"))
    assert status == "invalid" and "cursor" in message
    status, message, _, _ = admin(s, "xa-list", ("after", "nobody"))
    assert status == "invalid" and "cursor" in message
    # A failed admin command is an answer: the connection still serves.
    assert admin(s, "queues")[0] == "ok"


def test_max_page_bytes_ends_a_page_before_the_entry_that_would_pass_it(broker_factory, raw):
    limit = 1024
    b = broker_factory(config=config(admin=f"max-page-bytes = {limit}"))
    p = unique("pb")
    names = [f"{p}-{i:03d}-" + "n" * 60 for i in range(40)]  # names of one length: cursors of one length
    # Non-persistent messages: nothing stored, so oldest_age_ms stays null and an entry reads the
    # same on every page.
    send_to(raw, b, names, headers=[("persistent", "false")])
    s = raw(b)
    s.connect()
    got = pages(s, "queues")
    assert len(got) > 2
    for n, (page, body) in enumerate(got):
        assert len(body) <= limit and page["queues"], (n, len(body))
        if page["more"]:
            # The next page's first entry did not fit: this page plus it would pass the limit.
            following = json.dumps(got[n + 1][0]["queues"][0], separators=(",", ":"), ensure_ascii=False)
            assert len(body) + 1 + len(following) > limit, (n, len(body), len(following))
    assert [q["name"] for page, _ in got for q in page["queues"]] == names
    assert [q["name"] for q in ok_json(b, "queues")["queues"]] == names

    # One entry larger than the limit still comes, alone on its page.
    huge = f"{p}-zz-" + "h" * 2000
    send_to(raw, b, [huge], headers=[("persistent", "false")])
    got = pages(s, "queues")
    assert [page["queues"][0]["name"] for page, body in got if len(body) > limit] == [huge]
    assert [q["name"] for q in ok_json(b, "queues")["queues"]] == names + [huge]


def test_connections_subscriptions_and_xa_branches_are_paged_too(broker_factory, stomp_client, raw):
    b = broker_factory(config=config(admin="max-page-size = 2"))
    q, topic = unique("cq"), unique("tp")
    clients = []
    for i in range(5):
        c = stomp_client(b, headers={"client-id": f"{q}-c{i}"})
        c.subscribe(f"/queue/{q}-{i}", id=f"s{i}-a")
        c.subscribe(f"/queue/{q}-{i}", id=f"s{i}-b:with:colons")
        if i % 2 == 0:
            c.subscribe(f"/topic/{topic}", id=f"s{i}-d", headers={"durable-subscription-name": f"d{i}"})
        clients.append(c)

    conns = ok_json(b, "connections")["connections"]
    mine = [x["client_id"] for x in conns if x["client_id"].startswith(q)]
    assert sorted(mine) == [f"{q}-c{i}" for i in range(5)]
    assert len({x["id"] for x in conns}) == len(conns)
    assert [x["id"] for x in conns] == sorted(x["id"] for x in conns)
    assert sum(f"{q}-c" in line for line in ok_text(b, "connections").splitlines()) == 5

    subs = ok_json(b, "subscriptions")
    assert set(subs) == {"subscriptions", "durable"}
    ids = sorted(x["id"] for x in subs["subscriptions"])
    assert ids == sorted([f"s{i}-a" for i in range(5)] + [f"s{i}-b:with:colons" for i in range(5)] +
                         [f"s{i}-d" for i in (0, 2, 4)])
    assert sorted(x["subscription"] for x in subs["durable"]) == ["d0", "d2", "d4"]
    text = ok_text(b, "subscriptions")
    assert text.count("with:colons") == 5 and all(f" d{i} " in text for i in (0, 2, 4))

    # Raw pages of two: each entry once over the pages, whichever list it is in.
    s = raw(b)
    s.connect()
    got = pages(s, "subscriptions")
    assert all(len(page["subscriptions"]) + len(page["durable"]) <= 2 for page, _ in got)
    assert sorted(x["id"] for page, _ in got for x in page["subscriptions"]) == ids
    assert sorted(x["subscription"] for page, _ in got for x in page["durable"]) == ["d0", "d2", "d4"]

    # Five prepared branches of one transaction manager.
    tm = stomp_client(b)
    xids = []
    for i in range(5):
        x = new_xid()
        assert tm.xa("START", x).result == "XA_OK"
        tm.send(f"/queue/{q}-out", f"m{i}")
        assert tm.xa("END", x, "TMSUCCESS").result == "XA_OK"
        assert tm.xa("PREPARE", x).result == "XA_OK"
        xids.append(x)
    branches = ok_json(b, "xa", "list")["branches"]
    assert sorted(x["xid"] for x in branches) == sorted(xids)
    assert all(x in ok_text(b, "xa", "list") for x in xids)
    got = pages(s, "xa-list")
    assert len(got) == 3 and sorted(x["xid"] for page, _ in got for x in page["branches"]) == sorted(xids)
    for x in xids:
        assert escrow(b, "xa", "rollback", x).returncode == 0
        assert escrow(b, "xa", "forget", x).returncode == 0
    for c in clients:
        c.close()
