#!/usr/bin/env python3
"""Runs every comparison in benchmarks/ and writes one JSON result per comparison (what benchmarks/report.py
turns into benchmarks/RESULTS.md). scripts/bench installs, builds and then calls this; it can be run alone on a
build that has the benchmarks (a Release build with -DMWSTRAT_BUILD_BENCHMARKS=ON and tools/mwstrat-launch).

  python3 benchmarks/run.py --build build/bench --results benchmarks/results [--quick] [--only train --only peak]

Families and what each writes (RESULTS.md's sections):
  peak        peak.json                  the FP32 FMA peak, 1 and 2 threads (benchmarks/peak/fma_peak.cpp)
  train       train.json                 mwstrat vs PyTorch DDP vs TensorFlow MWMS (train/compare.py)
              train_ceiling.json         where two-worker scaling goes (train/ceiling.py)
              train_backup.json          BackupAndRestore's cost (train/backup_cost.sh, 1 and 2 workers)
  collective  collective.json            all-reduce: ring vs Gloo vs Open MPI vs loopback duplex (collective/compare.py)
              collective_mpi_algorithms.json   Open MPI's algorithms at 4 ranks (collective/mpi_algorithms.sh)
  nn          nn.json                    reference CNN vs PyTorch, dense GEMMs vs OpenBLAS (nn/compare.sh)
  checkpoint  checkpoint.json            save/load vs raw write/read (checkpoint/checkpoint_bench.cpp)
  data        data.json                  input pipeline batches/s and MNIST's peak memory (data/*.cpp)
  records     records.json               CIFAR-10 train as 8 TFRecord shards of PNGs (tools/tfrecord_convert), one pass
                                         read + decoded + augmented (pad 4, crop, flip, per-image standardization),
                                         batch 128: mwstrat's data::record_batches (data/records_bench.cpp) vs tf.data
                                         (data/tfdata_records.py), 1 and 2 threads, each run its own process,
                                         interleaved rounds; records/s, records per CPU second, peak RSS; and
                                         ResNet-56 training ms/step from those shards vs from memory
                                         (resnet/resnet_throughput.cpp --records), 1 worker × 1 thread
  resnet      resnet.json                ResNet-56 on CIFAR-10 training samples/s: mwstrat (resnet/resnet_throughput.cpp)
                                         vs PyTorch (both layouts) and TensorFlow MWMS, 1 and 2 workers × 1 thread,
                                         interleaved rounds; mwstrat's convolutions alone (--conv-kernels)
  kernels     kernels.json               the convolution kernels vs oneDNN (PyTorch) on each of ResNet-56's layer
                                         shapes, forward / data gradient / filter gradient, one thread, batch 128,
                                         interleaved rounds (kernels/compare.py)
  isa         isa.json                   kernels chosen at run time: the MNIST CNN step and the ResNet-56 step built with
                                         -march=native against the same programs built for the default x86-64 ISA,
                                         on each kernel path MWSTRAT_KERNEL_ISA forces (train_throughput, resnet_throughput;
                                         one worker, one thread, interleaved rounds)
  tta         resnet_tta.json            time to accuracy: ResNet-20 test accuracy against wall time, 2 workers, mwstrat
                                         (examples/cifar10_resnet: the build needs -DMWSTRAT_BUILD_EXAMPLES=ON) then
                                         PyTorch channels_last, the same short cosine recipe, each alone for up to
                                         --tta-budget-s (resnet/time_to_accuracy.py)
              resnet56_tta.json          the same for ResNet-56, the recipe shortened to 6 epochs (--tta-depths)
  hosts       collective_hosts.json      all-reduce between 2 simulated hosts (scripts/simhosts, tbf at 10 and 1
                                         Gbit/s; and on loopback): mwstrat fp32/bf16 vs Gloo vs Open MPI, vs the link
                                         limit (collective/hosts_bench.py)
              train_hosts.json           MNIST CNN training on 2 simulated hosts × 1 worker: mwstrat fp32/bf16 vs
                                         PyTorch DDP (gloo), at 10 and 1 Gbit/s (train/hosts_train.py)
  libtorch    libtorch.json              DDP for libtorch: examples/libtorch_mnist's CNN trained by mwstrat::fit over
                                         module_model vs PyTorch's DistributedDataParallel (gloo) on the same libtorch
                                         build vs a plain libtorch loop, 1 and 2 workers × 1 thread, interleaved
                                         rounds; samples/s and CPU s per step (libtorch/compare.py)
  security    collective_sealed.json     11 MiB all-reduce between 2 simulated hosts (1 and 2 ranks each, tbf at 10 and
                                         1 Gbit/s; and on loopback): plain vs authenticated (a job token: AES-256-GCM
                                         tags) vs encrypted frames (collective/hosts_bench.py, impls -mac/-enc)
              seal_cost.json             one core's CPU seconds per GiB to seal and open frames, and the alternatives
                                         (collective/seal_bench.cpp)
  elastic     elastic.json               an elastic job's membership change at 4, 8 and 16 ranks of the ring on loopback:
                                         the verdict, the survivors' smaller ring, one all-reduce on it
                                         (collective/shrink_bench.cpp); and with real processes, the MNIST example
                                         (3 workers, one killed per run, 50 runs): the loss seen → training again on
                                         two (train/elastic_shrink.py; the build needs -DMWSTRAT_BUILD_EXAMPLES=ON);
                                         the goodput under fault campaigns and the joins' times, MNIST and
                                         ResNet-20, and with a spare (train/elastic_goodput.py); a join's state
                                         transfer between simulated hosts against the link's rate
                                         (train/elastic_join_hosts.py)
              train_sealed.json          MNIST CNN training on 2 simulated hosts × 1 worker, plain vs authenticated vs
                                         encrypted, at 10 and 1 Gbit/s (train/hosts_train.py --security)
Every command runs in its own process group under a time limit; on expiry the whole group is killed. A failed
comparison is reported and the others still run; the exit status is non-zero if any failed.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import benchlib  # noqa: E402
from common import procs  # noqa: E402

FAMILIES = ["peak", "train", "collective", "nn", "checkpoint", "data", "records", "resnet", "kernels", "isa", "tta",
            "hosts", "libtorch", "security", "elastic"]


class Failed(Exception):
    pass


def run(argv, log, timeout, env=None, cwd=ROOT):
    """Runs argv in its own session, its output shown and appended to `log`; returns the output."""
    print(f"$ {' '.join(argv)}", flush=True)
    with open(log, "a") as f:
        f.write(f"$ {' '.join(argv)}\n")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd,
                            start_new_session=True)
    lines = []
    try:
        import threading
        timer = threading.Timer(timeout, lambda: os.killpg(proc.pid, signal.SIGKILL))
        timer.start()
        try:
            with open(log, "a") as f:
                for line in proc.stdout:
                    sys.stdout.write(line)
                    f.write(line)
                    lines.append(line)
            code = proc.wait()
        finally:
            timer.cancel()
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    try:  # whatever the command left behind in its group (a worker of a failed run) goes too
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if code != 0:
        raise Failed(f"{argv[0]} exited with {code}" + (f" (killed after {timeout} s)" if code == -9 else ""))
    return "".join(lines)


def gbench_medians(path):
    """{benchmark name: (real time, cpu time, unit)} from Google Benchmark's JSON: medians where repeated."""
    with open(path) as f:
        data = json.load(f)
    out = {}
    for b in data["benchmarks"]:
        # "BM_x/real_time" when a benchmark times wall clock: the page names benchmarks as their source does.
        name = b.get("run_name", b["name"]).replace("/real_time", "")
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        out[name] = (b["real_time"], b["cpu_time"], b["time_unit"])
    return out


