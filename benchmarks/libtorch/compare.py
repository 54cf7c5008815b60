#!/usr/bin/env python3
"""DDP for libtorch against PyTorch's DDP, the same kernels on both sides (benchmarks/RESULTS.md, "DDP for libtorch").

  python3 benchmarks/libtorch/compare.py --build build/bench --data-dir .cache/mnist --json-out libtorch.json

examples/libtorch_mnist's CNN on libtorch 1.13 (libtorch-dev) and the same network in Python on the same build
(Debian's python3-torch), batch 64 per worker, 1 intra-op thread per worker, SGD, real MNIST, 1 and 2 workers:
  mwstrat      BUILD/tools/mwstrat-launch -n N -- BUILD/benchmarks/libtorch/libtorch_throughput --loop mwstrat
  plain        BUILD/benchmarks/libtorch/libtorch_throughput --loop plain (no distribution: the ceiling); at 2, two
               such processes at once, sharing nothing: the machine's own limit for two workers (on a VM whose two
               vCPUs share a core's caches or units, a CPU second is worth less with both busy, and no distribution
               layer can scale better than that)
  ddp          N processes of /usr/bin/python3 ddp_throughput.py (torch.nn.parallel.DistributedDataParallel, gloo)
  ddp-metrics  the same plus what fit computes besides: the loss and correct count summed over the workers each step
Each run is one session (its processes share it, as a launcher's do: see main); the runs take turns within each
round (the order reversed every other round), so a busy spell of the shared machine weighs on every side. Each row
keeps the load at its start. The summary holds medians over the rounds and, for each ratio, the median of the rounds'
own ratios (the two sides of a round ran minutes apart at most). Goals (issue 45): at 1 worker mwstrat >= 1.0x DDP's
samples/s; at 2 workers scaling per CPU second >= 95% and >= 1.2x DDP's samples/s.
"""
import argparse
import json
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import benchlib  # noqa: E402
from common import procs  # noqa: E402

GOAL_ONE_WORKER = 1.0  # mwstrat ÷ DDP samples/s, 1 worker
GOAL_CPU_SCALING = 0.95  # 2 workers' samples per CPU second ÷ 1 worker's
GOAL_TWO_WORKERS = 1.2  # mwstrat ÷ DDP samples/s, 2 workers


def env_for_runs():
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("TF_CONFIG", None)
    return env


def commands(a, impl, workers):
    """The (argv, env) of each process of one run."""
    common = ["--data-dir", a.data_dir, "--batch", str(a.batch), "--warmup", str(a.warmup), "--steps", str(a.steps),
              "--threads", "1", "--learning-rate", str(a.learning_rate)]
    exe = os.path.join(a.build, "benchmarks", "libtorch", "libtorch_throughput")
    env = env_for_runs()
    if impl == "plain":  # N independent processes at once: what N busy cores of this machine give (its limit)
        return [([exe, "--loop", "plain"] + common, env) for _ in range(workers)]
    if impl == "mwstrat":
        launch = os.path.join(a.build, "tools", "mwstrat-launch")
        return [([launch, "-n", str(workers), "--", exe, "--loop", "mwstrat"] + common, env)]
    port = procs.free_ports(1)[0]
    script = [a.python, os.path.join(HERE, "ddp_throughput.py")] + common
    script += ["--metrics"] if impl == "ddp-metrics" else []
    return [(script, dict(env, RANK=str(r), WORLD_SIZE=str(workers), MASTER_PORT=str(port))) for r in range(workers)]


def autogroup():
    """Whether the kernel shares the CPU between sessions (sched_autogroup), as the results record."""
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            return f.read().strip() == "1"
    except OSError:
        return None


def shown(argv):
    return " ".join(benchlib.rel(x) if os.sep in x else x for x in argv)


def result_line(text):
    """The JSON line a run prints (mwstrat-launch prefixes its workers' lines with "[worker i] ")."""
    for line in text.splitlines():
        m = re.search(r"(\{\"impl\".*\})\s*$", line)
        if m:
            return json.loads(m.group(1))
    return None


