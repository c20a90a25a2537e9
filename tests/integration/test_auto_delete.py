"""Auto-delete of empty, unused queues (docs/configuration.md, "auto-delete-queues"): a queue that a
SEND or SUBSCRIBE created goes once it has been empty, without consumers and with nothing in flight
for auto-delete-queues-delay, so that names used once do not keep records and memory for good.
A queue with messages, a consumer, or one named as a dead letter address stays."""

import json
import os
import subprocess

from conftest import ROOT, SLOW, TIMEOUT, check_store, drain, unique

ESCROW = os.environ.get("ESCROW_CLI", str(ROOT / "build" / "cli" / "escrow"))

CONFIG = """
[[address-settings]]
match = "#"
dead-letter-address = "/queue/DLQ"
auto-delete-queues-delay = 200

[[address-settings]]
match = "kept.#"
auto-delete-queues = false
"""


def queue_names(broker):
    r = subprocess.run([ESCROW, "--url", f"stomp://127.0.0.1:{broker.port}", "--json", "queues"],
                       capture_output=True, text=True, timeout=TIMEOUT, env={**os.environ, "HOME": "/nonexistent"})
    assert r.returncode == 0, r.stdout + r.stderr
    return {q["name"] for q in json.loads(r.stdout)["queues"]}


def test_an_empty_unused_queue_goes_and_the_others_stay(broker_factory, stomp_client):
    b = broker_factory(config=CONFIG)
    gone, full, consumed, kept = (unique(p) for p in ("gone", "full", "consumed", "kept.q"))
    p = stomp_client(b)
    for q in (gone, full, kept):
        p.send(f"/queue/{q}", "m")
    p.send(f"/queue/{consumed}", "m")
    c = stomp_client(b)
    c.subscribe(f"/queue/{consumed}")  # stays subscribed: a queue with a consumer stays
    c.wait_messages(1)
    r = stomp_client(b)
    left, _ = drain(r, f"/queue/{gone}", p)  # empty again, and its consumer leaves
    assert [m.body for m in left] == ["m"]
    r.close()
    b.wait_log(f"queue {gone} deleted: empty and unused", timeout=10 * SLOW)
    names = queue_names(b)
    assert gone not in names
    assert {full, consumed, kept, "DLQ"} <= names, names
    # A later SEND creates it again, as new.
    p.send(f"/queue/{gone}", "again")
    assert gone in queue_names(b)

    b.kill9()
    check_store(b.data_dir)
    b.start()
    names = queue_names(b)
    assert {gone, full, consumed, kept, "DLQ"} <= names, names
    again, _ = drain(stomp_client(b), f"/queue/{gone}", stomp_client(b))
    assert [m.body for m in again] == ["again"]


def test_a_deleted_queue_stays_deleted_across_a_restart(broker_factory, stomp_client):
    b = broker_factory(config=CONFIG)
    q = unique("once")
    p = stomp_client(b)
    p.send(f"/queue/{q}", "m")
    r = stomp_client(b)
    drain(r, f"/queue/{q}", p)
    r.close()
    b.wait_log(f"queue {q} deleted: empty and unused", timeout=10 * SLOW)
    assert q not in queue_names(b)  # logged once its removal is stored
    b.kill9()
    check_store(b.data_dir)
    b.start()
    assert q not in queue_names(b)
