#!/usr/bin/env python3
"""An elastic job's goodput under a fault campaign, and the time of a join: examples/mnist_multiworker, N workers under
`mwstrat-launch --min-workers N-1 --max-workers N` (a lost worker is not replaced: the survivors shrink at once, and
the lost worker's node "returns" --join-delay seconds later as a joiner, taken in at a step boundary with the state
from a member's memory). First the job runs without faults (its wall time and model are the reference); then
`mwstrat-fault-campaign --elastic` runs it under one SIGKILL every --gaps seconds (each a separate campaign) and
reports the goodput — training steps per second against the fault-free run, both training the same steps with the
same global batch — and the time from each loss to training again. From the campaigns' logs also each join: the
chief's "training again on 3 workers ... X ms after the joiners were due" (the larger ring, the joiner's identity
check, the state from memory, the resharded data) and the state's size and transfer time. Every run's workers
write their steps' wall-clock times (the example's --step-times): the record holds each campaign's throughput per
second over the run with its shrinks and joins marked (benchmarks/report.py draws it: elastic_goodput_timeline.png).

Three workers on this machine share two cores, so a group of two is no slower per step than three (the cores, not
the workers, bound the step) and the goodput comes out above 100%. Two workers (--workers 2) have a core each, as
separate machines would: a shrunk group of one then computes each step's global batch alone, at half the speed,
until the joiner is back — the cost of a shrink that separate machines see. --cpu-per-worker C gives each worker
slot a CPU budget of its own instead (a cgroup with a CFS quota of C CPUs, the slot's joiner put in the same one):
then 3 or 4 workers on two cores are as many machines of C CPUs each, and a shrunk group has that much less
compute, as it would between machines. The shared machine's speed drifts by several percent between runs of minutes:
--repeats R runs R rounds of a fault-free run and the campaigns, each campaign against its own round's run, and
takes the median.

  elastic_goodput.py --build BUILD [--data-dir .cache/mnist] [--seconds 240] [--gaps 60,15] [--join-delay 5]
                     [--spare-wait 0] [--workers 3] [--cpu-per-worker C] [--repeats R]
                     [--model mnist|resnet20 [--cifar-dir .cache/cifar10]] [--json-out FILE]
"""
import argparse
import os
import re
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

JOIN = re.compile(r"training again on (\d+) workers from global step (\d+), ([\d.]+) ms after the joiners were due")
STEP_TIME = re.compile(r"step (\d+) workers (\d+) at ([\d.]+)")
STATE = re.compile(r"training state of global step \d+ .* sent from rank \d+'s memory: ([\d.]+) MB in (\d+) ms")
REPORT = {
    "goodput_percent": re.compile(r"goodput: ([\d.]+)%"),
    "loss_to_training_p50_ms": re.compile(r"from a loss to training again: p50 (\d+) ms"),
    "loss_to_training_p99_ms": re.compile(r"from a loss to training again: p50 \d+ ms, p99 (\d+) ms"),
    "faults_injected": re.compile(r"faults injected: (\d+)"),
    "faults_survived": re.compile(r"faults survived: (\d+)"),
    "campaign_seconds": re.compile(r"campaign run: ([\d.]+) s"),
    "model_difference_e6": re.compile(r"largest difference ([\d.]+)e-6"),
}


CGROUP_CPU = "/sys/fs/cgroup/cpu"  # cgroup v1's cpu controller (where v2 is mounted instead: not supported here)

# Puts the worker in its slot's cgroup (the slot: TF_CONFIG's task index, the same for the slot's joiner), then runs
# it: "$1" the folder of the slots' cgroups, the rest the worker's command line.
SLOT_WRAPPER = r"""#!/bin/sh
set -e
slot=$(printf '%s' "$TF_CONFIG" | sed -n 's/.*"index": *\([0-9]*\).*/\1/p')
folder="$1"; shift
echo $$ > "$folder/w$slot/cgroup.procs"
exec "$@"
"""