def combined(parts):
    """One row for N plain processes that ran at once: their samples/s and CPU per step add up."""
    row = dict(parts[0])
    if len(parts) == 1:
        return row
    row["workers"] = len(parts)
    row["samples_per_s"] = sum(x["samples_per_s"] for x in parts)
    row["seconds"] = max(x["seconds"] for x in parts)
    for key in ("cpu_s_per_step", "cpu_user_s_per_step", "cpu_system_s_per_step"):
        row[key] = sum(x.get(key, 0.0) for x in parts)
    row["peak_rss_mib"] = max(x["peak_rss_mib"] for x in parts)
    return row


def summarise(rows, runs, rounds):
    med = statistics.median
    summary = {}
    for impl, workers in runs:
        mine = [x for x in rows if x["impl"] == impl and x["workers"] == workers]
        if not mine:
            continue
        per_cpu_s = [x["batch"] * x["workers"] / x["cpu_s_per_step"] for x in mine]
        summary.setdefault(impl, {})[str(workers)] = {
            "runs": len(mine),
            "samples_per_s": med([x["samples_per_s"] for x in mine]),
            "samples_per_s_min": min(x["samples_per_s"] for x in mine),
            "samples_per_s_max": max(x["samples_per_s"] for x in mine),
            "ms_per_step": med([1000 * x["seconds"] / x["steps"] for x in mine]),
            "cpu_s_per_step": med([x["cpu_s_per_step"] for x in mine]),
            "cpu_system_s_per_step": med([x.get("cpu_system_s_per_step", 0.0) for x in mine]),
            "samples_per_cpu_s": med(per_cpu_s),
            "peak_rss_mib": max(x["peak_rss_mib"] for x in mine),
        }

    def paired(fn):
        """The median over the rounds of fn(row of a round -> value), where every row it needs ran that round."""
        values = []
        for r in range(1, rounds + 1):
            got = {(x["impl"], x["workers"]): x for x in rows if x["round"] == r}
            try:
                values.append(fn(got))
            except (KeyError, ZeroDivisionError):
                pass
        return med(values) if values else None

    def rate(x):
        return x["samples_per_s"]

    def per_cpu(x):
        return x["batch"] * x["workers"] / x["cpu_s_per_step"]

    ratios = {
        "mwstrat_over_ddp_1w": paired(lambda g: rate(g[("mwstrat", 1)]) / rate(g[("ddp", 1)])),
        "mwstrat_over_ddp_2w": paired(lambda g: rate(g[("mwstrat", 2)]) / rate(g[("ddp", 2)])),
        "mwstrat_over_ddp_metrics_1w": paired(lambda g: rate(g[("mwstrat", 1)]) / rate(g[("ddp-metrics", 1)])),
        "mwstrat_over_ddp_metrics_2w": paired(lambda g: rate(g[("mwstrat", 2)]) / rate(g[("ddp-metrics", 2)])),
        "mwstrat_over_plain_1w": paired(lambda g: rate(g[("mwstrat", 1)]) / rate(g[("plain", 1)])),
        "ddp_over_plain_1w": paired(lambda g: rate(g[("ddp", 1)]) / rate(g[("plain", 1)])),
        "cpu_mwstrat_over_ddp_1w": paired(lambda g: per_cpu(g[("mwstrat", 1)]) / per_cpu(g[("ddp", 1)])),
        "cpu_mwstrat_over_ddp_2w": paired(lambda g: per_cpu(g[("mwstrat", 2)]) / per_cpu(g[("ddp", 2)])),
        "cpu_mwstrat_over_plain_1w": paired(lambda g: per_cpu(g[("mwstrat", 1)]) / per_cpu(g[("plain", 1)])),
    }
    scaling = {}
    for impl in ("mwstrat", "ddp", "ddp-metrics"):
        scaling[impl] = {
            "cpu": paired(lambda g, i=impl: per_cpu(g[(i, 2)]) / per_cpu(g[(i, 1)])),
            "wall": paired(lambda g, i=impl: rate(g[(i, 2)]) / (2 * rate(g[(i, 1)]))),
            # Against the plain loop: what 2 workers keep of a process with no distribution at all.
            "cpu_of_plain": paired(lambda g, i=impl: per_cpu(g[(i, 2)]) / per_cpu(g[("plain", 1)])),
            # Against two plain processes at once: what 2 workers keep of what this machine's two cores give.
            "cpu_of_machine": paired(lambda g, i=impl: per_cpu(g[(i, 2)]) / per_cpu(g[("plain", 2)])),
            "wall_of_machine": paired(lambda g, i=impl: rate(g[(i, 2)]) / rate(g[("plain", 2)])),
        }
    # The machine's own scaling: two independent processes' samples per CPU second against one's.
    scaling["machine"] = {"cpu": paired(lambda g: per_cpu(g[("plain", 2)]) / per_cpu(g[("plain", 1)])),
                          "wall": paired(lambda g: rate(g[("plain", 2)]) / (2 * rate(g[("plain", 1)])))}
    goals = {
        "one_worker": {"value": ratios["mwstrat_over_ddp_1w"], "goal": GOAL_ONE_WORKER},
        "cpu_scaling": {"value": scaling["mwstrat"]["cpu"], "goal": GOAL_CPU_SCALING,
                        "machine_limit": scaling["machine"]["cpu"]},
        "two_workers": {"value": ratios["mwstrat_over_ddp_2w"], "goal": GOAL_TWO_WORKERS},
    }
    for g in goals.values():
        g["met"] = g["value"] is not None and g["value"] >= g["goal"]
    return summary, ratios, scaling, goals


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--json-out", required=True)
    ap.add_argument("--python", default="/usr/bin/python3", help="the Python with Debian's python3-torch")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--learning-rate", type=float, default=0.05)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    a.build, a.data_dir = os.path.abspath(a.build), os.path.abspath(a.data_dir)
    started = benchlib.start()
    runs = [("plain", 1), ("mwstrat", 1), ("ddp", 1), ("ddp-metrics", 1), ("plain", 2), ("mwstrat", 2), ("ddp", 2),
            ("ddp-metrics", 2)]
    shown_commands = [f"{impl} × {n}{' (two processes at once, each)' if impl == 'plain' and n > 1 else ''}: "
                      + " ; ".join(shown(argv) for argv, _ in commands(a, impl, n)[:1]) for impl, n in runs]
    rows, failures = [], []
    for r in range(1, a.rounds + 1):
        order = runs if r % 2 else list(reversed(runs))
        for impl, workers in order:
            load = benchlib.loadavg()
            group = commands(a, impl, workers)
            print(f"round {r}: {impl} × {workers} (load {load})", flush=True)
            # Every process of a run in one session: mwstrat-launch's workers share the launcher's, torchrun's ranks
            # share torchrun's, and so do the DDP ranks here (this script's, which only waits). With the kernel's
            # autogroup scheduling a busy machine's CPU is shared between sessions, not threads: ranks in sessions of
            # their own would each get a launcher's share. The mwstrat and plain runs get a session of their own
            # (each one session, and a failed launcher's workers are killed with it).
            codes, texts, note = procs.run_together(group, timeout=600, session=impl in ("mwstrat", "plain"))
            parts = [result_line(out) for out, _ in texts] if impl == "plain" else [result_line(texts[0][0])]
            row = combined(parts) if parts and None not in parts else None
            if any(codes) or row is None:
                failures.append(f"{impl} × {workers} (round {r}): exit {codes} {note} {texts[0][1][-400:]}".strip())
                print(f"  FAILED: {failures[-1]}", flush=True)
                continue
            row.update(impl=impl, round=r, load_at_start=load)
            print(f"  {row['samples_per_s']:.1f} samples/s, {1000 * row['cpu_s_per_step']:.1f} CPU ms/step",
                  flush=True)
            rows.append(row)
    summary, ratios, scaling, goals = summarise(rows, runs, a.rounds)
    record = benchlib.meta("libtorch", shown_commands, a.quick, started)
    record.update(rows=rows, summary=summary, ratios=ratios, scaling=scaling, goals=goals, failures=failures,
                  rounds=a.rounds, config={"batch": a.batch, "threads": 1, "warmup": a.warmup, "steps": a.steps,
                                           "learning_rate": a.learning_rate, "optimizer": "SGD",
                                           "autogroup": autogroup(),
                                           "torch": next((x["torch"] for x in rows if x["impl"] == "ddp"), None)})
    benchlib.write_json(a.json_out, record)
    for name, g in goals.items():
        limit = f", this machine's own limit {g['machine_limit']:.3f}" if g.get("machine_limit") else ""
        print(f"goal {name}: {g['value'] if g['value'] is None else round(g['value'], 3)} "
              f"(>= {g['goal']}{limit}): {'met' if g['met'] else 'NOT met'}", flush=True)
    return 1 if not rows else 0


if __name__ == "__main__":
    sys.exit(main())
