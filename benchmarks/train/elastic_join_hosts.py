#!/usr/bin/env python3
"""A join's state transfer between simulated hosts against the link's own rate: examples/mnist_multiworker, three
members on h1..h3 (--min-workers 2 --max-workers 4, every member waiting for a joiner after --at-step) and a joiner
on h4, every host's link shaped to the rate (scripts/simhosts: tbf both ways). The joiner says how many MB of
training state it received from a member's memory and in how long (the fingerprint check, the positions' exchange
and the ring broadcast of the header and the floats); the chief, how long the join took from the boundary where it
was due to training again on four (the larger ring, the identity check, the state, the resharded data). The link's
rate is measured in the same set, just before each join, by one TCP stream of the same number of bytes from h1 to
h4 (Python sockets inside the hosts, timed at the receiver from its first byte): the state's rate over that is the
share of the link the transfer used (goal: at least 80%).

  elastic_join_hosts.py --build BUILD [--data-dir .cache/mnist] [--rates 100mbit,1gbit] [--joins 3]
                        [--at-step 3] [--json-out FILE]
"""
import argparse
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import benchlib  # noqa: E402

SIMHOSTS = os.path.join(ROOT, "scripts", "simhosts")
PYTHON = "/usr/bin/python3"
RECEIVED = re.compile(r"received from rank \d+'s memory: ([\d.]+) MB in (\d+) ms")
JOINED = re.compile(r"worker 3 joined: 4 workers from global step \d+, ring generation \d+, in (\d+) ms with the state")
AGAIN = re.compile(r"training again on 4 workers from global step \d+, ([\d.]+) ms after the joiners were due")

# A one-connection TCP sink and source for the link's rate, run inside the hosts (the standard library only).
SINK = r"""
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(1); s.settimeout(60)
c, _ = s.accept(); c.settimeout(60)
total, first = 0, None
while True:
    b = c.recv(1 << 20)
    if not b: break
    if first is None: first = time.monotonic()
    total += len(b)
print(total, time.monotonic() - first)
"""
SOURCE = r"""
import socket, sys, time
deadline = time.monotonic() + 30
while True:
    try:
        c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5); break
    except OSError:
        if time.monotonic() > deadline: raise
        time.sleep(0.05)
left, block = int(sys.argv[3]), b"\0" * (1 << 20)
while left > 0:
    c.sendall(block[:min(left, len(block))]); left -= len(block)
c.close()
"""


def on_host(name, host, argv):
    return [SIMHOSTS, "--name", name, "exec", host, "--"] + argv


def link_rate(name, address, nbytes, port):
    """Bits per second of one TCP stream of `nbytes` from h1 to h4 (address: h4's)."""
    sink = subprocess.Popen(on_host(name, "h4", [PYTHON, "-c", SINK, str(port)]), stdout=subprocess.PIPE, text=True)
    subprocess.run(on_host(name, "h1", [PYTHON, "-c", SOURCE, address, str(port), str(nbytes)]), check=True,
                   timeout=120)
    out, _ = sink.communicate(timeout=120)
    total, seconds = out.split()
    return 8 * int(total) / float(seconds)


