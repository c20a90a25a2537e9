"""Who may use the HTTP endpoint (docs/security.md, "The HTTP endpoint"), against a real escrowd
over TCP with http.client, which sends whatever Host header the test gives: the Host check (the
defence against DNS rebinding: localhost, loopback addresses and the listen host by default,
[http] allowed-hosts for more, 421 for anything else), the bearer token of [http] token-file (401
without it, /health open), both applied again by SIGHUP, and the start-up errors of both keys."""

import http.client
import json
import re
import signal
import time

import pytest

from conftest import TIMEOUT
from test_admin import escrow
from test_config import run_escrowd
from test_http import http_port

TOKEN = "3f9c1e7a5b2d4c6e8f0a1b3c5d7e9f11"
OTHER_TOKEN = "a7b9c1d3e5f70819a2b4c6d8e0f21436"


def request(port, path="/metrics", host=None, headers=(), method="GET"):
    """(status, headers, body) of one request whose headers are exactly `headers` plus Host: `host`
    (None: no Host header at all)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        if host is not None:
            conn.putheader("Host", host)
        for name, value in headers:
            conn.putheader(name, value)
        conn.endheaders()
        r = conn.getresponse()
        return r.status, r.headers, r.read().decode()
    finally:
        conn.close()


def status_of(port, path="/metrics", host=None, headers=()):
    return request(port, path, host if host is not None else f"127.0.0.1:{port}", headers)[0]


def bearer(token):
    return [("Authorization", f"Bearer {token}")]


def http_broker(broker_factory, extra="", tmp_path=None, token=None):
    config = '[http]\nlisten = "127.0.0.1:0"\n' + extra
    if token is not None:
        path = tmp_path / "http-token"
        path.write_text(token + "\n")
        path.chmod(0o600)
        config += f'token-file = "{path}"\n'
    b = broker_factory(config=config)
    return b, http_port(b)


def hangup(broker):
    """SIGHUP, then waits for the reload's last line; the new HTTP access applies before it."""
    mark = len(broker.log)
    broker.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + TIMEOUT
    while "SIGHUP: reloaded" not in broker.log[mark:] and "SIGHUP: configuration not reloaded" not in broker.log[mark:]:
        assert time.monotonic() < deadline, "no end of the reload in the log:\n" + broker.log
        time.sleep(0.02)
    return broker.log[mark:]


def test_loopback_names_are_served_and_other_hosts_get_421(broker_factory):
    b, port = http_broker(broker_factory)
    for host in (f"127.0.0.1:{port}", "127.0.0.1", f"localhost:{port}", "localhost", f"LocalHost:{port}",
                 f"127.0.0.2:{port}", f"[::1]:{port}", "[::1]"):
        for path in ("/metrics", "/status", "/health"):
            status, _, body = request(port, path, host)
            assert status == 200, (host, path, status, body)

    other_port = port + 1 if port < 65535 else port - 1
    for host in (f"evil.example:{port}", "evil.example", f"localhost:{other_port}", f"127.0.0.1:{other_port}",
                 f"127.0.0.1.evil.example:{port}", f"localhost.evil.example:{port}", "localhost.",
                 f"user@localhost:{port}", f"0.0.0.0:{port}"):
        for path in ("/metrics", "/status", "/health", "/nope"):
            status, headers, body = request(port, path, host)
            assert status == 421, (host, path, status, body)
            assert headers["Content-Type"].startswith("text/plain")
            assert f"Host '{host}' is not a name of this endpoint" in body and "allowed-hosts" in body, body
            assert "escrow_" not in body and "{" not in body  # nothing of the metrics or the status
    # The Host check comes before anything else: a POST from a rebound page gets 421, not 405.
    status, _, _ = request(port, "/metrics", f"evil.example:{port}", method="POST")
    assert status == 421
    # No Host header, or two: 400.
    status, _, body = request(port, "/metrics", None)
    assert status == 400 and "Host" in body
    status, _, _ = request(port, "/metrics", f"127.0.0.1:{port}", headers=[("Host", f"evil.example:{port}")])
    assert status == 400
    # The log says so at warn level once a minute, not once per request (about 40 of them here).
    b.wait_log("http: refused a request from 127.0.0.1:")
    assert 1 <= len(re.findall(r"warning http: refused a request", b.log)) < 10, b.log


