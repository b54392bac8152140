"""Benchmark `bisectbot serve`'s webhook server against slow and lying clients: /healthz latency
idle vs under many slow connections (and the ratio), measured side by side in one run.

    python bench/bench_serve.py [--slow 3000] [--requests 200]

The server runs in a child process (make_webhook_server with the defaults of `serve`, its log at
INFO on stderr); this process is the clients. Parts, in order:

1. /healthz, one new connection per request: idle; with --slow connections open that each sent
   half a request head; and again once they are closed.
2. 20 POSTs that promise 1000 body bytes and send 10, and 20 connections that send half a
   request head: what the server did with each within its deadline + 2 s (408, or 503 beyond
   its 16 POSTs at a time; the half heads closed).
3. 40 unsigned POSTs declaring 24 MB: how many got 413 before sending their body, and the
   server's peak RSS.
4. the server's stderr: lines, warnings and tracebacks over the whole run.

About 30 s on 2 cores (most of it the body deadline of part 2).
"""

from __future__ import annotations

import argparse
import http.client
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bisectbot.bot.webhook import ServeLimits, sign  # noqa: E402

SECRET = b"bench"


def child(state: str) -> None:
    """The server: prints its port, serves until stdin closes."""
    import logging
    import threading

    from bisectbot.bot.webhook import make_webhook_server
    from bisectbot.state.storage import Store

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    store = Store(Path(state) / "state.sqlite3")
    server = make_webhook_server("127.0.0.1", 0, SECRET, lambda payload: None, store)
    print(server.server_address[1], flush=True)
    threading.Thread(target=lambda: (sys.stdin.read(), server.shutdown()), daemon=True).start()
    server.serve_forever()
    server.server_close()
    store.close()


def healthz(port: int) -> float:
    """Seconds for one GET /healthz on a new connection (200 or it raises)."""
    start = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/healthz")
    response = conn.getresponse()
    response.read()
    conn.close()
    if response.status != 200:
        raise RuntimeError(f"/healthz answered {response.status}")
    return time.perf_counter() - start


def latencies(port: int, n: int) -> list[float]:
    return [healthz(port) for _ in range(n)]


def row(name: str, xs: list[float], base: list[float] | None = None) -> None:
    med, p95 = statistics.median(xs), statistics.quantiles(xs, n=20)[18]
    ratio = (
        ""
        if base is None
        else f"{med / statistics.median(base):>8.2f}x {p95 / statistics.quantiles(base, n=20)[18]:>8.2f}x"
    )
    print(f"{name:<34} {len(xs):>5} {med * 1e3:>9.2f} {p95 * 1e3:>9.2f}  {ratio}")


def outcome(s: socket.socket) -> str:
    """What the server did before the socket's timeout: "closed" (no answer), a status, or "open"."""
    data = b""
    try:
        while chunk := s.recv(65536):
            data += chunk
    except TimeoutError:
        return "open"
    except ConnectionResetError:
        pass
    return data.split(b" ", 2)[1].decode() + " and closed" if data else "closed"


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slow", type=int, default=3000, help="slow connections held open in part 1")
    parser.add_argument("--requests", type=int, default=200, help="/healthz requests per measurement")
    parser.add_argument("--child", metavar="STATE_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child)

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < args.slow + 1000:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the child raises its own
    limits = ServeLimits()
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp, open(Path(tmp) / "stderr", "w+b") as err:
        proc = subprocess.Popen(
            [sys.executable, __file__, "--child", tmp],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert proc.stdout is not None and proc.stdin is not None
        port = int(proc.stdout.readline())
        try:
            print(f"server pid {proc.pid} on port {port}; limits: {limits}")
            print(
                f"\n1. /healthz, a new connection each {'n':>5} {'median ms':>9} {'p95 ms':>9}  "
                f"{'median':>9} {'p95':>9} (vs idle)"
            )
            latencies(port, 20)  # warm up
            idle = latencies(port, args.requests)
            row("idle", idle)
            slow: list[socket.socket] = []
            start = time.perf_counter()
            for _ in range(args.slow):
                s = socket.create_connection(("127.0.0.1", port), timeout=60)
                s.sendall(b"POST /webhook HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1")
                slow.append(s)
            opened = time.perf_counter() - start
            loaded = latencies(port, args.requests)
            row(f"under {args.slow:,} slow connections", loaded, idle)
            start = time.perf_counter()
            for s in slow:
                s.close()
            first = healthz(port)
            closed = time.perf_counter() - start
            after = latencies(port, args.requests)
            row("after closing them", after, idle)
            print(
                f"   opening the {args.slow:,} took {opened:.1f} s; the first /healthz after closing them "
                f"answered {closed * 1e3:.0f} ms after the first close ({first * 1e3:.1f} ms itself)"
            )

            lying, half = [], []
            for i in range(20):
                s = socket.create_connection(("127.0.0.1", port), timeout=limits.body_timeout + 2)
                s.sendall(
                    b"POST /webhook HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n"
                    b"X-GitHub-Event: issue_comment\r\nX-GitHub-Delivery: lie-%d\r\n"
                    b"X-Hub-Signature-256: %s\r\n\r\n" % (i, sign(SECRET, b"x" * 1000).encode()) + b"x" * 10
                )
                lying.append(s)
                s = socket.create_connection(("127.0.0.1", port), timeout=limits.head_timeout + 2)
                s.sendall(b"POST /webhook HTTP/1.1\r\nHost: localhost\r\nContent-Le")
                half.append(s)
            for name, socks, deadline in (
                ("lying Content-Length", lying, f"body deadline {limits.body_timeout:.0f} s"),
                ("half a request head", half, f"head deadline {limits.head_timeout:.0f} s"),
            ):
                seen = Counter(outcome(s) for s in socks)
                print(
                    f"\n2. {name} ({deadline} + 2 s): "
                    + ", ".join(f"{n} of {len(socks)} {what}" for what, n in sorted(seen.items())),
                    end="",
                )
                for s in socks:
                    s.close()
            print()

            big = []
            for i in range(40):
                s = socket.create_connection(("127.0.0.1", port), timeout=30)
                s.sendall(
                    b"POST /webhook HTTP/1.1\r\nHost: localhost\r\nContent-Length: %d\r\n"
                    b"X-GitHub-Event: issue_comment\r\nX-GitHub-Delivery: big-%d\r\n\r\n" % (24 * 1024 * 1024, i)
                )
                big.append(s)
            refused = Counter(outcome(s) for s in big)
            for s in big:
                s.close()
            print(
                "\n3. 40 unsigned POSTs of 24 MB, before sending their body: "
                + ", ".join(f"{n} of 40 {what}" for what, n in sorted(refused.items()))
                + "; "
                f"server peak RSS {peak_rss_mb(proc.pid):.0f} MB"
            )
        finally:
            proc.stdin.close()
            proc.wait(timeout=60)
        err.seek(0)
        lines = err.read().decode(errors="replace").splitlines()
        warnings = [ln for ln in lines if ln.startswith(("WARNING", "ERROR", "CRITICAL"))]
        print(
            f"\n4. server stderr: {len(lines)} lines, {len(warnings)} warnings or errors, "
            f"{sum('Traceback' in ln for ln in lines)} tracebacks"
        )
        for ln in lines[:5]:
            print(f"   {ln}")


if __name__ == "__main__":
    main()