def cpu_slots(a, work):
    """The slots' cgroups, each with a quota of --cpu-per-worker CPUs (a 10 ms period: a throttled worker waits
    milliseconds, not the default period's 100); returns the wrapper's argv prefix, or [] without the option."""
    if not a.cpu_per_worker:
        return []
    folder = os.path.join(CGROUP_CPU, f"mwstrat-goodput-{os.getpid()}")
    os.makedirs(folder, exist_ok=True)
    for k in range(a.workers):
        slot = os.path.join(folder, f"w{k}")
        os.makedirs(slot, exist_ok=True)
        with open(os.path.join(slot, "cpu.cfs_period_us"), "w") as f:
            f.write("10000")
        with open(os.path.join(slot, "cpu.cfs_quota_us"), "w") as f:
            f.write(str(int(10000 * a.cpu_per_worker)))
    wrapper = os.path.join(work, "slot-wrapper.sh")
    with open(wrapper, "w") as f:
        f.write(SLOT_WRAPPER)
    os.chmod(wrapper, 0o755)
    a.cgroup_folder = folder
    return [wrapper, folder]


def slot_usage(a):
    """Each slot's CFS periods and how many of them ended throttled (cpu.stat): the evidence that the quota held
    the slot back, or None without --cpu-per-worker."""
    folder = getattr(a, "cgroup_folder", None)
    if not folder:
        return None
    usage = []
    for k in range(a.workers):
        stat = {}
        with open(os.path.join(folder, f"w{k}", "cpu.stat")) as f:
            for line in f:
                key, value = line.split()
                stat[key] = int(value)
        usage.append({"slot": k, "periods": stat.get("nr_periods"), "throttled_periods": stat.get("nr_throttled"),
                      "throttled_s": stat.get("throttled_time", 0) / 1e9})
    return usage


def remove_cpu_slots(a):
    folder = getattr(a, "cgroup_folder", None)
    if not folder:
        return
    for k in range(a.workers):
        try:
            os.rmdir(os.path.join(folder, f"w{k}"))  # a cgroup goes once its processes have
        except OSError as e:
            print(f"cannot remove {folder}/w{k}: {e}", file=sys.stderr)
    try:
        os.rmdir(folder)
    except OSError:
        pass


def job_command(a, launch, example, model_dir, steps, times_prefix):
    n = a.workers
    elastic = [launch, "-n", str(n), "--min-workers", str(n - 1), "--max-workers", str(n), "--max-restarts", "1000",
               "--spare-wait", str(int(a.spare_wait * 1000)), "--join-delay", str(int(a.join_delay * 1000)),
               "--"] + a.wrapper
    if a.model == "resnet20":
        # The CIFAR-10 example (its global batch: 16 per worker × the -n workers, kept through shrinks and joins;
        # elastic through the launcher's variables).
        return elastic + [example, "--data-dir", a.cifar_dir, "--depth", "20", "--seed", "7", "--no-test",
                          "--batch-size", "16", "--epochs", "1", "--steps-per-epoch", str(steps),
                          "--validation-steps", "1", "--model-dir", model_dir, "--step-times", times_prefix]
    return elastic + [example, "--data-dir", a.data_dir, "--seed", "7", "--no-test", "--optimizer", "sgd",
                      "--learning-rate", "0.01", "--batch-size", "16", "--global-batch", "48",
                      "--epochs", "1", "--steps-per-epoch", str(steps), "--recovery-timeout", "60", "--model-dir",
                      model_dir, "--step-times", times_prefix]


