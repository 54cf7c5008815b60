#!/usr/bin/env python3
"""The raw TCP rate a simulated link carries: one host sends BYTES to another over N parallel TCP connections (plain
sockets, no framing, no reduction), the receiver times from the first byte to the last. What the all-reduce between
hosts could reach on this machine at best, next to the tbf rate it is shaped to (hosts_bench.py's link limit).

  hosts_tcp_rate.py --rates 10gbit,1gbit [--streams 1,2,4] [--bytes 11534336] [--rounds 5] [--json-out FILE]
  hosts_tcp_rate.py serve PORT STREAMS BYTES       (run inside a host by the above)
  hosts_tcp_rate.py send ADDR PORT STREAMS BYTES   (likewise)

Each round sends BYTES in both directions at once (h1 -> h2 and h2 -> h1, as a 2-rank ring's all-reduce does), split
evenly over the streams; the figure is the slower direction's time and BYTES / that time. Rounds of 1, 2, 4 streams
take turns; medians over rounds. Needs root (scripts/simhosts); skipped, saying why, otherwise.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SIMHOSTS = os.path.join(ROOT, "scripts", "simhosts")
BLOCK = 1 << 20


def shares(total, n):
    return [total * (k + 1) // n - total * k // n for k in range(n)]


def serve(port, streams, total):
    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind(("0.0.0.0", port))
    lst.listen(streams)
    print("listening", flush=True)
    conns = [lst.accept()[0] for _ in range(streams)]
    first, last = [None] * streams, [None] * streams

    def drain(k, conn, want):
        buf = bytearray(BLOCK)
        view = memoryview(buf)
        got = 0
        while got < want:
            n = conn.recv_into(view, min(BLOCK, want - got))
            if n == 0:
                raise RuntimeError(f"stream {k}: closed after {got} of {want} bytes")
            if first[k] is None:
                first[k] = time.perf_counter()
            got += n
        last[k] = time.perf_counter()
        conn.sendall(b"k")  # the sender waits for this: the round ends when every byte is in

    threads = [threading.Thread(target=drain, args=(k, c, w)) for k, (c, w) in enumerate(zip(conns, shares(total, streams)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("seconds=%.9f" % (max(last) - min(first)), flush=True)


def send(addr, port, streams, total):
    conns = []
    deadline = time.monotonic() + 20
    while len(conns) < streams:
        s = socket.socket()
        try:
            s.connect((addr, port))
            conns.append(s)
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
    payload = memoryview(bytearray(BLOCK))

    def pour(conn, want):
        left = want
        while left:
            n = min(BLOCK, left)
            conn.sendall(payload[:n])
            left -= n
        conn.recv(1)

    threads = [threading.Thread(target=pour, args=(c, w)) for c, w in zip(conns, shares(total, streams))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def one_round(name, streams, total, port):
    """Both directions at once; the slower one's seconds."""
    me = os.path.abspath(__file__)
    ex = lambda host, argv: [SIMHOSTS, "--name", name, "exec", host, "--", sys.executable, me] + argv
    servers = [subprocess.Popen(ex(h, ["serve", str(port), str(streams), str(total)]), stdout=subprocess.PIPE,
                                text=True) for h in ("h2", "h1")]
    for s in servers:
        s.stdout.readline()  # listening
    senders = [subprocess.Popen(ex(h, ["send", addr, str(port), str(streams), str(total)]))
               for h, addr in (("h1", "10.77.0.2"), ("h2", "10.77.0.1"))]
    for p in senders:
        if p.wait(timeout=120) != 0:
            raise RuntimeError("a sender failed")
    secs = []
    for s in servers:
        out, _ = s.communicate(timeout=120)
        secs.append(float(out.split("seconds=")[1]))
    return max(secs)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        return serve(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    if len(sys.argv) > 1 and sys.argv[1] == "send":
        return send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="10gbit,1gbit")
    ap.add_argument("--streams", default="1,2,4")
    ap.add_argument("--bytes", type=int, default=11 << 20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json-out")
    ap.add_argument("--sysctl", action="append", default=[],
                    help="KEY=VALUE set in every simulated host's network namespace after it is made (repeatable)")
    a = ap.parse_args()
    check = subprocess.run([SIMHOSTS, "check"], capture_output=True, text=True)
    if check.returncode != 0:
        print("skipped: scripts/simhosts unavailable: " + check.stdout.strip())
        return 0
    rows = []
    for rate in a.rates.split(","):
        name = subprocess.run([SIMHOSTS, "up", "2", "--rate", rate, "--owner", str(os.getpid())],
                              capture_output=True, text=True, check=True).stdout.strip()
        for h in range(1, 3):  # --sysctl: e.g. net.ipv4.tcp_congestion_control=cubic in every simulated host
            for kv in a.sysctl:
                subprocess.run([SIMHOSTS, "--name", name, "exec", f"h{h}", "--", "sysctl", "-qw", kv], check=True)
        try:
            port = 30000
            for rnd in range(1, a.rounds + 1):
                for n in [int(x) for x in a.streams.split(",")]:
                    port += 1
                    secs = one_round(name, n, a.bytes, port)
                    rows.append({"rate": rate, "streams": n, "round": rnd, "bytes": a.bytes, "seconds": secs})
                    print("round %d %-6s %d stream(s) %d B  %.3f ms  %.2f Gbit/s" % (
                        rnd, rate, n, a.bytes, secs * 1e3, a.bytes * 8 / secs / 1e9), flush=True)
        finally:
            subprocess.run([SIMHOSTS, "--name", name, "down"], capture_output=True)
    summary = []
    for rate in a.rates.split(","):
        for n in [int(x) for x in a.streams.split(",")]:
            secs = statistics.median(r["seconds"] for r in rows if r["rate"] == rate and r["streams"] == n)
            summary.append({"rate": rate, "streams": n, "bytes": a.bytes, "median_s": secs,
                            "gbit_per_s": a.bytes * 8 / secs / 1e9})
            print("%-6s %d stream(s): median %.3f ms = %.2f Gbit/s each way" % (rate, n, secs * 1e3,
                                                                                a.bytes * 8 / secs / 1e9))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"rows": rows, "summary": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
