"""SIGHUP: escrowd re-reads its configuration file and applies what can change at run time
(address settings, the reaper's period, persist-delivery-count-before-delivery, the log level)
without a restart; a file that no longer loads changes nothing; keys that need a restart are named
in the log."""

import signal
import time

from conftest import TIMEOUT, unique


def wait_log(broker, text, since=0):
    deadline = time.monotonic() + TIMEOUT
    while text not in broker.log[since:]:
        assert time.monotonic() < deadline, f"no {text!r} in the log:\n{broker.log}"
        time.sleep(0.05)


def hangup(broker, config_text):
    mark = len(broker.log)
    broker.config_path.write_text(config_text)
    broker.proc.send_signal(signal.SIGHUP)
    return mark


BASE = """
[[address-settings]]
match = "#"
dead-letter-address = "DLQ"
expiry-address = "ExpiryQueue"
"""


def test_sighup_changes_an_address_setting_without_a_restart(broker_factory, stomp_client):
    b = broker_factory(config=BASE + '\n[[address-settings]]\nmatch = "retry"\nmax-delivery-attempts = 5\n')
    pid = b.proc.pid
    c = stomp_client(b)
    sub = c.subscribe("/queue/retry", ack="client-individual")
    c.send("/queue/retry", "first")
    m = c.wait_messages(1, subscription=sub)[0]
    c.nack(m, receipt=True)
    again = c.wait_messages(2, subscription=sub)[1]  # 1 of 5 attempts: redelivered
    assert again.headers["redelivered"] == "true"

    mark = hangup(b, BASE + '\n[[address-settings]]\nmatch = "retry"\nmax-delivery-attempts = 2\n'
                             'dead-letter-address = "retry.DLQ"\n')
    wait_log(b, "SIGHUP: reloaded", mark)
    c.nack(again, receipt=True)  # the 2nd unsuccessful delivery: now a dead letter
    d = stomp_client(b)
    dsub = d.subscribe("/queue/retry.DLQ", ack="client-individual")
    dead = d.wait_messages(1, subscription=dsub)[0]
    assert dead.body == "first" and dead.headers["_HQ_ORIG_DELIVERY_COUNT"] == "2"
    assert b.proc.pid == pid and b.running()
    c.close()
    d.close()


def test_a_bad_file_on_sighup_keeps_the_running_settings(broker_factory, stomp_client):
    b = broker_factory(config=BASE + '\n[[address-settings]]\nmatch = "keep"\nmax-delivery-attempts = 1\n')
    mark = hangup(b, BASE + '\n[[address-settings]]\nmatch = "keep"\nmax-delivery-attempts = "one"\n')
    wait_log(b, "SIGHUP: configuration not reloaded", mark)
    assert "max-delivery-attempts" in b.log[mark:]
    c = stomp_client(b)
    sub = c.subscribe("/queue/keep", ack="client-individual")
    c.send("/queue/keep", "x")
    c.nack(c.wait_messages(1, subscription=sub)[0], receipt=True)
    d = stomp_client(b)
    dsub = d.subscribe("/queue/DLQ", ack="client-individual")
    assert d.wait_messages(1, subscription=dsub)[0].body == "x"  # still 1 attempt
    c.close()
    d.close()


def test_sighup_names_what_needs_a_restart_and_applies_the_log_level(broker_factory):
    b = broker_factory(config=BASE)
    mark = hangup(b, 'log-level = "debug"\n[limits]\nmax-frame-size = 4096\n' + BASE)
    wait_log(b, "SIGHUP: reloaded", mark)
    text = b.log[mark:]
    assert "log-level debug (was info)" in text
    assert "taking effect only at a restart: limits.max-frame-size" in text


def test_sighup_reschedules_the_reaper(broker_factory, stomp_client):
    b = broker_factory(config="[delivery]\nmessage-expiry-scan-period = -1\n" + BASE)
    c = stomp_client(b)
    q = unique("reap")
    expires = int(time.time() * 1000) + 100
    c.send(f"/queue/{q}", "old", headers={"expires": str(expires)})
    # The message is past its expiry before the reload (the broker's clock is the wall clock) ...
    while time.time() * 1000 <= expires + 1:
        time.sleep(0.01)
    assert "expiry reaper" not in b.log
    mark = hangup(b, "[delivery]\nmessage-expiry-scan-period = 100\n" + BASE)
    wait_log(b, "SIGHUP: reloaded", mark)
    wait_log(b, "expiry reaper: 1 messages expired", mark)
    # ... and yet the reaper, off, left it alone until then: its first line comes after the reload's
    # (escrowd writes its log in order; a line it wrote before the SIGHUP may be read after the mark).
    log = b.log
    assert log.index("expiry reaper") > log.index("SIGHUP: reloaded"), log
    c.close()