def family_peak(a, log):
    exe = os.path.join(a.build, "benchmarks", "peak", "mwstrat_bench_peak")
    args = ["--threads", "1,2", "--seconds", "0.2" if a.quick else "0.5", "--repeats", "3" if a.quick else "7"]
    started = benchlib.start()
    text = run([exe] + args, log, 300)
    lines = [json.loads(x) for x in text.splitlines() if x.startswith("{")]
    record = benchlib.meta("peak", [f"{os.path.relpath(exe, ROOT)} {' '.join(args)}"], a.quick, started)
    record.update(isa=lines[0]["isa"], vector_floats=lines[0]["vector_floats"],
                  accumulators=lines[0]["accumulators"], cpu_mhz=lines[0].get("cpu_mhz"), measured=True,
                  threads={str(x["threads"]): {"gflops": x["gflops"], "runs": x["gflops_runs"], "pinned": x["pinned"]}
                           for x in lines})
    benchlib.write_json(os.path.join(a.results, "peak.json"), record)


def family_train(a, log):
    py = sys.executable
    compare = [py, os.path.join(HERE, "train", "compare.py"), "--build", a.build, "--data-dir", a.data_dir,
               "--summary-out", os.path.join(a.results, "train.json")]
    if a.tf_python:
        compare += ["--tf-python", a.tf_python]
    if a.quick:
        compare += ["--repeats", "1", "--steps", "30", "--quick"]
    run(compare, log, 3600)
    ceiling = [py, os.path.join(HERE, "train", "ceiling.py"), "--build", a.build, "--data-dir", a.data_dir,
               "--json-out", os.path.join(a.results, "train_ceiling.json")]
    ceiling += ["--rounds", "1", "--steps", "50", "--quick"] if a.quick else ["--rounds", "5"]
    run(ceiling, log, 1800)
    # BackupAndRestore's cost at save_freq 100 (backup_cost.sh prints one table row per worker count).
    started = benchlib.start()
    repeats = "1" if a.quick else "5"
    rows = []
    for workers in ("1", "2"):
        text = run(["bash", os.path.join(HERE, "train", "backup_cost.sh"), a.build, workers, repeats], log, 900,
                   env=dict(os.environ, MWSTRAT_DATA_DIR=a.data_dir))
        row = next(line for line in text.splitlines() if re.match(r"\| \d+ \| [0-9]", line))
        cells = [c.strip().rstrip("%") for c in row.strip("|").split("|")]
        rows.append({"workers": int(cells[0]), "without": float(cells[1]), "with": float(cells[2]),
                     "cost_percent": float(cells[3]), "cpu_ms_without": float(cells[4]),
                     "cpu_ms_with": float(cells[5]), "cpu_cost_percent": float(cells[6])})
    command = f"benchmarks/train/backup_cost.sh {benchlib.rel(a.build)} {{1,2}} {repeats}"
    record = benchlib.meta("train_backup", [command],
                           a.quick, started)
    record.update(repeats=int(repeats), save_freq=100, rows=rows)
    benchlib.write_json(os.path.join(a.results, "train_backup.json"), record)


def family_collective(a, log):
    cmd = [sys.executable, os.path.join(HERE, "collective", "compare.py"), "--build", a.build,
           "--json-out", os.path.join(a.results, "collective.json"), "--rounds", "1" if a.quick else "3"]
    if a.quick:
        cmd.append("--quick")
    run(cmd, log, 1800)
    # Open MPI's own algorithms at 4 ranks (only where Open MPI is built).
    mpi = os.path.join(a.build, "benchmarks", "collective", "mwstrat_bench_collective_mpi")
    if not os.access(mpi, os.X_OK):
        print("no Open MPI benchmark built: mpi_algorithms.sh skipped", flush=True)
        return
    started = benchlib.start()
    text = run(["bash", os.path.join(HERE, "collective", "mpi_algorithms.sh"), a.build, "4"], log, 900)
    series, current = {}, None
    for line in text.splitlines():
        if line.startswith("== mwstrat ring"):
            current = "ring-tcp"
        elif line.startswith("== OpenMPI, its own choice"):
            current = "mpi-default"
        elif line.startswith("== OpenMPI, coll_tuned_allreduce_algorithm"):
            current = "mpi-" + line.split()[-1]
        elif current and re.match(r"^\s*\d+\s+[0-9.]+\s*$", line):
            size, busbw = line.split()
            series.setdefault(current, {})[size] = float(busbw)
    command = f"benchmarks/collective/mpi_algorithms.sh {benchlib.rel(a.build)} 4"
    record = benchlib.meta("collective_mpi_algorithms", [command],
                           a.quick, started)
    record.update(ranks=4, busbw=series,
                  names={"3": "recursive doubling", "4": "ring", "5": "segmented ring", "6": "Rabenseifner"})
    benchlib.write_json(os.path.join(a.results, "collective_mpi_algorithms.json"), record)


