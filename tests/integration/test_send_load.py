"""Every frame a live connection sent is processed (issue 22, part 5): fire-and-forget SENDs (no
receipts) from several producers at once, while consumers take the messages, with escrowd on one
I/O thread and on several. Each producer writes its SENDs as fast as its socket takes them, then
one SEND with a receipt: once that RECEIPT is back, every SEND before it on that connection has
been handled. Then escrowd's own count (`enqueued` in /status) and what the consumers received
must both be every message, each exactly once.

A reported loss of this kind (about half of such runs short by thousands, `enqueued` short by the
same number) was the load generator's: a producer that emptied its buffer just as it turned off
its wake-up for a writable socket, and so never wrote again (the broker had read everything the
client wrote; the client had stopped writing). This test writes without an event loop, so its
producers cannot stall that way, and counts on both sides.
"""
import json
import threading
import urllib.request

import pytest

from conftest import SLOW, TIMEOUT, Client, RawStomp, frame_bytes, unique

PRODUCERS = 4
CONSUMERS = 4
PER_PRODUCER = 5000
BODY = 512


def producer(port, q, p, persistent, errors):
    """Connects, writes PER_PRODUCER SENDs without receipts in one go, then one with a receipt."""
    s = RawStomp(port, timeout=TIMEOUT * SLOW)
    try:
        s.connect()
        pad = "x" * (BODY - 20)
        headers = [("destination", q), ("persistent", "true" if persistent else "false")]
        frames = b"".join(frame_bytes("SEND", headers + [("x-seq", f"{p}-{i}")], f"{p}-{i:08d}-{pad}")
                          for i in range(PER_PRODUCER))
        if not s.send(frames):
            errors.append(f"producer {p}: the connection closed while it wrote")
            return
        s.send(frame_bytes("SEND", headers + [("x-seq", f"{p}-last"), ("receipt", f"last-{p}")], f"{p}-last"))
        f = s.read_frame(timeout=TIMEOUT * SLOW * 4)
        if f.command != "RECEIPT" or f.headers.get("receipt-id") != f"last-{p}":
            errors.append(f"producer {p}: expected its RECEIPT, got {f.command} {dict(f.headers)}")
    except Exception as e:  # noqa: BLE001 - reported by the test
        errors.append(f"producer {p}: {e!r}")
    finally:
        s.close()


def status(broker):
    port = int(broker.log.split("http listening on 127.0.0.1:")[-1].split()[0])
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=TIMEOUT) as r:
        return json.loads(r.read())


@pytest.mark.parametrize("io_threads", [1, 3], ids=["one I/O thread", "three I/O threads"])
@pytest.mark.parametrize("persistent", [False, True], ids=["non-persistent", "persistent"])
def test_every_fire_and_forget_send_is_enqueued_and_delivered_once(broker_factory, persistent, io_threads):
    b = broker_factory(config=f'io-threads = {io_threads}\n[http]\nlisten = "127.0.0.1:0"\n')
    q = f"/queue/{unique('load')}"
    total = PRODUCERS * (PER_PRODUCER + 1)
    consumers = [Client(b) for _ in range(CONSUMERS)]
    try:
        for c in consumers:
            c.subscribe(q, ack="auto", headers={"prefetch-count": "1000"})
        errors = []
        threads = [threading.Thread(target=producer, args=(b.port, q, p, persistent, errors))
                   for p in range(PRODUCERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT * SLOW * 8)
        assert not errors, errors
        assert not any(t.is_alive() for t in threads), "a producer did not finish"
        enqueued = status(b)["totals"]["enqueued"]
        assert enqueued == total, f"escrowd enqueued {enqueued} of the {total} SENDs it was sent"

        def received():
            return sum(len(c.listener.messages) for c in consumers)
        consumers[0].listener.wait_for(lambda: received() >= total, TIMEOUT * SLOW * 8,
                                       f"{total} messages at the consumers")
        seqs = [m.headers.get("x-seq") for c in consumers for m in c.listener.messages]
        assert len(seqs) == total and len(set(seqs)) == total, \
            f"{len(seqs)} deliveries of {len(set(seqs))} distinct messages, expected {total} once each"
    finally:
        for c in consumers:
            c.close()
