"""escrow_xa_oldest_prepared_age_seconds (docs/operations.md, "What to alert on"): the age of the
oldest prepared branch in /metrics (read with the Prometheus parser) and in /status, for a branch
prepared through the XA frames: 0 with none, growing while it stays prepared, kept across a
restart (the start time is in the prepared record), back to 0 once the branch is committed."""

import json
import re
import time

from conftest import TIMEOUT, new_xid, unique
from test_http import get, http_config, http_port, scrape

AGE = ("escrow_xa_oldest_prepared_age_seconds", frozenset())


def age_in_status(port):
    status, _, body = get(port, "/status")
    assert status == 200, body
    return json.loads(body)["xa_oldest_prepared_age_seconds"]


def branch_age_ms(client, x):
    """The age of branch x as the broker reports it (the ADMIN xa-list answer's age_ms)."""
    rid = client.new_receipt()
    client.conn.send_frame("ADMIN", {"admin-command": "xa-list", "receipt": rid})
    client.wait_receipt(rid)
    with client.listener.cond:
        f = client.listener.receipt_frames[rid]
    assert f.headers.get("admin-status") == "ok", dict(f.headers)
    (b,) = [b for b in json.loads(f.body)["branches"] if b["xid"] == x]
    return b["age_ms"]


def poll(read, holds, what):
    """Calls read() until holds(value); returns that value (fails after TIMEOUT)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        value = read()
        if holds(value):
            return value
        assert time.monotonic() < deadline, f"{what}: still {value}"
        time.sleep(0.05)


def test_oldest_prepared_age(broker_factory, stomp_client):
    b = broker_factory(config=http_config(unique("age")))
    port = http_port(b)
    assert scrape(port)[AGE] == 0
    assert age_in_status(port) == 0

    c = stomp_client(b)
    started = time.monotonic()
    x = new_xid()
    assert c.xa("START", x).result == "XA_OK"
    c.send(f"/queue/{unique('age')}", "m")
    assert c.xa("END", x, "TMSUCCESS").result == "XA_OK"
    # Active and idle branches are not in doubt: still 0.
    assert scrape(port)[AGE] == 0
    # The idle branch is prepared once the broker says it is 1.2 s old (xa-list), not before.
    poll(lambda: branch_age_ms(c, x), lambda age: age >= 1200, "the idle branch's age_ms")
    assert c.xa("PREPARE", x).result == "XA_OK"
    first = scrape(port)[AGE]
    # Measured from XA-START, so at least the 1.2 s it was idle, and no more than the test ran.
    assert 1.2 <= first <= time.monotonic() - started + 0.1, first
    # It grows while the branch stays prepared: 0.4 s more, and still no more than the test ran.
    second = poll(lambda: scrape(port)[AGE], lambda age: age >= first + 0.4, f"{AGE[0]} after {first}")
    assert second <= time.monotonic() - started + 0.1, (first, second)
    assert second - 0.1 <= age_in_status(port) <= time.monotonic() - started + 0.1, second

    # Other branches prepared later do not lower it: it is the oldest.
    y = new_xid()
    assert c.xa("START", y).result == "XA_OK"
    c.send(f"/queue/{unique('age')}", "n")
    assert c.xa("END", y, "TMSUCCESS").result == "XA_OK"
    assert c.xa("PREPARE", y).result == "XA_OK"
    assert scrape(port)[AGE] >= second
    c.close()

    b.restart()
    port = http_port_of_last_run(b)
    after = scrape(port)[AGE]
    assert after >= second, (second, after)

    d = stomp_client(b)
    assert d.xa("COMMIT", x).result == "XA_OK"
    assert d.xa("ROLLBACK", y).result == "XA_OK"
    assert scrape(port)[AGE] == 0
    assert age_in_status(port) == 0


def http_port_of_last_run(broker):
    """The HTTP port of the latest run (http_port reads the first one in the log)."""
    marker = f"----- escrowd run {broker.runs} -----"
    log = broker.log
    tail = log[log.rfind(marker):]
    m = re.search(r"http listening on 127\.0\.0\.1:(\d+)", tail)
    assert m, log
    return int(m.group(1))