def family_nn(a, log):
    env = dict(os.environ, ROUNDS="1" if a.quick else "3", MWSTRAT_BENCH_QUICK="1" if a.quick else "0")
    with tempfile.TemporaryDirectory(prefix="mwstrat-bench-nn-") as raw:
        run(["bash", os.path.join(HERE, "nn", "compare.sh"), a.build, raw, os.path.join(a.results, "nn.json")], log,
            1800, env=env)


def family_checkpoint(a, log):
    exe = os.path.join(a.build, "benchmarks", "checkpoint", "mwstrat_checkpoint_bench")
    args = ["--benchmark_min_time=0.1", "--benchmark_repetitions=1"] if a.quick else \
        ["--benchmark_min_time=0.5", "--benchmark_repetitions=5", "--benchmark_report_aggregates_only=true"]
    started = benchlib.start()
    with tempfile.TemporaryDirectory(prefix="mwstrat-bench-ckpt-") as tmp:
        raw = os.path.join(tmp, "out.json")
        run([exe] + args + [f"--benchmark_out={raw}", "--benchmark_out_format=json"], log, 900)
        medians = gbench_medians(raw)
    record = benchlib.meta("checkpoint", [f"{os.path.relpath(exe, ROOT)} {' '.join(args)}"], a.quick, started)
    record.update(rows=[{"name": k, "real_ms": v[0], "cpu_ms": v[1]} for k, v in medians.items() if v[2] == "ms"],
                  folder=os.environ.get("MWSTRAT_BENCH_DIR", tempfile.gettempdir()))
    benchlib.write_json(os.path.join(a.results, "checkpoint.json"), record)


def family_data(a, log):
    bench_dir = os.path.join(a.build, "benchmarks", "data")
    exe = os.path.join(bench_dir, "mwstrat_bench_data_pipeline")
    args = ["--benchmark_min_time=0.1", "--benchmark_repetitions=1"] if a.quick else \
        ["--benchmark_min_time=0.5", "--benchmark_repetitions=5", "--benchmark_report_aggregates_only=true"]
    started = benchlib.start()
    with tempfile.TemporaryDirectory(prefix="mwstrat-bench-data-") as tmp:
        raw = os.path.join(tmp, "out.json")
        run([exe] + args + [f"--benchmark_out={raw}", "--benchmark_out_format=json"], log, 600)
        medians = gbench_medians(raw)
    memory = {}
    for storage in ("bytes", "float"):
        text = run([os.path.join(bench_dir, "mwstrat_bench_data_memory"), storage], log, 300)
        phases = re.findall(r"^(.*?)\s+peak RSS\s+([0-9.]+) MiB", text, re.M)
        memory[storage] = {"after_load": float(phases[-2][1]), "after_epoch": float(phases[-1][1]),
                           "empty_process": float(phases[0][1])}
    rows = []
    for name, (real, cpu, unit) in medians.items():
        scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3}[unit]
        rows.append({"name": name, "real_us": real * scale, "cpu_us": cpu * scale})
    record = benchlib.meta("data", [f"{os.path.relpath(exe, ROOT)} {' '.join(args)}",
                                    f"{os.path.relpath(bench_dir, ROOT)}/mwstrat_bench_data_memory bytes|float"],
                           a.quick, started)
    record.update(rows=rows, memory=memory)
    benchlib.write_json(os.path.join(a.results, "data.json"), record)


