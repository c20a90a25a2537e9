#!/usr/bin/python3
"""One STOMP producer that sends persistent messages one at a time, each waiting for its RECEIPT,
and records when each receipt arrived (scripts/bench-sweep). It runs until SIGTERM, then writes one
line per receipt, the epoch time in milliseconds (with fractions), to OUT.

    receipt_gaps.py PORT QUEUE OUT [BODY_SIZE]

A raw socket and a plain loop: the receipt times are what a client waiting for each send sees.
"""

import signal
import socket
import sys
import time


def main():
    port, queue, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    body = b"x" * (int(sys.argv[4]) if len(sys.argv) > 4 else 100)
    stop = False

    def on_term(signum, frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\0")
    buf = b""
    while b"\0" not in buf:
        buf += sock.recv(65536)
    if not buf.startswith(b"CONNECTED"):
        sys.exit(f"receipt_gaps: the broker did not accept the connection: {buf[:200]!r}")
    buf = b""
    times = []
    n = 0
    while not stop:
        n += 1
        rid = f"r{n}".encode()
        sock.sendall(b"SEND\ndestination:/queue/" + queue.encode() + b"\nreceipt:" + rid + b"\n\n" + body + b"\0")
        # Its RECEIPT is the only frame this connection gets.
        while b"\0" not in buf:
            try:
                chunk = sock.recv(65536)
            except InterruptedError:
                continue
            if not chunk:
                sys.exit("receipt_gaps: the broker closed the connection")
            buf += chunk
        frame, _, buf = buf.partition(b"\0")
        frame = frame.lstrip(b"\r\n")
        if not frame.startswith(b"RECEIPT") or b"receipt-id:" + rid not in frame:
            sys.exit(f"receipt_gaps: expected RECEIPT {rid!r}, got {frame[:300]!r}")
        times.append(time.time() * 1000.0)
    with open(out, "w") as f:
        for t in times:
            f.write(f"{t:.3f}\n")


if __name__ == "__main__":
    main()
