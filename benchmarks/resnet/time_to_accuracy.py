#!/usr/bin/env python3
"""Time to accuracy (issue 17): test accuracy against wall time for ResNet on CIFAR-10, 2 workers on this machine,
mwstrat (examples/cifar10_resnet under mwstrat-launch) next to PyTorch DDP (pytorch_resnet.py --time-to-accuracy)
with the same recipe: TF's Keras resnet_cifar_model of --depth, per-worker batch --batch, SGD momentum 0.9
(--nesterov: Nesterov's), --lr for the global batch with a linear warm-up of --warmup-epochs from 0, then a cosine
decay to 0 by step over the rest of --epochs; the loss's --label-smoothing; the tutorial's augmentation; the same
initialisation (PyTorch's --fc-init he_normal draws the Dense kernel as mwstrat's resnet_cifar does); the whole
test set after every epoch (after every --validation-freq-th, as Keras's validation_freq, to spend less of the
budget on evaluation; it must divide --epochs, so that the last epoch has its point). The defaults are the best
recipe measured in 30 minutes on 2 cores (benchmarks/history/2026-11-27-tta-resnet20-recipes.md): ResNet-20, 32
epochs, batch 64 per worker, Nesterov at 0.1, label smoothing 0.1. The implementations run one after the other
(never side by side: each has the whole machine), each under a wall-clock --budget-s (a run still going then is stopped, and its curve ends where it got).

Time is measured from training's start (mwstrat: the chief's "Epoch 1/N" line, after start-up and data loading;
PyTorch: its own clock from the first step), and includes every evaluation.

The record's family is resnet_tta for ResNet-20 and resnet<depth>_tta for other depths (run.py's tta family runs
ResNet-20 on the default recipe, then ResNet-56 on the same recipe shortened to 6 epochs).

--only X --reuse FILE reruns one implementation and takes the other's curve from FILE, an earlier record of the
same recipe (refused otherwise); the record names the date each run was measured on.

  time_to_accuracy.py --build BUILD [--data-dir .cache/cifar10] [--depth 20] [--epochs 32] [--warmup-epochs 1]
                      [--lr 0.1] [--batch 64] [--[no-]nesterov] [--label-smoothing 0.1] [--validation-freq 1]
                      [--budget-s 1800] [--steps-per-epoch N] [--only mwstrat|torch]
                      [--reuse FILE] [--json-out FILE]
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import benchlib  # noqa: E402

TORCH_PYTHON = "/usr/bin/python3"  # Debian's python3-torch
EPOCH_BEGIN = re.compile(r"^Epoch (\d+)/")
EPOCH_END = re.compile(r"- loss: ([0-9.]+).*- val_loss: ([0-9.]+) - val_accuracy: ([0-9.]+)")


def stream(cmd, env, budget_s, on_line):
    """Runs cmd, calls on_line(text, seconds since start) for every stdout line; stops it after budget_s. Returns
    (exit code or None when stopped, stderr's tail)."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    stopped = []

    def stop():
        stopped.append(True)
        try:
            os.killpg(proc.pid, 15)
        except ProcessLookupError:
            pass

    timer = threading.Timer(budget_s, stop)
    timer.start()
    err = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr.readlines()))
    reader.start()
    try:
        # The progress bar redraws with '\r': split on both so every epoch's final line is seen when it ends.
        buf = ""
        while True:
            chunk = proc.stdout.read(1)
            if not chunk:
                break
            if chunk in "\r\n":
                if buf:
                    on_line(buf, time.monotonic() - started)
                buf = ""
            else:
                buf += chunk
        proc.wait()
    finally:
        timer.cancel()
        reader.join(5)
    return (None if stopped else proc.returncode), "".join(err[-20:])