def family_records(a, log):
    # Issue 47's input pipeline, "data as clusters hold it": CIFAR-10 train written as 8 TFRecord shards of PNG
    # images (tools/tfrecord_convert, into a temporary folder), then one full pass each of mwstrat's
    # data::record_batches (1 worker, data sharding, decode_threads 1 and 2) and tf.data (TFRecordDataset -> map
    # (parse + decode_png + the same augmentation, AUTOTUNE) -> batch(128) -> prefetch, TensorFlow's pools and
    # tf.data's private threadpool limited to 1 and 2 threads). Every run is its own process (its peak RSS its own);
    # the runs take turns within each round (mwstrat 1, tf 1, mwstrat 2, tf 2), so a busy spell of a shared machine
    # weighs on both. The figure that matters is records per CPU second (all threads' user + system time), which a
    # busy machine changes least; the goal is mwstrat ≥ 1.5× tf.data's with no more memory.
    # Then, from the same shards where resnet_throughput is built: ResNet-56 training (1 worker × 1 thread, batch
    # 128) fed from the shards (--records, 1 decode thread on the input's prefetch thread) and from the set in
    # memory, taking turns round by round; the goal is the shards' ms/step within 2% of memory's.
    started = benchlib.start()
    rounds = a.records_rounds or (1 if a.quick else 5)
    threads = (1, 2)
    convert = os.path.join(a.build, "tools", "tfrecord_convert")
    prog = os.path.join(a.build, "benchmarks", "data", "mwstrat_bench_records")
    for exe in (convert, prog):
        if not os.access(exe, os.X_OK):
            raise Failed(f"{benchlib.rel(exe)} is not built (it needs mwstrat::images: libpng and libjpeg)")
    tf_script = os.path.join(HERE, "data", "tfdata_records.py")
    env = dict(os.environ, OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    env.pop("TF_CONFIG", None)
    rows, failures, commands = [], [], []
    with tempfile.TemporaryDirectory(prefix="mwstrat-bench-records-") as shards:
        run([convert, "cifar10", a.cifar_dir, shards, "--split", "train", "--shards", "8", "--image", "png"], log, 600)
        files = sorted(os.path.join(shards, f) for f in os.listdir(shards))
        shard_bytes = sum(os.path.getsize(f) for f in files)
        pattern = os.path.join(shards, "cifar10-train.tfrecord-*")
        commands.append(f"{benchlib.rel(convert)} cifar10 {benchlib.rel(a.cifar_dir)} SHARDS --split train "
                        f"--shards 8 --image png")
        runs = []
        for t in threads:
            runs.append(("mwstrat", t, [prog, "--decode-threads", str(t), "--batch", "128", pattern]))
            if a.tf_python:
                runs.append(("tf.data", t, [a.tf_python, tf_script, "--threads", str(t), "--batch", "128", pattern]))
        for label, t, argv in runs:
            commands.append(" ".join(benchlib.rel(x) if os.sep in x else x for x in argv).replace(
                pattern, "'SHARDS/cifar10-train.tfrecord-*'"))
        if not a.tf_python:
            failures.append("no --tf-python given: tf.data not measured")
        for r in range(rounds):
            for label, t, argv in runs:
                load = benchlib.loadavg()
                try:
                    text = run(argv, log, 900, env=env)
                except Failed as e:
                    failures.append(f"{label} × {t} threads (round {r + 1}): {e}")
                    continue
                for line in text.splitlines():
                    if line.startswith("{"):
                        row = json.loads(line)
                        row.update(label=label, round=r + 1, load_at_start=load)
                        rows.append(row)
        resnet = os.path.join(a.build, "benchmarks", "resnet", "resnet_throughput")
        train_rows, train_rounds = [], 0
        if os.access(resnet, os.X_OK):
            train_rounds = 1 if a.quick else 3
            warmup, steps = ("1", "3") if a.quick else ("2", "10")
            common = ["--data-dir", a.cifar_dir, "--depth", "56", "--batch", "128", "--threads", "1", "--warmup",
                      warmup, "--steps", steps]
            train_runs = [("memory", [resnet] + common), ("records", [resnet] + common + ["--records", pattern])]
            for label, argv in train_runs:
                commands.append(" ".join(benchlib.rel(x) if os.sep in x else x for x in argv).replace(
                    pattern, "'SHARDS/cifar10-train.tfrecord-*'"))
            for r in range(train_rounds):
                for label, argv in train_runs:
                    load = benchlib.loadavg()
                    try:
                        text = run(argv, log, 900, env=env)
                    except Failed as e:
                        failures.append(f"ResNet-56 from {label} (round {r + 1}): {e}")
                        continue
                    for line in text.splitlines():
                        if line.startswith("{"):
                            row = json.loads(line)
                            row.update(label=label, round=r + 1, load_at_start=load)
                            train_rows.append(row)
        else:
            failures.append(f"{benchlib.rel(resnet)} not built: the ResNet-56 comparison was not run")
    med = statistics.median
    training = {}
    for label in ("memory", "records"):
        mine = [x for x in train_rows if x["label"] == label and x.get("steps_per_s")]
        if mine:
            training[label] = {"runs": len(mine), "ms_per_step": med([1000.0 / x["steps_per_s"] for x in mine]),
                               "ms_per_step_min": min(1000.0 / x["steps_per_s"] for x in mine),
                               "ms_per_step_max": max(1000.0 / x["steps_per_s"] for x in mine),
                               "cpu_ms_per_step": med([1000.0 * x["cpu_s_per_step"] for x in mine]),
                               "peak_rss_mib": max(x["peak_rss_mib"] for x in mine)}
    if "memory" in training and "records" in training:
        per_round = []
        for r in range(1, train_rounds + 1):
            m = [x for x in train_rows if x["label"] == "memory" and x["round"] == r]
            f = [x for x in train_rows if x["label"] == "records" and x["round"] == r]
            if m and f:
                per_round.append(m[0]["steps_per_s"] / f[0]["steps_per_s"])
        ratio = training["records"]["ms_per_step"] / training["memory"]["ms_per_step"]
        training["ratio"] = {"ms_per_step": ratio, "ms_per_step_rounds": med(per_round) if per_round else None,
                             "cpu_ms_per_step": training["records"]["cpu_ms_per_step"]
                             / training["memory"]["cpu_ms_per_step"],
                             "goal_met": ratio <= 1.02}
    summary = {}
    for label in ("mwstrat", "tf.data"):
        for t in threads:
            mine = [x for x in rows if x["label"] == label and x["threads"] == t]
            if mine:
                summary.setdefault(label, {})[str(t)] = {
                    "runs": len(mine), "records": mine[0]["records"],
                    "records_per_s": med([x["records_per_s"] for x in mine]),
                    "records_per_s_min": min(x["records_per_s"] for x in mine),
                    "records_per_s_max": max(x["records_per_s"] for x in mine),
                    "records_per_cpu_s": med([x["records_per_cpu_s"] for x in mine]),
                    "records_per_cpu_s_min": min(x["records_per_cpu_s"] for x in mine),
                    "records_per_cpu_s_max": max(x["records_per_cpu_s"] for x in mine),
                    "peak_rss_mib": max(x["peak_rss_mib"] for x in mine),
                    "start_rss_mib": med([x["start_rss_mib"] for x in mine if x.get("start_rss_mib") is not None]
                                         or [0.0])}
    ratios = {}
    for t in threads:
        m, f = summary.get("mwstrat", {}).get(str(t)), summary.get("tf.data", {}).get(str(t))
        if m and f:
            # Of the medians, and the median of each round's own ratio (the two sides of one round ran together).
            per_round = []
            for r in range(1, rounds + 1):
                mr = [x for x in rows if x["label"] == "mwstrat" and x["threads"] == t and x["round"] == r]
                fr = [x for x in rows if x["label"] == "tf.data" and x["threads"] == t and x["round"] == r]
                if mr and fr:
                    per_round.append(mr[0]["records_per_cpu_s"] / fr[0]["records_per_cpu_s"])
            ratios[str(t)] = {"records_per_cpu_s": m["records_per_cpu_s"] / f["records_per_cpu_s"],
                              "records_per_cpu_s_rounds": med(per_round) if per_round else None,
                              "records_per_s": m["records_per_s"] / f["records_per_s"],
                              "peak_rss": m["peak_rss_mib"] / f["peak_rss_mib"],
                              "goal_cpu_met": m["records_per_cpu_s"] / f["records_per_cpu_s"] >= 1.5,
                              "goal_memory_met": m["peak_rss_mib"] <= f["peak_rss_mib"]}
    tf_version = next((x.get("tensorflow") for x in rows if x.get("tensorflow")), None)
    record = benchlib.meta("records", commands, a.quick, started)
    record.update(rows=rows, summary=summary, ratios=ratios, failures=failures, rounds=rounds, tensorflow=tf_version,
                  training_rows=train_rows, training=training, training_rounds=train_rounds,
                  config={"data_set": "CIFAR-10 train", "shards": 8, "image": "png", "shard_bytes": shard_bytes,
                          "batch": 128, "workers": 1, "policy": "data_shard", "threads": list(threads),
                          "augmentation": "pad 4, random crop 32x32, random flip left-right, per-image "
                                          "standardization", "goal_cpu_ratio": 1.5})
    benchlib.write_json(os.path.join(a.results, "records.json"), record)
    if not summary.get("mwstrat"):
        raise Failed("no mwstrat run succeeded: " + "; ".join(failures))
    if a.tf_python and not summary.get("tf.data"):
        raise Failed("no tf.data run succeeded: " + "; ".join(failures))


def family_resnet(a, log):
    # ResNet-56 (TF's Keras resnet_cifar_model), batch 128 per worker, 1 thread per worker: mwstrat
    # (resnet/resnet_throughput.cpp under mwstrat-launch), PyTorch in both layouts and TensorFlow MWMS where a Python
    # with it is given, 1 and 2 workers. The implementations take turns within every round (mwstrat, torch, torch,
    # [tf], then the same at 2 workers), so a slow spell of a shared machine weighs on all of them; every row keeps
    # its CPU seconds per step too. Each round also times mwstrat's convolutions alone (--conv-kernels), the figure
    # read against the FP32 FMA peak, with the default kernels (Winograd where it applies) and the direct ones.
    started = benchlib.start()
    warmup, steps, rounds = ("1", "3", 1) if a.quick else ("2", "10", 3)
    if a.resnet_rounds:
        rounds = a.resnet_rounds
    if a.resnet_steps:
        steps = str(a.resnet_steps)
    common = ["--data-dir", a.cifar_dir, "--depth", "56", "--batch", "128", "--threads", "1", "--warmup", warmup,
              "--steps", steps]
    launch = os.path.join(a.build, "tools", "mwstrat-launch")
    prog = os.path.join(a.build, "benchmarks", "resnet", "resnet_throughput")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("TF_CONFIG", None)
    runs = [("mwstrat-conv-kernels", 1, [prog, "--conv-kernels"], 600),
            ("mwstrat-conv-kernels direct", 1, [prog, "--conv-kernels", "--conv-path", "direct"], 600)]
    for workers in ("1", "2"):
        runs.append(("mwstrat", int(workers), [launch, "-n", workers, "--", prog], 900))
        runs += [(f"torch {layout}", int(workers), ["/usr/bin/python3",  # Debian's torch
                  os.path.join(HERE, "resnet", "pytorch_resnet.py"), "--layout", layout, "--workers", workers], 900)
                 for layout in ("default", "channels_last")]
        if a.tf_python:
            runs.append(("tensorflow", int(workers), [a.tf_python, os.path.join(HERE, "resnet", "tf_resnet.py"),
                                                      "--workers", workers], 1800))
    commands, rows, failures = [], [], []
    for r in range(rounds):
        for label, workers, argv, limit in runs:
            argv = argv + (common[2:] if label.startswith("mwstrat-conv-kernels") else common)  # kernels: no data
            command = " ".join([benchlib.rel(x) if os.sep in x else x for x in argv])
            if r == 0:
                commands.append(command)
            load = benchlib.loadavg()
            try:
                text = run(argv, log, limit, env=env)
            except Failed as e:
                failures.append(f"{label} × {workers} (round {r + 1}): {e}")
                continue
            for line in text.splitlines():
                at = line.find("{")  # mwstrat-launch prefixes a worker's lines with "[worker 0] "
                if at == 0 or (at > 0 and line.startswith("[worker ")):
                    row = json.loads(line[at:])
                    row.update(label=label, round=r + 1, load_at_start=load)
                    rows.append(row)
    record = benchlib.meta("resnet", commands, a.quick, started)
    record.update(rows=rows, failures=failures, rounds=rounds,
                  config={"depth": 56, "batch": 128, "threads": 1, "warmup": int(warmup), "steps": int(steps)})
    benchlib.write_json(os.path.join(a.results, "resnet.json"), record)
    if not any(x["label"] == "mwstrat" for x in rows):
        raise Failed("no mwstrat run succeeded: " + "; ".join(failures))


def family_kernels(a, log):
    # Every convolution pass of ResNet-56 (each shape once, weighted by its layer count in the totals): mwstrat's
    # nn/kernels (kernels/conv_bench.cpp) and PyTorch's oneDNN (kernels/torch_conv_bench.py) taking turns round by
    # round, both on one thread; each side's best time per pass and the median of the rounds' own ratios.
    started = benchlib.start()
    rounds, seconds = ("1", "0.1") if a.quick else ("3", "0.5")
    bench = os.path.join(a.build, "benchmarks", "kernels", "mwstrat_bench_conv")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "kernels.json")
        argv = ["/usr/bin/python3", os.path.join(HERE, "kernels", "compare.py"), "--bench", bench,  # Debian's torch
                "--rounds", rounds, "--seconds", seconds, "--json-out", out]
        run(argv, log, 3600, env=dict(os.environ, OMP_NUM_THREADS="1"))
        with open(out) as f:
            compared = json.load(f)
    command = " ".join(benchlib.rel(x) if os.sep in x else x for x in argv[:-2])
    record = benchlib.meta("kernels", [command], a.quick, started)
    record.update(compared)
    benchlib.write_json(os.path.join(a.results, "kernels.json"), record)
    if not any(r["torch_gflops"] for r in record["rows"]):
        raise Failed("no pass was timed on both sides")


