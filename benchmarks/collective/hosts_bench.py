#!/usr/bin/env python3
"""All-reduce of 11 MiB and 4 KiB between 2 hosts: mwstrat's ring, fp32 vs bf16 on the wire, 1 and 2 ranks per
host (hierarchical), against the link's limit 2·(H−1)/H · bytes / rate.

Two settings, side by side in one run:
  loopback  every rank on 127.0.0.1, hosts told apart by --host-id (no link limit: loopback is not shaped);
  simhosts  scripts/simhosts' network namespaces, links shaped with tbf at each --rates value (skipped, saying
            why, when `scripts/simhosts check` fails: not root, no ip/tc).

  hosts_bench.py --build BUILD [--rates 10gbit,1gbit] [--reps 20] [--quick] [--json-out FILE]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import benchlib  # noqa: E402

SIZES = [4096, 11 << 20]
HOSTS = 2


def rate_bytes(rate):
    m = re.fullmatch(r"(\d+)(bit|kbit|mbit|gbit)", rate)
    scale = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[m.group(2)]
    return int(m.group(1)) * scale / 8


def run_ranks(commands, timeout):
    """Starts every rank's command at once; rank 0's stdout, after all exited 0."""
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in commands]
    outs = []
    deadline = time.time() + timeout
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise RuntimeError("ranks did not finish within %d s" % timeout)
        if p.returncode != 0:
            for q in procs:
                q.kill()
            raise RuntimeError("rank exited %d: %s" % (p.returncode, err.strip()[-2000:]))
        outs.append(out)
    rows = {}
    for line in outs[0].splitlines():
        m = re.match(r"size=(\d+) median_s=([0-9.]+) min_s=([0-9.]+)", line)
        if m:
            rows[int(m.group(1))] = {"median_s": float(m.group(2)), "min_s": float(m.group(3))}
    return rows


def free_port_base(n):
    import socket
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def bench_args(bench, rank, addresses, host, compression, reps):
    return [bench, "--rank", str(rank), "--addresses", ",".join(addresses), "--host-id", host,
            "--compression", compression, "--reps", str(reps), "--sizes", ",".join(map(str, SIZES))]


def loopback(bench, per_host, compression, reps):
    n = HOSTS * per_host
    addresses = ["127.0.0.1:%d" % p for p in free_port_base(n)]
    cmds = [bench_args(bench, r, addresses, "h%d" % (r // per_host + 1), compression, reps) for r in range(n)]
    return run_ranks(cmds, 300)


def simhosts(bench, name, per_host, compression, reps, subnet="10.77.0"):
    script = os.path.join(ROOT, "scripts", "simhosts")
    n = HOSTS * per_host
    addresses = ["%s.%d:%d" % (subnet, r // per_host + 1, 29500 + r % per_host) for r in range(n)]
    cmds = [[script, "--name", name, "exec", "h%d" % (r // per_host + 1), "--"] +
            bench_args(bench, r, addresses, "h%d" % (r // per_host + 1), compression, reps) for r in range(n)]
    return run_ranks(cmds, 600)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--rates", default="10gbit,1gbit")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json-out")
    ap.add_argument("--settings", default="loopback,simhosts")
    a = ap.parse_args()
    bench = os.path.join(a.build, "benchmarks", "collective", "mwstrat_bench_hosts")
    reps = 5 if a.quick else a.reps
    started = benchlib.start()
    results = []

    def record(setting, rate, per_host, compression, rows):
        for size, r in sorted(rows.items()):
            limit = 2 * (HOSTS - 1) / HOSTS * size / rate_bytes(rate) if rate else None
            row = {"setting": setting, "rate": rate, "hosts": HOSTS, "ranks_per_host": per_host,
                   "compression": compression, "bytes": size, "median_s": r["median_s"], "min_s": r["min_s"],
                   "link_limit_s": limit, "fraction_of_limit": (limit / r["median_s"]) if limit else None}
            results.append(row)
            print("%-8s %-6s %dx%d %-4s %9d B  median %9.3f ms  min %9.3f ms%s" % (
                setting, rate or "-", HOSTS, per_host, compression, size, r["median_s"] * 1e3, r["min_s"] * 1e3,
                "  limit %.3f ms = %.0f%% of it" % (limit * 1e3, 100 * limit / r["median_s"]) if limit else ""),
                flush=True)

    settings = a.settings.split(",")
    if "loopback" in settings:
        for per_host in (1, 2):
            for compression in ("none", "bf16"):  # interleaved, so slow phases of the shared machine hit both
                record("loopback", None, per_host, compression, loopback(bench, per_host, compression, reps))
    skipped = None
    if "simhosts" in settings:
        script = os.path.join(ROOT, "scripts", "simhosts")
        check = subprocess.run([script, "check"], capture_output=True, text=True) if os.access(script, os.X_OK) else None
        if check is None or check.returncode != 0:
            skipped = "scripts/simhosts unavailable: " + (check.stdout.strip() if check else "no scripts/simhosts")
            print("simhosts skipped: " + skipped, flush=True)
        else:
            for rate in a.rates.split(","):
                name = subprocess.run([script, "up", str(HOSTS), "--rate", rate], capture_output=True, text=True,
                                      check=True).stdout.strip()
                try:
                    for per_host in (1, 2):
                        for compression in ("none", "bf16"):
                            record("simhosts", rate, per_host, compression,
                                   simhosts(bench, name, per_host, compression, reps))
                finally:
                    subprocess.run([script, "--name", name, "down"], capture_output=True)
    if a.json_out:
        rec = benchlib.meta("collective_hosts", ["benchmarks/collective/hosts_bench.py --build %s" %
                                                 benchlib.rel(a.build)], a.quick, started)
        rec.update(rows=results, simhosts_skipped=skipped, reps=reps,
                   link_limit="2*(H-1)/H*bytes/rate, H=2 hosts, rate = the tbf rate of each host's link")
        benchlib.write_json(a.json_out, rec)


if __name__ == "__main__":
    main()