def one_join(a, name, addresses, work, k):
    cluster = [f"{addr}:{20000 + k}" for addr in addresses]
    desk = f"{addresses[0]}:{20100 + k}"
    job = [a.example, "--data-dir", a.data_dir, "--seed", "7", "--epochs", "1", "--steps-per-epoch",
           str(a.at_step + 3), "--global-batch", "48", "--train-examples", "1200", "--no-test", "--optimizer", "sgd",
           "--learning-rate", "0.01", "--op-timeout", "120", "--min-workers", "2", "--max-workers", "4",
           "--recovery-timeout", "60", "--model-dir", os.path.join(work, f"model{k}")]

    def tf_config(endpoints, index):
        workers = ",".join(f'"{e}"' for e in endpoints)
        return '{"cluster":{"worker":[%s]},"task":{"type":"worker","index":%d}}' % (workers, index)

    procs, logs = [], []
    for w in range(4):
        env = {"MWSTRAT_JOB_TOKEN": "bench", ("MWSTRAT_JOIN" if w == 3 else "MWSTRAT_JOIN_LISTEN"): desk,
               "TF_CONFIG": tf_config(cluster if w == 3 else cluster[:3], w)}
        argv = job + (["--connect-timeout", "120"] if w == 3 else ["--await-joiner-at-step", str(a.at_step)])
        line = " ".join(f"{key}={shlex.quote(v)}" for key, v in env.items()) + " " + shlex.join(argv)
        log = open(os.path.join(work, f"join{k}.w{w}.log"), "w+")
        logs.append(log)
        procs.append(subprocess.Popen(on_host(name, f"h{w + 1}", ["sh", "-c", line]), stdout=log,
                                      stderr=subprocess.STDOUT))
    codes = [p.wait(timeout=600) for p in procs]
    texts = []
    for log in logs:
        log.seek(0)
        texts.append(log.read())
        log.close()
    if any(codes):
        raise RuntimeError(f"join {k}: exit codes {codes}: " + texts[codes.index(next(c for c in codes if c))][-2000:])
    received = RECEIVED.search(texts[3])
    joined = JOINED.search(texts[0])
    again = AGAIN.search(texts[0])
    if not (received and joined and again):
        raise RuntimeError(f"join {k}: the logs do not say how it went:\n" + texts[0][-2000:] + texts[3][-2000:])
    return {"state_mb": float(received.group(1)), "state_ms": float(received.group(2)),
            "join_ms": float(joined.group(1)), "due_to_training_ms": float(again.group(1))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--data-dir", default=os.path.join(ROOT, ".cache", "mnist"))
    ap.add_argument("--rates", default="100mbit,1gbit")
    ap.add_argument("--joins", type=int, default=3, help="joins per rate")
    ap.add_argument("--at-step", type=int, default=3, help="the step boundary where the members await the joiner")
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()
    a.build, a.data_dir = os.path.abspath(a.build), os.path.abspath(a.data_dir)
    a.example = os.path.join(a.build, "examples", "mnist_multiworker", "mnist_multiworker")
    started = benchlib.start()
    check = subprocess.run([SIMHOSTS, "check"], capture_output=True, text=True)
    if check.returncode != 0:
        print("skipped: scripts/simhosts unavailable: " + check.stdout.strip())
        return 0
    subprocess.run([SIMHOSTS, "gc"], capture_output=True)
    rows = []
    for rate in a.rates.split(","):
        name = subprocess.run([SIMHOSTS, "up", "4", "--rate", rate, "--owner", str(os.getpid())],
                              capture_output=True, text=True, check=True).stdout.strip()
        work = tempfile.mkdtemp(prefix="mwstrat-join-")
        try:
            addresses = [subprocess.run([SIMHOSTS, "--name", name, "addr", f"h{h}"], capture_output=True, text=True,
                                        check=True).stdout.strip() for h in range(1, 5)]
            state_bytes = None
            for k in range(a.joins):
                load = benchlib.loadavg()
                link = link_rate(name, addresses[3], state_bytes or 6_000_000, 5300 + k)
                r = one_join(a, name, addresses, work, k)
                state_bytes = int(r["state_mb"] * 1e6)
                r.update(rate=rate, join=k, link_bits_per_s=link, load_at_start=load,
                         state_bits_per_s=8 * r["state_mb"] * 1e6 / (r["state_ms"] / 1e3))
                r["share_of_link"] = r["state_bits_per_s"] / link
                rows.append(r)
                print(f"{rate:7s} join {k}: {r['state_mb']:.1f} MB in {r['state_ms']:.0f} ms = "
                      f"{r['state_bits_per_s'] / 1e6:.1f} Mbit/s; the link {link / 1e6:.1f} Mbit/s: "
                      f"{100 * r['share_of_link']:.0f}%; joined in {r['join_ms']:.0f} ms, training again "
                      f"{r['due_to_training_ms']:.0f} ms after due (load {load})", flush=True)
                time.sleep(1)
        finally:
            subprocess.run([SIMHOSTS, "--name", name, "down"], capture_output=True)
            shutil.rmtree(work, ignore_errors=True)
    summary = []
    for rate in a.rates.split(","):
        done = [r for r in rows if r["rate"] == rate]
        summary.append({"rate": rate, "joins": len(done), "state_mb": done[0]["state_mb"],
                        "state_ms_p50": statistics.median(r["state_ms"] for r in done),
                        "link_mbit_s_p50": statistics.median(r["link_bits_per_s"] for r in done) / 1e6,
                        "state_mbit_s_p50": statistics.median(r["state_bits_per_s"] for r in done) / 1e6,
                        "share_of_link_p50": statistics.median(r["share_of_link"] for r in done),
                        "join_ms_p50": statistics.median(r["join_ms"] for r in done),
                        "due_to_training_ms_p50": statistics.median(r["due_to_training_ms"] for r in done)})
        s = summary[-1]
        print(f"{rate:7s} {s['joins']} joins: state {s['state_mb']:.1f} MB at {s['state_mbit_s_p50']:.1f} Mbit/s "
              f"(p50) on a link of {s['link_mbit_s_p50']:.1f}: {100 * s['share_of_link_p50']:.0f}%; due to training "
              f"again p50 {s['due_to_training_ms_p50']:.0f} ms", flush=True)
    if a.json_out:
        argv = (f"benchmarks/train/elastic_join_hosts.py --build {benchlib.rel(a.build)} --rates {a.rates} "
                f"--joins {a.joins} --at-step {a.at_step}")
        rec = benchlib.meta("elastic_join_hosts", [argv], False, started)
        rec.update(rows=rows, summary=summary)
        benchlib.write_json(a.json_out, rec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
