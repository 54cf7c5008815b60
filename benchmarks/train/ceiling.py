#!/usr/bin/env python3
"""Where two-worker scaling is lost: the tutorial CNN on 1 worker, on 2 independent workers at once, and on 2
mwstrat workers with and without the gradient all-reduce.

Each round runs, one after another (nothing else running), with --threads (1) per worker and --batch (64) per worker:
  solo      one train_throughput process (no TF_CONFIG)
  pair      two such processes started together: what this machine gives two busy processes (no communication)
  lockstep  mwstrat-launch -n 2 -- train_throughput --gradients local: both workers step together (the metrics
            are summed every step) but keep their own gradients
  mirrored  mwstrat-launch -n 2 -- train_throughput: the real thing (gradient mean every step; fit's default path,
            which on one host is one shared parameter copy)
and prints, per configuration, the median samples/s over the rounds and its efficiency against 2 x solo of the
same round (median of the per-round ratios). pair - lockstep is what stepping in lockstep costs, lockstep - mirrored
what the gradient all-reduce costs.

  python3 benchmarks/train/ceiling.py --build build/trainbench --data-dir .cache/mnist --rounds 5
"""
import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from compare import base_env, common_args, json_line, run_group  # noqa: E402
import benchlib  # noqa: E402  (compare put benchmarks/ on the path)


def samples_per_s(stdout, what):
    record = json_line(stdout, "mwstrat")
    if record is None:
        sys.exit(f"{what}: no result line in its output:\n{stdout}")
    return record["samples_per_s"], record["cpu_s_per_step"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build/trainbench")
    ap.add_argument("--data-dir", default=".cache/mnist")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--json-out", default=None, help="write the rows, the rounds and the machine here")
    ap.add_argument("--quick", action="store_true", help="only marks the JSON as a quick run")
    a = ap.parse_args()
    started = benchlib.start()
    prog = os.path.join(a.build, "benchmarks", "train", "train_throughput")
    launch = os.path.join(a.build, "tools", "mwstrat-launch")
    for path in (prog, launch):
        if not os.access(path, os.X_OK):
            sys.exit(f"{path} not found: configure with -DMWSTRAT_BUILD_BENCHMARKS=ON and build first")
    solo = ([prog] + common_args(a), base_env(a.threads))

    def one(cmds, what):
        codes, out, err = run_group(cmds, a.timeout)
        if any(c != 0 for c in codes):
            sys.exit(f"{what} failed ({codes}):\n{err}")
        return samples_per_s(out, what)

    def pair():
        procs = [subprocess.Popen(solo[0], env=solo[1], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                 for _ in range(2)]
        try:
            outs = [p.communicate(timeout=a.timeout)[0] for p in procs]
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            sys.exit(f"pair: timed out after {a.timeout}s")
        if any(p.returncode != 0 for p in procs):
            sys.exit("pair: a process failed")
        runs = [samples_per_s(o, "pair") for o in outs]
        return sum(r[0] for r in runs), sum(r[1] for r in runs)

    names = ["solo", "pair", "lockstep", "mirrored"]
    runs = {n: [] for n in names}
    with open("/proc/loadavg") as f:
        print(f"== {benchlib.cpu_model()}; load at start: {' '.join(f.read().split()[:3])}, {os.cpu_count()} cores, "
              f"{a.rounds} rounds, "
              f"{a.threads} thread(s) per worker, batch {a.batch} per worker", flush=True)
    for r in range(a.rounds):
        runs["solo"].append(one([solo], "solo"))
        runs["pair"].append(pair())
        runs["lockstep"].append(one([([launch, "-n", "2", "--", prog, "--gradients", "local"] + common_args(a),
                                      base_env(a.threads))], "lockstep"))
        runs["mirrored"].append(one([([launch, "-n", "2", "--", prog] + common_args(a), base_env(a.threads))],
                                    "mirrored"))
        print(f"   round {r + 1}: " + ", ".join(f"{n} {runs[n][-1][0]:.0f}" for n in names), flush=True)

    print()
    print("| configuration | samples/s (median) | CPU ms per step, all workers (median) | efficiency vs 2 × solo "
          "(median of rounds) | per round |")
    print("|---|---|---|---|---|")
    rows = []
    for n in names:
        sps = statistics.median(x[0] for x in runs[n])
        cpu = 1000 * statistics.median(x[1] for x in runs[n])
        if n == "solo":
            print(f"| {n} | {sps:.0f} | {cpu:.1f} | — | — |")
            rows.append({"configuration": n, "samples_per_s": sps, "cpu_ms_per_step": cpu})
            continue
        ratios = [x[0] / (2 * s[0]) for x, s in zip(runs[n], runs["solo"])]
        rows.append({"configuration": n, "samples_per_s": sps, "cpu_ms_per_step": cpu,
                     "efficiency": statistics.median(ratios), "per_round": ratios})
        print(f"| {n} | {sps:.0f} | {cpu:.1f} | {100 * statistics.median(ratios):.0f}% | "
              + " ".join(f"{100 * q:.0f}%" for q in ratios) + " |")
    if a.json_out:
        command = (f"python3 benchmarks/train/ceiling.py --build {benchlib.rel(a.build)} "
                   f"--data-dir {benchlib.rel(a.data_dir)} "
                   f"--rounds {a.rounds} --steps {a.steps}")
        record = benchlib.meta("train_ceiling", [command], a.quick, started)
        record.update(config={"batch": a.batch, "threads": a.threads, "warmup": a.warmup, "steps": a.steps,
                              "rounds": a.rounds}, rows=rows,
                      rounds=[{n: runs[n][r][0] for n in names} for r in range(a.rounds)])
        benchlib.write_json(a.json_out, record)


if __name__ == "__main__":
    main()
