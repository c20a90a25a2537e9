#!/usr/bin/python3
"""One tenant's latency under another's flood (issue 23, N8; docs/performance.md, "Tenants"): starts
escrowd on a fresh data directory with two users, alice and bob; measures alice's persistent
SEND-to-RECEIPT latency (one 1 KiB message at a time, each waiting for its receipt) alone, then
while bob floods over CONNECTIONS connections with pipelined persistent 64 KiB SENDs without
receipts. Prints one RESULT line with the medians and 90th percentiles in milliseconds. A
benchmark, not a test: run it with two escrowd builds to compare them.

  tenant_flood.py --escrowd build/broker/escrowd [--count 200] [--connections 1] [--dir DIR]
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def frame(command, headers, body=b""):
    head = "\n".join([command] + [f"{k}:{v}" for k, v in headers]) + "\n\n"
    return head.encode() + body + b"\0"


def connect(port, login, passcode):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(frame("CONNECT", [("accept-version", "1.2"), ("host", "x"), ("login", login), ("passcode", passcode)]))
    data = b""
    while b"\0" not in data:
        chunk = s.recv(4096)
        if not chunk:
            sys.exit(f"{login}'s CONNECT was refused")
        data += chunk
    if not data.startswith(b"CONNECTED"):
        sys.exit(f"{login}'s CONNECT: {data!r}")
    return s


def latencies(sock, count, queue):
    """Milliseconds from each SEND to its RECEIPT, one at a time."""
    out = []
    body = b"a" * 1024
    buf = b""
    for n in range(count):
        rid = f"r{n}"
        t0 = time.perf_counter()
        sock.sendall(frame("SEND", [("destination", queue), ("persistent", "true"), ("receipt", rid)], body))
        while f"receipt-id:{rid}\n".encode() not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                sys.exit(f"alice's connection closed: {buf[-300:]!r}")
            if b"ERROR" in chunk:
                sys.exit(f"alice got an ERROR: {chunk!r}")
            buf += chunk
        out.append((time.perf_counter() - t0) * 1000)
        buf = buf[buf.index(f"receipt-id:{rid}\n".encode()):]
    return out


def summary(ms):
    ms = sorted(ms)
    return statistics.median(ms), ms[int(len(ms) * 0.9) - 1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--escrowd", required=True)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--connections", type=int, default=1)
    ap.add_argument("--dir")
    args = ap.parse_args()
    work = os.path.abspath(args.dir or tempfile.mkdtemp(prefix="tenant-flood-"))
    args.escrowd = os.path.abspath(args.escrowd)
    os.makedirs(work, exist_ok=True)

    def hashed(password):
        r = subprocess.run([args.escrowd, "--hash-password"], input=password + "\n", capture_output=True, text=True)
        return r.stdout.strip()

    with open(os.path.join(work, "users.toml"), "w") as f:
        for name, role in (("alice", "orders-app"), ("bob", "billing-app")):
            f.write(f'[[user]]\nname = "{name}"\npassword = "{hashed(name + "-secret")}"\nroles = ["{role}"]\n')
    with open(os.path.join(work, "escrowd.toml"), "w") as f:
        f.write('[security]\nusers-file = "users.toml"\n'
                '[[security-settings]]\nmatch = "orders.#"\nsend = ["orders-app"]\nconsume = ["orders-app"]\n'
                '[[security-settings]]\nmatch = "billing.#"\nsend = ["billing-app"]\nconsume = ["billing-app"]\n')
    log = open(os.path.join(work, "escrowd.log"), "wb")
    broker = subprocess.Popen([args.escrowd, "--listen", "127.0.0.1:0", "--data-dir", os.path.join(work, "data"),
                               "--config", os.path.join(work, "escrowd.toml"), "--log-level", "info"],
                              cwd=work, stdout=log, stderr=subprocess.STDOUT)
    port = None
    for _ in range(1000):
        m = re.search(rb"listening on 127\.0\.0\.1:(\d+)", open(os.path.join(work, "escrowd.log"), "rb").read())
        if m:
            port = int(m.group(1))
            break
        time.sleep(0.01)
    if port is None:
        broker.kill()
        sys.exit("escrowd did not start")
    try:
        alice = connect(port, "alice", "alice-secret")
        alone = latencies(alice, args.count, "/queue/orders.bench")
        stop = threading.Event()
        sent = [0]
        floods = [connect(port, "bob", "bob-secret") for _ in range(args.connections)]
        burst = frame("SEND", [("destination", "/queue/billing.bench"), ("persistent", "true")], b"f" * 65536) * 8

        def flood(s):
            try:
                while not stop.is_set():
                    s.sendall(burst)
                    sent[0] += 8
            except OSError:
                pass

        threads = [threading.Thread(target=flood, args=(s,), daemon=True) for s in floods]
        for t in threads:
            t.start()
        time.sleep(1.0)  # the flood reaches its steady state (the back-pressure limit)
        t0 = time.monotonic()
        under = latencies(alice, args.count, "/queue/orders.bench")
        flood_seconds = time.monotonic() - t0
        before = sent[0]
        stop.set()
        for s in floods:
            s.shutdown(socket.SHUT_RDWR)
            s.close()
        a50, a90 = summary(alone)
        u50, u90 = summary(under)
        print(f"RESULT alone_p50_ms={a50:.2f} alone_p90_ms={a90:.2f} flood_p50_ms={u50:.2f} flood_p90_ms={u90:.2f} "
              f"bob_mib_per_s={before * 64 / 1024 / max(flood_seconds + 1.0, 1e-9):.0f} connections={args.connections}")
    finally:
        broker.terminate()
        try:
            broker.wait(60)
        except subprocess.TimeoutExpired:
            broker.kill()


if __name__ == "__main__":
    main()
