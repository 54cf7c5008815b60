#!/usr/bin/env python3
"""Training throughput of the tutorial CNN: mwstrat vs PyTorch DDP vs TensorFlow MultiWorkerMirroredStrategy.

Runs, for N workers in --workers (1 and 2), each with --threads threads (1) and per-worker batch 64:
  mwstrat         BUILD/tools/mwstrat-launch -n N -- BUILD/benchmarks/train/train_throughput ...
  torch-ddp       N processes of ddp_throughput.py (Debian's python3-torch, gloo over tcp://127.0.0.1), once with
                  Debian's OpenBLAS choosing its kernel and once with OPENBLAS_CORETYPE forced to this CPU's best
                  (SkylakeX with AVX-512, Haswell with AVX2; a kernel the CPU lacks dies of SIGILL)
  tensorflow-mwms N processes of tf_throughput.py with their own TF_CONFIG (pip's tensorflow-cpu; skipped, and
                  said so, when no Python with TensorFlow is found)
Every configuration runs --repeats times (3), interleaved (repeat 1 of everything, then repeat 2, ...) so that a
change of load hits all of them alike; the table shows the median run by samples/s. Each program times the same
span: --steps steps after --warmup warm-up steps, inside one training run, clock read at step ends.

  python3 benchmarks/train/compare.py --build build/trainbench --data-dir .cache/mnist
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import benchlib  # noqa: E402
from common import procs  # noqa: E402


def openblas_coretype():
    """The OpenBLAS kernel family this CPU runs best (None when neither AVX-512 nor AVX2 is there)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return None
    if "avx512f" in flags:
        return "SkylakeX"
    if "avx2" in flags:
        return "Haswell"
    return None


free_ports = procs.free_ports


def json_line(text, impl):
    for line in text.splitlines():
        at = line.find("{")
        if at < 0:
            continue
        try:
            record = json.loads(line[at:])
        except ValueError:
            continue
        if record.get("impl") == impl:
            return record
    return None


def run_group(commands, timeout):
    """Starts every (argv, env) at once; returns (returncodes, rank 0's stdout, everyone's stderr).

    When one process fails, or the deadline passes, the others are killed (a peer left waiting on a dead rank would
    otherwise wait for its framework's own timeout); their return codes then read -9.
    """
    codes, texts, note = procs.run_together(commands, timeout)
    return codes, texts[0][0], (note + "\n" if note else "") + "".join(e for _, e in texts)


def base_env(threads):
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    env.pop("OPENBLAS_CORETYPE", None)
    env["OMP_NUM_THREADS"] = str(threads)
    return env


def common_args(a):
    return ["--data-dir", a.data_dir, "--batch", str(a.batch), "--warmup", str(a.warmup), "--steps", str(a.steps),
            "--threads", str(a.threads)]


def mwstrat_cmd(a, n):
    launch = os.path.join(a.build, "tools", "mwstrat-launch")
    prog = os.path.join(a.build, "benchmarks", "train", "train_throughput")
    return [([launch, "-n", str(n), "--", prog] + common_args(a), base_env(a.threads))]


def torch_cmd(a, n, coretype):
    port = free_ports(1)[0]
    cmds = []
    for r in range(n):
        env = base_env(a.threads)
        env.update(RANK=str(r), WORLD_SIZE=str(n), MASTER_PORT=str(port))
        if coretype:
            env["OPENBLAS_CORETYPE"] = coretype
        cmds.append(([a.torch_python, os.path.join(HERE, "ddp_throughput.py")] + common_args(a), env))
    return cmds


def tf_cmd(a, n):
    ports = free_ports(n)
    workers = [f"127.0.0.1:{p}" for p in ports]
    cmds = []
    for r in range(n):
        env = base_env(a.threads)
        env["TF_CONFIG"] = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": r}})
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        cmds.append(([a.tf_python, os.path.join(HERE, "tf_throughput.py")] + common_args(a), env))
    return cmds


