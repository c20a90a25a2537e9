"""TLS listeners ([[tls-listener]]) and the client library over TLS, against a real escrowd.

Every certificate and key is made here, in a temporary directory, with the openssl command: a
throwaway CA, a server certificate for 127.0.0.1 and localhost, one for another host, a client
certificate, and a self-signed certificate nobody trusts. Nothing secret is committed.

Real clients: python3-stomp (set_ssl), Python's ssl module for handshakes the tests steer
(versions, no client certificate), and tests/tls/tls_probe, the C++ client library
(<build>/tests/tls/tls_probe; the build directory is ESCROW_BUILD or the one ESCROWD lives in).
"""

import os
import re
import socket
import ssl
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import stomp

from conftest import ESCROWD, SLOW, TIMEOUT, Client, Collector, unique

BUILD = Path(os.environ.get("ESCROW_BUILD") or Path(ESCROWD).resolve().parent.parent)
TLS_PROBE = BUILD / "tests" / "tls" / "tls_probe"


# --------------------------------------------------------------------------------------------
# Certificates
# --------------------------------------------------------------------------------------------

def _openssl(*args, cwd):
    r = subprocess.run(["openssl", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0, f"openssl {' '.join(args)} failed:\n{r.stdout}"


_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """Paths of a CA and certificates it issued, plus an untrusted self-signed one (PEM files)."""
    d = tmp_path_factory.mktemp("tls-certs")
    _openssl("req", "-x509", *_KEY, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=Escrow Test CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    serial = iter(range(1001, 2000))

    def issue(name, subject, extensions):
        (d / f"{name}.ext").write_text("\n".join(extensions) + "\n")
        _openssl("req", "-new", *_KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-set_serial", str(next(serial)), "-days", "2", "-extfile", f"{name}.ext",
                 "-out", f"{name}.pem", cwd=d)

    issue("server", "/CN=localhost",
          ["subjectAltName=IP:127.0.0.1,DNS:localhost", "extendedKeyUsage=serverAuth", "basicConstraints=CA:FALSE"])
    issue("wrong_host", "/CN=wrong.example",
          ["subjectAltName=DNS:wrong.example", "extendedKeyUsage=serverAuth", "basicConstraints=CA:FALSE"])
    issue("client", "/O=Escrow Tests/CN=test-client",
          ["extendedKeyUsage=clientAuth", "basicConstraints=CA:FALSE"])
    _openssl("req", "-x509", *_KEY, "-keyout", "untrusted.key", "-out", "untrusted.pem", "-days", "2",
             "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", cwd=d)
    names = ["ca", "server", "wrong_host", "client", "untrusted"]
    return SimpleNamespace(dir=d, **{n: str(d / f"{n}.pem") for n in names},
                           **{f"{n}_key": str(d / f"{n}.key") for n in names})


def listener(chain, key, **extra):
    """The keys of one [[tls-listener]] on a free loopback port."""
    return dict({"listen": "127.0.0.1:0", "certificate-chain": chain, "private-key": key}, **extra)


def tls_config(*listeners, extra=""):
    lines = [extra]
    for keys in listeners:
        lines.append("[[tls-listener]]")
        lines += [f'{k} = "{v}"' for k, v in keys.items()]
    return "\n".join(lines) + "\n"


def tls_ports(broker):
    """The TLS listeners' ports, in the order of the configuration."""
    ports = [int(p) for p in re.findall(r"listening on 127\.0\.0\.1:(\d+) \(tls\)", broker.log)]
    assert ports, "no TLS listener in the log:\n" + broker.log
    return ports


def wait_log(broker, pattern, what):
    """Waits until the broker's log matches `pattern` (a regex); returns the match."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        m = re.search(pattern, broker.log)
        if m:
            return m
        time.sleep(0.05)
    raise AssertionError(f"the log never showed {what} ({pattern}):\n{broker.log}")


# --------------------------------------------------------------------------------------------
# Clients
# --------------------------------------------------------------------------------------------

def stomp_tls(port, certs, cert=None, key=None):
    """A connected python3-stomp Connection12 over TLS, trusting the test CA; returns (conn, collector)."""
    conn = stomp.Connection12([("127.0.0.1", port)], heartbeats=(0, 0), reconnect_attempts_max=1, timeout=TIMEOUT)
    conn.set_ssl(for_hosts=[("127.0.0.1", port)], ca_certs=certs.ca, cert_file=cert, key_file=key)
    collector = Collector()
    conn.set_listener("collector", collector)
    conn.connect(wait=True)
    return conn, collector


def stomp_round_trip(sender, receiver_conn, receiver, destination, body):
    """SUBSCRIBE on the receiver (with a receipt), SEND from the sender, wait for the MESSAGE."""
    sub = unique("sub")
    receiver_conn.subscribe(destination, sub, ack="auto", headers={"receipt": sub})
    receiver.wait_for(lambda: sub in receiver.receipts, TIMEOUT, "the SUBSCRIBE receipt")
    sender(destination, body)
    receiver.wait_for(lambda: any(m.body == body for m in receiver.messages), TIMEOUT, f"message {body!r}")


def probe(port, *args, expect_ok=True):
    """Runs the C++ client (tls_probe); returns its output line. Checks the exit status."""
    assert TLS_PROBE.exists(), f"{TLS_PROBE} is missing: build it (ninja -C {BUILD})"
    env = dict(os.environ)
    if SLOW > 1:
        env["ESCROW_SANITIZED"] = "1"
    r = subprocess.run([str(TLS_PROBE), "--port", str(port), *args], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=60 * SLOW)
    out = r.stdout.strip()
    if expect_ok:
        assert r.returncode == 0 and out.startswith("ok:"), f"tls_probe {' '.join(args)} failed: {out}"
    else:
        assert r.returncode == 1 and out.startswith("error:"), f"tls_probe {' '.join(args)} should fail: {out}"
    return out


def python_tls(port, certs, maximum=None, cert=None, key=None):
    """A Python ssl socket to the broker (CA and host name checked), handshake done."""
    context = ssl.create_default_context(cafile=certs.ca)
    if maximum:
        context.maximum_version = maximum
    if cert:
        context.load_cert_chain(cert, key)
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    try:
        return context.wrap_socket(sock, server_hostname="localhost")
    except BaseException:
        sock.close()
        raise


def stomp_connect_over(sock):
    """Sends CONNECT on an open (TLS) socket and returns what came back up to the first NUL."""
    sock.sendall(b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\0")
    data = b""
    while b"\0" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------

def test_stomp_py_over_tls_sends_and_receives(broker_factory, certs):
    broker = broker_factory(config=tls_config(listener(certs.server, certs.server_key)))
    [port] = tls_ports(broker)
    conn, collector = stomp_tls(port, certs)
    try:
        # No maximum version on either side: TLS 1.3 is what they agree on.
        assert conn.transport.socket.version() == "TLSv1.3"
        q = "/queue/" + unique("tls")

        def send(destination, body):
            conn.send(destination, body, headers={"receipt": "sent"})
            collector.wait_for(lambda: "sent" in collector.receipts, TIMEOUT, "the SEND receipt")

        stomp_round_trip(send, conn, collector, q, "over TLS")
        assert not collector.errors
    finally:
        conn.disconnect()


def test_plain_and_tls_listeners_side_by_side(broker_factory, certs):
    broker = broker_factory(config=tls_config(listener(certs.server, certs.server_key)))
    [port] = tls_ports(broker)
    assert port != broker.port
    plain = Client(broker)  # the fixture's --listen: the first "listening on" line
    conn, collector = stomp_tls(port, certs)
    try:
        q = "/queue/" + unique("side")
        stomp_round_trip(lambda d, b: plain.send(d, b), conn, collector, q, "plain to TLS")
        to_plain = "/queue/" + unique("side")

        def send_tls(destination, body):
            conn.send(destination, body, headers={"receipt": "tls-sent"})
            collector.wait_for(lambda: "tls-sent" in collector.receipts, TIMEOUT, "the SEND receipt")

        stomp_round_trip(send_tls, plain.conn, plain.listener, to_plain, "TLS to plain")
    finally:
        conn.disconnect()
        plain.conn.disconnect()


def test_cpp_client_over_tls(broker_factory, certs):
    broker = broker_factory(config=tls_config(listener(certs.server, certs.server_key)))
    [port] = tls_ports(broker)
    # By IP address (the certificate lists IP:127.0.0.1), by host name, and a name given apart
    # from the address; large messages cross many TLS records.
    assert probe(port, "--ca", certs.ca) == "ok: 3 messages of 16 bytes"
    probe(port, "--ca", certs.ca, "--host", "localhost")
    probe(port, "--ca", certs.ca, "--server-name", "localhost", "--messages", "2", "--size", "3000000")
    # The plain listener next to it still speaks plain STOMP to the same library.
    probe(broker.port, "--plain")


def test_cpp_client_refuses_an_untrusted_certificate(broker_factory, certs):
    broker = broker_factory(config=tls_config(listener(certs.untrusted, certs.untrusted_key)))
    [port] = tls_ports(broker)
    out = probe(port, "--ca", certs.ca, expect_ok=False)
    assert "error: connection_lost: TLS handshake with 127.0.0.1:" in out, out
    assert "certificate verify failed: self-signed certificate" in out, out
    # The system's CAs do not know it either.
    out = probe(port, expect_ok=False)
    assert "certificate verify failed" in out, out
    # The broker logs the refused handshake with the peer and the reason, and keeps serving.
    wait_log(broker, r"connection \d+ from 127\.0\.0\.1:\d+: TLS handshake failed: .*(unknown ca|bad certificate)",
             "the refused handshake")
    probe(port, "--no-verify")


def test_cpp_client_refuses_a_wrong_host_name(broker_factory, certs):
    broker = broker_factory(config=tls_config(listener(certs.wrong_host, certs.wrong_host_key),
                                              listener(certs.server, certs.server_key)))
    wrong, right = tls_ports(broker)
    out = probe(wrong, "--ca", certs.ca, expect_ok=False)  # 127.0.0.1 is not in its certificate
    assert "host name mismatch: the broker's certificate is not valid for '127.0.0.1'" in out, out
    out = probe(right, "--ca", certs.ca, "--server-name", "wrong.example", expect_ok=False)
    assert "host name mismatch: the broker's certificate is not valid for 'wrong.example'" in out, out
    # The same certificate is fine when the name is the one it was issued for.
    probe(wrong, "--ca", certs.ca, "--server-name", "wrong.example")


# What the C++ client says when the connection ended before it read the broker's alert: the
# refusal then shows only as a closed connection (the alert's reason is in the broker's log).
CLOSED_FIRST = ("shut down", "the broker closed the connection")


def test_mutual_tls_requires_a_client_certificate(broker_factory, certs):
    broker = broker_factory(config=tls_config(listener(certs.server, certs.server_key, **{"client-ca": certs.ca})),
                            args=["--log-level", "debug"])
    [port] = tls_ports(broker)

    # Python without a certificate: the broker refuses it (TLS 1.3 reports it after the client's
    # side of the handshake, so it shows on the first read at the latest).
    with pytest.raises((ssl.SSLError, ConnectionError)):
        with python_tls(port, certs) as sock:
            data = stomp_connect_over(sock)
            assert not data, f"the broker answered a client without a certificate: {data!r}"
            raise ConnectionError("closed without an answer")
    wait_log(broker, r"from 127\.0\.0\.1:\d+: TLS handshake failed: peer did not return a certificate",
             "the refused client")

    # The C++ client without one fails with OpenSSL's reason.
    # (With TLS 1.3 the broker's alert comes after the client's handshake has finished, so whether
    # its text or a plain "shut down" reaches the client first is a race; the refusal is not.)
    out = probe(port, "--ca", certs.ca, expect_ok=False)
    assert "error: connection_lost:" in out, out
    assert any(t in out for t in ("the broker requires a client certificate", *CLOSED_FIRST)), out

    # A certificate from a CA the broker does not trust is refused too.
    out = probe(port, "--ca", certs.ca, "--cert", certs.untrusted, "--key", certs.untrusted_key, expect_ok=False)
    assert "error: connection_lost:" in out, out
    assert any(t in out for t in ("the broker does not accept the client certificate", *CLOSED_FIRST)), out
    wait_log(broker, r"TLS handshake failed: .*certificate verify failed.*\(client certificate: self-signed",
             "the refused client certificate")

    # With the client certificate: C++ client, python3-stomp and Python's ssl all get in.
    probe(port, "--ca", certs.ca, "--cert", certs.client, "--key", certs.client_key)
    wait_log(broker, r"client certificate CN=test-client,O=Escrow Tests", "the client certificate's subject")
    conn, collector = stomp_tls(port, certs, cert=certs.client, key=certs.client_key)
    try:
        def send(destination, body):
            conn.send(destination, body, headers={"receipt": "sent"})
            collector.wait_for(lambda: "sent" in collector.receipts, TIMEOUT, "the SEND receipt")

        stomp_round_trip(send, conn, collector, "/queue/" + unique("mtls"), "mutual")
    finally:
        conn.disconnect()
    with python_tls(port, certs, cert=certs.client, key=certs.client_key) as sock:
        assert stomp_connect_over(sock).startswith(b"CONNECTED\n")


def test_min_version_1_3_refuses_a_tls_1_2_client(broker_factory, certs):
    broker = broker_factory(config=tls_config(listener(certs.server, certs.server_key),
                                              listener(certs.server, certs.server_key, **{"min-version": "1.3"})))
    default, strict = tls_ports(broker)
    # The default (1.2 at the least) takes a TLS 1.2 client, with its default ciphers.
    with python_tls(default, certs, maximum=ssl.TLSVersion.TLSv1_2) as sock:
        assert sock.version() == "TLSv1.2"
        assert stomp_connect_over(sock).startswith(b"CONNECTED\n")
    with pytest.raises(ssl.SSLError, match="(?i)protocol version|unsupported protocol"):
        python_tls(strict, certs, maximum=ssl.TLSVersion.TLSv1_2).close()
    wait_log(broker, r"from 127\.0\.0\.1:\d+: TLS handshake failed: unsupported protocol", "the refused TLS 1.2 client")
    probe(strict, "--ca", certs.ca)  # the C++ client speaks TLS 1.3


def test_handshake_timeout_and_garbage_close_only_that_connection(broker_factory, certs, raw):
    # Short, yet long enough for python3-stomp's handshake and CONNECT on a loaded machine.
    limit = int(1500 * SLOW)
    broker = broker_factory(config=tls_config(listener(certs.server, certs.server_key),
                                              extra=f"[limits]\nconnect-timeout-ms = {limit}\n"))
    [port] = tls_ports(broker)
    conn, collector = stomp_tls(port, certs)
    try:
        # Silence: closed once connect-timeout-ms has passed.
        silent = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        started = time.monotonic()
        assert silent.recv(100) == b""
        assert time.monotonic() - started < 10 * SLOW
        silent.close()
        wait_log(broker, rf"from 127\.0\.0\.1:\d+: TLS handshake not finished within {limit} ms", "the handshake timeout")

        # Plain STOMP on the TLS port: refused by the handshake, nothing answered in clear text.
        plain = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        plain.sendall(b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\0")
        answer = b""
        while chunk := plain.recv(4096):
            answer += chunk
        plain.close()
        assert b"CONNECTED" not in answer
        wait_log(broker, r"from 127\.0\.0\.1:\d+: TLS handshake failed: ", "the plain client on the TLS port")

        # A TLS client on the plain port: closed with a line in the log that says what happened.
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            python_tls(broker.port, certs).close()
        wait_log(broker, r"a TLS handshake on a plain listener", "the TLS client on the plain port")

        # The connection that did things right is still there.
        def send(destination, body):
            conn.send(destination, body, headers={"receipt": "after"})
            collector.wait_for(lambda: "after" in collector.receipts, TIMEOUT, "the SEND receipt")

        stomp_round_trip(send, conn, collector, "/queue/" + unique("survivor"), "still here")
    finally:
        conn.disconnect()


def _run_escrowd(tmp_path, config):
    path = tmp_path / "escrowd.toml"
    path.write_text(config)
    r = subprocess.run([ESCROWD, "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data"), "--config", str(path)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30 * SLOW)
    return r.returncode, r.stdout, str(path)


@pytest.mark.parametrize("case", ["missing key", "key of another certificate", "missing chain", "bad ciphers",
                                  "missing client ca"])
def test_unloadable_tls_file_exits_2_naming_file_line_key(tmp_path, certs, case):
    keys = listener(certs.server, certs.server_key)
    missing = str(tmp_path / "nowhere" / "server.key")
    key, expected = {
        "missing key": ("private-key", [missing, "No such file or directory"]),
        "key of another certificate": ("private-key", ["is not the key of the certificate", "key values mismatch"]),
        "missing chain": ("certificate-chain", [missing, "No such file or directory"]),
        "bad ciphers": ("ciphers", ["names no TLS 1.2 cipher", "no cipher match"]),
        "missing client ca": ("client-ca", [missing, "No such file or directory"]),
    }[case]
    keys[key] = {"missing key": missing, "key of another certificate": certs.client_key, "missing chain": missing,
                 "bad ciphers": "NOT-A-CIPHER", "missing client ca": missing}[case]
    config = tls_config(keys)
    line = next(i for i, text in enumerate(config.splitlines(), 1) if text.startswith(key + " "))
    status, out, path = _run_escrowd(tmp_path, config)
    assert status == 2, f"exit {status}:\n{out}"
    assert f"{path}:{line}: tls-listener[1].{key}" in out, out
    for text in expected:
        assert text in out, out
    assert "escrowd ready" not in out


@pytest.mark.parametrize("body, expected", [
    ('listen = "127.0.0.1:0"\ncertificate-chain = "a.pem"\nprivate-key = "a.key"\nmin-version = "1.1"\n',
     ':6: tls-listener[1].min-version must be "1.2" or "1.3"'),
    ('listen = "127.0.0.1:0"\ncertificate-chain = "a.pem"\n', ":2: tls-listener[1] has no private-key key"),
    ('listen = "nowhere"\ncertificate-chain = "a.pem"\nprivate-key = "a.key"\n',
     ':3: tls-listener[1].listen must be a "HOST:PORT" string'),
    ('listen = "127.0.0.1:0"\ncertificate-chain = "a.pem"\nprivate-key = "a.key"\ncipher = "x"\n',
     ":6: tls-listener[1].cipher: unknown key"),
])
def test_bad_tls_listener_table_exits_2(tmp_path, body, expected):
    status, out, path = _run_escrowd(tmp_path, "# TLS\n[[tls-listener]]\n" + body)
    assert status == 2, f"exit {status}:\n{out}"
    assert path + expected in out, out