def test_allowed_hosts_add_names_with_any_port_or_the_one_given(broker_factory):
    _, port = http_broker(broker_factory, 'allowed-hosts = ["metrics.example.com", "proxy.example:9090", "10.1.2.3"]\n')
    for host in ("metrics.example.com", f"metrics.example.com:{port}", "METRICS.example.com:443",
                 "proxy.example:9090", "10.1.2.3:8161", f"localhost:{port}"):
        assert status_of(port, host=host) == 200, host
    for host in ("proxy.example:9091", "proxy.example", "other.example.com", "sub.metrics.example.com",
                 "10.1.2.4"):
        assert status_of(port, host=host) == 421, host


def test_a_star_turns_the_host_check_off_with_a_warning_when_there_is_no_token(broker_factory):
    b, port = http_broker(broker_factory, 'allowed-hosts = ["*"]\n')
    assert status_of(port, host="anything.example:1") == 200
    assert 'allowed-hosts holds "*": the Host header is not checked' in b.log


def test_a_token_is_needed_for_everything_but_health(broker_factory, tmp_path):
    b, port = http_broker(broker_factory, tmp_path=tmp_path, token=TOKEN)
    assert "every request but /health needs a bearer token" in b.log
    host = f"localhost:{port}"

    for path in ("/metrics", "/status", "/nope"):
        status, headers, body = request(port, path, host)
        assert status == 401, (path, status, body)
        assert headers["WWW-Authenticate"] == 'Bearer realm="escrowd"'
        assert "Authorization: Bearer" in body and "escrow_" not in body
    for wrong in (bearer(OTHER_TOKEN), bearer(TOKEN[:-1]), bearer(TOKEN + "0"), bearer(TOKEN.upper()),
                  bearer(""), [("Authorization", f"Basic {TOKEN}")], bearer(TOKEN) + bearer(OTHER_TOKEN)):
        status, headers, body = request(port, "/metrics", host, wrong)
        assert status == 401, (wrong, status, body)
        assert headers["WWW-Authenticate"].startswith('Bearer realm="escrowd"'), headers
    status, headers, _ = request(port, "/status", host, bearer(OTHER_TOKEN))
    assert headers["WWW-Authenticate"] == 'Bearer realm="escrowd", error="invalid_token"'
    # Without the token not even the method or the path is looked at.
    assert request(port, "/metrics", host, method="POST")[0] == 401

    status, _, body = request(port, "/metrics", host, bearer(TOKEN))
    assert status == 200 and "escrow_uptime_seconds" in body
    status, _, body = request(port, "/status", host, [("Authorization", f"bearer {TOKEN}")])
    assert status == 200 and json.loads(body)["store"]["writable"] is True
    assert request(port, "/nope", host, bearer(TOKEN))[0] == 404
    # /health is for load balancers that cannot send a token: open, and it says only "ok".
    status, _, body = request(port, "/health", host)
    assert (status, body) == (200, "ok\n")
    # The token does not lift the Host check.
    assert request(port, "/metrics", f"evil.example:{port}", bearer(TOKEN))[0] == 421
    assert request(port, "/health", f"evil.example:{port}")[0] == 421
    assert TOKEN not in b.log


