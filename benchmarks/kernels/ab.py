#!/usr/bin/python3
"""Paired comparison of two builds of mwstrat_bench_conv (a change against its base) on a machine whose speed
drifts: the builds run in alternating rounds (A B, B A, ...), each round keeps each build's best repetition per
pass, and the report gives per pass the median of the rounds' time ratios B / A, how many rounds B was ahead, and
every round's ratio.

    /usr/bin/python3 benchmarks/kernels/ab.py --base A/mwstrat_bench_conv --change B/mwstrat_bench_conv \\
        [--rounds 6] [--repetitions 5] [--filter 'forward/32x32_16-16_3x3|backward_data/8x8']
"""
import argparse
import json
import statistics
import subprocess


def best_times(bench, name_filter, repetitions):
    out = subprocess.run([bench, "--threads=1", f"--benchmark_filter={name_filter}", "--benchmark_min_time=0.1",
                          f"--benchmark_repetitions={repetitions}", "--benchmark_format=json"],
                         check=True, capture_output=True, text=True).stdout
    best = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("run_type") == "iteration":
            best[b["run_name"]] = min(best.get(b["run_name"], float("inf")), b["cpu_time"])
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--change", required=True)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--filter", default=".", help="google-benchmark regex of the passes to time")
    args = ap.parse_args()
    ratios = {}
    for r in range(args.rounds):
        order = [args.base, args.change] if r % 2 == 0 else [args.change, args.base]
        times = {bench: best_times(bench, args.filter, args.repetitions) for bench in order}
        for name, t in times[args.base].items():
            ratios.setdefault(name, []).append(times[args.change][name] / t)
    print("| pass | change / base time, median | rounds the change was ahead | each round |")
    print("|---|---:|---:|---|")
    for name, rs in ratios.items():
        ahead = sum(1 for x in rs if x < 1)
        print(f"| {name} | {statistics.median(rs):.3f} | {ahead} of {len(rs)} | {' '.join(f'{x:.2f}' for x in rs)} |")


if __name__ == "__main__":
    main()
