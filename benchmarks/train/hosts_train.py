#!/usr/bin/env python3
"""Training the tutorial CNN on MNIST across 2 simulated hosts × 1 worker (and 2 hosts × 2 workers): mwstrat (fp32,
and bf16 on the wire between hosts) vs PyTorch DDP (gloo) on the same layout, at each link rate, next to one worker
alone for the scaling efficiency. With 2 workers per host mwstrat's workers share their host's /dev/shm and identity
(simhosts exec), so its default topology is the hierarchical all-reduce (shared memory within a host, TCP between).

The programs are compare.py's: train_throughput (mwstrat, TF_CONFIG naming the hosts' addresses) and
ddp_throughput.py (Debian's python3-torch, init over tcp://<h1's address>), per-worker batch 64, 1 thread, the same
--warmup/--steps span timed inside one run. Every worker runs inside its host (`scripts/simhosts exec`: its own
network namespace and /dev/shm, links shaped with tbf at the rate); the one-worker runs run inside h1 (no link).
Within a rate the configurations take turns for --rounds rounds (mwstrat 1, torch 1, mwstrat 2 fp32, mwstrat 2
bf16, mwstrat 2 bf16 with --update mirrored, torch 2, then mwstrat 2x2 and torch 2x2, then mwstrat 2 bf16 mirrored
with --overlap always; see RUNS), so a slow spell
of the shared machine hits all; ratios are taken within a round, median over rounds. Scaling is samples/s over
(workers × one worker's).

With --security the runs are instead mwstrat fp32 on 2 hosts × 1 worker plain, authenticated (MWSTRAT_JOB_TOKEN set:
every frame between hosts carries an AES-256-GCM tag) and encrypted (MWSTRAT_JOB_TOKEN and MWSTRAT_RING_ENCRYPT=1),
taking turns within each round, each round starting with the next of the three (docs/security.md); each one's step
time is held against plain's of the same round.
A sealed run whose chief does not say that its frames between hosts are sealed counts as failed. The record's family
is train_sealed (report.py's security section).

  hosts_train.py --build BUILD [--data-dir .cache/mnist] [--rates 10gbit,1gbit] [--rounds 3] [--steps 100]
                 [--workers-per-host 1,2] [--only REGEX] [--security] [--quick] [--json-out FILE]
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import benchlib  # noqa: E402
from compare import json_line, run_group  # noqa: E402  (compare.py's helpers: one group of workers, rank 0's JSON)

SIMHOSTS = os.path.join(ROOT, "scripts", "simhosts")
TORCH_PYTHON = "/usr/bin/python3"  # Debian's python3-torch
HOSTS = 2


class Configs:
    def __init__(self, a, name):
        self.a, self.name, self.port = a, name, 21000

    def args(self):
        a = self.a
        return ["--data-dir", a.data_dir, "--batch", str(a.batch), "--warmup", str(a.warmup), "--steps",
                str(a.steps), "--threads", "1"]

    def env(self):
        env = dict(os.environ, OMP_NUM_THREADS="1")
        for k in ("TF_CONFIG", "OPENBLAS_CORETYPE", "MASTER_ADDR", "MASTER_PORT", "MWSTRAT_RING_COMPRESSION",
                  "MWSTRAT_JOB_TOKEN", "MWSTRAT_RING_ENCRYPT"):
            env.pop(k, None)
        return env

    def in_host(self, h, argv):
        return [SIMHOSTS, "--name", self.name, "exec", f"h{h + 1}", "--"] + argv

    def mwstrat(self, n, compression, update, per_host=1, seal="plain"):
        """n workers, worker k on host k // per_host (ranks of a host consecutive), each on a port of its own; seal:
        plain, mac (a job token) or enc (a job token and MWSTRAT_RING_ENCRYPT=1)."""
        self.port += 10
        workers = [f"10.77.0.{k // per_host + 1}:{self.port + k}" for k in range(n)]
        prog = os.path.join(self.a.build, "benchmarks", "train", "train_throughput")
        cmds = []
        for k in range(n):
            tf_config = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": k}},
                                   separators=(",", ":"))
            cmds.append((self.in_host(k // per_host, [
                "env", f"TF_CONFIG={tf_config}", f"MWSTRAT_RING_COMPRESSION={compression}"] + SEALS[seal] + [prog]
                + self.args()
                + (["--update"] + update.split() if update else [])), self.env()))
        return cmds

    def torch(self, n, per_host=1):
        self.port += 10
        script = os.path.join(HERE, "ddp_throughput.py")
        return [(self.in_host(k // per_host, ["env", f"RANK={k}", f"WORLD_SIZE={n}", "MASTER_ADDR=10.77.0.1",
                                              f"MASTER_PORT={self.port}", "GLOO_SOCKET_IFNAME=eth0", TORCH_PYTHON,
                                              script] + self.args()), self.env()) for k in range(n)]


# The environment of each mode of docs/security.md (the token is a benchmark's: any shared string will do).
SEALS = {"plain": [], "mac": ["MWSTRAT_JOB_TOKEN=hosts-train-token"],
         "enc": ["MWSTRAT_JOB_TOKEN=hosts-train-token", "MWSTRAT_RING_ENCRYPT=1"]}
# What the chief prints when its frames between hosts are sealed (the ring's start-up line).
SEAL_MARKERS = {"mac": "frames between hosts authenticated", "enc": "frames between hosts encrypted"}
SEAL_NAMES = {"plain": "", "mac": " authenticated", "enc": " encrypted"}

# (implementation, workers, wire compression, train_throughput's --update, workers per host). With the default update
# placement the fit's gradient all-reduce is all_reduce_update: its reduce-scatter goes bf16 but the parameters it
# gathers travel exact (fp32), so bf16 saves a quarter of the bytes; `--update mirrored` all-reduces the gradients
# (both halves bf16) and every worker applies the whole update. One worker (per_host 1, 1 worker) is the baseline.
RUNS = [("mwstrat", 1, "none", None, 1), ("torch-ddp", 1, None, None, 1), ("mwstrat", 2, "none", None, 1),
        ("mwstrat", 2, "bf16", None, 1), ("mwstrat", 2, "bf16", "mirrored", 1), ("torch-ddp", 2, None, None, 1),
        ("mwstrat", 4, "none", None, 2), ("torch-ddp", 4, None, None, 2),
        # The fastest mwstrat configuration at 1 Gbit/s: bf16, every worker applies the update, and the all-reduce
        # overlapping backward in buckets (the automatic rule does not overlap here: both simulated hosts share this
        # machine's CPUs, so it counts them as one full machine; at 10 Gbit/s, CPU-bound, overlap does not pay).
        ("mwstrat", 2, "bf16", "mirrored --overlap always", 1)]
# --security: (the same fields, then the seal); 2 hosts × 2 with --workers-per-host 2.
SEALED_RUNS = [("mwstrat", 2 * per_host, "none", None, per_host, seal) for per_host in (1, 2)
               for seal in ("plain", "mac", "enc")]


def label(impl, n, compression, update=None, per_host=1, seal="plain"):
    layout = f"{HOSTS}x{per_host}" if per_host > 1 else str(n)
    return (impl + (" bf16" if compression == "bf16" else "") + (f" --update {update}" if update else "")
            + SEAL_NAMES[seal] + f" × {layout}")


def rotated(runs, rnd):
    """--security's order in round rnd: each layout's three modes start in turn (plain, mac, enc; then mac, enc,
    plain; ...), so that none is always the one that follows the same other."""
    order = []
    for per_host in sorted({r[4] for r in runs}):
        mine = [r for r in runs if r[4] == per_host]
        k = (rnd - 1) % len(mine)
        order += mine[k:] + mine[:k]
    return order


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--data-dir", default=os.path.join(ROOT, ".cache", "mnist"))
    ap.add_argument("--rates", default="10gbit,1gbit")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--timeout", type=float, default=300, help="seconds per run")
    ap.add_argument("--quick", action="store_true", help="1 round of 30 steps")
    ap.add_argument("--json-out")
    ap.add_argument("--workers-per-host",
                    help="layouts to run besides the one-worker baselines: 1 (2 hosts x 1), 2 (2 hosts x 2); "
                         "default 1,2 (with --security: 1)")
    ap.add_argument("--only", help="a regular expression: run only the configurations whose label matches it "
                                   "(and the one-worker baselines), e.g. 'mirrored|torch-ddp × 2'")
    ap.add_argument("--security", action="store_true",
                    help="plain vs authenticated vs encrypted frames between the hosts instead (family train_sealed)")
    a = ap.parse_args()
    default_layouts = "1" if a.security else "1,2"
    a.workers_per_host = a.workers_per_host or default_layouts
    per_hosts = {int(x) for x in a.workers_per_host.split(",")}
    if a.security:
        runs = [r for r in SEALED_RUNS if r[4] in per_hosts]
    else:
        runs = [r + ("plain",) for r in RUNS if r[1] == 1 or r[4] in per_hosts]
    if a.only:
        runs = [r for r in runs if r[1] == 1 or re.search(a.only, label(*r))]
    a.build, a.data_dir = os.path.abspath(a.build), os.path.abspath(a.data_dir)
    if a.quick:
        a.rounds, a.steps = 1, 30
    started = benchlib.start()
    check = subprocess.run([SIMHOSTS, "check"], capture_output=True, text=True)
    rows, failures, commands = [], [], []
    skipped = None if check.returncode == 0 else "scripts/simhosts unavailable: " + check.stdout.strip()
    if skipped:
        print("skipped: " + skipped, flush=True)
    else:
        subprocess.run([SIMHOSTS, "gc"], capture_output=True)
    for rate in ([] if skipped else a.rates.split(",")):
        name = subprocess.run([SIMHOSTS, "up", str(HOSTS), "--rate", rate, "--owner", str(os.getpid())],
                              capture_output=True, text=True, check=True).stdout.strip()
        try:
            c = Configs(a, name)
            for rnd in range(1, a.rounds + 1):
                for impl, n, compression, update, per_host, seal in (rotated(runs, rnd) if a.security else runs):
                    lab = label(impl, n, compression, update, per_host, seal)
                    cmds = (c.mwstrat(n, compression, update, per_host, seal) if impl == "mwstrat"
                            else c.torch(n, per_host))
                    if rnd == 1 and rate == a.rates.split(",")[0]:
                        commands.append(f"[{lab}] " + " & ".join(
                            shlex.join(benchlib.rel(x) if x.startswith("/") else x for x in argv).replace(name, "$SET")
                            for argv, _ in cmds))
                    load = benchlib.loadavg()
                    codes, out, err = run_group(cmds, a.timeout)
                    rec = json_line(out, impl)
                    unsealed = seal in SEAL_MARKERS and SEAL_MARKERS[seal] not in err
                    if rec is None or any(codes) or unsealed:
                        failures.append(f"{rate} {lab} round {rnd}: exit codes {codes}"
                                        + (f" but no '{SEAL_MARKERS[seal]}' from the chief" if unsealed else "")
                                        + f": {err.strip()[-1500:]}")
                        print("FAILED " + failures[-1], flush=True)
                        continue
                    rec.update(rate=rate, round=rnd, label=lab, compression=compression, update_option=update,
                               hosts=min(n, HOSTS), workers=n, workers_per_host=per_host, seal=seal,
                               load_at_start=load)
                    rows.append(rec)
                    print(f"round {rnd} {rate:7s} {rec['label']:24s} {rec['steps_per_s']:7.2f} steps/s "
                          f"{rec['samples_per_s']:8.1f} samples/s  {rec['cpu_s_per_step'] * 1e3:6.1f} CPU ms/step "
                          + (f"(user {rec['cpu_user_s_per_step'] * 1e3:.1f}, system "
                             f"{rec['cpu_system_s_per_step'] * 1e3:.1f}, {rec['context_switches_per_step']:.0f} "
                             f"switches) " if "cpu_user_s_per_step" in rec else "")
                          + f"(load {load})", flush=True)
        finally:
            subprocess.run([SIMHOSTS, "--name", name, "down"], capture_output=True)

    def find(rate, lab, rnd):
        return next((r for r in rows if r["rate"] == rate and r["label"] == lab and r["round"] == rnd), None)

    summary = []
    for rate in ([] if skipped else a.rates.split(",")):
        for impl, n, compression, update, per_host, seal in runs:
            lab = label(impl, n, compression, update, per_host, seal)
            done = [r for r in rows if r["rate"] == rate and r["label"] == lab]
            if not done:
                continue
            vs_ddp, scaling, vs_plain = [], [], []
            for r in done:
                ddp = find(rate, label("torch-ddp", n, None, None, per_host), r["round"])
                one = find(rate, label(impl, 1, None), r["round"])
                plain = find(rate, label(impl, n, compression, update, per_host), r["round"])
                if ddp:
                    vs_ddp.append(r["steps_per_s"] / ddp["steps_per_s"])
                if one and n > 1:
                    scaling.append(r["samples_per_s"] / (n * one["samples_per_s"]))
                if plain and a.security:  # step time ÷ plain's step time, the same round
                    vs_plain.append(plain["steps_per_s"] / r["steps_per_s"])
            summary.append({"rate": rate, "label": lab, "impl": impl, "workers": n, "hosts": min(n, HOSTS),
                            "workers_per_host": per_host, "compression": compression, "seal": seal,
                            "rounds": len(done),
                            "steps_per_s": statistics.median(r["steps_per_s"] for r in done),
                            "samples_per_s": statistics.median(r["samples_per_s"] for r in done),
                            "cpu_ms_per_step": 1e3 * statistics.median(r["cpu_s_per_step"] for r in done),
                            "cpu_user_ms_per_step": 1e3 * statistics.median(r.get("cpu_user_s_per_step", 0) for r in done),
                            "cpu_system_ms_per_step":
                                1e3 * statistics.median(r.get("cpu_system_s_per_step", 0) for r in done),
                            "over_ddp": statistics.median(vs_ddp) if vs_ddp else None,
                            "scaling": statistics.median(scaling) if scaling else None,
                            "time_over_plain": statistics.median(vs_plain) if vs_plain else None,
                            "over_ddp_per_round": vs_ddp, "scaling_per_round": scaling,
                            "time_over_plain_per_round": vs_plain})
            s = summary[-1]
            print(f"{rate:7s} {lab:24s} {s['steps_per_s']:7.2f} steps/s {s['cpu_ms_per_step']:6.1f} CPU ms/step"
                  + (f"  {s['over_ddp']:.2f}x DDP's" if s["over_ddp"] else "")
                  + (f"  scaling {100 * s['scaling']:.0f}%" if s["scaling"] else "")
                  + (f"  step time {s['time_over_plain']:.3f}x plain's" if s["time_over_plain"] else ""), flush=True)
    if a.json_out:
        argv = ["benchmarks/train/hosts_train.py", "--build", benchlib.rel(a.build), "--data-dir",
                benchlib.rel(a.data_dir), "--rates", a.rates] + (
            ["--quick"] if a.quick else ["--rounds", str(a.rounds), "--steps", str(a.steps)]) + (
            ["--workers-per-host", a.workers_per_host] if a.workers_per_host != default_layouts else []) + (
            ["--only", a.only] if a.only else []) + (["--security"] if a.security else [])
        rec = benchlib.meta("train_sealed" if a.security else "train_hosts", [" ".join(argv)] + commands, a.quick,
                            started)
        rec.update(set_note="$SET: the simulated hosts made by `scripts/simhosts up 2 --rate RATE` for each rate; "
                            "the workers of one command line start together ('&')", rows=rows, summary=summary,
                   failures=failures, simhosts_skipped=skipped, rounds=a.rounds,
                   config={"batch": a.batch, "warmup": a.warmup, "steps": a.steps, "threads": 1,
                           "openblas_coretype": "Debian's default"})
        benchlib.write_json(a.json_out, rec)
    return 1 if failures and not rows else 0


if __name__ == "__main__":
    sys.exit(main())
