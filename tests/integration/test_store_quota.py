"""One tenant cannot take the store or the broker's reading from the others (issue 23, N8;
docs/security.md, "Tenants" and "Limits"). With the users of test_tenants.py (alice sends on
orders.#, bob on billing.#):

- limits.max-stored-bytes-per-user: bob's persistent messages stored in queues count against his
  quota; at it his next SEND gets an ERROR naming him, the bytes and the key, and nothing stored
  changes, while alice's persistent SEND still gets its RECEIPT. Counted again after a SIGKILL,
  freed by acknowledgements.
- limits.max-unstored-bytes: a flood of bob's pipelined SENDs makes the broker stop reading from
  bob's connection, not from alice's, whose RECEIPTs keep arriving (the latency figures are in
  docs/performance.md, "Tenants", from scripts/bench).

Before this, bob filled storage.max-size and alice's SENDs were refused, and his flood paused the
reading of every connection."""

import re
import socket
import threading
import time

import pytest

from conftest import TIMEOUT, SLOW, Client, check_store, frame_bytes, unique
from test_tenants import PASSWORDS, SETTINGS, login

QUOTA_ERROR = re.compile(r"message not stored: user 'bob' has (\d+) bytes of persistent messages stored, being "
                         r"stored or in open transactions, and this one of (\d+) bytes would take them above "
                         r"limits\.max-stored-bytes-per-user \((\d+)\); consume some of them first")


@pytest.fixture(scope="module")
def users_file():
    from test_security import hash_password
    roles = {"alice": "orders-app", "bob": "billing-app", "ops": "operator"}
    return "\n".join(f'[[user]]\nname = "{n}"\npassword = "{hash_password(p)}"\nroles = ["{roles[n]}"]\n'
                     for n, p in PASSWORDS.items())


def start(broker_factory, users_file, limits, args=(), env=None, extra=""):
    b = broker_factory(config=SETTINGS + "\n[limits]\n" + limits + extra, start=False, args=args, env=env)
    (b.workdir / "users.toml").write_text(users_file)
    b.start()
    return b


def set_quota(broker, quota):
    text = broker.config_path.read_text()
    broker.config_path.write_text(re.sub(r"max-stored-bytes-per-user = \d+", f"max-stored-bytes-per-user = {quota}",
                                         text))


def send_until_refused(broker, queue, body, most=1000):
    """Bob's persistent SENDs with receipts, one at a time, until one is refused: (how many were
    stored, the refusal's numbers (held, this one, quota), the ERROR frame)."""
    bob = login(broker, "bob")
    for n in range(most):
        rid = bob.send(queue, body, wait=False)
        bob.listener.wait_for(lambda: rid in bob.listener.receipts or bob.listener.errors, TIMEOUT, "an answer")
        if bob.listener.errors:
            e = bob.listener.errors[0]
            m = QUOTA_ERROR.fullmatch(e.headers["message"])
            assert m, e.headers
            assert e.headers.get("receipt-id") == rid  # the refused frame's own answer
            bob.close()
            return n, tuple(int(x) for x in m.groups()), e
    raise AssertionError(f"bob stored {most} messages without a refusal")


def consume(broker, user, queue, count, ack_each=True):
    """`count` messages of `queue` for `user`, acknowledged one by one with a receipt when
    ack_each (so that each removal is stored); returns the client (still subscribed)."""
    c = login(broker, user)
    c.subscribe(queue, id="s", ack="client-individual")
    c.wait_messages(count)
    if ack_each:
        for m in list(c.messages)[:count]:
            c.ack(m, receipt=True)
    return c


def test_bob_at_his_store_quota_is_refused_precisely_and_alice_still_stores(broker_factory, users_file):
    b = start(broker_factory, users_file, "max-stored-bytes-per-user = 10000\n")
    bobs, alices = f"/queue/billing.{unique()}", f"/queue/orders.{unique()}"
    stored, (held, size, quota), _ = send_until_refused(b, bobs, "b" * 1000)
    # At its edge: the last one allowed fitted, the next did not.
    assert quota == 10000 and stored >= 1
    assert held == stored * size <= quota < held + size, (stored, held, size)
    # Alice, another tenant, is not refused: her persistent SEND gets its RECEIPT.
    alice = login(b, "alice")
    alice.send(alices, "alice's order")
    # Nothing of the refused SEND was stored: bob's queue holds exactly what he was told was stored.
    consume(b, "bob", bobs, stored, ack_each=False).wait_messages(stored)
    check_store(b.data_dir)


def test_the_quota_is_counted_again_after_a_sigkill_and_acks_free_it(broker_factory, users_file):
    b = start(broker_factory, users_file, "max-stored-bytes-per-user = 10000\n")
    bobs = f"/queue/billing.{unique()}"
    stored, (held, size, _), _ = send_until_refused(b, bobs, "b" * 1000)
    # The quota exactly one more message above what bob holds: after the SIGKILL the count at open
    # must find all of his messages again, or the second SEND would be stored too.
    b.kill9()  # and escrow check on the store it left
    set_quota(b, held + size)
    b.start()
    b.wait_log("counted ")  # the stored bytes by sender, counted in the background at open
    b.wait_log(" bytes of stored messages of ")
    bob = login(b, "bob")
    bob.send(bobs, "b" * 1000)  # exactly at the quota: allowed
    again, (held2, size2, quota2), _ = send_until_refused(b, bobs, "b" * 1000)
    assert again == 0 and held2 == held + size == quota2 and size2 == size
    # An acknowledged message no longer counts: one acknowledged, one more fits, the next does not.
    c = consume(b, "bob", bobs, 1)
    bob = login(b, "bob")
    bob.send(bobs, "b" * 1000)
    again, (held3, _, _), _ = send_until_refused(b, bobs, "b" * 1000)
    assert again == 0 and held3 == held + size
    c.close()
    # All of them acknowledged: the whole quota is free again.
    c = consume(b, "bob", bobs, stored + 1)
    fits, (held4, _, _), _ = send_until_refused(b, bobs, "b" * 1000)
    assert held4 == fits * size and fits == stored + 1
    c.close()
    b.kill9()