@pytest.mark.parametrize("content,problem", [
    (None, "cannot read it: No such file or directory"),
    ("", "holds no token"),
    ("\n  \n", "holds no token"),
    ("short\n", "line 1: a token has from 16 to 4096 characters"),
    (TOKEN + "\nwith a space in it\n", "line 2: a token is visible ASCII characters without spaces"),
], ids=["missing", "empty", "blank", "short", "space"])
def test_a_bad_token_file_stops_escrowd_with_exit_2(tmp_path, content, problem):
    token_file = tmp_path / "http-token"
    if content is not None:
        token_file.write_text(content)
    config = tmp_path / "escrowd.toml"
    config.write_text(f'[http]\nlisten = "127.0.0.1:0"\ntoken-file = "{token_file}"\n')
    r = run_escrowd(["--config", str(config), "--data-dir", str(tmp_path / "data")], tmp_path)
    assert r.returncode == 2, r
    assert f"{config}:3: http.token-file '{token_file}': {problem}" in r.stdout + r.stderr, r
    assert not (tmp_path / "data").exists()  # before the store is opened
    # escrow check-config finds the same.
    c = escrow(None, "check-config", config)
    assert c.returncode == 1 and f"http.token-file '{token_file}': {problem}" in c.stderr, c


@pytest.mark.parametrize("value,needle", [
    ('"metrics.example.com"', "must be an array of host names"),
    ('["http://metrics.example.com"]', "'http://metrics.example.com' is not a host name"),
    ('["metrics.example.com/status"]', "is not a host name"),
    ('["*.example.com"]', "is not a host name"),
    ("[8161]", "must be an array of host names"),
], ids=["not-array", "scheme", "path", "wildcard", "number"])
def test_bad_allowed_hosts_exit_2_naming_file_line_and_key(tmp_path, value, needle):
    config = tmp_path / "escrowd.toml"
    config.write_text(f'[http]\nlisten = "127.0.0.1:0"\nallowed-hosts = {value}\n')
    r = run_escrowd(["--config", str(config), "--data-dir", str(tmp_path / "data")], tmp_path)
    assert r.returncode == 2, r
    assert f"{config}:3: http.allowed-hosts" in r.stderr and needle in r.stderr, r.stderr


def test_a_token_file_open_to_others_is_warned_about(broker_factory, tmp_path):
    b, _ = http_broker(broker_factory, tmp_path=tmp_path, token=TOKEN)
    assert "is open to others" not in b.log  # 0600
    (tmp_path / "http-token").chmod(0o644)
    b.restart()
    assert f"the token file {tmp_path / 'http-token'} is open to others (mode 0644)" in b.log


def test_sighup_rotates_the_token_and_applies_allowed_hosts(broker_factory, tmp_path):
    b, port = http_broker(broker_factory, tmp_path=tmp_path, token=TOKEN)
    token_file = tmp_path / "http-token"
    host = f"127.0.0.1:{port}"
    assert status_of(port, host=host, headers=bearer(TOKEN)) == 200

    # Rotation without a moment where no token works: old and new, then the new one only.
    token_file.write_text(f"{TOKEN}\n{OTHER_TOKEN}\n")
    assert "SIGHUP: reloaded" in hangup(b)
    assert status_of(port, host=host, headers=bearer(TOKEN)) == 200
    assert status_of(port, host=host, headers=bearer(OTHER_TOKEN)) == 200
    token_file.write_text(f"{OTHER_TOKEN}\n")
    text = hangup(b)
    assert "SIGHUP: http: 0 allowed hosts besides localhost and loopback, a bearer token from" in text
    assert status_of(port, host=host, headers=bearer(TOKEN)) == 401
    assert status_of(port, host=host, headers=bearer(OTHER_TOKEN)) == 200

    # allowed-hosts changes too; http.listen would need a restart.
    assert status_of(port, host="metrics.example.com", headers=bearer(OTHER_TOKEN)) == 421
    b.config_path.write_text(b.config_path.read_text() + 'allowed-hosts = ["metrics.example.com"]\n')
    hangup(b)
    assert status_of(port, host="metrics.example.com", headers=bearer(OTHER_TOKEN)) == 200

    # A token file that no longer loads keeps the running token (the rest is reloaded).
    token_file.write_text("")
    text = hangup(b)
    assert "the token file was not read" in text and "holds no token" in text
    assert status_of(port, host=host, headers=bearer(OTHER_TOKEN)) == 200
    assert status_of(port, host=host) == 401