def family_isa(a, log):
    # One worker and one thread, so the figure is the kernels' own: each round runs the native build, then the
    # default-ISA build on every path this CPU has (best first), for the MNIST CNN (batch 64) and ResNet-56 (batch
    # 128). Rows keep the wall and CPU seconds per step; the report takes medians and the default ÷ native ratio.
    started = benchlib.start()
    rounds = 1 if a.quick else 4
    mnist_steps, resnet_steps = ("20", "2") if a.quick else ("300", "6")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("TF_CONFIG", None)
    env.pop("MWSTRAT_KERNEL_ISA", None)
    flags = open("/proc/cpuinfo").read()
    paths = [p for p, need in (("avx512", " avx512bw"), ("avx2", " avx2"), ("baseline", "")) if need in flags]
    programs = {
        "mnist": (os.path.join("train", "train_throughput"),
                  ["--data-dir", a.data_dir, "--batch", "64", "--threads", "1", "--warmup", "10", "--steps", mnist_steps]),
        "resnet56": (os.path.join("resnet", "resnet_throughput"),
                     ["--data-dir", a.cifar_dir, "--depth", "56", "--batch", "128", "--threads", "1", "--warmup", "2",
                      "--steps", resnet_steps]),
    }
    # The default-ISA build unasked (it takes the best path), then forced onto each narrower one.
    variants = ([("native", "", None), ("default-isa", "_default_isa", None)]
                + [(f"default-isa {p}", "_default_isa", p) for p in paths[1:]])
    # The peers on the same step, one worker and one thread: PyTorch DDP (gloo) for the CNN, torch channels_last
    # for ResNet-56 (Debian's torch, its own oneDNN dispatch).
    peers = {
        "mnist": ("torch", ["/usr/bin/python3", os.path.join(HERE, "train", "ddp_throughput.py")] + programs["mnist"][1]),
        "resnet56": ("torch channels_last", ["/usr/bin/python3", os.path.join(HERE, "resnet", "pytorch_resnet.py"),
                                             "--layout", "channels_last", "--workers", "1"] + programs["resnet56"][1]),
    }
    commands, rows, failures = [], [], []
    for r in range(rounds):
        for model, (prog, args) in programs.items():
            for label, suffix, path in variants + [("peer", None, None)]:
                if label == "peer":
                    label, argv = peers[model]
                    run_env = dict(env, RANK="0", WORLD_SIZE="1", MASTER_PORT=str(procs.free_ports(1)[0]))
                else:
                    argv = [os.path.join(a.build, "benchmarks", prog + suffix)] + args
                    run_env = dict(env, MWSTRAT_KERNEL_ISA=path) if path else env
                command = (f"MWSTRAT_KERNEL_ISA={path} " if path else "") + " ".join(
                    benchlib.rel(x) if os.sep in x else x for x in argv)
                if r == 0:
                    commands.append(command)
                try:
                    text = run(argv, log, 1200, env=run_env)
                except Failed as e:
                    failures.append(f"{model} {label} (round {r + 1}): {e}")
                    continue
                for line in text.splitlines():
                    if line.startswith("{"):
                        row = json.loads(line)
                        row.update(model=model, label=label, round=r + 1)
                        rows.append(row)
    record = benchlib.meta("isa", commands, a.quick, started)
    record.update(rows=rows, failures=failures, rounds=rounds, paths=paths)
    benchlib.write_json(os.path.join(a.results, "isa.json"), record)
    if not rows:
        raise Failed("no run succeeded: " + "; ".join(failures))