def timeline(times_prefix, bin_s=1.0):
    """Throughput over a run from its workers' --step-times files: each global step at the time it was last
    trained (a step trained again after a shrink replaces the earlier one), steps per second in bins of `bin_s`
    from the first step, and the times the group shrank and grew (the workers count between consecutive steps)."""
    final = {}
    folder, stem = os.path.split(times_prefix)
    for name in os.listdir(folder):
        if not name.startswith(stem + ".w"):
            continue
        with open(os.path.join(folder, name)) as f:
            for line in f:
                m = STEP_TIME.match(line)
                if m:
                    step, workers, at = int(m.group(1)), int(m.group(2)), float(m.group(3))
                    if step not in final or final[step][1] < at:
                        final[step] = (workers, at)
    if not final:
        return None
    steps = sorted(final)
    t0 = min(at for _, at in final.values())
    bins = [0] * (int((max(at for _, at in final.values()) - t0) / bin_s) + 1)
    for _, at in final.values():
        bins[int((at - t0) / bin_s)] += 1
    shrinks, joins = [], []
    for before, after in zip(steps, steps[1:]):
        (w0, _), (w1, t1) = final[before], final[after]
        if w1 < w0:
            shrinks.append(round(t1 - t0, 3))
        elif w1 > w0:
            joins.append(round(t1 - t0, 3))
    return {"bin_s": bin_s, "steps_per_s": [c / bin_s for c in bins], "shrinks_s": shrinks, "joins_s": joins,
            "steps": len(final), "span_s": max(at for _, at in final.values()) - t0}


def steady_rate(times_prefix):
    """Steps per second between the first and the last step of a run's --step-times files; None without them."""
    t = timeline(times_prefix) if os.path.isdir(os.path.dirname(times_prefix)) else None
    if not t or t["steps"] < 2 or t["span_s"] <= 0:
        return None
    return (t["steps"] - 1) / t["span_s"]