def find_tf_python(a):
    candidates = [a.tf_python] if a.tf_python else [
        os.path.join(ROOT, "build", "trainbench", "tfvenv", "bin", "python"), sys.executable, "/usr/bin/python3"]
    for c in candidates:
        if c and shutil.which(c) or (c and os.path.exists(c)):
            r = subprocess.run([c, "-c", "import tensorflow as t; print(t.__version__)"], capture_output=True,
                               text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
            if r.returncode == 0:
                return c, r.stdout.strip().splitlines()[-1]
    return None, None


def loadavg():
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build", "trainbench"))
    p.add_argument("--data-dir", default=os.path.join(ROOT, ".cache", "mnist"))
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=float, default=300, help="seconds per run")
    p.add_argument("--torch-python", default="/usr/bin/python3")
    p.add_argument("--tf-python", default=None)
    p.add_argument("--skip-tf", action="store_true")
    p.add_argument("--json-out", default=None, help="also write every run's record here")
    p.add_argument("--summary-out", default=None,
                   help="write the table's rows, the per-repeat ratios and the machine here (benchmarks/report.py)")
    p.add_argument("--quick", action="store_true", help="only marks the summary as a quick run")
    a = p.parse_args()
    started = benchlib.start()

    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; cpu: {benchlib.cpu_model()} × {os.cpu_count()}; "
          f"load average at start: {loadavg()}", flush=True)
    tf_python, tf_version = (None, None) if a.skip_tf else find_tf_python(a)
    if not a.skip_tf and tf_python is None:
        print("tensorflow: not found in any candidate Python; its rows are left out", flush=True)
    a.tf_python = tf_python

    coretype = openblas_coretype()
    configs = []  # (label, impl, workers, command factory)
    for n in a.workers:
        configs.append(("mwstrat", "mwstrat", n, lambda n=n: mwstrat_cmd(a, n)))
        configs.append(("torch-ddp (OpenBLAS default)", "torch-ddp", n, lambda n=n: torch_cmd(a, n, None)))
        if coretype:
            configs.append((f"torch-ddp (OPENBLAS_CORETYPE={coretype})", "torch-ddp", n,
                            lambda n=n: torch_cmd(a, n, coretype)))
        if tf_python:
            configs.append((f"tensorflow-mwms {tf_version}", "tensorflow-mwms", n, lambda n=n: tf_cmd(a, n)))

    records = {(c[0], c[2]): [] for c in configs}
    failures = []
    for rep in range(a.repeats):
        for label, impl, n, make in configs:
            codes, out, err = run_group(make(), a.timeout)
            rec = json_line(out, impl)
            if rec is None or any(c != 0 for c in codes):
                failures.append(f"{label} N={n} repeat {rep + 1}: exit codes {codes}\n{err[-2000:]}")
                print(f"FAILED {label} N={n} repeat {rep + 1}: exit codes {codes}", flush=True)
                continue
            rec["label"] = label
            rec["repeat"] = rep
            records[(label, n)].append(rec)
            print(f"repeat {rep + 1} {label:40s} N={n}: {rec['samples_per_s']:8.1f} samples/s, "
                  f"{rec['cpu_s_per_step'] * 1000:6.1f} CPU ms/step, peak RSS {rec['peak_rss_mib']:.1f} MiB "
                  f"(load {loadavg()})", flush=True)
    end_load = loadavg()

    med = {}
    for key, runs in records.items():
        if runs:
            runs = sorted(runs, key=lambda r: r["samples_per_s"])
            med[key] = dict(runs[len(runs) // 2], runs=len(runs),
                            spread=(runs[0]["samples_per_s"], runs[-1]["samples_per_s"]),
                            cpu_ms=1000 * statistics.median(r["cpu_s_per_step"] for r in runs))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({str(k): v for k, v in records.items()}, f, indent=1)

    print(f"\nload average at start / end: see above / {end_load}\n")
    print("| impl | workers × threads | steps/s | samples/s (global) | min–max of runs | scaling efficiency "
          "| CPU ms per step (all workers) | peak RSS per worker, MiB | mwstrat ÷ this (samples/s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, impl, n, _ in configs:
        m = med.get((label, n))
        if m is None:
            print(f"| {label} | {n} × {a.threads} | failed | | | | | | |")
            continue
        one = med.get((label, 1))
        eff = (f"{100 * m['samples_per_s'] / (n * one['samples_per_s']):.0f}%" if one and n > 1 else
               ("—" if n == 1 else "n/a"))
        mw = med.get(("mwstrat", n))
        ratio = f"{mw['samples_per_s'] / m['samples_per_s']:.2f}×" if mw else "n/a"
        rss = " / ".join(f"{v:.0f}" for v in m["peak_rss_mib_per_worker"])
        print(f"| {label} | {n} × {a.threads} | {m['steps_per_s']:.2f} | {m['samples_per_s']:.0f} | "
              f"{m['spread'][0]:.0f}–{m['spread'][1]:.0f} | {eff} | {m['cpu_ms']:.1f} | {rss} | {ratio} |")

    # The goals, judged on the medians (torch at its faster OpenBLAS setting).
    print("\ngoals (issue 7):")
    for n in a.workers:
        mw = med.get(("mwstrat", n))
        if not mw:
            continue
        if n > 1 and ("mwstrat", 1) in med:
            eff = mw["samples_per_s"] / (n * med[("mwstrat", 1)]["samples_per_s"])
            print(f"  N={n}: scaling efficiency {100 * eff:.0f}% (goal >= 85%): {'met' if eff >= 0.85 else 'NOT met'}")
        torch = [med[k] for k in med if k[1] == n and k[0].startswith("torch")]
        if torch:
            best = max(t["samples_per_s"] for t in torch)
            r = mw["samples_per_s"] / best
            print(f"  N={n}: {r:.2f}x PyTorch DDP's faster setting (goal >= 1.5x): {'met' if r >= 1.5 else 'NOT met'}")
        tfm = [med[k] for k in med if k[1] == n and k[0].startswith("tensorflow")]
        if tfm:
            r = mw["samples_per_s"] / tfm[0]["samples_per_s"]
            print(f"  N={n}: {r:.2f}x TensorFlow MWMS (goal >= 2x): {'met' if r >= 2 else 'NOT met'}")
    # The same, repeat by repeat: the runs of one repeat are seconds apart, so a slow spell of a shared machine
    # weighs on both sides of these ratios (the verdicts above stay on the medians).
    by_rep = {(r["label"], n, r["repeat"]): r for (label, n), runs in records.items() for r in runs}
    tf_label = next((c[0] for c in configs if c[1] == "tensorflow-mwms"), None)
    lines = []
    for n in a.workers:
        if n > 1 and 1 in a.workers:
            effs = [by_rep[("mwstrat", n, r)]["samples_per_s"] / (n * by_rep[("mwstrat", 1, r)]["samples_per_s"])
                    for r in range(a.repeats) if ("mwstrat", n, r) in by_rep and ("mwstrat", 1, r) in by_rep]
            if effs:
                lines.append(f"  N={n}: scaling efficiency " + ", ".join(f"{100 * e:.0f}%" for e in effs))
        if tf_label:
            rs = [by_rep[("mwstrat", n, r)]["samples_per_s"] / by_rep[(tf_label, n, r)]["samples_per_s"]
                  for r in range(a.repeats) if ("mwstrat", n, r) in by_rep and (tf_label, n, r) in by_rep]
            if rs:
                lines.append(f"  N={n}: mwstrat ÷ TensorFlow MWMS " + ", ".join(f"{x:.2f}x" for x in rs))
    if lines:
        print("\nwithin each repeat:")
        print("\n".join(lines))
    if failures:
        print("\nfailures:")
        for f in failures:
            print(f)
    if a.summary_out:
        write_summary(a, configs, med, by_rep, tf_label, failures, started)
    return 1 if failures else 0


def write_summary(a, configs, med, by_rep, tf_label, failures, started):
    rows = []
    for label, impl, n, _ in configs:
        m = med.get((label, n))
        row = {"label": label, "impl": impl, "workers": n, "threads": a.threads}
        if m:
            row.update(steps_per_s=m["steps_per_s"], samples_per_s=m["samples_per_s"], min=m["spread"][0],
                       max=m["spread"][1], cpu_ms_per_step=m["cpu_ms"],
                       peak_rss_mib_per_worker=m["peak_rss_mib_per_worker"], runs=m["runs"])
        rows.append(row)
    per_repeat = {"scaling_efficiency": {}, "vs_tensorflow": {}}
    for n in a.workers:
        if n > 1:
            per_repeat["scaling_efficiency"][str(n)] = [
                by_rep[("mwstrat", n, r)]["samples_per_s"] / (n * by_rep[("mwstrat", 1, r)]["samples_per_s"])
                for r in range(a.repeats) if ("mwstrat", n, r) in by_rep and ("mwstrat", 1, r) in by_rep]
        if tf_label:
            per_repeat["vs_tensorflow"][str(n)] = [
                by_rep[("mwstrat", n, r)]["samples_per_s"] / by_rep[(tf_label, n, r)]["samples_per_s"]
                for r in range(a.repeats) if ("mwstrat", n, r) in by_rep and (tf_label, n, r) in by_rep]
    command = (f"python3 benchmarks/train/compare.py --build {benchlib.rel(a.build)} "
               f"--data-dir {benchlib.rel(a.data_dir)} "
               f"--repeats {a.repeats} --steps {a.steps}")
    record = benchlib.meta("train", [command], a.quick, started)
    record.update(config={"batch": a.batch, "threads": a.threads, "warmup": a.warmup, "steps": a.steps,
                          "repeats": a.repeats}, rows=rows, per_repeat=per_repeat,
                  failures=[f.splitlines()[0] for f in failures])
    benchlib.write_json(a.summary_out, record)


if __name__ == "__main__":
    sys.exit(main())