# Time to accuracy per depth: the results file and the recipe's changes from time_to_accuracy.py's default (ResNet-20,
# 32 epochs). ResNet-56 costs about 3× as much per epoch, so its schedule is cut to the 6 epochs that fit the 30-min
# budget on the slower of the project's machines (the Intel Xeon, model 85: about 250 s an epoch with 2 workers).
TTA_DEPTHS = {20: ("resnet_tta.json", []), 56: ("resnet56_tta.json", ["--depth", "56", "--epochs", "6"])}


def family_tta(a, log):
    # Time to accuracy: one long run per implementation and depth, one after the other (each has the machine to
    # itself). A machine slower than the one a recipe was chosen on is stopped at the budget with its cosine
    # unfinished. The depths run even when one failed.
    failed = []
    for depth in a.tta_depths:
        name, recipe = TTA_DEPTHS[depth]
        quick = ["--epochs", "2", "--warmup-epochs", "0.5", "--steps-per-epoch", "20", "--budget-s", "600"] \
            if a.quick else ["--budget-s", str(a.tta_budget_s)]
        if a.quick:  # the quick schedule replaces the depth's own epochs
            recipe = recipe[:2]
        try:
            run([sys.executable, os.path.join(HERE, "resnet", "time_to_accuracy.py"), "--build", a.build, "--data-dir",
                 a.cifar_dir, "--json-out", os.path.join(a.results, name)] + recipe + quick, log,
                2 * (600 if a.quick else a.tta_budget_s) + 600)
        except Failed as e:
            failed.append(f"ResNet-{depth}: {e}")
    if failed:
        raise Failed("; ".join(failed))


def family_hosts(a, log):
    # Across 2 simulated hosts (scripts/simhosts: network namespaces, tbf-shaped links; skipped, saying why, where
    # they cannot be made): the all-reduce (and on loopback), then training. Each writes its JSON even when one of
    # its runs failed (the failures are in it); the second runs even when the first failed.
    quick = ["--quick"] if a.quick else []
    failed = []
    simhosts = os.path.join(ROOT, "scripts", "simhosts")
    for argv, limit in (
            ([sys.executable, os.path.join(HERE, "collective", "hosts_bench.py"), "--build", a.build,
              "--json-out", os.path.join(a.results, "collective_hosts.json")] + quick, 3600),
            ([sys.executable, os.path.join(HERE, "train", "hosts_train.py"), "--build", a.build,
              "--data-dir", a.data_dir, "--json-out", os.path.join(a.results, "train_hosts.json")] + quick, 3600)):
        try:
            run(argv, log, limit)
        except Failed as e:
            failed.append(str(e))
        finally:  # a run killed at its time limit could not remove its simulated hosts: their owner is gone now
            subprocess.run([simhosts, "gc"], capture_output=True)
    if failed:
        raise Failed("; ".join(failed))


