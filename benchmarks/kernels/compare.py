#!/usr/bin/python3
"""Interleaved comparison of mwstrat's convolution kernels with PyTorch's (oneDNN) on ResNet-56's layer shapes:
runs mwstrat_bench_conv, then torch_conv_bench.py, `--rounds` times in turn (mwstrat, torch, mwstrat, torch, ...)
so that both see the same background load, keeps each one's best CPU time per (pass, shape), and prints a
Markdown table: shape, mwstrat GFLOP/s, % of the FMA peak, torch GFLOP/s, the ratio of the bests, and the median
of the rounds' own ratios (on a VM whose speed drifts between rounds, the median of paired rounds is the steadier
figure); then the whole network's convolution time per pass (each shape weighted by how many ResNet-56 layers
have it). `--filter` (a substring of the names) times only some passes and leaves the totals out. `--json-out`
also writes every pass's best times and round ratios, and the totals (what benchmarks/run.py's kernels family
records for RESULTS.md).

    /usr/bin/python3 benchmarks/kernels/compare.py --bench build/release/benchmarks/kernels/mwstrat_bench_conv \
        [--peak 115.6] [--rounds 2] [--seconds 0.5] [--filter forward/16x16] [--json-out FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_mwstrat(bench, seconds, name_filter):
    out = subprocess.run([bench, "--threads=1", f"--benchmark_min_time={seconds}", "--benchmark_format=json",
                          f"--benchmark_filter={name_filter}"],
                         check=True, capture_output=True, text=True).stdout
    rows = {}
    for b in json.loads(out)["benchmarks"]:
        scale = {"ms": 1e-3, "us": 1e-6, "ns": 1e-9, "s": 1.0}[b.get("time_unit", "ns")]
        rows[b["name"]] = {"cpu_s": b["cpu_time"] * scale, "gflops": b["GFLOP/s"], "layers": int(b["layers"])}
    return rows


def run_torch(seconds, name_filter):
    out = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "torch_conv_bench.py"), "--seconds", str(seconds),
                          "--repeats", "1", "--filter", name_filter], check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        r = json.loads(line)
        rows[r["name"]] = {"cpu_s": r["cpu_ms"] * 1e-3, "gflops": r["gflops"]}
    return rows


def best(into, rows):
    for name, r in rows.items():
        if name not in into or r["cpu_s"] < into[name]["cpu_s"]:
            into[name] = r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--peak", type=float, default=115.6, help="one-thread FP32 FMA peak, GFLOP/s (mwstrat_bench_peak)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=0.5)
    ap.add_argument("--filter", default="", help="time only the passes whose names contain this")
    ap.add_argument("--json-out", default=None, help="also write the passes and totals here as JSON")
    args = ap.parse_args()
    mine, theirs = {}, {}
    paired = {}  # name -> each round's torch time / mwstrat time
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}: mwstrat", file=sys.stderr, flush=True)
        m_round = run_mwstrat(args.bench, args.seconds, args.filter)
        best(mine, m_round)
        print(f"round {r + 1}/{args.rounds}: torch", file=sys.stderr, flush=True)
        t_round = run_torch(args.seconds, args.filter)
        best(theirs, t_round)
        for name, m in m_round.items():
            if name in t_round:
                paired.setdefault(name, []).append(t_round[name]["cpu_s"] / m["cpu_s"])
    print("| pass / shape (batch 128) | layers | mwstrat GFLOP/s | % peak | torch GFLOP/s | mwstrat / torch "
          "| median of rounds |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    totals = {}
    for name, m in mine.items():
        t = theirs.get(name)
        ratio = f"{m['gflops'] / t['gflops']:.2f}" if t else "n/a"
        tg = f"{t['gflops']:.1f}" if t else "n/a"
        med = f"{statistics.median(paired[name]):.2f}" if name in paired else "n/a"
        print(f"| {name} | {m['layers']} | {m['gflops']:.1f} | {100 * m['gflops'] / args.peak:.0f}% | {tg} | {ratio} "
              f"| {med} |")
        p = name.split("/")[0]
        tot = totals.setdefault(p, [0.0, 0.0])
        if t:
            tot[0] += m["layers"] * m["cpu_s"]
            tot[1] += m["layers"] * t["cpu_s"]
    if args.json_out:
        rows = [{"name": name, "layers": m["layers"], "mwstrat_cpu_s": m["cpu_s"], "mwstrat_gflops": m["gflops"],
                 "torch_cpu_s": theirs[name]["cpu_s"] if name in theirs else None,
                 "torch_gflops": theirs[name]["gflops"] if name in theirs else None,
                 "round_ratios": paired.get(name, [])} for name, m in mine.items()]
        with open(args.json_out, "w") as f:
            json.dump({"rounds": args.rounds, "seconds": args.seconds, "filter": args.filter, "rows": rows,
                       "totals_ms": {p: {"mwstrat": a * 1e3, "torch": b * 1e3} for p, (a, b) in totals.items()}
                       if not args.filter else {}}, f, indent=1)
    if args.filter:
        return  # the network's totals need every shape
    print()
    print("| ResNet-56 convolutions, one batch of 128 | mwstrat ms | torch ms | torch / mwstrat |")
    print("|---|---:|---:|---:|")
    for p, (a, b) in totals.items():
        print(f"| {p} | {a * 1e3:.1f} | {b * 1e3:.1f} | {b / a:.2f} |")
    a = sum(v[0] for v in totals.values())
    b = sum(v[1] for v in totals.values())
    print(f"| all three | {a * 1e3:.1f} | {b * 1e3:.1f} | {b / a:.2f} |")


if __name__ == "__main__":
    main()