def run_mwstrat(a, log):
    cmd = [os.path.join(a.build, "tools", "mwstrat-launch"), "-n", str(a.workers), "--",
           os.path.join(a.build, "examples", "cifar10_resnet", "cifar10_resnet"), "--data-dir", a.data_dir,
           "--depth", str(a.depth), "--epochs", str(a.epochs), "--batch-size", str(a.batch),
           "--learning-rate", str(a.lr), "--schedule", "cosine", "--warmup-epochs", str(a.warmup_epochs),
           "--threads", "1", "--no-test", "--op-timeout", "600"]
    if a.steps_per_epoch:
        cmd += ["--steps-per-epoch", str(a.steps_per_epoch)]
    if a.nesterov:
        cmd += ["--nesterov"]
    if a.label_smoothing:
        cmd += ["--label-smoothing", str(a.label_smoothing)]
    if a.validation_freq != 1:
        cmd += ["--validation-freq", str(a.validation_freq)]
    points, begin, epoch = [], [], [0]

    def on_line(text, t):
        text = re.sub(r"^\[worker \d+\] ", "", text)  # mwstrat-launch names the worker of every line
        b = EPOCH_BEGIN.match(text)
        if b:
            epoch[0] = int(b.group(1))
            if epoch[0] == 1 and not begin:
                begin.append(t)
            return
        m = EPOCH_END.search(text)  # only an epoch that validated has val_loss
        if m and begin:
            points.append({"epoch": epoch[0], "wall_s": round(t - begin[0], 2),
                           "train_loss": float(m.group(1)), "test_loss": float(m.group(2)),
                           "test_accuracy": float(m.group(3))})
            log(f"  mwstrat epoch {epoch[0]}: {points[-1]['wall_s']:.0f} s, test accuracy "
                f"{points[-1]['test_accuracy']:.4f}")

    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("TF_CONFIG", None)
    code, err = stream(cmd, env, a.budget_s, on_line)
    return {"impl": "mwstrat", "command": " ".join(shlex.quote(benchlib.rel(c)) for c in cmd), "exit": code,
            "stopped_at_budget": code is None, "points": points, "stderr_tail": err if code not in (0, None) else ""}