def family_libtorch(a, log):
    # The same kernels on both sides (libtorch 1.13 from libtorch-dev in C++, Debian's python3-torch in Python): only
    # the distribution layer differs. Needs libtorch-dev (the program is built only where libtorch is found).
    exe = os.path.join(a.build, "benchmarks", "libtorch", "libtorch_throughput")
    if not os.access(exe, os.X_OK):
        raise Failed(f"{benchlib.rel(exe)} is not built (it needs libtorch-dev)")
    cmd = ["/usr/bin/python3", os.path.join(HERE, "libtorch", "compare.py"), "--build", a.build, "--data-dir",
           a.data_dir, "--json-out", os.path.join(a.results, "libtorch.json")]
    cmd += ["--rounds", "1", "--steps", "30", "--quick"] if a.quick else ["--rounds", str(a.libtorch_rounds or 7)]
    run(cmd, log, 3600)


def family_security(a, log):
    # Sealed frames between hosts (docs/security.md): their CPU cost on one core, then the all-reduce and the MNIST
    # training between simulated hosts plain, authenticated and encrypted, taking turns within each round.
    failed = []
    try:
        run([os.path.join(a.build, "benchmarks", "collective", "mwstrat_bench_seal"), "--seconds",
             "0.5" if a.quick else "2", "--json", os.path.join(a.results, "seal_cost.json")], log, 600)
    except Failed as e:
        failed.append(str(e))
    argv = [sys.executable, os.path.join(HERE, "collective", "hosts_bench.py"), "--build", a.build,
            "--impls", "mwstrat-fp32,mwstrat-fp32-mac,mwstrat-fp32-enc", "--sizes", str(11 << 20),
            "--family", "collective_sealed", "--json-out", os.path.join(a.results, "collective_sealed.json")]
    try:
        run(argv + (["--quick"] if a.quick else ["--rounds", "5", "--reps", "20"]), log, 3600)
    except Failed as e:
        failed.append(str(e))
    finally:
        subprocess.run([os.path.join(ROOT, "scripts", "simhosts"), "gc"], capture_output=True)
    try:  # the same three in training (the all-reduce is part of a step)
        run([sys.executable, os.path.join(HERE, "train", "hosts_train.py"), "--build", a.build, "--data-dir",
             a.data_dir, "--security", "--json-out", os.path.join(a.results, "train_sealed.json")]
            + (["--quick"] if a.quick else ["--rounds", "3", "--steps", "60"]), log, 1800)
    except Failed as e:
        failed.append(str(e))
    finally:
        subprocess.run([os.path.join(ROOT, "scripts", "simhosts"), "gc"], capture_output=True)
    if failed:
        raise Failed("; ".join(failed))