def test_an_open_transaction_counts_against_the_quota(broker_factory, users_file):
    b = start(broker_factory, users_file, "max-stored-bytes-per-user = 10000\n")
    bobs = f"/queue/billing.{unique()}"
    bob = login(b, "bob")
    bob.begin("t")
    for _ in range(20):
        bob.conn.send(bobs, "b" * 1000, headers={"transaction": "t"})
        if bob.listener.errors:
            break
    rid = bob.new_receipt()
    bob.conn.send(bobs, "b" * 1000, headers={"transaction": "t", "receipt": rid})
    bob.listener.wait_for(lambda: bob.listener.errors or rid in bob.listener.receipts, TIMEOUT, "an answer")
    assert bob.listener.errors and QUOTA_ERROR.fullmatch(bob.listener.errors[0].headers["message"]), \
        [dict(e.headers) for e in bob.listener.errors]
    # The connection closed, its transaction rolled back: nothing of it was stored or counts.
    stored, (held, size, _), _ = send_until_refused(b, bobs, "b" * 1000)
    assert held == stored * size and stored >= 1


def test_by_default_a_user_may_store_half_of_storage_max_size(broker_factory, users_file):
    # The attack: bob fills storage.max-size with 64 KiB messages, then alice's SEND is refused.
    max_size = 8 << 20
    b = start(broker_factory, users_file, "", extra=f"\n[storage]\nmax-size = {max_size}\n")
    bobs, alices = f"/queue/billing.{unique()}", f"/queue/orders.{unique()}"
    stored, (held, size, quota), _ = send_until_refused(b, bobs, "b" * 65536, most=200)
    assert quota == max_size // 2 and held <= quota < held + size
    alice = login(b, "alice")
    for n in range(10):
        alice.send(alices, f"alice's order {n}")
    b.wait_log(f"limits.max-stored-bytes-per-user: {max_size // 2} bytes (half of storage.max-size")
    b.kill9()


# --------------------------------------------------------------------------------------------
# Back-pressure by share (limits.max-unstored-bytes)
# --------------------------------------------------------------------------------------------

def session_id(client_or_frame):
    headers = client_or_frame.listener.connected.headers
    return int(headers["session"].removeprefix("escrow-"))


class Flood:
    """Bob's pipelined persistent 64 KiB SENDs without receipts, on a raw socket of its own, until
    stop(); the socket blocks while the broker does not read from it."""

    def __init__(self, broker, queue):
        self.sock = socket.create_connection(broker.address, timeout=60 * SLOW)
        self.sock.sendall(frame_bytes("CONNECT", [("accept-version", "1.2"), ("host", "x"), ("login", "bob"),
                                                  ("passcode", PASSWORDS["bob"])]))
        connected = b""
        while b"\0" not in connected:
            chunk = self.sock.recv(4096)
            assert chunk, "bob's CONNECT was refused"
            connected += chunk
        assert connected.startswith(b"CONNECTED"), connected
        self.id = int(re.search(rb"session:escrow-(\d+)", connected).group(1))
        self.frames = frame_bytes("SEND", [("destination", queue), ("persistent", "true")], b"f" * 65536) * 8
        self.stopping = False
        self.failure = None
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            while not self.stopping:
                self.sock.sendall(self.frames)
                self.sent += 8
        except OSError as e:
            if not self.stopping:
                self.failure = e

    def stop(self):
        self.stopping = True
        self.sock.shutdown(socket.SHUT_RDWR)
        self.thread.join(TIMEOUT)
        self.sock.close()


def paused_connections(broker):
    return {int(m) for m in re.findall(r"connection (\d+) \([^)]*\): reading paused", broker.log)}


def test_a_flood_pauses_reading_from_the_flooding_connection_only(broker_factory, users_file):
    # A slow disk (every group's sync takes a second) keeps bob's unstored bytes above the limit
    # for as long as he floods; alice sends one message at a time and waits for each receipt.
    b = start(broker_factory, users_file, "max-unstored-bytes = 1048576\n",
              args=["--log-level", "debug"], env={"ESCROW_FAULTS": "sync:2+:stall"})
    alice = login(b, "alice")
    alice.send(f"/queue/orders.{unique()}", "first")  # the first sync, before the stalls
    flood = Flood(b, f"/queue/billing.{unique()}")
    deadline = time.monotonic() + TIMEOUT
    while flood.id not in paused_connections(b):  # the log line of bob's first pause
        assert time.monotonic() < deadline and flood.failure is None, f"bob was never paused:\n{b.log}"
        time.sleep(0.02)
    # While bob's connection is held back, alice's persistent SENDs are read and answered.
    queue = f"/queue/orders.{unique()}"
    for n in range(3):
        alice.send(queue, f"order {n}")
    assert flood.failure is None and flood.thread.is_alive()
    assert session_id(alice) not in paused_connections(b), \
        f"alice's connection {session_id(alice)} was paused:\n{b.log}"
    flood.stop()
    alice.close()
    b.terminate()
    check_store(b.data_dir)