def per_gap(rows, gap):
    """One gap's campaigns over the rounds: the median goodput (and each round's), every fault's counts summed, the
    median of the rounds' p50 and the largest p99 (no p99 over faults across rounds can be computed from them), the
    timeline of the round whose goodput is the median's."""
    these = [r for r in rows if r["gap_s"] == gap]
    scored = sorted((r for r in these if r["goodput_percent"] is not None), key=lambda r: r["goodput_percent"])
    middle = scored[(len(scored) - 1) // 2] if scored else these[-1]
    total = lambda key: sum(r[key] or 0 for r in these)  # noqa: E731
    p50s = [r["loss_to_training_p50_ms"] for r in these if r["loss_to_training_p50_ms"] is not None]
    p99s = [r["loss_to_training_p99_ms"] for r in these if r["loss_to_training_p99_ms"] is not None]
    return {"gap_s": gap, "rounds": len(these), "goodput_percent": middle["goodput_percent"],
            "goodput_rounds": [r["goodput_percent"] for r in these],
            "faults_scheduled": total("faults_scheduled"), "faults_injected": total("faults_injected"),
            "faults_survived": total("faults_survived"), "joined": total("joined"), "joins": total("joins"),
            "loss_to_training_p50_ms": statistics.median(p50s) if p50s else None,
            "loss_to_training_p99_ms": max(p99s) if p99s else None,
            "exit_status": max(r["exit_status"] for r in these),
            "model_difference_e6": max((r["model_difference_e6"] for r in these
                                        if r["model_difference_e6"] is not None), default=None),
            "timeline": middle.get("timeline")}


def timed(argv, log_path, limit):
    began = time.monotonic()
    with open(log_path, "w") as log:
        code = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, timeout=limit).returncode
    return code, time.monotonic() - began


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--model", choices=["mnist", "resnet20"], default="mnist",
                    help="the MNIST example's CNN, or ResNet-20 on CIFAR-10 (examples/cifar10_resnet)")
    ap.add_argument("--data-dir", default=os.path.join(ROOT, ".cache", "mnist"))
    ap.add_argument("--cifar-dir", default=os.path.join(ROOT, ".cache", "cifar10"))
    ap.add_argument("--seconds", type=float, default=240, help="the fault-free run's rough length")
    ap.add_argument("--gaps", default="60,15", help="seconds between faults, one campaign each")
    ap.add_argument("--join-delay", type=float, default=5, help="seconds until a lost worker's node returns")
    ap.add_argument("--spare-wait", type=float, default=0, help="seconds the survivors wait for it before shrinking")
    ap.add_argument("--workers", type=int, default=3, help="2 on a 2-core machine: one core each, as on separate "
                    "machines (three share two cores, and a group of two is then no slower than three)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="rounds of a fault-free run and the campaigns; the goodput is the rounds' median")
    ap.add_argument("--cpu-per-worker", type=float, default=0,
                    help="each worker slot's CPU budget (a cgroup's quota), as on machines of that many CPUs")
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()
    if a.repeats < 1:
        ap.error("--repeats must be at least 1")
    if a.cpu_per_worker and not os.access(CGROUP_CPU, os.W_OK):
        ap.error(f"--cpu-per-worker needs a writable {CGROUP_CPU} (cgroup v1's cpu controller, as root)")
    launch = os.path.join(a.build, "tools", "mwstrat-launch")
    campaign = os.path.join(a.build, "tools", "mwstrat-fault-campaign")
    example = (os.path.join(a.build, "examples", "cifar10_resnet", "cifar10_resnet") if a.model == "resnet20" else
               os.path.join(a.build, "examples", "mnist_multiworker", "mnist_multiworker"))
    started = benchlib.start()
    with tempfile.TemporaryDirectory(prefix="mwstrat-goodput-") as work:
        a.wrapper = cpu_slots(a, work)
        try:
            return measure(a, launch, campaign, example, work, started)
        finally:
            remove_cpu_slots(a)


def measure(a, launch, campaign, example, work, started):
    # Calibrate: how many steps make a run of about --seconds (a short fault-free run, then scaled).
    probe_steps = 200
    code, took = timed(job_command(a, launch, example, os.path.join(work, "probe"), probe_steps,
                                   os.path.join(work, "probe-steps")),
                       os.path.join(work, "probe.log"), 600)
    if code != 0:
        raise RuntimeError("the probe run failed: " + open(os.path.join(work, "probe.log")).read()[-3000:])
    # The probe's own step times where it writes them (MNIST): its wall time holds the start-up too (the data read,
    # the ring), so scaling by it would make the runs too short for the gaps' faults.
    rate = steady_rate(os.path.join(work, "probe-steps"))
    startup = took - (probe_steps / rate if rate else 0)
    steps = max(100, int(rate * max(a.seconds - startup, 1)) if rate else int(probe_steps * a.seconds / max(took, 1e-3)))
    model_dir = os.path.join(work, "model")
    rows, commands, joins, states, references = [], [], [], [], []
    # Rounds: a fault-free run, then the campaigns, each campaign's goodput against its own round's fault-free run,
    # so a slow or fast spell of the shared machine weighs on both sides of a ratio.
    for rnd in range(a.repeats):
        job = job_command(a, launch, example, model_dir, steps, os.path.join(work, f"reference{rnd}-steps"))
        code, reference_seconds = timed(job, os.path.join(work, "reference.log"), 4 * a.seconds + 600)
        references.append(reference_seconds)
        if code != 0:
            raise RuntimeError("the fault-free run failed: " + open(os.path.join(work, "reference.log")).read()[-3000:])
        reference_model = os.path.join(work, "reference.safetensors")
        shutil.copy(os.path.join(model_dir, "model.safetensors"), reference_model)
        print(f"fault-free: {steps} steps in {reference_seconds:.1f} s ({steps / reference_seconds:.2f} steps/s)",
              flush=True)
        reference_timeline = timeline(os.path.join(work, f"reference{rnd}-steps"))
        for gap in [float(g) for g in a.gaps.split(",")]:
            faults = max(1, int(reference_seconds / gap) - 1)
            campaign_dir = os.path.join(work, f"campaign{rnd}-{gap:g}")
            times_prefix = os.path.join(work, f"campaign{rnd}-{gap:g}-steps")
            job = job_command(a, launch, example, model_dir, steps, times_prefix)
            argv = [campaign, "--elastic", "--faults", str(faults), "--kinds", "kill", "--seed", "1", "--gap-min",
                    str(gap), "--gap-max", str(gap), "--model", os.path.join(model_dir, "model.safetensors"),
                    "--reference-model", reference_model, "--reference-seconds", f"{reference_seconds:.3f}",
                    "--work-dir", campaign_dir, "--timeout", str(6 * reference_seconds + 600), "--"] + job
            result = subprocess.run(argv, capture_output=True, text=True, timeout=8 * reference_seconds + 900)
            report = result.stdout
            row = {"round": rnd, "gap_s": gap, "faults_scheduled": faults, "exit_status": result.returncode,
                   "reference_seconds": reference_seconds}
            for name, pattern in REPORT.items():
                m = pattern.search(report)
                row[name] = float(m.group(1)) if m else None
            with open(os.path.join(campaign_dir, "campaign.log")) as f:
                text = f.read()
            # Joins at a step boundary are timed from when they were due; a spare's (--spare-wait) is inside the
            # loss's own "training again" time, and is counted by the chief's "joined" line.
            these = [float(m.group(3)) for m in JOIN.finditer(text)]
            joins += these
            row["joined"] = len(re.findall(r"\[mwstrat\.recovery\] rank 0: .*joined: \d+ workers", text))
            states += [(float(m.group(1)), float(m.group(2))) for m in STATE.finditer(text)]
            row["joins"] = len(these)
            row["timeline"] = timeline(times_prefix)
            rows.append(row)
            commands.append(" ".join(benchlib.rel(x) if os.path.isabs(x) and x.startswith(ROOT) else x
                                     for x in argv[:argv.index("--model")]) + " ... -- " +
                            " ".join(benchlib.rel(x) if x.startswith(ROOT) else x for x in job))
            print(f"round {rnd + 1}: one fault every {gap:g} s: {row['faults_injected']} injected, {row['faults_survived']} survived, "
                  f"goodput {row['goodput_percent']}%, loss to training p50 {row['loss_to_training_p50_ms']} ms p99 "
                  f"{row['loss_to_training_p99_ms']} ms, {row['joined']} joined ({len(these)} at a later boundary; "
                  f"campaign exit {result.returncode})", flush=True)
            if result.returncode != 0:
                print(report[-3000:], flush=True)
    summary = {"model": a.model, "steps": steps, "reference_seconds": statistics.median(references),
               "reference_seconds_rounds": references, "join_delay_s": a.join_delay, "spare_wait_s": a.spare_wait,
               "workers": a.workers, "cpu_per_worker": a.cpu_per_worker or None, "repeats": a.repeats,
               "campaigns": [per_gap(rows, gap) for gap in sorted({r["gap_s"] for r in rows}, reverse=True)],
               "rounds": rows, "slot_cpu": slot_usage(a), "reference_timeline": reference_timeline}
    for c in summary["campaigns"]:
        print(f"one fault every {c['gap_s']:g} s: goodput {c['goodput_percent']}% (median of "
              f"{', '.join(str(g) for g in c['goodput_rounds'])}), loss to training p50 "
              f"{c['loss_to_training_p50_ms']} ms, p99 {c['loss_to_training_p99_ms']} ms", flush=True)
    if joins:
        ordered = sorted(joins)
        summary["join_ms"] = {"count": len(joins), "p50": statistics.median(joins),
                              "p99": ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))],
                              "max": ordered[-1]}
    if states:
        summary["state_mb"] = states[0][0]
        summary["state_transfer_ms_p50"] = statistics.median(ms for _, ms in states)
    print("joins: " + (f"{summary['join_ms']['count']}, p50 {summary['join_ms']['p50']:.0f} ms, p99 "
                       f"{summary['join_ms']['p99']:.0f} ms" if joins else "none"))
    if a.json_out:
        record = benchlib.meta("elastic_goodput", [f"benchmarks/train/elastic_goodput.py --build "
                                                   f"{benchlib.rel(a.build)} --seconds {a.seconds:g} --gaps {a.gaps} "
                                                   f"--join-delay {a.join_delay:g} --spare-wait {a.spare_wait:g} "
                                                   f"--workers {a.workers} --repeats {a.repeats}"
                                                   + (f" --cpu-per-worker {a.cpu_per_worker:g}"
                                                      if a.cpu_per_worker else "")
                                                   + (" --model resnet20" if a.model == "resnet20" else "")]
                               + commands, False, started)
        record["goodput"] = summary
        benchlib.write_json(a.json_out, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