def family_elastic(a, log):
    # An elastic job's membership change (docs/fault-tolerance.md, "Elastic training"): a rank lost, the verdict, the
    # survivors' smaller ring and one all-reduce on it, at 4, 8 and 16 ranks (collective/shrink_bench.cpp).
    started = benchlib.start()
    rounds = "3" if a.quick else "20"
    argv = [os.path.join(a.build, "benchmarks", "collective", "mwstrat_bench_shrink"), "--workers", "4,8,16",
            "--rounds", rounds]
    text = run(argv, log, 1800)
    rows = []
    pattern = (r"shrink workers (\d+) rounds (\d+): detect p50 ([\d.]+) ms, ring p50 ([\d.]+) ms, total p50 ([\d.]+) "
               r"p99 ([\d.]+) max ([\d.]+) ms")
    for m in re.finditer(pattern, text):
        n, r, detect, ring, p50, p99, worst = m.groups()
        rows.append({"workers": int(n), "rounds": int(r), "detect_p50_ms": float(detect), "ring_p50_ms": float(ring),
                     "total_p50_ms": float(p50), "total_p99_ms": float(p99), "total_max_ms": float(worst)})
    if len(rows) != 3:
        raise Failed(f"mwstrat_bench_shrink printed {len(rows)} of 3 rows")
    command = f"{benchlib.rel(argv[0])} --workers 4,8,16 --rounds {rounds}"
    # Then with real processes: the MNIST example, 3 workers, one killed per run (train/elastic_shrink.py).
    faults = "5" if a.quick else "50"
    with tempfile.TemporaryDirectory(prefix="mwstrat-elastic-") as tmp:
        out = os.path.join(tmp, "processes.json")
        run([sys.executable, os.path.join(HERE, "train", "elastic_shrink.py"), "--build", a.build, "--data-dir",
             a.data_dir, "--faults", faults, "--json-out", out], log, 3600)
        with open(out) as f:
            processes = json.load(f)
    # And the goodput under fault campaigns without spares: a lost worker's node returns as a joiner 5 s later
    # (train/elastic_goodput.py: one SIGKILL every 60 s and every 15 s, the joins' times from the same runs). Four
    # workers, each slot held to half a CPU (a cgroup's quota), as four machines would be: a shrunk group then has
    # less compute (four workers sharing two cores freely would not: a group of three would be no slower). Without
    # a writable cgroup, two workers with a core each.
    slots = (["--workers", "4", "--cpu-per-worker", "0.5"] if os.access("/sys/fs/cgroup/cpu", os.W_OK)
             else ["--workers", "2"])
    with tempfile.TemporaryDirectory(prefix="mwstrat-goodput-") as tmp:
        out = os.path.join(tmp, "goodput.json")
        run([sys.executable, os.path.join(HERE, "train", "elastic_goodput.py"), "--build", a.build, "--data-dir",
             a.data_dir, "--json-out", out] + slots
            + (["--seconds", "40", "--gaps", "15"] if a.quick else ["--seconds", "80", "--repeats", "3"]),
            log, 7200)
        with open(out) as f:
            goodput = json.load(f)
    # And a join's state transfer between simulated hosts against the link's measured rate
    # (train/elastic_join_hosts.py: three members and a joiner on four hosts, each link shaped).
    with tempfile.TemporaryDirectory(prefix="mwstrat-join-") as tmp:
        out = os.path.join(tmp, "join.json")
        run([sys.executable, os.path.join(HERE, "train", "elastic_join_hosts.py"), "--build", a.build, "--data-dir",
             a.data_dir, "--json-out", out] + (["--joins", "1"] if a.quick else []), log, 3600)
        join = json.load(open(out)) if os.path.exists(out) else {"commands": [], "summary": None}
    # The same campaigns on ResNet-20 (the CIFAR-10 example: a step of more compute per byte of gradient), and one
    # with a spare started at once that the survivors wait for (--spare-wait): the recovery's own cost, nobody away.
    with tempfile.TemporaryDirectory(prefix="mwstrat-goodput-") as tmp:
        out = os.path.join(tmp, "resnet20.json")
        run([sys.executable, os.path.join(HERE, "train", "elastic_goodput.py"), "--build", a.build, "--cifar-dir",
             a.cifar_dir, "--model", "resnet20", "--json-out", out] + slots
            + (["--seconds", "40", "--gaps", "15"] if a.quick else ["--seconds", "80", "--repeats", "3"]), log, 7200)
        with open(out) as f:
            resnet = json.load(f)
        out = os.path.join(tmp, "spare.json")
        run([sys.executable, os.path.join(HERE, "train", "elastic_goodput.py"), "--build", a.build, "--data-dir",
             a.data_dir, "--gaps", "15", "--join-delay", "0", "--spare-wait", "5", "--json-out", out] + slots
            + (["--seconds", "40"] if a.quick else ["--seconds", "100"]), log, 7200)
        with open(out) as f:
            spare = json.load(f)
    # The spare's command last: report.py names it as the record's last command.
    record = benchlib.meta("elastic", [command] + processes["commands"] + goodput["commands"] + join["commands"]
                           + resnet["commands"] + spare["commands"], a.quick, started)
    record["shrink"] = rows
    record["shrink_processes"] = processes["shrink_processes"]
    record["goodput"] = goodput["goodput"]
    record["join_between_hosts"] = join["summary"]
    record["goodput_resnet20"] = resnet["goodput"]
    record["goodput_spare"] = spare["goodput"]
    benchlib.write_json(os.path.join(a.results, "elastic.json"), record)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "bench"))
    ap.add_argument("--results", default=os.path.join(HERE, "results"))
    ap.add_argument("--data-dir", default=os.path.join(ROOT, ".cache", "mnist"))
    ap.add_argument("--cifar-dir", default=os.path.join(ROOT, ".cache", "cifar10"))
    ap.add_argument("--tf-python", default=None, help="a Python with tensorflow and tf_keras (compare.py's)")
    ap.add_argument("--quick", action="store_true", help="one repeat/round of everything, shorter runs")
    ap.add_argument("--only", action="append", choices=FAMILIES, help="run only this family (repeatable)")
    ap.add_argument("--records-rounds", type=int, default=0, help="records: interleaved rounds (default 5, quick 1)")
    ap.add_argument("--resnet-rounds", type=int, default=0, help="resnet: interleaved rounds (default 3, quick 1)")
    ap.add_argument("--resnet-steps", type=int, default=0, help="resnet: timed steps per run (default 10, quick 3)")
    ap.add_argument("--libtorch-rounds", type=int, default=0, help="libtorch: interleaved rounds (default 7, quick 1)")
    ap.add_argument("--tta-budget-s", type=int, default=1800, help="tta: wall-clock budget of each run (s)")
    ap.add_argument("--tta-depths", default="20,56",
                    help=f"tta: the ResNet depths to run, comma-separated, of {sorted(TTA_DEPTHS)}")
    ap.add_argument("--logs", default=None, help="folder for each family's log (default BUILD/bench-logs)")
    a = ap.parse_args()
    try:
        a.tta_depths = [int(d) for d in a.tta_depths.split(",")]
    except ValueError:
        ap.error(f"--tta-depths {a.tta_depths!r}: not a comma-separated list of depths")
    if not a.tta_depths or any(d not in TTA_DEPTHS for d in a.tta_depths):
        ap.error(f"--tta-depths {a.tta_depths}: each must be one of {sorted(TTA_DEPTHS)}")
    a.build = os.path.abspath(a.build)
    a.results = os.path.abspath(a.results)
    a.data_dir = os.path.abspath(a.data_dir)
    a.cifar_dir = os.path.abspath(a.cifar_dir)
    logs = a.logs or os.path.join(a.build, "bench-logs")
    os.makedirs(logs, exist_ok=True)
    os.makedirs(a.results, exist_ok=True)
    families = [f for f in FAMILIES if not a.only or f in a.only]
    print(f"== {benchlib.cpu_model()} × {os.cpu_count()}, {benchlib.vector_isa()}; load {benchlib.loadavg()}; "
          f"{'quick' if a.quick else 'full'} run of: {' '.join(families)}", flush=True)
    failed = []
    for family in families:
        log = os.path.join(logs, f"{family}.log")
        open(log, "w").close()
        print(f"\n== [{family}] on {benchlib.cpu_model()}, load {benchlib.loadavg()} (log: {log})", flush=True)
        try:
            globals()[f"family_{family}"](a, log)
        except (Failed, OSError, ValueError, KeyError, IndexError, StopIteration, json.JSONDecodeError) as e:
            print(f"== [{family}] FAILED: {type(e).__name__}: {e}", flush=True)
            failed.append(family)
    print(f"\n== done on {benchlib.cpu_model()}; load {benchlib.loadavg()}; results in {a.results}"
          + (f"; FAILED: {' '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
