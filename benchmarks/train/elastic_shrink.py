#!/usr/bin/env python3
"""An elastic job's shrink with real worker processes: examples/mnist_multiworker, 3 workers on 127.0.0.1 started by
hand (no launcher, nobody replaces the lost one), --min-workers 2, one worker SIGKILLing itself at a step boundary
(its rank and step drawn by a seeded schedule), over --faults runs. From each run, the new chief's line "training
again on 2 workers from global step S, X ms after the loss was seen" (fit, train/fit.hpp): the time from the
survivors seeing the loss (the ring's verdict, which for a killed process is its closed connection) to training again
on the smaller group — the survivors' ring, the state exchange from the latest boundary, the resharded data and the
gradient synchroniser. The loss → verdict part is mwstrat_bench_shrink's "detect" (about a millisecond for a closed
connection). Every run must also end with exit codes 0 for the survivors and 137 for the lost one.

  elastic_shrink.py --build BUILD [--data-dir .cache/mnist] [--faults 50] [--seed 1] [--json-out FILE]
"""
import argparse
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import benchlib  # noqa: E402

AGAIN = re.compile(r"training again on (\d+) workers from global step (\d+), ([\d.]+) ms after the loss was seen")


def free_ports(n):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def tf_config(ports, index):
    workers = ",".join(f'"127.0.0.1:{p}"' for p in ports)
    return '{"cluster":{"worker":[' + workers + ']},"task":{"type":"worker","index":' + str(index) + "}}"


def one_run(example, data_dir, rank, step, work):
    ports = free_ports(3)
    job = [example, "--data-dir", data_dir, "--seed", "7", "--no-test", "--optimizer", "sgd", "--learning-rate", "0.05",
           "--batch-size", "5", "--train-examples", "60", "--epochs", "2", "--steps-per-epoch", "4", "--op-timeout",
           "30", "--min-workers", "2", "--kill-at-step", str(step), "--kill-rank", str(rank)]
    procs = []
    for w in range(3):
        env = dict(os.environ, TF_CONFIG=tf_config(ports, w))
        out = open(os.path.join(work, f"w{w}.log"), "w")
        procs.append((subprocess.Popen(job, env=env, stdout=out, stderr=subprocess.STDOUT), out))
    codes = []
    for p, out in procs:
        try:
            codes.append(p.wait(timeout=300))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(p.wait())
        out.close()
    text = ""
    for w in range(3):
        with open(os.path.join(work, f"w{w}.log")) as f:
            text += f.read()
    expected = [0, 0, 0]
    expected[rank] = -9
    if codes != expected:
        raise RuntimeError(f"exit codes {codes}, expected {expected}:\n{text[-3000:]}")
    m = AGAIN.search(text)
    if not m:
        raise RuntimeError(f"no 'training again' line:\n{text[-3000:]}")
    return float(m.group(3)), " ".join([benchlib.rel(job[0]), "--data-dir", benchlib.rel(data_dir)] + job[3:])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--data-dir", default=os.path.join(ROOT, ".cache", "mnist"))
    ap.add_argument("--faults", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()
    example = os.path.join(a.build, "examples", "mnist_multiworker", "mnist_multiworker")
    started = benchlib.start()
    draw = random.Random(a.seed)
    times, job = [], ""
    with tempfile.TemporaryDirectory(prefix="mwstrat-elastic-") as work:
        for i in range(a.faults):
            rank, step = draw.randrange(3), draw.randrange(1, 7)
            ms, job = one_run(example, a.data_dir, rank, step, work)
            times.append(ms)
            print(f"fault {i + 1}/{a.faults}: rank {rank} after step {step}: training again {ms:.1f} ms after the "
                  f"loss was seen", flush=True)
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    summary = {"faults": len(times), "p50_ms": statistics.median(times), "p99_ms": p99, "max_ms": ordered[-1],
               "times_ms": times}
    print(f"elastic shrink over {len(times)} faults: p50 {summary['p50_ms']:.1f} ms, p99 {p99:.1f} ms, max "
          f"{ordered[-1]:.1f} ms")
    if a.json_out:
        command = (f"benchmarks/train/elastic_shrink.py --build {benchlib.rel(a.build)} --faults {a.faults} "
                   f"--seed {a.seed}")
        record = benchlib.meta("elastic_processes", [command, job], False, started)
        record["shrink_processes"] = summary
        benchlib.write_json(a.json_out, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