def run_torch(a, log):
    cmd = [TORCH_PYTHON, os.path.join(HERE, "pytorch_resnet.py"), "--workers", str(a.workers), "--layout",
           "channels_last", "--data-dir", a.data_dir, "--depth", str(a.depth), "--batch", str(a.batch),
           "--threads", "1", "--time-to-accuracy", "--epochs", str(a.epochs), "--schedule", "cosine",
           "--warmup-epochs", str(a.warmup_epochs), "--lr", str(a.lr), "--fc-init", "he_normal"]
    if a.steps_per_epoch:
        cmd += ["--steps-per-epoch", str(a.steps_per_epoch)]
    if a.nesterov:
        cmd += ["--nesterov"]
    if a.label_smoothing:
        cmd += ["--label-smoothing", str(a.label_smoothing)]
    if a.validation_freq != 1:
        cmd += ["--validation-freq", str(a.validation_freq)]
    points = []

    def on_line(text, _t):
        if not text.startswith("{"):
            return
        r = json.loads(text)
        points.append({"epoch": r["epoch"], "wall_s": r["wall_s"], "train_loss": r["train_loss"],
                       "test_loss": r["test_loss"], "test_accuracy": r["test_accuracy"]})
        log(f"  torch epoch {r['epoch']}: {r['wall_s']:.0f} s, test accuracy {r['test_accuracy']:.4f}")

    env = dict(os.environ, OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "MASTER_PORT", "MASTER_ADDR"):
        env.pop(k, None)
    code, err = stream(cmd, env, a.budget_s, on_line)
    return {"impl": "torch channels_last", "command": " ".join(shlex.quote(benchlib.rel(c)) for c in cmd),
            "exit": code, "stopped_at_budget": code is None, "points": points,
            "stderr_tail": err if code not in (0, None) else ""}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build/bench")
    p.add_argument("--data-dir", default=".cache/cifar10")
    p.add_argument("--depth", type=int, default=20)
    p.add_argument("--epochs", type=int, default=32)
    p.add_argument("--warmup-epochs", type=float, default=1)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--nesterov", action=argparse.BooleanOptionalAction, default=True,
                   help="Nesterov momentum (both implementations)")
    p.add_argument("--label-smoothing", type=float, default=0.1, help="the loss's label smoothing (both)")
    p.add_argument("--validation-freq", type=int, default=1,
                   help="evaluate the test set after every n-th epoch (both); must divide --epochs")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--budget-s", type=float, default=1800)
    p.add_argument("--steps-per-epoch", type=int, default=0, help="0: full passes (fewer: a check of the tooling)")
    p.add_argument("--only", choices=["mwstrat", "torch"])
    p.add_argument("--reuse", help="with --only: the other implementation's run from this earlier record")
    p.add_argument("--json-out")
    a = p.parse_args()
    if a.warmup_epochs >= a.epochs:
        p.error("--warmup-epochs must be fewer than --epochs")
    if a.validation_freq < 1 or a.epochs % a.validation_freq != 0:
        p.error(f"--validation-freq {a.validation_freq} must be >= 1 and divide --epochs ({a.epochs})")
    if a.reuse and not a.only:
        p.error("--reuse needs --only (the implementation to rerun)")

    def log(text):
        print(text, file=sys.stderr, flush=True)

    recipe = {"depth": a.depth, "epochs": a.epochs, "steps_per_epoch": a.steps_per_epoch or "a full pass",
              "warmup_epochs": a.warmup_epochs, "lr": a.lr, "batch_per_worker": a.batch,
              **({"nesterov": True} if a.nesterov else {}),
              **({"label_smoothing": a.label_smoothing} if a.label_smoothing else {}),
              **({"validation_freq": a.validation_freq} if a.validation_freq != 1 else {}),
              "workers": a.workers, "threads": 1, "schedule": "cosine", "budget_s": a.budget_s}
    other = []
    if a.reuse:  # checked before the runs: a refusal after half an hour of training would waste it
        with open(a.reuse) as f:
            earlier = json.load(f)
        if earlier.get("recipe") != recipe:
            p.error(f"--reuse: {a.reuse} has another recipe ({earlier.get('recipe')}) than this run ({recipe})")
        other = [dict(r, measured=r.get("measured", earlier.get("date", "?"))) for r in earlier.get("runs", [])
                 if r["impl"].split()[0] != a.only]  # "torch channels_last" is --only torch's
        if not other:
            p.error(f"--reuse: {a.reuse} holds no run other than {a.only}")

    started = benchlib.start()
    runs = []
    for name, fn in (("mwstrat", run_mwstrat), ("torch", run_torch)):
        if a.only and a.only != name:
            continue
        log(f"{name}: ResNet-{a.depth}, {a.workers} workers x 1 thread, {a.epochs} epochs, budget {a.budget_s:.0f} s")
        r = fn(a, log)
        if r["exit"] not in (0, None):
            log(f"{name} failed (exit {r['exit']}):\n{r['stderr_tail']}")
        runs.append(r)
    for r in runs:
        r["measured"] = started[0]
    if other:
        runs = sorted(runs + other, key=lambda r: r["impl"] != "mwstrat")  # mwstrat first, as in a full run
    # ResNet-20's record keeps the family name it has always had; other depths are families of their own
    # (benchmarks/report.py draws a section and a plot for each).
    family = "resnet_tta" if a.depth == 20 else f"resnet{a.depth}_tta"
    record = benchlib.meta(family, [r["command"] for r in runs], started=started)
    record["recipe"] = recipe
    record["runs"] = runs
    print(json.dumps(record))
    if a.json_out:
        benchlib.write_json(a.json_out, record)
    return 0 if all(r["exit"] in (0, None) and r["points"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
