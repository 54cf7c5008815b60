#!/usr/bin/env python3
"""All-reduce bus bandwidth: mwstrat's ring vs Gloo vs OpenMPI (TCP), over several interleaved rounds, with verdicts.

On a small shared machine one run of each program differs from the next by up to 20%, enough to flip a
comparison. This runs every program once per round (ring, Gloo, OpenMPI with 2 then 4 processes: what
compare.sh runs once), --rounds times (3), so that a change of load hits all of them alike, and prints for
each (ranks, bytes) the median bus bandwidth of each over the rounds, how many rounds the ring's TCP row was
ahead of both peers, and issue 4's verdicts at >= 1 MiB: at least Gloo's and OpenMPI's bus bandwidth, and
>= 75% of the loopback TCP duplex bandwidth measured by the same ring benchmark.

  python3 benchmarks/collective/compare.py --build build/collective-release [--rounds 3]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import benchlib  # noqa: E402


def run(argv, env=None):
    out = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=900)
    if out.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({out.returncode}):\n{out.stdout}")
    return out.stdout


def numbers(line):
    try:
        return [float(x) for x in line.split()]
    except ValueError:
        return None


def parse_ring(text, into, duplex):
    for line in text.splitlines():
        if line.startswith("loopback TCP duplex,"):
            # "loopback TCP duplex, N processes in a ring: X GB/s per direction (wall), ..."
            ranks = int(line.split(",")[1].split()[0])
            duplex.setdefault(ranks, []).append(float(line.split(":")[1].split()[0]))
            continue
        parts = line.split()
        if len(parts) == 9 and parts[1] in ("tcp", "shm") and numbers(parts[0] + " " + parts[2]):
            into.setdefault(("ring-" + parts[1], int(parts[0]), int(parts[2])), []).append(float(parts[4]))


def parse_table(text, impl, into):
    for line in text.splitlines():
        v = numbers(line)
        if v and len(v) >= 4:
            into.setdefault((impl, int(v[0]), int(v[1])), []).append(v[3])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json-out", default=None, help="write the medians, the duplex and the machine here")
    ap.add_argument("--quick", action="store_true", help="only marks the JSON as a quick run")
    args = ap.parse_args()
    started = benchlib.start()
    bin_dir = os.path.join(args.build, "benchmarks", "collective")
    ring = os.path.join(bin_dir, "mwstrat_bench_collective")
    gloo = os.path.join(bin_dir, "mwstrat_bench_collective_gloo")
    mpi = os.path.join(bin_dir, "mwstrat_bench_collective_mpi")
    if not os.access(ring, os.X_OK):
        sys.exit(f"{ring} not found: build with -DMWSTRAT_BUILD_BENCHMARKS=ON first")
    have_gloo = os.access(gloo, os.X_OK)
    have_mpi = os.access(mpi, os.X_OK) and shutil.which("mpirun") is not None
    mpi_env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"== {benchlib.cpu_model()}; load at start: {load}, {os.cpu_count()} cores, {args.rounds} rounds"
          f"{'' if have_gloo else ', no Gloo build'}{'' if have_mpi else ', no OpenMPI build'}")

    bw, duplex = {}, {}
    for r in range(args.rounds):
        print(f"   round {r + 1}/{args.rounds}", flush=True)
        parse_ring(run([ring, "--ranks", "2,4"]), bw, duplex)
        if have_gloo:
            parse_table(run([gloo, "--ranks", "2,4"]), "gloo", bw)
        if have_mpi:
            for n in (2, 4):
                parse_table(run(["mpirun", "-np", str(n), "--oversubscribe", "--bind-to", "none", "--mca", "btl",
                                 "tcp,self", "--mca", "btl_tcp_if_include", "lo", mpi], env=mpi_env), "mpi", bw)

    def med(key):
        v = bw.get(key)
        return statistics.median(v) if v else None

    def cell(x):
        return f"{x:.2f}" if x is not None else "—"

    print()
    print("Bus bandwidth, GB/s, median of the rounds (ring wins: rounds where ring-tcp beat both peers):")
    print()
    print("| ranks | bytes | ring tcp | ring shm | Gloo | OpenMPI | ring tcp ÷ best peer | ring wins | of duplex |")
    print("|---|---|---|---|---|---|---|---|---|")
    verdict_peers, verdict_duplex = [], []
    rows = []
    sizes = sorted({k[2] for k in bw if k[0] == "ring-tcp"})
    for ranks in (2, 4):
        d = statistics.median(duplex[ranks]) if duplex.get(ranks) else None
        for size in sizes:
            tcp, shm = med(("ring-tcp", ranks, size)), med(("ring-shm", ranks, size))
            g, m = med(("gloo", ranks, size)), med(("mpi", ranks, size))
            peers = [p for p in (g, m) if p is not None]
            best = max(peers) if peers else None
            rounds_won = 0
            rounds = bw.get(("ring-tcp", ranks, size), [])
            for i, t in enumerate(rounds):
                others = [bw[(impl, ranks, size)][i] for impl in ("gloo", "mpi")
                          if (impl, ranks, size) in bw and i < len(bw[(impl, ranks, size)])]
                rounds_won += all(t >= o for o in others)
            share = tcp / d if tcp is not None and d else None
            ratio = tcp / best if tcp is not None and best else None
            rows.append({"ranks": ranks, "bytes": size, "ring_tcp": tcp, "ring_shm": shm, "gloo": g, "mpi": m,
                         "ring_wins": rounds_won, "rounds": len(rounds)})
            print(f"| {ranks} | {size} | {cell(tcp)} | {cell(shm)} | {cell(g)} | {cell(m)} | "
                  f"{f'{ratio:.2f}×' if ratio else '—'} | {rounds_won}/{len(rounds)} | "
                  f"{f'{share:.0%}' if share else '—'} |")
            if size >= 1 << 20 and tcp is not None:
                if best is not None:
                    verdict_peers.append((ranks, size, ratio))
                if share is not None:
                    verdict_duplex.append((ranks, size, share))
    print()
    print("duplex (GB/s per direction, median): " +
          ", ".join(f"{n} processes {statistics.median(v):.2f}" for n, v in sorted(duplex.items())))
    print()
    print("goals (issue 4, sizes >= 1 MiB, medians):")
    missed = [f"{n} ranks/{s >> 20} MiB ({r:.2f}×)" for n, s, r in verdict_peers if r < 1.0]
    print(f"  at least Gloo's and OpenMPI's bus bandwidth: "
          f"{len(verdict_peers) - len(missed)} of {len(verdict_peers)} cells"
          + (f"; behind in {', '.join(missed)}" if missed else ": met"))
    low = [f"{n} ranks/{s >> 20} MiB ({x:.0%})" for n, s, x in verdict_duplex if x < 0.75]
    print(f"  >= 75% of loopback TCP duplex: {len(verdict_duplex) - len(low)} of {len(verdict_duplex)} cells"
          + (f"; below in {', '.join(low)}" if low else ": met"))
    if args.json_out:
        command = f"python3 benchmarks/collective/compare.py --build {benchlib.rel(args.build)} --rounds {args.rounds}"
        record = benchlib.meta("collective", [command], args.quick, started)
        record.update(rounds=args.rounds, have_gloo=have_gloo, have_mpi=have_mpi, rows=rows,
                      duplex={str(n): statistics.median(v) for n, v in sorted(duplex.items())})
        benchlib.write_json(args.json_out, record)


if __name__ == "__main__":
    main()
