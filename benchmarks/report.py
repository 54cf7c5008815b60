#!/usr/bin/env python3
"""Renders benchmarks/RESULTS.md (and its plots) from the JSON results in benchmarks/results/.

  python3 benchmarks/report.py [--results benchmarks/results] [--out benchmarks/RESULTS.md] [--plots benchmarks/plots]

The page is generated, never edited by hand: scripts/bench runs every comparison (benchmarks/run.py writes one JSON
file per comparison, each with the machine, date, load and command it was measured with) and then this. A results
file can also be written by hand when figures come from elsewhere (the journal's passes in benchmarks/history/):
its "source" says so and the page prints it next to every figure taken from it.

Ratios to the physical limits:
  compute-bound figures (training steps, dense products) are read against the measured FP32 FMA peak of the machine
  they ran on (peak.json; a results file may carry its own "peak_gflops" when it comes from another machine), with
  the training step's FLOPs counted from the model (cnn_flops_per_sample);
  bandwidth-bound figures (all-reduce) against the loopback TCP duplex bandwidth the ring benchmark measures in the
  same run; checkpoints against a raw write/read of the same bytes on the same disk.
Plots need matplotlib; without it the page is written without them (and says so).
"""
import argparse
import glob
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

FAMILY_ORDER = ["peak", "train", "train_ceiling", "train_backup", "collective", "collective_mpi_algorithms", "nn",
                "checkpoint", "data", "records", "resnet", "kernels", "isa", "resnet_tta", "resnet56_tta",
                "collective_hosts", "train_hosts", "libtorch", "collective_sealed", "train_sealed", "elastic",
                "fault_campaign"]


def cnn_flops_per_sample():
    """FLOPs of one training sample of the tutorial CNN: multiply-adds count 2, element-wise work is left out.

    Conv2D(32, 3x3) on 28x28x1 -> 26x26x32; Dense(21632 -> 128); Dense(128 -> 10). Forward: every layer's product;
    backward: each dense layer's weight gradient and input gradient, the convolution's weight gradient only (the
    first layer needs no input gradient). Biases, ReLU, the loss and the SGD update are element-wise (memory-bound)
    and below 1% of it.
    """
    conv = 2 * 26 * 26 * 32 * 9
    dense1 = 2 * 21632 * 128
    dense2 = 2 * 128 * 10
    forward = conv + dense1 + dense2
    backward = conv + 2 * dense1 + 2 * dense2
    return forward + backward


def load(results):
    out = {}
    for path in sorted(glob.glob(os.path.join(results, "*.json"))):
        with open(path) as f:
            record = json.load(f)
        out[record.get("family", os.path.splitext(os.path.basename(path))[0])] = record
    return out


def cpu_scaling(one, many):
    """Scaling per CPU second: samples per CPU second of all workers with n workers over one worker's. Perfect
    scaling keeps it at 100%; what two workers lose to each other's presence on shared cores (wall time) is not in
    it, what the exchange costs in CPU (copies, the kernel's TCP work, waiting spun) is. Rows give the CPU ms per
    step of all workers, each worker's step holding one per-worker batch."""
    if not one or not many or not one.get("cpu_ms_per_step") or not many.get("cpu_ms_per_step"):
        return None
    return many["workers"] * one["cpu_ms_per_step"] / (one["workers"] * many["cpu_ms_per_step"])


def fmt(x, digits=0, unit=""):
    if x is None:
        return "—"
    return f"{x:,.{digits}f}".replace(",", " ") + unit


def pct(x):
    return "—" if x is None else f"{100 * x:.0f}%"


def times(x):
    return "—" if x is None else f"{x:.2f}×"


def machine_key(rec):
    m = rec.get("machine", {})
    return (m.get("cpu"), m.get("isa"))


def where(rec):
    """One line: when, on what, from where."""
    m = rec.get("machine", {})
    bits = [rec.get("date", "?"), f"{m.get('cpu', '?')} × {m.get('cpus', '?')}, {m.get('isa', '?')}"]
    if rec.get("load_at_start"):
        bits.append(f"load {rec['load_at_start']} at start")
    src = rec.get("source", "?")
    bits.append(src if src != "scripts/bench" else "scripts/bench" + (" --quick" if rec.get("quick") else ""))
    return "; ".join(bits)


def short_source(rec):
    src = rec.get("source", "?")
    if src == "scripts/bench":
        return f"scripts/bench{' --quick' if rec.get('quick') else ''}, {rec.get('date', '?')}"
    return f"{rec.get('pass', src)}, {rec.get('date', '?')}"


class Page:
    def __init__(self, results, plots_dir, out_path):
        self.r = results
        self.plots_dir = plots_dir
        self.rel_plots = os.path.relpath(plots_dir, os.path.dirname(os.path.abspath(out_path)))
        self.lines = []
        self.headlines = []  # (figure, value, peers, limit, source, command)
        self.headline_notes = []  # what a headline cell needs more words for (effective rates), numbered
        self.plots_made = []
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            self.plt = plt
        except ImportError:
            self.plt = None

    def w(self, text=""):
        self.lines.append(text)

    # --- the limits ---
    def peak(self, rec, threads):
        """The FP32 FMA peak (GFLOP/s) of the machine `rec` ran on, for `threads` threads, and what it is."""
        own = rec.get("peak_gflops")
        if own and str(threads) in own:
            return own[str(threads)], own.get("note", "")
        p = self.r.get("peak")
        if p and machine_key(p) == machine_key(rec) and str(threads) in p.get("threads", {}):
            return p["threads"][str(threads)]["gflops"], ""
        return None, ""

    def save_plot(self, fig, name):
        os.makedirs(self.plots_dir, exist_ok=True)
        fig.tight_layout()
        fig.savefig(os.path.join(self.plots_dir, name), dpi=110, metadata={"Software": None})
        self.plt.close(fig)
        self.plots_made.append(name)
        return f"{self.rel_plots}/{name}"

    # --- sections ---
    def machine(self):
        p = self.r.get("peak")
        self.w("## The machine")
        self.w()
        if not p:
            self.w("No peak measured yet (`scripts/bench --only peak`).")
            self.w()
            return
        m = p["machine"]
        self.w("| | |")
        self.w("|---|---|")
        self.w(f"| CPU | {m.get('cpu')}, {m.get('cpus')} CPUs" + (f", {m['memory_gib']} GiB" if m.get("memory_gib")
                                                                   else "") + " |")
        for t in ("1", "2"):
            x = p.get("threads", {}).get(t)
            if x:
                how = (f"measured, {p.get('isa')}, {p.get('accumulators')} independent chains per thread"
                       + (", threads pinned" if x.get("pinned") else "") if p.get("measured", True)
                       else p.get("note", "not measured"))
                self.w(f"| FP32 FMA peak, {t} thread{'s' if t != '1' else ''} | **{fmt(x['gflops'], 1)} GFLOP/s** "
                       f"({how}) |")
        c = self.r.get("collective")
        if c and machine_key(c) == machine_key(p):
            for n, d in sorted(c.get("duplex", {}).items()):
                self.w(f"| loopback TCP, {n} processes in a ring | {d:.2f} GB/s per direction (measured by the "
                       f"collective comparison) |")
        self.w(f"| figures from | {where(p)} |")
        self.w()
        if p.get("measured", True):
            self.w(f"Command: `{p['commands'][0]}` (source: `benchmarks/peak/fma_peak.cpp`).")
        else:
            self.w("The peak benchmark (`benchmarks/peak/fma_peak.cpp`) did not exist when this machine was measured; "
                   "`scripts/bench --only peak` measures it.")
        self.w()

    def train(self):
        t = self.r.get("train")
        if not t:
            return
        rows = {(x["label"], x["workers"]): x for x in t["rows"] if x.get("samples_per_s")}
        workers = sorted({x["workers"] for x in t["rows"]})
        flops = cnn_flops_per_sample()
        self.w("## Training throughput: mwstrat vs PyTorch DDP vs TensorFlow MultiWorkerMirroredStrategy")
        self.w()
        self.w(f"Measured: {where(t)}.  ")
        self.w(f"Command: `{t['commands'][0]}`")
        self.w()
        cfg = t.get("config", {})
        self.w(f"The tutorial CNN on real MNIST, per-worker batch {cfg.get('batch', 64)}, {cfg.get('threads', 1)} "
               f"thread per worker, worker processes on one host; {cfg.get('warmup', 10)} warm-up then "
               f"{cfg.get('steps', 100)} timed steps per run, {cfg.get('repeats', 3)} interleaved repeats, median "
               f"run shown. PyTorch DDP runs with Debian's OpenBLAS choosing its kernel and with it forced; the "
               f"ratios take its faster setting. GFLOP/s = samples/s × {flops / 1e6:.1f} MFLOP per sample "
               f"(forward + backward, counted from the model: `cnn_flops_per_sample` in `benchmarks/report.py`).")
        self.w()
        self.w("| impl | workers × threads | samples/s | min–max | scaling (wall / CPU) | CPU ms per step (all workers) | "
               "peak RSS per worker, MiB | GFLOP/s | of FMA peak | mwstrat ÷ this |")
        self.w("|---|---|---|---|---|---|---|---|---|---|")
        for x in t["rows"]:
            n = x["workers"]
            if not x.get("samples_per_s"):
                self.w(f"| {x['label']} | {n} × {x['threads']} | failed | | | | | | | |")
                continue
            one = rows.get((x["label"], 1))
            eff = x["samples_per_s"] / (n * one["samples_per_s"]) if one and n > 1 else None
            eff_cpu = cpu_scaling(one, x)
            mw = rows.get(("mwstrat", n))
            gf = x["samples_per_s"] * flops / 1e9
            peak, _ = self.peak(t, n * x["threads"])
            rss = " / ".join(f"{v:.0f}" for v in x.get("peak_rss_mib_per_worker", []))
            self.w(f"| {x['label']} | {n} × {x['threads']} | {fmt(x['samples_per_s'])} | "
                   f"{fmt(x.get('min'))}–{fmt(x.get('max'))} | {pct(eff) + ' / ' + pct(eff_cpu) if n > 1 else '—'} | "
                   f"{fmt(x.get('cpu_ms_per_step'), 1)} | {rss or '—'} | {gf:.1f} | "
                   f"{pct(gf / peak) if peak else '—'} | "
                   f"{times(mw['samples_per_s'] / x['samples_per_s']) if mw else '—'} |")
        self.w()
        per = t.get("per_repeat", {})
        bits = []
        for n, v in per.get("scaling_efficiency", {}).items():
            if v:
                bits.append(f"scaling efficiency at N={n}: " + ", ".join(pct(e) for e in v))
        for n, v in per.get("vs_tensorflow", {}).items():
            if v:
                bits.append(f"mwstrat ÷ TensorFlow at N={n}: " + ", ".join(times(e) for e in v))
        if bits:
            self.w("Within each repeat (runs seconds apart, so a slow spell of the machine weighs on both sides): "
                   + "; ".join(bits) + ".")
            self.w()
        if t.get("failures"):
            self.w("Failed runs: " + "; ".join(t["failures"]))
            self.w()
        if t.get("note"):
            self.w(t["note"])
            self.w()

        # Headlines and the plot.
        cmd = t["commands"][0]
        for n in workers:
            mw = rows.get(("mwstrat", n))
            if not mw:
                continue
            torch = [v for (label, k), v in rows.items() if k == n and label.startswith("torch")]
            tf = [v for (label, k), v in rows.items() if k == n and label.startswith("tensorflow")]
            peers = []
            if torch:
                peers.append(f"{times(mw['samples_per_s'] / max(v['samples_per_s'] for v in torch))} PyTorch DDP")
            if tf:
                peers.append(f"{times(mw['samples_per_s'] / tf[0]['samples_per_s'])} TensorFlow MWMS")
            gf = mw["samples_per_s"] * flops / 1e9
            peak, _ = self.peak(t, n * mw["threads"])
            limit = f"{gf:.0f} GFLOP/s = {pct(gf / peak)} of the {n}-thread FMA peak" if peak else f"{gf:.0f} GFLOP/s"
            if n > 1 and ("mwstrat", 1) in rows:
                eff = mw["samples_per_s"] / (n * rows[("mwstrat", 1)]["samples_per_s"])
                eff_cpu = cpu_scaling(rows[("mwstrat", 1)], mw)
                limit += (f"; scaling {pct(eff)} of {n} × one worker wall, **{pct(eff_cpu)}** per CPU second "
                          f"(goal ≥ 95%)")
            self.headlines.append((f"Training, {n} worker{'s' if n > 1 else ''} × {mw['threads']} thread (samples/s)",
                                   fmt(mw["samples_per_s"]), ", ".join(peers), limit, short_source(t), cmd))
        if self.plt and len(workers) > 1:
            plt = self.plt
            fig, ax = plt.subplots(figsize=(6.4, 4.2))
            series = {}
            for (label, n), v in rows.items():
                impl = "PyTorch DDP (faster OpenBLAS setting)" if label.startswith("torch") else (
                    "TensorFlow MWMS" if label.startswith("tensorflow") else label)
                series.setdefault(impl, {})
                series[impl][n] = max(series[impl].get(n, 0), v["samples_per_s"])
            for impl, pts in series.items():
                ns = sorted(pts)
                ax.plot(ns, [pts[n] for n in ns], marker="o", label=impl)
            if ("mwstrat", 1) in rows:
                one = rows[("mwstrat", 1)]["samples_per_s"]
                ax.plot(workers, [one * n for n in workers], linestyle="--", color="grey",
                        label="mwstrat, perfect scaling")
            ax.set_xticks(workers)
            ax.set_xlabel("worker processes (1 thread each)")
            ax.set_ylabel("samples/s (global)")
            ax.set_ylim(bottom=0)
            ax.set_title(f"Tutorial CNN training\n{short_cpu(t)} ({t.get('date', '')[:10]})", fontsize=9)
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3)
            path = self.save_plot(fig, "train_scaling.png")
            self.w(f"![Training samples/s against worker count]({path})")
            self.w()

        c = self.r.get("train_ceiling")
        if c:
            self.w("### Where two-worker scaling goes")
            self.w()
            self.w(f"Measured: {where(c)}.  ")
            self.w(f"Command: `{c['commands'][0]}`")
            self.w()
            self.w("solo: one worker alone; pair: two independent processes at once (what the machine gives two busy "
                   "processes); lockstep: two mwstrat workers stepping together without the gradient mean; "
                   "mirrored: the real thing. Efficiency is against 2 × solo of the same round.")
            self.w()
            self.w("| configuration | samples/s (median) | CPU ms per step, all workers | efficiency (median of "
                   "rounds) | per round |")
            self.w("|---|---|---|---|---|")
            for x in c["rows"]:
                self.w(f"| {x['configuration']} | {fmt(x['samples_per_s'])} | {fmt(x.get('cpu_ms_per_step'), 1)} | "
                       f"{pct(x.get('efficiency'))} | {' '.join(pct(q) for q in x.get('per_round', [])) or '—'} |")
            self.w()
            mirrored = next((x for x in c["rows"] if x["configuration"] == "mirrored"), None)
            pair = next((x for x in c["rows"] if x["configuration"] == "pair"), None)
            if mirrored and mirrored.get("efficiency") is not None:
                self.headlines.append(("Two-worker scaling, paired rounds (ceiling.py)", pct(mirrored["efficiency"]),
                                       "—", f"two independent processes: {pct(pair.get('efficiency'))}" if pair
                                       else "—", short_source(c), c["commands"][0]))

        b = self.r.get("train_backup")
        if b:
            self.w("### BackupAndRestore's cost (save_freq = 100 steps)")
            self.w()
            self.w(f"Measured: {where(b)}.  ")
            self.w(f"Command: `{b['commands'][0]}`")
            self.w()
            self.w("| workers | samples/s without backup | with | cost | CPU ms/step without | with | CPU cost |")
            self.w("|---|---|---|---|---|---|---|")
            for x in b["rows"]:
                self.w(f"| {x['workers']} | {fmt(x['without'])} | {fmt(x['with'])} | {x['cost_percent']:.1f}% | "
                       f"{fmt(x.get('cpu_ms_without'), 2)} | {fmt(x.get('cpu_ms_with'), 2)} | "
                       f"{fmt(x.get('cpu_cost_percent'), 1, '%')} |")
            self.w()
            costs = " / ".join(f"{x['cost_percent']:.1f}%" for x in b["rows"])
            workers = " / ".join(str(x["workers"]) for x in b["rows"])
            self.headlines.append((f"BackupAndRestore every 100 steps, throughput cost ({workers} workers)", costs,
                                   "—", "goal < 3%", short_source(b), b["commands"][0]))

    def collective(self):
        c = self.r.get("collective")
        if not c:
            return
        self.w("## All-reduce: the ring vs Gloo vs Open MPI vs the loopback link")
        self.w()
        self.w(f"Measured: {where(c)}.  ")
        self.w(f"Command: `{c['commands'][0]}`")
        self.w()
        self.w(f"Bus bandwidth (GB/s; 2(n−1)/n × bytes ÷ time), median of {c.get('rounds', '?')} interleaved "
               "rounds, all processes on one host over loopback TCP (Open MPI with `--mca btl tcp,self`). "
               "`ring shm` is the ring's same-host shared-memory path, what a one-host job gets by default. The "
               "limit: the loopback TCP duplex bandwidth per direction, measured by the ring benchmark in the same "
               "run; above 100% happens, since on loopback the link is the kernel's copy and that test a measurement "
               "of it, not a ceiling.")
        self.w()
        self.w("| ranks | bytes | ring tcp | ring shm | Gloo | Open MPI | ring tcp ÷ best peer | rounds won | "
               "ring tcp ÷ duplex |")
        self.w("|---|---|---|---|---|---|---|---|---|")
        duplex = c.get("duplex", {})
        for x in c["rows"]:
            peers = [v for v in (x.get("gloo"), x.get("mpi")) if v]
            d = duplex.get(str(x["ranks"]))
            tcp = x.get("ring_tcp")
            self.w(f"| {x['ranks']} | {human_bytes(x['bytes'])} | {fmt(tcp, 2)} | {fmt(x.get('ring_shm'), 2)} | "
                   f"{fmt(x.get('gloo'), 2)} | {fmt(x.get('mpi'), 2)} | "
                   f"{times(tcp / max(peers)) if tcp and peers else '—'} | "
                   f"{x.get('ring_wins', '—')}/{x.get('rounds', '—')} | {pct(tcp / d) if tcp and d else '—'} |")
        self.w()
        self.w("Loopback duplex, GB/s per direction: " +
               ", ".join(f"{n} processes {v:.2f}" for n, v in sorted(duplex.items())) + ".")
        self.w()
        big = [x for x in c["rows"] if x["bytes"] >= 1 << 20 and x.get("ring_tcp")]
        ahead = [x for x in big if x["ring_tcp"] >= max([v for v in (x.get("gloo"), x.get("mpi")) if v] or [0])]
        self.w(f"At ≥ 1 MiB the ring over TCP is at or above both peers in {len(ahead)} of {len(big)} cells.")
        self.w()
        # Headline: the CNN's gradient (11 MiB), 2 ranks.
        g = next((x for x in c["rows"] if x["ranks"] == 2 and x["bytes"] == 11534336), None)
        if g and g.get("ring_tcp"):
            peers = []
            if g.get("gloo"):
                peers.append(f"{times(g['ring_tcp'] / g['gloo'])} Gloo")
            if g.get("mpi"):
                peers.append(f"{times(g['ring_tcp'] / g['mpi'])} Open MPI")
            d = duplex.get("2")
            limit = f"{pct(g['ring_tcp'] / d)} of loopback duplex ({d:.2f} GB/s)" if d else "—"
            if d and g["ring_tcp"] > d:
                # Not a ceiling at this size: say why in a note rather than print a share above 100%.
                faster = [x for x in c["rows"] if x["ranks"] == 2 and x.get("ring_tcp") and x["ring_tcp"] > d]
                self.headline_notes.append(
                    f"The loopback duplex ({d:.2f} GB/s per direction) is what the ring benchmark measures in the "
                    f"same run with plain TCP: 2 processes each streaming 256 MiB to the other through one "
                    f"connection. The ring's 11 MiB all-reduce ran at {fmt(g['ring_tcp'], 2)} GB/s, "
                    f"{times(g['ring_tcp'] / d)} that figure, and it ran faster than it at {len(faster)} of the "
                    f"{len([x for x in c['rows'] if x['ranks'] == 2])} sizes with 2 ranks (from "
                    f"{human_bytes(min(x['bytes'] for x in faster))} to {human_bytes(max(x['bytes'] for x in faster))}). "
                    f"So on this machine the plain test understates what loopback TCP carries, and a share of it "
                    f"would read above 100%: the cell gives the measurement instead. Why the plain stream is slower "
                    f"than the ring's pipelined chunks was not looked into.")
                limit = (f"the loopback duplex measured in this run, {d:.2f} GB/s, is no ceiling at this size "
                         f"(note {len(self.headline_notes)})")
            self.headlines.append((
                "All-reduce of the CNN's 11 MiB gradient, 2 ranks, TCP (bus GB/s)", fmt(g["ring_tcp"], 2),
                ", ".join(peers), limit, short_source(c), c["commands"][0]))
            if g.get("ring_shm"):
                # The shared-memory path does not touch the loopback: its limit is memory bandwidth, not measured.
                self.headlines.append(("… the same over the shared-memory path (bus GB/s)", fmt(g["ring_shm"], 2),
                                       f"{times(g['ring_shm'] / max(g.get('gloo') or 0, g.get('mpi') or 0))} "
                                       "the better peer" if g.get("gloo") or g.get("mpi") else "—",
                                       f"{times(g['ring_shm'] / g['ring_tcp'])} the ring over TCP (memory bandwidth, "
                                       "its limit, is not measured)",
                                       short_source(c), c["commands"][0]))
        if big:
            self.headlines.append(("All-reduce cells ≥ 1 MiB where the ring (TCP) is ≥ Gloo and Open MPI",
                                   f"{len(ahead)} of {len(big)}", "—", "—", short_source(c), c["commands"][0]))
        if self.plt:
            plt = self.plt
            ranks = sorted({x["ranks"] for x in c["rows"]})
            fig, axes = plt.subplots(1, len(ranks), figsize=(5.2 * len(ranks), 4.0), squeeze=False)
            for ax, n in zip(axes[0], ranks):
                rows = [x for x in c["rows"] if x["ranks"] == n]
                sizes = [x["bytes"] for x in rows]
                for key, label in (("ring_tcp", "mwstrat ring, TCP"), ("ring_shm", "mwstrat ring, shared memory"),
                                   ("gloo", "Gloo"), ("mpi", "Open MPI")):
                    pts = [(x["bytes"], x[key]) for x in rows if x.get(key)]
                    if pts:
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, label=label)
                d = duplex.get(str(n))
                if d:
                    ax.axhline(d, color="grey", linestyle="--", label="loopback TCP duplex")
                ax.set_xscale("log", base=2)
                ticks = [s for s in sizes if s & (s - 1) == 0]  # powers of two (11 MiB would overlap 16 MiB)
                ax.set_xticks(ticks)
                ax.set_xticklabels([human_bytes(s) for s in ticks], rotation=45, fontsize=7)
                ax.set_xlabel("message size")
                ax.set_ylabel("bus bandwidth, GB/s")
                ax.set_title(f"{n} ranks", fontsize=9)
                ax.grid(alpha=0.3)
                ax.legend(fontsize=7)
            fig.suptitle(f"All-reduce on one host, {short_cpu(c)} ({c.get('date', '')[:10]})", fontsize=9)
            path = self.save_plot(fig, "allreduce_bandwidth.png")
            self.w(f"![All-reduce bus bandwidth against message size]({path})")
            self.w()

        m = self.r.get("collective_mpi_algorithms")
        if m:
            self.w(f"### Open MPI's own algorithms at {m.get('ranks', 4)} ranks")
            self.w()
            self.w(f"Measured: {where(m)}.  ")
            self.w(f"Command: `{m['commands'][0]}`")
            self.w()
            names = m.get("names", {})
            series = m["busbw"]
            keys = ["ring-tcp", "mpi-default"] + sorted(k for k in series
                                                        if k.startswith("mpi-") and k != "mpi-default")
            keys = [k for k in keys if k in series]
            label = {"ring-tcp": "mwstrat ring, TCP", "mpi-default": "Open MPI, its choice"}
            self.w("| bytes | " + " | ".join(label.get(k, f"Open MPI {k[4:]} ({names.get(k[4:], '?')})")
                                           for k in keys) + " |")
            self.w("|---" * (len(keys) + 1) + "|")
            for size in sorted({int(s) for k in keys for s in series[k]}):
                self.w(f"| {human_bytes(size)} | " + " | ".join(fmt(series[k].get(str(size)), 2) for k in keys) + " |")
            self.w()
            if m.get("note"):
                self.w(m["note"])
                self.w()

    def nn(self):
        n = self.r.get("nn")
        if not n:
            return
        flops = cnn_flops_per_sample()
        self.w("## Reference CNN on one process: mwstrat vs PyTorch, dense products vs OpenBLAS")
        self.w()
        self.w(f"Measured: {where(n)}.  ")
        self.w(f"Command: `{n['commands'][0]}`")
        self.w()
        self.w("Training step (forward + backward + SGD) on random data, no input pipeline; PyTorch is Debian's "
               f"`python3-torch` with the same model, batch and threads, run with OpenBLAS choosing its kernel and "
               f"with `OPENBLAS_CORETYPE={n.get('coretype', '?')}`; ratios are against the faster, per round.")
        self.w()
        self.w("| batch | threads | mwstrat samples/s | PyTorch (faster) | mwstrat ÷ PyTorch (rounds) | "
               "mwstrat GFLOP/s | of FMA peak |")
        self.w("|---|---|---|---|---|---|---|")
        for x in n["train"]:
            best = x.get("torch_best") or max(v for v in (x.get("torch_default"), x.get("torch_coretype")) if v)
            gf = x["mwstrat"] * flops / 1e9
            peak, _ = self.peak(n, x["threads"])
            rounds = " ".join(f"{r:.2f}" for r in x.get("per_round", []))
            self.w(f"| {x['batch']} | {x['threads']} | {fmt(x['mwstrat'])} | {fmt(best)} | "
                   f"{times(x['ratio'])}{f' ({rounds})' if rounds else ''} | {gf:.1f} | "
                   f"{pct(gf / peak) if peak else '—'} |")
            if x["batch"] == 64 and x["threads"] == 1:
                self.headlines.append(("Reference CNN training step, batch 64, 1 thread (samples/s)",
                                       fmt(x["mwstrat"]), f"{times(x['ratio'])} PyTorch",
                                       f"{gf:.0f} GFLOP/s = {pct(gf / peak)} of FMA peak" if peak
                                       else f"{gf:.0f} GFLOP/s",
                                       short_source(n), n["commands"][0]))
        self.w()
        self.w("Dense(21632 → 128) products alone (GFLOP/s; OpenBLAS `cblas_sgemm` on the same shapes):")
        self.w()
        self.w("| product | batch | threads | mwstrat | OpenBLAS | OpenBLAS, forced kernel | "
               "mwstrat ÷ faster OpenBLAS | "
               "of FMA peak |")
        self.w("|---|---|---|---|---|---|---|---|")
        shares = []
        for x in n["dense"]:
            blas = [v for v in (x.get("openblas_gflops"), x.get("openblas_coretype_gflops")) if v]
            share = x.get("share_of_faster")
            if share is None and blas and x.get("mwstrat_gflops"):
                share = x["mwstrat_gflops"] / max(blas)
            shares.append(share)
            peak, _ = self.peak(n, x["threads"])
            m = x.get("mwstrat_gflops")
            self.w(f"| {x['product']} | {x['batch']} | {x['threads']} | {fmt(m, 1)} | "
                   f"{fmt(x.get('openblas_gflops'), 1)} | {fmt(x.get('openblas_coretype_gflops'), 1)} | {pct(share)} | "
                   f"{pct(m / peak) if m and peak else '—'} |")
        self.w()
        known = [s for s in shares if s is not None]
        if known:
            self.headlines.append(("Dense-layer products (forward, dK, dX; batch 64/128; 1/2 threads), ÷ OpenBLAS",
                                   f"{pct(min(known))}–{pct(max(known))}", "OpenBLAS sgemm", "—", short_source(n),
                                   n["commands"][0]))
        if n.get("note"):
            self.w(n["note"])
            self.w()

    def checkpoint(self):
        c = self.r.get("checkpoint")
        if not c:
            return
        rows = {x["name"]: x for x in c["rows"]}
        self.w("## Checkpoints: save and load against a raw write and read of the same bytes")
        self.w()
        self.w(f"Measured: {where(c)}.  ")
        self.w(f"Command: `{c['commands'][0]}`")
        self.w()
        self.w("The tutorial CNN's full training state (weights + Adam's m and v, 33.25 MB) against `write` + `fsync` "
               "and `read` of the same number of bytes in the same folder: the disk's limit.")
        self.w()
        pairs = [("BM_save_training_state", "save (write + fsync, atomic rename)", "BM_raw_write_fsync"),
                 ("BM_manager_save", "save through checkpoint_manager (index, pruning)", "BM_raw_write_fsync"),
                 ("BM_load_training_state_into_warm", "load into an existing state, page cache warm",
                  "BM_raw_read_warm"),
                 ("BM_safetensors_file_open_warm", "safetensors_file::open, warm", "BM_raw_read_warm"),
                 ("BM_load_training_state_fresh_warm", "load into a new state, warm", "BM_raw_read_warm"),
                 ("BM_load_training_state_into_cold", "load from the disk (page cache dropped)", "BM_raw_read_cold"),
                 ("BM_snapshot_into", "snapshot_into (the training thread's share of a background backup)", None),
                 ("BM_crc32c", "CRC32C of the 33 MB in memory", None)]
        notes = c.get("note")
        self.w("| what | raw baseline, ms | mwstrat, ms | raw ÷ mwstrat (share of the limit) |")
        self.w("|---|---|---|---|")
        for name, what, base in pairs:
            x = rows.get(name)
            if not x:
                continue
            b = rows.get(base) if base else None
            share = b["real_ms"] / x["real_ms"] if b else None
            self.w(f"| {what} | {fmt(b['real_ms'], 2) if b else '—'} | {fmt(x['real_ms'], 2)} | {pct(share)} |")

            if name in ("BM_save_training_state", "BM_load_training_state_into_warm") and b:
                self.headlines.append((f"Checkpoint {what} (33 MB), ms", fmt(x["real_ms"], 1), "—",
                                       f"{pct(share)} of raw {'write + fsync' if 'save' in name else 'read'}",
                                       short_source(c), c["commands"][0]))
        self.w()
        if notes:
            self.w(notes)
            self.w()

    def data(self):
        d = self.r.get("data")
        if not d:
            return
        self.w("## Input pipeline")
        self.w()
        self.w(f"Measured: {where(d)}.  ")
        self.w(f"Command: `{d['commands'][0]}`, and `{d['commands'][1]}`")
        self.w()
        self.w("MNIST, one thread: shuffle + batch of 64 + normalise to float. The limit it is read against: the "
               "training step rate it has to feed.")
        self.w()
        what = {"BM_DistributedBatches/1": "the trainer's path (distributed_batches::next), 1 worker",
                "BM_DistributedBatches/2": "the same, worker 0 of 2",
                "BM_FloatStorageGather": "images stored as float at load, gather-copy (the alternative design)",
                "BM_DatasetPipeline": "range.shuffle.repeat.batch(64).map(normalise)",
                "BM_DatasetPrefetch": "the same + prefetch(2) (2 threads; wall time)"}
        self.w("| benchmark | what | CPU µs per batch | batches/s |")
        self.w("|---|---|---|---|")
        for x in d["rows"]:
            t = x["real_us"] if "Prefetch" in x["name"] else x["cpu_us"]
            self.w(f"| `{x['name']}` | {what.get(x['name'], '')} | {fmt(t, 1)} | {fmt(1e6 / t) if t else '—'} |")
        self.w()
        mem = d.get("memory", {})
        if mem:
            self.w("| MNIST train + test held as | peak RSS after loading, MiB | after an epoch + evaluation, MiB |")
            self.w("|---|---|---|")
            for k, v in mem.items():
                self.w(f"| {k} | {fmt(v['after_load'], 1)} | {fmt(v['after_epoch'], 1)} |")
            self.w()
        if d.get("note"):
            self.w(d["note"])
            self.w()
        trainer = next((x for x in d["rows"] if x["name"] == "BM_DistributedBatches/1"), None)
        t = self.r.get("train")
        if trainer and trainer.get("cpu_us"):
            rate = 1e6 / trainer["cpu_us"]
            mw = next((x for x in (t or {}).get("rows", []) if x["label"] == "mwstrat" and x["workers"] == 1
                       and x.get("steps_per_s")), None)
            other = " (the step rate measured on another machine)" if mw and machine_key(t) != machine_key(d) else ""
            self.headlines.append(("Input pipeline, batches of 64 per second on one thread", fmt(rate),
                                   "—", f"{rate / mw['steps_per_s']:.0f}× the 1-worker training step rate{other}"
                                   if mw else "—",
                                   short_source(d), d["commands"][0]))

    def records(self):
        d = self.r.get("records")
        if not d:
            return
        cfg = d.get("config", {})
        summary, ratios = d.get("summary", {}), d.get("ratios", {})
        self.w("## Input pipeline from TFRecord shards: mwstrat vs tf.data")
        self.w()
        self.w(f"Measured: {where(d)}.  ")
        self.w("Commands: " + ", then ".join(f"`{c}`" for c in d.get("commands", [])))
        self.w()
        self.w(f"{cfg.get('data_set', 'CIFAR-10 train')} written as {cfg.get('shards', 8)} TFRecord shards of "
               f"{cfg.get('image', 'png').upper()} images ({fmt(cfg.get('shard_bytes', 0) / 2**20, 0)} MiB, "
               f"`tools/tfrecord_convert`), then one full pass read + decoded + augmented ({cfg.get('augmentation')}) "
               f"into batches of {cfg.get('batch', 128)}: mwstrat's `data::record_batches` (1 worker, data sharding, "
               f"`decode_threads` = the threads; `benchmarks/data/records_bench.cpp`) against tf.data "
               f"(TensorFlow {d.get('tensorflow') or '?'}: `TFRecordDataset` → `map(parse + decode_png + the same "
               f"augmentation, AUTOTUNE)` → `batch` → `prefetch`, its intra/inter-op pools, private threadpool and "
               f"max_intra_op_parallelism limited to the threads; `benchmarks/data/tfdata_records.py`). Each run is "
               f"its own process; the four take turns in each of {d.get('rounds', 1)} rounds, medians shown. Time "
               f"and CPU (user + system of all threads) from building the pipeline to the end of the pass; peak RSS "
               f"is the process's (TensorFlow's own import is most of tf.data's). mwstrat reads the records in a "
               f"seeded shuffled order (one `pread` each), tf.data in file order (no shuffle), which favours "
               f"tf.data. The goal (issue 47): mwstrat ≥ {cfg.get('goal_cpu_ratio', 1.5)}× tf.data's records per "
               f"CPU second with no more memory.")
        self.w()
        self.w("| impl | threads | records/s | min–max | records per CPU s | min–max | peak RSS, MiB "
               "(before the pipeline) |")
        self.w("|---|---|---|---|---|---|---|")
        for label in ("mwstrat", "tf.data"):
            for t, x in sorted(summary.get(label, {}).items(), key=lambda kv: int(kv[0])):
                self.w(f"| {label} | {t} | {fmt(x['records_per_s'])} | {fmt(x['records_per_s_min'])}–"
                       f"{fmt(x['records_per_s_max'])} | **{fmt(x['records_per_cpu_s'])}** | "
                       f"{fmt(x['records_per_cpu_s_min'])}–{fmt(x['records_per_cpu_s_max'])} | "
                       f"{fmt(x['peak_rss_mib'], 1)} ({fmt(x.get('start_rss_mib'), 1)}) |")
        self.w()
        if ratios:
            def round_ratios(t):  # each round's own mwstrat ÷ tf.data (the two ran back to back)
                out = []
                for r in sorted({x["round"] for x in d.get("rows", [])}):
                    m = [x for x in d["rows"] if x["label"] == "mwstrat" and x["threads"] == int(t) and x["round"] == r]
                    f = [x for x in d["rows"] if x["label"] == "tf.data" and x["threads"] == int(t) and x["round"] == r]
                    if m and f:
                        out.append(m[0]["records_per_cpu_s"] / f[0]["records_per_cpu_s"])
                return out

            self.w("| threads | mwstrat ÷ tf.data, records per CPU s: of the medians | median of the rounds' own "
                   "(min–max) | records/s | peak RSS | CPU goal ≥ 1.5× | memory goal |")
            self.w("|---|---|---|---|---|---|---|")
            for t, x in sorted(ratios.items(), key=lambda kv: int(kv[0])):
                rr = round_ratios(t)
                spread = f" ({times(min(rr))}–{times(max(rr))})" if rr else ""
                self.w(f"| {t} | **{times(x['records_per_cpu_s'])}** | "
                       f"{times(x.get('records_per_cpu_s_rounds'))}{spread} | "
                       f"{times(x['records_per_s'])} | {pct(x['peak_rss'])} | "
                       f"{'met' if x['goal_cpu_met'] else 'not met'} | "
                       f"{'met' if x['goal_memory_met'] else 'not met'} |")
            self.w()
            cpu_met = all(x["goal_cpu_met"] for x in ratios.values())
            mem_met = all(x["goal_memory_met"] for x in ratios.values())
            self.w(f"Goal of ≥ {cfg.get('goal_cpu_ratio', 1.5)}× tf.data's records per CPU second at "
                   f"{' and '.join(sorted(ratios, key=int))} threads: **{'met' if cpu_met else 'not met'}**; no more "
                   f"memory than tf.data: **{'met' if mem_met else 'not met'}**. Load average at the start "
                   f"{d.get('load_at_start', '?')}, at the end {d.get('load_at_end', '?')} (on {short_cpu(d)} × "
                   f"{d.get('machine', {}).get('cpus', '?')}): records/s is the machine's share, records per CPU "
                   f"second the pipeline's own cost.")
            self.w()
            one = ratios.get("1")
            if one:
                self.headlines.append(("TFRecord PNG pipeline (CIFAR-10, decode + augment), records per CPU second, "
                                       "1 thread", fmt(summary["mwstrat"]["1"]["records_per_cpu_s"]),
                                       f"tf.data {times(one['records_per_cpu_s'])}", "—", short_source(d),
                                       d["commands"][1] if len(d.get("commands", [])) > 1 else ""))
        tr = d.get("training", {})
        if tr.get("memory") and tr.get("records"):
            self.w(f"ResNet-56 training from those shards against the set in memory "
                   f"(`benchmarks/resnet/resnet_throughput.cpp`, `--records`: `distributed_input::from_records`, the "
                   f"same augmentation, data sharding, 1 decode thread on the input's prefetch thread), 1 worker × 1 "
                   f"thread, batch 128, {d.get('training_rounds', 1)} interleaved rounds, medians. The goal: within 2% "
                   f"of memory's time per step. The same seed gives the same batches from either input, bit for bit "
                   f"(record_batches walks the in-memory path's order), so the losses must agree too.")
            self.w()
            self.w("| input | ms per step | min–max | CPU ms per step | peak RSS, MiB | loss the run reports "
                   "(each round) |")
            self.w("|---|---|---|---|---|---|")
            for label in ("memory", "records"):
                x = tr[label]
                losses = " ".join(f"{r['loss']:.5f}" for r in d.get("training_rows", []) if r["label"] == label)
                self.w(f"| {label} | **{fmt(x['ms_per_step'], 1)}** | {fmt(x['ms_per_step_min'], 1)}–"
                       f"{fmt(x['ms_per_step_max'], 1)} | {fmt(x['cpu_ms_per_step'], 1)} | "
                       f"{fmt(x['peak_rss_mib'], 1)} | {losses} |")
            self.w()
            q = tr.get("ratio", {})
            if q:
                self.w(f"Shards ÷ memory, ms per step: **{q['ms_per_step']:.3f}** (median of the rounds' own "
                       f"{q['ms_per_step_rounds']:.3f}); CPU ms per step {q['cpu_ms_per_step']:.3f}. Within 2%: "
                       f"**{'met' if q['goal_met'] else 'not met'}**."
                       + (" (Below 1 is the machine's noise, not a gain: from the shards the input does more work — "
                          "reading and decoding PNGs — on its prefetch thread.)" if q["ms_per_step"] < 1 else ""))
                self.w()
        for f in d.get("failures", []):
            self.w(f"- failed: {f}")
        if d.get("failures"):
            self.w()
        if d.get("note"):
            self.w(d["note"])
            self.w()

    def resnet(self):
        t = self.r.get("resnet")
        if not t:
            return
        rows = [x for x in t["rows"] if x.get("samples_per_s") or x.get("conv_gflops")]
        cfg = t.get("config", {})
        med = statistics.median

        def label(x):
            if x.get("impl") == "torch":
                return f"torch {x.get('layout', 'default')}"
            return x.get("label") or x.get("impl")

        # The median over rounds of every (implementation, workers), wall and CPU.
        groups = {}
        for x in rows:
            if x.get("impl") == "mwstrat-conv-kernels":
                continue
            groups.setdefault((label(x), x["workers"]), []).append(x)
        summary = {k: {"samples_per_s": med([x["samples_per_s"] for x in v]),
                       "per_worker": med([x["samples_per_s_per_worker"] for x in v]),
                       "cpu_s_per_step": med([x["cpu_s_per_step"] for x in v]),
                       "min": min(x["samples_per_s"] for x in v), "max": max(x["samples_per_s"] for x in v),
                       "runs": len(v), "threads": v[0].get("threads", 1), "conv_gflop": v[0].get("conv_gflop_per_step")}
                   for k, v in groups.items()}
        for k, s in summary.items():  # samples per CPU second of all workers: the figure a loaded machine spares
            s["per_cpu_s"] = cfg.get("batch", 128) * k[1] / s["cpu_s_per_step"] if s["cpu_s_per_step"] else None
        kernels = [x for x in rows if x.get("impl") == "mwstrat-conv-kernels" and x.get("conv_path") != "direct"]
        direct_kernels = [x for x in rows if x.get("impl") == "mwstrat-conv-kernels" and x.get("conv_path") == "direct"]
        conv_gflop = next((s["conv_gflop"] for s in summary.values() if s["conv_gflop"]), None)
        if conv_gflop is None and kernels:
            conv_gflop = kernels[0]["conv_gflop_per_step"]

        self.w("## ResNet-56 training throughput: mwstrat vs PyTorch vs TensorFlow MultiWorkerMirroredStrategy")
        self.w()
        self.w(f"Measured: {where(t)}.  ")
        self.w("Commands (run in this order, round after round): " + "; ".join(f"`{c}`" for c in t["commands"]))
        self.w()
        self.w(f"The second tutorial's model (TF's Keras `resnet_cifar_model`, depth {cfg.get('depth', 56)}) on real "
               f"CIFAR-10 with the tutorial's augmentation, per-worker batch {cfg.get('batch', 128)}, "
               f"{cfg.get('threads', 1)} thread per worker, workers on one host; {cfg.get('warmup')} warm-up then "
               f"{cfg.get('steps')} timed steps per run, {t.get('rounds', 1)} round(s) with the implementations "
               f"taking turns, median shown. *Samples per CPU s* = samples per second of CPU time of all workers "
               f"(steadier than wall time when other work shares the machine). Conv GFLOP/s = "
               f"{fmt(conv_gflop, 1)} GFLOP of convolutions per worker step (forward, data and filter gradients, "
               f"counted from the model in `resnet_throughput.cpp`) × steps/s, i.e. the whole step's rate counted "
               f"in convolution work only.")
        self.w()
        self.w("| impl | workers × threads | samples/s | min–max | per worker | CPU s per step (all workers) | "
               "samples per CPU s | scaling (wall / CPU) | conv GFLOP/s per worker (wall / CPU) | of FMA peak "
               "(wall / CPU) | mwstrat ÷ this (wall / CPU) |")
        self.w("|---|---|---|---|---|---|---|---|---|---|---|")
        for (name, n), s in sorted(summary.items(), key=lambda kv: (kv[0][1], kv[0][0] != "mwstrat", kv[0][0])):
            one = summary.get((name, 1))
            eff = s["samples_per_s"] / (n * one["samples_per_s"]) if one and n > 1 else None
            # Per CPU second, perfect scaling keeps the samples per CPU second of one worker.
            eff_cpu = s["per_cpu_s"] / one["per_cpu_s"] if one and n > 1 and one["per_cpu_s"] else None
            mw = summary.get(("mwstrat", n))
            gf = s["per_worker"] / cfg.get("batch", 128) * conv_gflop if conv_gflop else None
            gf_cpu = s["per_cpu_s"] / cfg.get("batch", 128) * conv_gflop if conv_gflop and s["per_cpu_s"] else None
            peak, _ = self.peak(t, s["threads"])
            self.w(f"| {name} | {n} × {s['threads']} | {fmt(s['samples_per_s'], 1)} | {fmt(s['min'], 1)}–"
                   f"{fmt(s['max'], 1)} | {fmt(s['per_worker'], 1)} | {fmt(s['cpu_s_per_step'], 2)} | "
                   f"{fmt(s['per_cpu_s'], 1)} | {pct(eff) + ' / ' + pct(eff_cpu) if n > 1 else '—'} | "
                   f"{fmt(gf, 1)} / {fmt(gf_cpu, 1)} | "
                   f"{pct(gf / peak) + ' / ' + pct(gf_cpu / peak) if gf and gf_cpu and peak else '—'} | "
                   + (f"{times(mw['samples_per_s'] / s['samples_per_s'])} / {times(mw['per_cpu_s'] / s['per_cpu_s'])}"
                      if mw and name != 'mwstrat' else '—') + " |")
        self.w()

        # The goals of issue 17: >= 1.3x the faster peer per worker, >= 95% two-worker scaling, convs >= 60% of peak.
        bits = []
        for n in sorted({k[1] for k in summary}):
            mw = summary.get(("mwstrat", n))
            peers = {k[0]: v for k, v in summary.items() if k[1] == n and k[0] != "mwstrat"}
            if not mw or not peers:
                continue
            fast = max(peers, key=lambda p: peers[p]["per_worker"])
            fast_cpu = max(peers, key=lambda p: peers[p]["per_cpu_s"] or 0)
            bits.append(f"{n} worker{'s' if n > 1 else ''}: mwstrat ÷ the faster peer ({fast}) per worker "
                        f"**{times(mw['per_worker'] / peers[fast]['per_worker'])}** wall, "
                        f"{times(mw['per_cpu_s'] / peers[fast_cpu]['per_cpu_s'])} per CPU second ({fast_cpu})")
        for name in sorted({k[0] for k in summary}):
            one, two = summary.get((name, 1)), summary.get((name, 2))
            if one and two:
                bits.append(f"{name} two-worker scaling **{pct(two['samples_per_s'] / (2 * one['samples_per_s']))}** "
                            f"wall, {pct(two['per_cpu_s'] / one['per_cpu_s'])} per CPU second")
        if bits:
            self.w("Against issue 17's goals (≥ 1.3× the faster peer per worker, ≥ 95% two-worker scaling): "
                   + "; ".join(bits) + ".")
            self.w()
        if kernels:
            k_wall = med([x["conv_seconds_per_step"] for x in kernels])
            k_cpu = med([x["conv_cpu_s_per_step"] for x in kernels])
            k_gf = med([x["conv_gflops"] for x in kernels])
            k_gf_cpu = med([x["conv_gflops_per_cpu_s"] for x in kernels])
            peak, _ = self.peak(t, kernels[0].get("threads", 1))
            mw = summary.get(("mwstrat", 1))
            share = ""
            if mw:
                step_cpu = mw["cpu_s_per_step"]
                share = (f" They take {fmt(k_cpu, 2)} CPU s of the whole step's {fmt(step_cpu, 2)} CPU s "
                         f"(**{pct(k_cpu / step_cpu)}** of the step); the rest is batch norm, ReLU, the shortcuts' "
                         f"adds, the input pipeline, the loss and the update.")
            self.w(f"mwstrat's convolutions alone (`--conv-kernels`: nn/kernels' forward, data gradient and filter "
                   f"gradient on every convolution shape of the model at batch {kernels[0]['batch']}, "
                   f"{kernels[0]['convolutions']} convolutions, random data, {len(kernels)} run(s)): "
                   f"{fmt(k_wall, 2)} s wall / {fmt(k_cpu, 2)} CPU s per step, **{fmt(k_gf, 1)} GFLOP/s** wall, "
                   f"{fmt(k_gf_cpu, 1)} GFLOP per CPU second"
                   + (f" = **{pct(k_gf / peak)}** wall, {pct(k_gf_cpu / peak)} per CPU second, of the 1-thread FP32 "
                      f"FMA peak ({fmt(peak, 1)} GFLOP/s; goal ≥ 60%)." if peak else
                      " (no FMA peak measured on this machine: `benchmarks/run.py --only peak`).") + share)
            self.w()
            if direct_kernels:
                d_wall = med([x["conv_seconds_per_step"] for x in direct_kernels])
                d_gf = med([x["conv_gflops"] for x in direct_kernels])
                self.w(f"The GFLOP are the direct convolution's multiply-adds: the default kernels run the 3×3 "
                       f"stride-1 convolutions by Winograd F(4×4, 3×3), whose products need 2.25× fewer (forward "
                       f"pass and data gradient) or 4× fewer (filter gradient, by the transposed algorithm), so "
                       f"their rate is an effective one and may pass the peak. The direct kernels "
                       f"alone (`--conv-path direct`, every multiply-add done): {fmt(d_wall, 2)} s per step, "
                       f"**{fmt(d_gf, 1)} GFLOP/s**"
                       + (f" = **{pct(d_gf / peak)}** of the FMA peak" if peak else "")
                       + f"; Winograd makes the convolutions **{times(d_wall / k_wall)}** faster.")
                self.w()
        if t.get("failures"):
            self.w("Failed runs: " + "; ".join(t["failures"]))
            self.w()
        try:
            busy = float(t.get("load_at_start", "0").split()[0]) > t.get("machine", {}).get("cpus", 1) - 0.5
        except ValueError:
            busy = False
        if busy:
            self.w(f"**The machine was busy** (load {t['load_at_start']} at start on "
                   f"{t.get('machine', {}).get('cpus')} CPUs): wall-clock figures, and wall scaling above all (two "
                   f"workers compete with the other load for two cores), say little; the per-CPU-second figures are "
                   f"the ones to read. Rerun on a quiet machine for wall figures.")
            self.w()
        if t.get("note"):
            self.w(t["note"])
            self.w()
        for n in (1, 2):
            mw = summary.get(("mwstrat", n))
            peers = {k[0]: v for k, v in summary.items() if k[1] == n and k[0] != "mwstrat"}
            if not mw:
                continue
            limit = "—"
            one = summary.get(("mwstrat", 1))
            if n > 1 and one:
                limit = (f"scaling {pct(mw['samples_per_s'] / (n * one['samples_per_s']))} of {n} × one worker wall, "
                         f"**{pct(mw['per_cpu_s'] / one['per_cpu_s']) if mw['per_cpu_s'] and one['per_cpu_s'] else '—'}"
                         f"** per CPU second (goal ≥ 95%)")
            elif direct_kernels and self.peak(t, 1)[0]:
                # The share of the peak is the direct kernels' (every multiply-add done); Winograd's rate counts the
                # multiply-adds it saves and can pass 100%, so it goes to the notes under the table, not into a cell.
                peak1 = self.peak(t, 1)[0]
                speedup = med([x["conv_seconds_per_step"] for x in direct_kernels]) / med(
                    [x["conv_seconds_per_step"] for x in kernels])
                self.headline_notes.append(
                    f"ResNet-56's convolutions by default run the 3×3 stride-1 ones by Winograd F(4×4, 3×3), which does "
                    f"2.25× (forward, data gradient) to 4× (filter gradient) fewer multiply-adds than the direct "
                    f"convolution. Counted in the direct convolution's multiply-adds, the default kernels run at an "
                    f"*effective* {pct(med([x['conv_gflops'] for x in kernels]) / peak1)} of the 1-thread FMA peak "
                    f"({fmt(med([x['conv_gflops'] for x in kernels]), 1)} GFLOP/s against {fmt(peak1, 1)}): a rate "
                    f"of useful work, not of arithmetic done, which is why it may pass 100%. The cell gives the "
                    f"direct kernels' share, arithmetic actually done.")
                limit = (f"convolutions alone (direct kernels) at "
                         f"{pct(med([x['conv_gflops'] for x in direct_kernels]) / peak1)} of the 1-thread FMA peak; "
                         f"Winograd {times(speedup)} faster than that (note {len(self.headline_notes)})")
            elif kernels and self.peak(t, 1)[0]:
                limit = (f"convolutions alone at {pct(med([x['conv_gflops'] for x in kernels]) / self.peak(t, 1)[0])}"
                         f" of the 1-thread FMA peak")
            self.headlines.append((f"ResNet-56 training, {n} worker{'s' if n > 1 else ''} × 1 thread (samples/s)",
                                   fmt(mw["samples_per_s"], 1),
                                   ", ".join(f"{times(mw['samples_per_s'] / v['samples_per_s'])} {p}"
                                             for p, v in sorted(peers.items())),
                                   limit, short_source(t), next((c for c in t["commands"] if "mwstrat-launch -n "
                                                                 + str(n) in c), t["commands"][0])))

    def kernels(self):
        """The convolution kernels against oneDNN (PyTorch), pass by pass on ResNet-56's shapes (issue 17's goal:
        faster on every shape)."""
        k = self.r.get("kernels")
        if not k:
            return
        w = self.w
        med = statistics.median
        peak, _ = self.peak(k, 1)
        w("### Convolution kernels against oneDNN, each of ResNet-56's shapes")
        w()
        w(f"Measured: {where(k)}.  ")
        w(f"Command: `{k['commands'][0]}`")
        w()
        w(f"nn/kernels (`benchmarks/kernels/conv_bench.cpp`) and PyTorch's oneDNN convolutions "
          f"(`benchmarks/kernels/torch_conv_bench.py`, channels-last) on one thread at batch 128, taking turns for "
          f"{k['rounds']} round(s) of at least {k['seconds']} s per pass. *Best* is the ratio of each side's best time "
          f"over the rounds; *median* is the median of each round's own ratio, the steadier figure on a machine "
          f"whose speed drifts between rounds. GFLOP/s count the direct convolution's multiply-adds, so Winograd's "
          f"passes (3×3, stride 1) read an effective rate that may pass the peak. Layers: how many of ResNet-56's "
          f"convolutions have the shape (the totals weight each shape by it).")
        w()
        self.busy_note(k)
        w("| pass / shape (batch 128) | layers | mwstrat GFLOP/s | of the FMA peak | oneDNN GFLOP/s "
          "| mwstrat ÷ oneDNN, best | median of rounds |")
        w("|---|---:|---:|---:|---:|---:|---:|")
        behind, untimed = [], []  # untimed: oneDNN has no time for the pass, so it is neither ahead nor behind
        for r in k["rows"]:
            best = r["mwstrat_gflops"] / r["torch_gflops"] if r.get("torch_gflops") else None
            median = med(r["round_ratios"]) if r.get("round_ratios") else None
            if best is None or median is None:
                untimed.append(r["name"])
            elif best < 1 or median < 1:
                behind.append(r["name"])
            w(f"| {r['name']} | {r['layers']} | {fmt(r['mwstrat_gflops'], 1)} | "
              f"{pct(r['mwstrat_gflops'] / peak) if peak else '—'} | {fmt(r.get('torch_gflops'), 1)} | "
              f"{'**' if best is not None and best < 1 else ''}{times(best)}{'**' if best is not None and best < 1 else ''}"
              f" | {times(median)} |")
        w()
        totals = k.get("totals_ms") or {}
        if totals:
            w("| ResNet-56 convolutions, one batch of 128 | mwstrat ms | oneDNN ms | oneDNN ÷ mwstrat |")
            w("|---|---:|---:|---:|")
            for p, v in totals.items():
                w(f"| {p} | {fmt(v['mwstrat'], 1)} | {fmt(v['torch'], 1)} | {times(v['torch'] / v['mwstrat'])} |")
            a = sum(v["mwstrat"] for v in totals.values())
            b = sum(v["torch"] for v in totals.values())
            w(f"| all three | {fmt(a, 1)} | {fmt(b, 1)} | **{times(b / a)}** |")
            w()
            self.headlines.append(("ResNet-56's convolutions, 1 thread, batch 128 (ms per batch)", fmt(a, 1),
                                   f"{times(b / a)} oneDNN (PyTorch)",
                                   f"{len(k['rows']) - len(behind) - len(untimed)} of {len(k['rows'])} passes ahead of "
                                   f"oneDNN by both measures", short_source(k), k["commands"][0]))
        if untimed:
            w(f"Not timed on oneDNN's side in this run, so not compared: {', '.join(untimed)}.")
            w()
        if behind:
            w(f"Against issue 17's goal (faster than oneDNN on every shape): **not met** here; {len(behind)} of "
              f"{len(k['rows'])} passes are behind by the best or the median: {', '.join(behind)}. "
              f"[kernels/README.md](kernels/README.md) has what was tried on them.")
        elif untimed:
            w("Against issue 17's goal (faster than oneDNN on every shape): not shown by this run, which lacks "
              "oneDNN's time for the passes above.")
        else:
            w(f"Against issue 17's goal (faster than oneDNN on every shape): met in this run, every pass ahead by "
              f"both measures.")
        w()

    def libtorch(self):
        """DDP for libtorch (issue 45): mwstrat::fit over module_model against PyTorch's DDP on the same libtorch
        build and a plain libtorch loop, 1 and 2 workers; the goals judged on the rounds' own ratios."""
        k = self.r.get("libtorch")
        if not k or not k.get("summary"):
            return
        w = self.w
        summ, ratios, scaling, goals = k["summary"], k.get("ratios", {}), k.get("scaling", {}), k.get("goals", {})
        cfg = k.get("config", {})
        w("## DDP for libtorch: mwstrat vs PyTorch DDP on the same libtorch build")
        w()
        w(f"Measured: {where(k)}.  ")
        w("Commands: " + "; ".join(f"`{c}`" for c in k["commands"]))
        w()
        w(f"examples/libtorch_mnist's CNN (the module itself, `tutorial_cnn.hpp`) trained with SGD on real MNIST, batch "
          f"{cfg.get('batch', '?')} per worker, {cfg.get('threads', 1)} intra-op thread per worker, "
          f"{cfg.get('warmup', '?')} warm-up then {cfg.get('steps', '?')} timed steps per run, {k.get('rounds', '?')} "
          "interleaved round(s) (every run in each round, the order reversed every other round). The kernels are the "
          f"same on every row: libtorch {cfg.get('torch') or '1.13'} from Debian (`libtorch-dev` for C++, "
          "`python3-torch` for Python are one build, with OpenBLAS choosing its kernel for both), so only the "
          "distribution layer differs. *mwstrat*: `mwstrat::fit` over `mwstrat::libtorch::module_model`, one process "
          "per worker (mwstrat-launch); since 2026-12-07 (15:47 UTC) its two workers train one shared copy of the "
          "parameters in the host's region and read each other's gradients there (`update_placement::"
          "shared_host_copy`: the adapter adopts the region, no gradient is copied into or out of the ring). "
          "*ddp*: `torch.nn.parallel.DistributedDataParallel` over gloo on 127.0.0.1, its "
          "textbook loop; *ddp-metrics* adds what fit computes besides (the loss and correct count summed over the "
          "workers each step). *plain*: libtorch's own MNIST reader and `torch::optim::SGD`, no distribution at "
          "all: the ceiling; at 2 workers, two such processes at once that share nothing, the machine's own limit "
          "for two (what two busy cores of it give). plain pins glibc's malloc thresholds, and so does mwstrat's "
          "`module_model` (`libtorch/tensor_memory.hpp`): with glibc's defaults a process may hand each step's freed "
          "tensors back to the kernel and fault them in again (13–26 ms of kernel time per step here, depending on "
          "the order of its first frees: [history/2026-12-07-libtorch-malloc.md](history/2026-12-07-libtorch-malloc.md)); "
          "the Python processes run with glibc's defaults, as DDP's users do. CPU ms per step: the whole process's "
          "CPU time (every thread, gloo's and "
          "the ring's included) of all workers; samples per CPU second: the global batch ÷ that. Medians over the "
          "rounds; ratios are the median of each round's own ratio (the two sides of a round ran a minute apart at "
          "most).")
        w()
        self.busy_note(k)
        loads = [x.get("load_at_start", "") for x in k.get("rows", [])]
        if loads:
            ones = sorted(float(x.split()[0]) for x in loads if x)
            if ones:
                w(f"Load (1-minute average) at the start of each run: {ones[0]:.2f} to {ones[-1]:.2f}, median "
                  f"{statistics.median(ones):.2f}, on {k.get('machine', {}).get('cpus', '?')} CPUs.")
                w()
        w("| impl | workers × threads | samples/s | min–max | ms per step | CPU ms per step (all workers) | "
          "of which in the kernel | samples per CPU second | scaling (CPU / wall) | peak RSS, MiB | "
          "mwstrat ÷ this (samples/s / per CPU s) |")
        w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        pair = {("ddp", "1"): ("mwstrat_over_ddp_1w", "cpu_mwstrat_over_ddp_1w"),
                ("ddp", "2"): ("mwstrat_over_ddp_2w", "cpu_mwstrat_over_ddp_2w"),
                ("ddp-metrics", "1"): ("mwstrat_over_ddp_metrics_1w", None),
                ("ddp-metrics", "2"): ("mwstrat_over_ddp_metrics_2w", None),
                ("plain", "1"): ("mwstrat_over_plain_1w", "cpu_mwstrat_over_plain_1w")}
        mine = scaling.get("mwstrat", {})
        for workers in ("1", "2"):
            for impl in ("mwstrat", "ddp", "ddp-metrics", "plain"):
                x = summ.get(impl, {}).get(workers)
                if not x:
                    continue
                sc = scaling.get("machine" if impl == "plain" else impl, {}) if workers == "2" else {}
                scale = f"{pct(sc.get('cpu'))} / {pct(sc.get('wall'))}" if sc else "—"
                if impl == "mwstrat":
                    over = "1.00×"
                elif (impl, workers) == ("plain", "2"):
                    over = f"{times(mine.get('wall_of_machine'))} / {times(mine.get('cpu_of_machine'))}"
                else:
                    rate_key, cpu_key = pair.get((impl, workers), (None, None))
                    over = times(ratios.get(rate_key)) + (f" / {times(ratios.get(cpu_key))}" if cpu_key else "")
                w(f"| {impl} | {workers} × 1 | {fmt(x['samples_per_s'])} | {fmt(x['samples_per_s_min'])}–"
                  f"{fmt(x['samples_per_s_max'])} | {fmt(x['ms_per_step'], 1)} | {fmt(1000 * x['cpu_s_per_step'], 1)} | "
                  f"{fmt(1000 * x.get('cpu_system_s_per_step', 0.0), 1)} | "
                  f"{fmt(x['samples_per_cpu_s'])} | {scale} | {fmt(x['peak_rss_mib'])} | {over} |")
        w()
        w("*Scaling*, 2 workers over the same implementation's 1 worker: per CPU second, samples per CPU second of "
          "both workers ÷ one worker's (100%: the exchange and the lockstep cost no CPU); wall, samples/s ÷ twice one "
          "worker's; plain's at 2 is the machine's own (two processes that share nothing). Against the plain loop, "
          "2 workers keep per CPU second: "
          + ", ".join(f"{impl} {pct(scaling.get(impl, {}).get('cpu_of_plain'))}" for impl in ("mwstrat", "ddp")
                      if scaling.get(impl)) + "; against two plain processes at once: "
          + ", ".join(f"{impl} {pct(scaling.get(impl, {}).get('cpu_of_machine'))}" for impl in ("mwstrat", "ddp")
                      if scaling.get(impl, {}).get("cpu_of_machine") is not None) + ".")
        w()
        if k.get("failures"):
            w("Runs that failed: " + "; ".join(k["failures"]))
            w()
        names = {"one_worker": ("at 1 worker, mwstrat ≥ {g:.1f}× DDP's samples/s", times),
                 "cpu_scaling": ("at 2 workers, mwstrat's scaling per CPU second ≥ {g:.0%}", pct),
                 "two_workers": ("at 2 workers, mwstrat ≥ {g:.1f}× DDP's samples/s", times)}
        if goals:
            w("### Issue 45's speed goals, on these figures")
            w()
            for key, (text, shown) in names.items():
                g = goals.get(key)
                if g:
                    limit = (f" (this machine's own, two plain processes: {pct(g['machine_limit'])})"
                             if g.get("machine_limit") is not None else "")
                    w(f"- {text.format(g=g['goal'])}: {shown(g.get('value'))}, "
                      f"{'met' if g.get('met') else '**not met**'}{limit}")
            w()
            if k.get("note"):  # what the figures of this one run do not say by themselves (other runs, noise)
                w(k["note"])
                w()
            one = summ.get("mwstrat", {}).get("1")
            two = summ.get("mwstrat", {}).get("2")
            if one and two:
                w(f"The two workers share the machine's {k.get('machine', {}).get('cpus', '?')} CPUs with each other "
                  "and with whatever else runs (the load above), so the wall-clock figures at 2 workers are the "
                  "machine's as much as the library's; CPU seconds count only what each process did. On a machine "
                  "with separate cores per worker (or separate hosts), each worker's step is its one-worker compute "
                  f"({fmt(1000 * one['cpu_s_per_step'], 1)} CPU ms here) plus what of the gradient's exchange is not "
                  "hidden behind the backward pass: 2 workers' samples/s then approach twice one worker's in the "
                  "measure that scaling per CPU second gives (the CPU the exchange adds is what is lost), and the "
                  "ratio to DDP at 2 workers approaches the ratio of samples per CPU second in the table. Shared "
                  "cores also slow each kernel (caches, memory bandwidth, the hypervisor's scheduling), which inflates "
                  "the CPU time of both 2-worker rows alike: per CPU second is a floor for separate cores, not a "
                  "forecast.")
                w()
            value = goals.get("one_worker", {}).get("value")
            self.headlines.append(("DDP for libtorch: mwstrat ÷ PyTorch DDP, samples/s (1 / 2 workers)",
                                   f"{times(value)} / {times(goals.get('two_workers', {}).get('value'))}",
                                   "same libtorch build", f"goals ≥ 1.0× / ≥ 1.2×; scaling per CPU s "
                                   f"{pct(goals.get('cpu_scaling', {}).get('value'))} (goal ≥ 95%)",
                                   short_source(k), "benchmarks/libtorch/compare.py"))

    def elastic(self):
        """An elastic job's membership change by worker count (elastic.json, collective/shrink_bench.cpp)."""
        e = self.r.get("elastic")
        if not e:
            return
        w = self.w
        w("## Elastic training: a shrink by worker count")
        w()
        w(f"Measured: {where(e)}.  ")
        w(f"Command: `{e['commands'][0]}`")
        w()
        w("N ranks of the TCP ring on loopback, each a thread with its own ring, sockets and liveness thread; one rank "
          "is lost mid all-reduce (its ring torn down as a process exit tears it down), and the survivors find it "
          "(the verdict), build the ring without it (`ring_collective::without_ranks`) and finish one all-reduce on "
          "it — what `fit` does when an elastic job shrinks, the training state's transfer aside (a broadcast of the "
          "snapshot). Times are the slowest survivor's, from the loss. The anchor is Horovod's Gloo "
          "re-initialisation after a membership change, as reported in its issue tracker: 0.4 / 1.2 / 7.1 / 15.8 s at "
          "2 / 4 / 8 / 16 ranks (another machine). Goal: at most 200 ms at 16.")
        w()
        w("| ranks | rounds | loss → verdict (p50) | verdict → new ring's first all-reduce (p50) | loss → training "
          "again: p50 | p99 | max | Horovod/Gloo re-init |")
        w("|---|---|---|---|---|---|---|---|")
        gloo = {4: "1.2 s", 8: "7.1 s", 16: "15.8 s"}
        for x in e.get("shrink", []):
            w(f"| {x['workers']} | {x['rounds']} | {fmt(x['detect_p50_ms'], 1)} ms | {fmt(x['ring_p50_ms'], 1)} ms | "
              f"{fmt(x['total_p50_ms'], 1)} ms | {fmt(x['total_p99_ms'], 1)} ms | {fmt(x['total_max_ms'], 1)} ms | "
              f"{gloo.get(x['workers'], '—')} |")
        w()
        p = e.get("shrink_processes")
        if p:
            w(f"With real processes (`{e['commands'][1]}`): examples/mnist_multiworker, 3 workers on 127.0.0.1, "
              f"`--min-workers 2`, one worker SIGKILLing itself at a seeded step in each of {p['faults']} runs; the "
              "new chief's time from seeing the loss to training again on two workers (the survivors' ring, the "
              "training state from the latest boundary, the resharded data, the gradient synchroniser): "
              f"**p50 {fmt(p['p50_ms'], 1)} ms, p99 {fmt(p['p99_ms'], 1)} ms, max {fmt(p['max_ms'], 1)} ms** "
              "(goal: at most 1 s, p99 over at least 50 faults). Add the loss → verdict above (a killed process: its "
              "connection closes).")
            w()
        g = e.get("goodput")
        if g:
            n = g.get("workers", 3)
            when = f" (measured {e['goodput_date']})" if e.get("goodput_date") else ""
            budget = (f" of {fmt(g['cpu_per_worker'], 2)} CPU each (below)" if g.get("cpu_per_worker") else "")
            w(f"Goodput under fault campaigns without spares{when} (`{e['commands'][3]}`): the MNIST example, {n} workers"
              f"{budget} "
              f"under `mwstrat-launch --min-workers {n - 1} --max-workers {n} --spare-wait 0 --join-delay "
              f"{int(g['join_delay_s'] * 1000)}` (a lost worker's node returns as a joiner "
              f"{fmt(g['join_delay_s'], 0)} s later), {g['steps']} steps of a global batch of 48, fault-free in "
              f"{fmt(g['reference_seconds'], 1)} s; one SIGKILL of a random worker every gap. Goodput = training steps "
              "per second against the fault-free run (the same steps). Goals: at least 98% at one fault every 60 s "
              "and 90% at one every 15 s (torchft's published 82.3% and 30.2% step efficiency, another setting).")
            w()
            if g.get("repeats", 1) > 1:
                w(f"{g['repeats']} rounds, each a fault-free run then the campaigns, each campaign's goodput against its "
                  "own round's fault-free run (the shared machine's speed drifts by several percent between runs "
                  "minutes apart); the table gives the median round (the lower middle one for an even count) and "
                  "every round's figure. The faults and joins are all the rounds'; p99 is the largest of the rounds'.")
                w()
            self.campaign_table(g["campaigns"], g.get("rounds", g["campaigns"]))
            spare = e.get("goodput_spare")
            if spare:
                c = spare["campaigns"][0]
                spare_command = next((x for x in e["commands"] if x.startswith("benchmarks/") and "--join-delay 0" in x),
                                     e["commands"][-1])
                w(f"With a spare started at once (`{spare_command}`: `--join-delay 0 --spare-wait "
                  f"{fmt(spare['spare_wait_s'], 0)}`, the survivors wait for it before training smaller, and it joins at "
                  f"the boundary they shrank at): one fault every {fmt(c['gap_s'], 0)} s, "
                  f"{fmt(c['faults_injected'], 0)} injected and survived, **goodput {fmt(c['goodput_percent'], 1)}%**, "
                  f"loss → training again on {spare['workers']} workers, the spare's start and join included, p50 "
                  f"{fmt(c['loss_to_training_p50_ms'], 0)} ms, p99 {fmt(c['loss_to_training_p99_ms'], 0)} ms.")
                w()
            if g.get("join_ms"):
                j = g["join_ms"]
                w(f"Joins in those runs ({j['count']}): from the step boundary where the joiner was due to training "
                  f"again on {n} workers (the larger ring, the identity check, the {fmt(g.get('state_mb'), 1)} MB "
                  f"state from a member's memory, the resharded data): **p50 {fmt(j['p50'], 0)} ms, p99 "
                  f"{fmt(j['p99'], 0)} ms** (goal: at most 1 s). On loopback the state moves through shared memory "
                  f"(p50 {fmt(g.get('state_transfer_ms_p50'), 0)} ms); between hosts, below.")
                w()
            resnet = e.get("goodput_resnet20")
            if resnet:
                command = next((c for c in e["commands"] if c.startswith("benchmarks/") and "resnet20" in c), "")
                w(f"The same campaigns on ResNet-20 (`{command}`): the CIFAR-10 example, depth 20, "
                  f"{resnet['workers']} workers, a global batch of {16 * resnet['workers']} kept through every "
                  f"shrink and join, {resnet['steps']} steps, fault-free in {fmt(resnet['reference_seconds'], 1)} s; "
                  "its step has more compute per byte of gradient than the MNIST CNN's.")
                w()
                self.campaign_table(resnet["campaigns"], resnet.get("rounds", resnet["campaigns"]))
                if resnet.get("join_ms"):
                    j = resnet["join_ms"]
                    w(f"Its joins ({j['count']}), due → training again: p50 {fmt(j['p50'], 0)} ms, p99 "
                      f"{fmt(j['p99'], 0)} ms, with a {fmt(resnet.get('state_mb'), 1)} MB state.")
                    w()
            timed = [c for c in g["campaigns"] if c.get("timeline")]
            if self.plt and timed:
                plt = self.plt
                fig, axes = plt.subplots(len(timed), 1, figsize=(7.2, 2.4 * len(timed)), squeeze=False)
                ref = g.get("reference_timeline")
                for ax, c in zip(axes[:, 0], timed):
                    t = c["timeline"]
                    xs = [i * t["bin_s"] for i in range(len(t["steps_per_s"]))]
                    ax.plot(xs, t["steps_per_s"], linewidth=0.8, label="under faults")
                    if ref and ref.get("steps_per_s"):
                        mean = g["steps"] / g["reference_seconds"]
                        ax.axhline(mean, color="grey", linestyle="--", linewidth=0.8, label="fault-free mean")
                    for k, at in enumerate(t["shrinks_s"]):
                        ax.axvline(at, color="red", linewidth=0.7, label="worker lost: shrunk" if k == 0 else None)
                    for k, at in enumerate(t["joins_s"]):
                        ax.axvline(at, color="green", linewidth=0.7, linestyle=":",
                                   label="node back: joined" if k == 0 else None)
                    ax.set_ylabel("steps/s")
                    ax.set_ylim(bottom=0)
                    ax.set_title(f"one fault every {fmt(c['gap_s'], 0)} s: goodput {fmt(c['goodput_percent'], 1)}%",
                                 fontsize=9)
                    ax.grid(alpha=0.3)
                    ax.legend(fontsize=7, loc="lower right")
                axes[-1, 0].set_xlabel("seconds from the first step")
                fig.suptitle(f"Elastic MNIST, {n} workers: throughput over time\n{short_cpu(e)} "
                             f"({e.get('goodput_date', e.get('date', ''))[:10]})", fontsize=9)
                path = self.save_plot(fig, "elastic_goodput_timeline.png")
                w(f"![Elastic training throughput over time, faults marked]({path})")
                w()
            w("Where the goodput goes: a lost worker's node is away for the join delay and then for its joiner's own "
              "start-up (the program started, its data read, its model built, on its slot's budget), and in that "
              f"time the smaller group computes every global step with {n - 1} of {n} workers' compute. Where the "
              f"step is all compute that costs about (join delay + start-up) × 1/{n} of the steps per fault "
              f"({fmt(g['join_delay_s'] / n, 2)} s of steps for the delay alone), whatever the recovery does; the "
              "loss → training again and the join above are the recovery's own cost. With one fault every 15 s the "
              f"delay alone gives {fmt(100 * (1 - g['join_delay_s'] / n / 15), 0)}% at {n} workers; a start-up of "
              "seconds more (the CIFAR-10 example reads and decodes its 50 000 images) lowers that further. The "
              "MNIST job at this size is not compute-bound (the exchange of its 11.1 MB gradient and the lockstep "
              "bound its step), so a group of three trains it about as fast as four; the spare run shows the "
              "recovery's cost with nobody away.")
            w()
            if g.get("cpu_per_worker"):
                cpu = g["cpu_per_worker"]
                w(f"Each worker slot is held to {fmt(cpu, 2)} CPU (a cgroup with a CFS quota, the slot's joiner put in "
                  f"the same one), so the {n} workers are {n} machines of {fmt(cpu, 2)} CPU each on this machine's "
                  "two cores: a shrunk group has that much less compute and computes each step's global batch more "
                  "slowly until the joiner is back. (Workers sharing the two cores freely would not show it: a "
                  "smaller group would take the cores the lost one left, and run no slower.)")
                u = g.get("slot_cpu") or []
                if u:
                    throttled = sum(x["throttled_periods"] or 0 for x in u)
                    periods = sum(x["periods"] or 0 for x in u)
                    w(f"The quotas were in force: {throttled} of the slots' {periods} 10-ms periods ended "
                      "throttled.")
            else:
                w("Each worker has a core of its own, as on separate machines: a shrunk group computes each step's "
                  "global batch with fewer workers, more slowly, until the joiner is back. (Three workers would share "
                  "the two cores, and a group of two would be no slower per step than three.)")
            w()
        hosts = e.get("join_between_hosts")
        if hosts:
            command = next((c for c in e["commands"] if "elastic_join_hosts.py" in c), "train/elastic_join_hosts.py")
            w(f"A join between simulated hosts (`{command}`): "
              "three members of the MNIST example on h1..h3 and a joiner on h4, every host's link shaped to the rate "
              "(tbf both ways); the joiner's time to take in the training state from a member's memory (the "
              "fingerprint check, the positions' exchange, the ring broadcast) against one TCP stream of the same "
              "bytes from h1 to h4 just before, in the same set. Goal: the state at 80% of the link's rate or more.")
            w()
            w("| link | joins | state | state transfer p50 | state's rate | the link's measured rate | share of the "
              "link | due → training again on 4 (p50) |")
            w("|---|---|---|---|---|---|---|---|")
            for x in hosts:
                w(f"| {x['rate']} | {x['joins']} | {fmt(x['state_mb'], 1)} MB | {fmt(x['state_ms_p50'], 0)} ms | "
                  f"{fmt(x['state_mbit_s_p50'], 1)} Mbit/s | {fmt(x['link_mbit_s_p50'], 1)} Mbit/s | "
                  f"**{fmt(100 * x['share_of_link_p50'], 0)}%** | {fmt(x['due_to_training_ms_p50'], 0)} ms |")
            w()
        if g:
            fifteen = [c for c in g["campaigns"] if c["gap_s"] == 15]
            if fifteen:
                inside = [x for x in (within_run_goodput(r.get("timeline")) for r in g.get("rounds", fifteen)
                                      if r["gap_s"] == 15) if x is not None]
                figure = f"{fmt(fifteen[0]['goodput_percent'], 1)}%" + (
                    f" (within the runs {fmt(statistics.median(inside), 1)}%)" if inside else "")
                self.headlines.append((f"Elastic goodput, MNIST, {g['workers']} workers, one fault every 15 s, the "
                                       f"node back after {fmt(g['join_delay_s'], 0)} s", figure,
                                       "torchft 30.2% (published, another setting)", "goal ≥ 90%", short_source(e),
                                       e["commands"][3]))
            resnet = e.get("goodput_resnet20")
            r15 = [c for c in (resnet or {}).get("campaigns", []) if c["gap_s"] == 15]
            if r15:
                command = next((c for c in e["commands"] if c.startswith("benchmarks/") and "resnet20" in c), "")
                self.headlines.append((f"Elastic goodput, ResNet-20, {resnet['workers']} workers, one fault every 15 s",
                                       f"{fmt(r15[0]['goodput_percent'], 1)}%", "torchft 30.2% (published, another "
                                       "setting)", "goal ≥ 90%", short_source(e), command))
            if g.get("join_ms"):
                self.headlines.append(("Elastic join, due → training again (p99)", f"{fmt(g['join_ms']['p99'], 0)} ms",
                                       "—", "goal ≤ 1 s", short_source(e), e["commands"][3]))
        sixteen = [x for x in e.get("shrink", []) if x["workers"] == 16]
        if sixteen:
            x = sixteen[0]
            self.headlines.append(("Elastic shrink at 16 ranks, loss → training again (p99)",
                                   f"{fmt(x['total_p99_ms'], 1)} ms", "Horovod/Gloo re-init 15.8 s (reported)",
                                   "goal ≤ 200 ms", short_source(e), e["commands"][0]))

    def campaign_table(self, campaigns, rounds):
        """One row per gap of an elastic goodput record's campaigns (elastic_goodput.py); `rounds`: every round's
        campaign, for the goodput within each run."""
        w = self.w
        w("*Within the run*: the campaign's steps over its span against the median steps/s of its own seconds with "
          "the whole group and no membership change near (report.py's `within_run_goodput`), which the drift between "
          "separate runs does not touch. *Final model*: the largest difference from the fault-free run's, as a share "
          "of its largest parameter; every shrink and join changes the order of the gradient's additions, and over "
          "thousands of steps such differences grow (the tests check the examples and losses of each step instead).")
        w()
        w("| one fault every | faults injected | survived | goodput | the rounds | within the run (median) | loss → "
          "training again p50 | p99 | joins | final model vs fault-free |")
        w("|---|---|---|---|---|---|---|---|---|---|")
        for c in campaigns:
            diff = c.get("model_difference_e6")
            each = ", ".join(f"{fmt(x, 1)}%" for x in c.get("goodput_rounds", [c["goodput_percent"]]))
            inside = [x for x in (within_run_goodput(r.get("timeline")) for r in rounds if r["gap_s"] == c["gap_s"])
                      if x is not None]
            inside_cell = f"{fmt(statistics.median(inside), 1)}%" if inside else "—"
            w(f"| {fmt(c['gap_s'], 0)} s | {fmt(c['faults_injected'], 0)} | {fmt(c['faults_survived'], 0)} | "
              f"{fmt(c['goodput_percent'], 1)}% | {each} | {inside_cell} | {fmt(c['loss_to_training_p50_ms'], 0)} ms | "
              f"{fmt(c['loss_to_training_p99_ms'], 0)} ms | {c.get('joined', c['joins'])} | "
              f"{'largest difference ' + fmt(diff, 1) + 'e-6' if diff is not None else '—'} |")
        w()

    def fault_campaign(self):
        """mwstrat-fault-campaign's figures (docs/fault_campaign.md): recorded by hand, not by scripts/bench."""
        c = self.r.get("fault_campaign")
        if not c:
            return
        w = self.w
        w("## Fault campaigns: faults survived, time lost per fault, final model byte-identical")
        w()
        w(f"Measured: {where(c)}.  ")
        for cmd in c["commands"]:
            w(f"Command: `{cmd}`  ")
        w()
        w("The job runs once without faults, then under the seeded schedule; time lost = (campaign wall time − "
          "fault-free wall time) ÷ faults injected, which includes restarts, the steps redone since the last backup "
          "and the tool's hold times (a stopped worker is SIGKILLed after 3 s, a cut link restored after 3 s). "
          "Goal (issue 20): every fault survived, final model byte-identical, ≤ 10 s lost per fault.")
        w()
        w("| campaign | faults (kinds) | injected | survived | fault-free, s | campaign, s | lost per fault, s "
          "| byte-identical |")
        w("|---|---|---|---|---|---|---|---|")
        for run in c["runs"]:
            w(f"| {run['name']} | {run['faults_scheduled']} ({run['kinds']}) | {run['faults_injected']} | "
              f"{run['faults_survived']} | {fmt(run['reference_seconds'], 1)} | {fmt(run['campaign_seconds'], 1)} | "
              f"**{fmt(run['seconds_lost_per_fault'], 2)}** | {'yes' if run['byte_identical'] else 'NO'} |")
        w()
        for run in c["runs"]:
            kinds = run.get("per_kind") or {}
            if len(kinds) < 2:  # one kind: the row above says it all
                continue
            measure = run.get("recovery_is", "from the fault to the next worker group's start, or to the link or "
                                             "disk given back")
            w(f"{run['name']}: recovery by kind ({measure})")
            w()
            w("| kind | faults | mean recovery, s | longest, s |")
            w("|---|---|---|---|")
            for kind, k in kinds.items():
                w(f"| {kind} | {k['count']} | {fmt(k['mean_recovery_s'], 2)} | {fmt(k['max_recovery_s'], 2)} |")
            w()
        if c.get("note"):
            w(c["note"])
            w()
        first = c["runs"][0]
        self.headlines.append(("Fault campaign: seconds lost per fault", fmt(first["seconds_lost_per_fault"], 2),
                               "—", f"{first['faults_survived']}/{first['faults_injected']} survived, byte-identical: "
                               f"{'yes' if first['byte_identical'] else 'NO'}", short_source(c), c["commands"][0]))
    def isa(self):
        """Kernels chosen at run time (issue 49): the default-ISA build on each path against the -march=native
        build, MNIST CNN and ResNet-56 steps (goal: the default build at >= 95% of the native one)."""
        k = self.r.get("isa")
        if not k or not k.get("rows"):
            return
        w = self.w
        med = statistics.median
        w("### Kernels chosen at run time: a default-flags build against -march=native")
        w()
        w(f"Measured: {where(k)}.  ")
        w("Commands: " + "; ".join(f"`{c}`" for c in k["commands"]))
        w()
        w("The same two programs built twice in one Release build: with the bench build's `-march=native`, and for "
          "the compiler's default x86-64 ISA (`-march=x86-64 -mtune=generic`, what a project with CMake's plain "
          "Release gets). The default-ISA build runs the kernels the CPU has, chosen at run time "
          "(`nn/kernels/isa.hpp`); `MWSTRAT_KERNEL_ISA` forces each path it has; PyTorch runs the same step "
          "(DDP over gloo for the CNN, channels_last for ResNet-56). One worker, one thread (the "
          f"kernels' own speed), {k['rounds']} interleaved round(s); medians of the rounds. *Of native*: the native "
          "build's time per step ÷ this row's (above 100%: faster).")
        w()
        self.busy_note(k)
        w("| model | build | kernels | ms per step | CPU ms per step | of native (wall) | of native (CPU) |")
        w("|---|---|---|---:|---:|---:|---:|")
        headline = {}
        for model, title in (("mnist", "MNIST CNN, batch 64"), ("resnet56", "ResNet-56, batch 128")):
            rows = [x for x in k["rows"] if x["model"] == model]
            if not rows:
                continue
            steps = lambda x: x["seconds"] / x["steps"]
            cpu = lambda x: x["cpu_s_per_step"] / max(1, x.get("workers", 1))
            native = [x for x in rows if x["label"] == "native"]
            if not native:
                continue
            n_wall, n_cpu = med([steps(x) for x in native]), med([cpu(x) for x in native])
            labels = ["native"] + [x for x in dict.fromkeys(x["label"] for x in rows)
                                   if x != "native" and not x.startswith("torch")]
            peer = [x for x in rows if x["label"].startswith("torch")]
            for label in labels:
                these = [x for x in rows if x["label"] == label]
                wall, c = med([steps(x) for x in these]), med([cpu(x) for x in these])
                kernels = these[0].get("kernels", "?")
                build = "-march=native" if label == "native" else "default ISA"
                w(f"| {title} | {build} | {kernels} | {fmt(wall * 1000, 1)} | {fmt(c * 1000, 1)} | "
                  f"{pct(n_wall / wall)} | {pct(n_cpu / c)} |")
                if label != "native" and label == labels[1]:
                    headline[model] = (n_wall / wall, kernels)
            if peer:
                wall, c = med([steps(x) for x in peer]), med([cpu(x) for x in peer])
                w(f"| {title} | PyTorch {peer[0].get('torch', '')} ({peer[0]['label']}) | its own | "
                  f"{fmt(wall * 1000, 1)} | {fmt(c * 1000, 1)} | {pct(n_wall / wall)} | {pct(n_cpu / c)} |")
        w()
        if headline:
            w("The first default-ISA row of each model is that build unasked (it takes the best path this CPU has); "
              "the others force a narrower path. Goal: the unasked row at 95% or more of the native build's speed.")
            w()
            cells = ", ".join(f"{'MNIST CNN' if m == 'mnist' else 'ResNet-56'} {pct(r)} ({kern})"
                              for m, (r, kern) in headline.items())
            self.headlines.append(("Default-flags build ÷ -march=native build, step speed", cells, "—",
                                   "goal ≥ 95%", short_source(k), k["commands"][0]))

    def busy_note(self, rec):
        """A warning where the machine was loaded when `rec` was measured (by builds, other work, or the family's
        own earlier runs, which a 1-minute load average still counts)."""
        try:
            load = float(rec.get("load_at_start", "0").split()[0])
        except ValueError:
            return
        cpus = rec.get("machine", {}).get("cpus", 1)
        if load > cpus - 0.5:
            self.w(f"**The machine was busy** (load {rec['load_at_start']} at start, {rec.get('load_at_end', '?')} at "
                   f"the end, on {cpus} CPUs: the 1-minute average counts the family's own runs just before as well as "
                   "anything else that ran): absolute times may be low and noisy; read the "
                   "ratios, which were taken within one round of interleaved runs.")
            self.w()

    def resnet_time_to_accuracy(self):
        # ResNet-20's record (the goal's depth) keeps its historical family name; other depths carry theirs.
        for family, plot in (("resnet_tta", "resnet_time_to_accuracy.png"),
                             ("resnet56_tta", "resnet56_time_to_accuracy.png")):
            t = self.r.get(family)
            if t:
                self.resnet_time_to_accuracy_of(t, plot)

    def resnet_time_to_accuracy_of(self, t, plot):
        rc = t.get("recipe", {})
        depth = rc.get("depth")
        w = self.w
        w(f"### Time to accuracy: ResNet-{depth} test accuracy against wall time, 2 workers")
        w()
        w(f"Measured: {where(t)}.  ")
        w("Commands (one after the other): " + "; ".join(f"`{c}`" for c in t.get("commands", [])))
        w()
        w(f"ResNet-{rc.get('depth')} (TF's Keras resnet_cifar_model) on real CIFAR-10 with the tutorial's "
          f"augmentation, {rc.get('workers')} workers × {rc.get('threads')} thread on this machine, per-worker batch "
          f"{rc.get('batch_per_worker')}, SGD with momentum 0.9{' (Nesterov)' if rc.get('nesterov') else ''} at "
          f"{rc.get('lr')} for the global batch: linear warm-up from 0 over {rc.get('warmup_epochs')} epoch(s), then "
          f"cosine decay to 0 by step over {rc.get('epochs')} epochs in all"
          + (f"; the loss's label smoothing {rc['label_smoothing']}" if rc.get("label_smoothing") else "") + ". "
          + ("The whole test set is evaluated after every epoch; " if rc.get("validation_freq", 1) == 1 else
             f"The whole test set is evaluated once every {rc['validation_freq']} epochs (Keras's validation_freq); ")
          + "time runs from the first training step and includes "
          f"the evaluations. Each run had the machine alone and a budget of {rc.get('budget_s', 0) / 60:.0f} min "
          "(`benchmarks/resnet/time_to_accuracy.py`).")
        if rc.get("steps_per_epoch") not in (None, "a full pass"):
            w()
            w(f"**Epochs of {rc['steps_per_epoch']} steps, not full passes**: a check of the tooling, not a result.")
        w()
        runs = [r for r in t.get("runs", []) if r.get("points")]
        # A point per evaluated epoch (every epoch, or every validation_freq-th); older records lack "epoch".
        by_epoch = [{p.get("epoch", i + 1): p for i, p in enumerate(r["points"])} for r in runs]
        w("| epoch | " + " | ".join(f"{r['impl']}: wall s | test accuracy" for r in runs) + " |")
        w("|---|" + "---|---|" * len(runs))
        for e in sorted(set().union(*by_epoch)):
            cells = []
            for points in by_epoch:
                p = points.get(e)
                cells += [fmt(p["wall_s"]) if p else "—", f"{p['test_accuracy']:.4f}" if p else "—"]
            w(f"| {e} | " + " | ".join(cells) + " |")
        w()
        for r, points in zip(runs, by_epoch):
            last_epoch = max(points)
            last = points[last_epoch]
            best = max(p["test_accuracy"] for p in r["points"])
            stop = " (stopped at the budget)" if r.get("stopped_at_budget") else ""
            when = f" (measured {r['measured']})" if r.get("measured") and r["measured"] != t.get("date") else ""
            w(f"- {r['impl']}: {last_epoch} epochs in {last['wall_s'] / 60:.1f} min{stop}, final test accuracy "
              f"**{last['test_accuracy']:.4f}** (best {best:.4f}){when}.")
        if len(runs) == 2 and runs[0]["impl"] == "mwstrat":
            common = set(by_epoch[0]) & set(by_epoch[1])
            if common:
                n = max(common)
                ratio = by_epoch[0][n]["wall_s"] / by_epoch[1][n]["wall_s"]
                w(f"- To the same epoch ({n}): mwstrat took {ratio:.2f}× {runs[1]['impl']}'s wall time.")
        w("- The points' training losses differ in kind: mwstrat's includes the L2 term (Keras's loss += λ·Σw²), "
          "PyTorch's is the cross-entropy alone (its L2 is the optimizer's weight decay).")
        if depth == 20:
            w(f"- Issue 17's goal (≥ 91% test accuracy in ≤ 30 min, ResNet-20), on this run of at most "
              f"{rc.get('budget_s', 0) / 60:.0f} min: "
              + ("met" if any(p["test_accuracy"] >= 0.91 and p["wall_s"] <= 1800 for r in runs
                              if r["impl"] == "mwstrat" for p in r["points"]) else "**not met**") + ".")
        else:
            w(f"- Issue 17 sets no accuracy goal for ResNet-{depth} in a short schedule; this curve is the comparison "
              "with PyTorch on the same recipe and budget. Its accuracy after the tutorial's 60 epochs is in "
              "[history/2026-11-27-resnet56-tutorial.md](history/2026-11-27-resnet56-tutorial.md).")
        w()
        if self.plt and runs:
            fig, ax = self.plt.subplots(figsize=(6.4, 4.2))
            for r in runs:
                ax.plot([p["wall_s"] / 60 for p in r["points"]], [100 * p["test_accuracy"] for p in r["points"]],
                        marker="o", label=r["impl"])
            if depth == 20:
                ax.axhline(91, linestyle="--", color="grey", label="goal: 91%")
            ax.set_xlabel("wall time since the first step (min)")
            ax.set_ylabel("test accuracy (%)")
            ax.set_title(f"ResNet-{rc.get('depth')} on CIFAR-10, {rc.get('workers')} workers\n{short_cpu(t)} "
                         f"({t.get('date', '')[:10]})", fontsize=9)
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3)
            path = self.save_plot(fig, plot)
            w(f"![Test accuracy against wall time]({path})")
            w()

    def hosts(self):
        c = self.r.get("collective_hosts")
        t = self.r.get("train_hosts")
        if not c and not t:
            return
        self.w("## Across simulated hosts: all-reduce and training over shaped links")
        self.w()
        self.w("Two simulated hosts made by `scripts/simhosts` on this one machine: a network namespace per host "
               "joined through a bridge, each host with its own address (10.77.0.k, inside the namespaces only), its "
               "own `/dev/shm` and host identity, both directions of each host's link shaped with `tc` tbf at the "
               "rate named. Every rank or worker runs inside its host (`simhosts exec`); Open MPI's `mpirun` runs "
               "inside h1 and starts h2's daemon through `simhosts rsh` as its rsh launch agent (btl tcp between the "
               "hosts, vader within one). All hosts share the machine's CPUs: a host's ranks compete with the other "
               "host's for the same cores. `scripts/bench --only hosts` runs both comparisons (through "
               "`benchmarks/run.py --only hosts`).")
        self.w()
        if c:
            self.hosts_allreduce(c)
        if t:
            self.hosts_train(t)
        self.hosts_goals(c, t)

    def security(self):
        # Sealed frames between hosts (docs/security.md): collective_sealed.json (hosts_bench.py, impls -mac/-enc)
        # and seal_cost.json (mwstrat_bench_seal, which writes no machine record of its own: the sealed run's is it).
        # Training between the hosts in the three modes: train_sealed.json (train/hosts_train.py --security).
        c = self.r.get("collective_sealed")
        cost = self.r.get("seal_cost")
        t = self.r.get("train_sealed")
        if not c and not t:
            return
        w = self.w
        w("## Sealed frames between hosts: plain vs authenticated vs encrypted")
        w()
        if c:
            self.security_allreduce(c, cost)
        if t:
            self.security_train(t)
        w("Gloo's TLS transport (the issue's anchor) is not measured: Debian's libgloo-dev is built without it "
          "(`GLOO_HAVE_TRANSPORT_TCP_TLS 0` in `gloo/config.h`), and PyTorch's Gloo has no TLS either.")
        w()

    def security_allreduce(self, c, cost):
        w = self.w
        w(f"Measured: {where(c)}.  ")
        w(f"Command: `{c['commands'][0]}`; the CPU cost: `build/bench/benchmarks/collective/mwstrat_bench_seal "
          "--seconds 2` (`scripts/bench --only security` runs both, through `benchmarks/run.py --only security`).")
        w()
        self.busy_note(c)
        w("With a job token every frame between hosts carries an AES-256-GCM tag (authenticated: the payload as "
          "additional data, only GHASH runs over it); with `MWSTRAT_RING_ENCRYPT=1` the payload is encrypted too "
          "(docs/security.md). 11 MiB all-reduce of float32 (sum), barrier to return, median over repetitions and then "
          f"over {c.get('rounds', '?')} rounds in which the three took turns; the ratio is each one's time ÷ plain's "
          "within a round, median over rounds. Rank 0's CPU: its user + system seconds over the whole run ÷ the GiB "
          "it all-reduced (spinning and start-up included, so read the differences).")
        w()
        if c.get("simhosts_skipped"):
            w(f"Simulated hosts skipped: {c['simhosts_skipped']}.")
            w()
        names = {"mwstrat-fp32": "plain", "mwstrat-fp32-mac": "authenticated", "mwstrat-fp32-enc": "encrypted"}
        w("| setting | ranks per host | mode | time | ÷ plain | ÷ link limit | rank 0 CPU s per GiB |")
        w("|---|---|---|---|---|---|---|")
        summ = [x for x in c.get("summary", []) if x["bytes"] == 11 << 20]
        order = {"mwstrat-fp32": 0, "mwstrat-fp32-mac": 1, "mwstrat-fp32-enc": 2}
        summ.sort(key=lambda x: (x["setting"] != "simhosts", -int((x["rate"] or "0gbit")[:-4] or 0),
                                 x["ranks_per_host"], order.get(x["impl"], 9)))
        for x in summ:
            where_ = (f"simulated hosts, {x['rate'][:-4]} Gbit/s" if x["setting"] == "simhosts" else "loopback")
            frac = pct(x["fraction_of_limit"]) if x.get("fraction_of_limit") else "—"
            cpu = fmt(x["rank0_cpu_s_per_gib"], 2) if x.get("rank0_cpu_s_per_gib") else "—"
            ratio = times(x["time_over_mwstrat_fp32"]) if x.get("time_over_mwstrat_fp32") else "—"
            w(f"| {where_} | {x['ranks_per_host']} | {names.get(x['impl'], x['impl'])} | "
              f"{fmt(x['median_s'] * 1e3, 1)} ms | {ratio} | {frac} | {cpu} |")
        w()
        if cost:
            w(f"**The CPU cost** of sealing and opening, one core, {human_bytes(cost.get('frame_bytes', 0))} frames "
              "(the ring's chunk), CPU seconds per GiB of payload:")
            w()
            w("| | seal | open |")
            w("|---|---|---|")
            for r in cost.get("rows", []):
                w(f"| {r['name']} | {fmt(r['seal_cpu_s_per_gib'], 3)} | {fmt(r['open_cpu_s_per_gib'], 3)} |")
            w()
        goals = [(r, limit) for r, limit in (("10gbit", 1.15), ("1gbit", 1.03))]
        lines = []
        for rate, limit in goals:
            for impl in ("mwstrat-fp32-enc", "mwstrat-fp32-mac"):
                x = next((y for y in summ if y["setting"] == "simhosts" and y["rate"] == rate and
                          y["ranks_per_host"] == 1 and y["impl"] == impl), None)
                if x and x.get("time_over_mwstrat_fp32"):
                    ok = x["time_over_mwstrat_fp32"] <= limit
                    lines.append(f"- {names[impl]}, 2 hosts × 1 at {rate[:-4]} Gbit/s, ≤ {pct(limit - 1)} slower "
                                 f"than plain: {times(x['time_over_mwstrat_fp32'])}, "
                                 + ("met" if ok else "**not met**"))
        if lines:
            w("**Issue 46's goals** (encrypted against plain; authenticated beside it):")
            w()
            for line in lines:
                w(line)
            w()
            w("Where the plain all-reduce itself reaches well under the link's limit (10 Gbit/s and loopback on these "
              "2 shared cores) the rank's CPU is the bottleneck, and sealing's CPU (the table above, seal + open per "
              "GiB sent) adds to the time almost one for one; where the link is (1 Gbit/s), it hides behind the wire.")
            w()

    def security_train(self, t):
        w = self.w
        names = {"plain": "plain", "mac": "authenticated", "enc": "encrypted"}
        w("### Training the MNIST CNN between 2 simulated hosts: plain vs authenticated vs encrypted")
        w()
        w(f"Measured: {where(t)}.  ")
        w(f"Command: `{t['commands'][0]}` (each configuration's command below).")
        w()
        self.busy_note(t)
        c = self.r.get("collective_sealed")
        if c and machine_key(c) != machine_key(t):
            w(f"Measured on another machine than the all-reduce above ({c.get('machine', {}).get('cpu', '?')}): "
              "compare the ratios, not the times.")
            w()
        cfg = t.get("config", {})
        w(f"The tutorial CNN on real MNIST as in the training section above (mwstrat's `train_throughput`, fp32, "
          f"per-worker batch {cfg.get('batch', 64)}, 1 thread per worker, {cfg.get('steps', '?')} timed steps after "
          f"{cfg.get('warmup', '?')} warm-up steps), one worker on each of 2 simulated hosts: plain, authenticated "
          "(`MWSTRAT_JOB_TOKEN` set) and encrypted (`MWSTRAT_JOB_TOKEN` and `MWSTRAT_RING_ENCRYPT=1`). A sealed run "
          "counts only where its chief says its frames between hosts are sealed. The three took turns within each of "
          f"{t.get('rounds', '?')} rounds; the ratio is each one's step time ÷ plain's in the same round, median over "
          "rounds (the per-round ratios beside it).")
        w()
        if t.get("simhosts_skipped"):
            w(f"Simulated hosts skipped: {t['simhosts_skipped']}.")
            w()
        w("| link | workers | mode | steps/s | ms per step | step time ÷ plain | per round | CPU ms per step (all "
          "workers) |")
        w("|---|---|---|---|---|---|---|---|")
        summ = sorted(t.get("summary", []), key=lambda x: (-rate_bits(x["rate"]), x["workers_per_host"],
                                                           ["plain", "mac", "enc"].index(x.get("seal", "plain"))))
        for x in summ:
            layout = f"2 × {x['workers_per_host']}"
            per_round = ", ".join(f"{r:.3f}" for r in x.get("time_over_plain_per_round", []))
            w(f"| {x['rate'][:-4]} Gbit/s | {layout} | {names.get(x.get('seal'), x.get('seal'))} | "
              f"{fmt(x['steps_per_s'], 2)} | {fmt(1e3 / x['steps_per_s'], 1)} | "
              f"{times(x['time_over_plain']) if x.get('time_over_plain') else '—'} | {per_round or '—'} | "
              f"{fmt(x['cpu_ms_per_step'], 1)} |")
        w()
        lines = []
        for rate, limit in (("10gbit", 1.15), ("1gbit", 1.03)):
            for seal in ("enc", "mac"):
                x = next((y for y in summ if y["rate"] == rate and y["workers_per_host"] == 1 and
                          y.get("seal") == seal), None)
                if x and x.get("time_over_plain"):
                    ratio = x["time_over_plain"]
                    lines.append(f"- {names[seal]}, 2 hosts × 1 at {rate[:-4]} Gbit/s, ≤ {pct(limit - 1)} slower than "
                                 f"plain: {times(ratio)} ({100 * (ratio - 1):+.1f}%), "
                                 + ("met" if ratio <= limit else "**not met**"))
        if lines:
            w("**Issue 46's goals, in training** (step time against plain's):")
            w()
            for line in lines:
                w(line)
            w()
            w("In training the all-reduce is only part of a step (forward and backward take the rest; at 1 Gbit/s the "
              "wire takes most of it), so sealing's CPU weighs less than in the bare 11 MiB all-reduce; but on these 2 "
              "shared cores both hosts' workers, and their sealing, compete for the same CPUs, so at 10 Gbit/s the "
              "sealing's CPU (the CPU ms per step above) still adds to the step time.")
            w()
        if t.get("failures"):
            w("Runs that failed (left out of the medians):")
            w()
            for f in t["failures"]:
                w(f"- `{f[:300]}`")
            w()
        w("<details><summary>Each configuration's command (first round at the first rate)</summary>")
        w()
        if t.get("set_note"):
            w(t["set_note"] + ".")
            w()
        for cmd in t["commands"][1:]:
            w(f"- `{cmd}`")
        w()
        w("</details>")
        w()

    def hosts_goals(self, c, t):
        """Issue 19's speed goals, judged on the medians above."""
        lines = []

        def verdict(ok):
            return "met" if ok else "**not met**"
        order = {"mwstrat-fp32": 0, "mwstrat-bf16": 1}
        summ = sorted((c or {}).get("summary", []), key=lambda x: (-rate_bits(x["rate"]), order.get(x["impl"], 2)))
        for x in summ:
            if x["setting"] == "simhosts" and x["ranks_per_host"] == 1 and x["bytes"] == 11 << 20:
                rate = x["rate"][:-4]
                if x["impl"] == "mwstrat-fp32" and x.get("fraction_of_limit"):
                    lines.append(f"all-reduce of 11 MiB, fp32, 2 hosts × 1 at {rate} Gbit/s ≥ 90% of the link limit: "
                                 f"{pct(x['fraction_of_limit'])}, {verdict(x['fraction_of_limit'] >= 0.9)}")
                if x["impl"] == "mwstrat-bf16" and x.get("time_over_mwstrat_fp32"):
                    speed = 1 / x["time_over_mwstrat_fp32"]
                    lines.append(f"bf16 ≥ 1.8× fp32 there at {rate} Gbit/s: {times(speed)}, {verdict(speed >= 1.8)}")
        rows = (t or {}).get("summary", [])
        # The goal names no configuration: the best 2-worker mwstrat row at 10 Gbit/s is judged, and named.
        fastest = max((x for x in rows if x["rate"] == "10gbit" and x["workers"] == 2 and x["impl"] == "mwstrat"
                       and x.get("scaling")), key=lambda x: x["scaling"], default=None)
        solo = next((x for x in rows if x["rate"] == "10gbit" and x["workers"] == 1 and x["impl"] == "mwstrat"), None)
        by_cpu = max((x for x in rows if x["rate"] == "10gbit" and x["workers"] == 2 and x["impl"] == "mwstrat"
                      and cpu_scaling(solo, x)), key=lambda x: cpu_scaling(solo, x), default=None)
        if by_cpu:
            # The goal is per CPU second: the hosts share this machine's cores, so wall-clock scaling is the machine's.
            e = cpu_scaling(solo, by_cpu)
            lines.append(f"training, 2 hosts × 1 worker at 10 Gbit/s, scaling per CPU second ≥ 90%: **{pct(e)}** "
                         f"({by_cpu['label']}; {fmt(solo['cpu_ms_per_step'], 1)} CPU ms per step alone, "
                         f"{fmt(by_cpu['cpu_ms_per_step'], 1)} for both workers' steps together, of which "
                         f"{fmt(by_cpu.get('cpu_system_ms_per_step'), 1)} in the kernel), {verdict(e >= 0.9)}")
        if fastest:
            lines.append(f"the same, wall clock (the hosts' workers share two cores): {pct(fastest['scaling'])} "
                         f"({fastest['label']})")
        best = max((x for x in rows if x["rate"] == "1gbit" and x["workers"] == 2 and x["impl"] == "mwstrat"
                    and x.get("compression") == "bf16" and x.get("over_ddp")),
                   key=lambda x: x["over_ddp"], default=None)
        if best:
            lines.append(f"training at 1 Gbit/s with compression ≥ 2× DDP: {best['over_ddp']:.3f}× "
                         f"({best['label']}), {verdict(best['over_ddp'] >= 2)}")
        if not lines:
            return
        self.w("### Issue 19's speed goals, on these figures")
        self.w()
        for line in lines:
            self.w(f"- {line}")
        self.w()
        loop = next((x for x in summ if x["setting"] == "loopback" and x["ranks_per_host"] == 1
                     and x["impl"] == "mwstrat-fp32" and x["bytes"] == 11 << 20), None)
        fast = next((x for x in summ if x["setting"] == "simhosts" and x["rate"] == "10gbit"
                     and x["impl"] == "mwstrat-fp32" and x["bytes"] == 11 << 20), None)
        m = (c or t or {}).get("machine", {})
        # The two records may come from different machines: name each one's CPU then.
        cpu = (f"{short_cpu(c)} for the all-reduce figures, {short_cpu(t)} for the training ones"
               if c and t and short_cpu(c) != short_cpu(t) else short_cpu(c or t))
        text = (f"The simulated hosts share the machine's {m.get('cpus', '?')} CPUs ({cpu}): what a "
                "rank computes and copies, and the kernel's TCP work for it, competes with the other host's ranks for "
                "the same cores, so a goal missed here can be the CPU's, not the link's.")
        if loop and fast:
            text += (f" On loopback, with no link limit at all, the same 11 MiB all-reduce took "
                     f"{fmt(loop['median_s'] * 1e3, 1)} ms against the {fmt(fast['link_limit_s'] * 1e3, 1)} ms a "
                     "10 Gbit/s link needs" + (": at 10 Gbit/s the CPU, not the link, sets the pace here."
                                               if loop["median_s"] > fast["link_limit_s"] else "."))
        self.w(text)
        self.w()
        if solo and fast and solo.get("steps_per_s"):
            # Separate hosts: each worker has its own cores, so its step is its one-worker compute plus what of the
            # gradient's exchange is not hidden behind the backward pass. Both ends of that range, from figures above.
            step = 1 / solo["steps_per_s"]
            ar = fast["median_s"]
            self.w(f"**On separate hosts** each worker would have its own cores. Its step would then be its one-worker "
                   f"step ({fmt(step * 1e3, 1)} ms here) plus whatever part of the 11 MiB gradient exchange is not "
                   f"hidden behind the backward pass. That exchange took {fmt(ar * 1e3, 1)} ms over the shaped "
                   f"10 Gbit/s link here; the link alone needs {fmt(fast['link_limit_s'] * 1e3, 1)} ms. "
                   f"Two-worker scaling would lie between {pct(step / (step + ar))} (nothing hidden) and "
                   f"{pct(min(1.0, step / max(step, ar)))} (all of it hidden); at the link's own time, between "
                   f"{pct(step / (step + fast['link_limit_s']))} and {pct(min(1.0, step / max(step, fast['link_limit_s'])))}. "
                   f"The measured exchange is itself an upper bound: its two ranks also shared the two cores.")
            self.w()

    def hosts_allreduce(self, c):
        self.w("### All-reduce between 2 hosts: mwstrat vs Gloo vs Open MPI against the link")
        self.w()
        self.w(f"Measured: {where(c)}.  ")
        self.w(f"Command: `{c['commands'][0]}` (each implementation's own command below).")
        self.w()
        self.busy_note(c)
        if c.get("simhosts_skipped"):
            self.w(f"Simulated hosts skipped: {c['simhosts_skipped']}.")
            self.w()
        impls = {"mwstrat-fp32": "mwstrat fp32", "mwstrat-bf16": "mwstrat bf16", "gloo": "Gloo (torch)",
                 "mpi": "Open MPI"}
        for impl, why in c.get("missing", {}).items():
            self.w(f"{impls.get(impl, impl)} not measured: {why}.")
            self.w()
        self.w("Time of one all-reduce of float32 (sum), barrier to return, median over repetitions (large buffers "
               f"fewer) and then over {c.get('rounds', '?')} rounds in which the implementations took turns. **The "
               "machine's limit** is the time the link needs for the bytes any all-reduce must move across it: "
               "2·(H−1)/H × bytes ÷ rate with H = 2 hosts (each host sends half the buffer out and takes the other "
               "half in, whatever the ranks per host). What TCP can carry is lower: tbf counts whole frames, so at "
               "MTU 1500 the payload tops out at 1448/1514 ≈ 96% of the rate; and tbf lets a burst (64 KiB, or 1 ms "
               "at the rate) through unshaped, so buffers of 64 KiB and below are bound by latency, not by the link, "
               "and can read above 100%. bf16 sends half the bytes between hosts, so it can reach 200% of the fp32 "
               "limit. The ratio columns are the peer's time ÷ mwstrat fp32's time, taken within each round "
               "(> 1: mwstrat is faster).")
        self.w()
        summ = c.get("summary", [])
        keys = sorted({(x["setting"], x["rate"] or "", x["ranks_per_host"]) for x in summ},
                      key=lambda k: (k[0] != "simhosts", -int(k[1][:-4] or 0) if k[1].endswith("gbit") else 0, k[2]))
        for setting, rate, per_host in keys:
            cell = {(x["impl"], x["bytes"]): x for x in summ
                    if (x["setting"], x["rate"] or "", x["ranks_per_host"]) == (setting, rate, per_host)}
            title = (f"2 hosts × {per_host} rank{'s' if per_host > 1 else ''}, "
                     + (f"links shaped to {rate[:-4]} Gbit/s" if setting == "simhosts" else
                        "all on 127.0.0.1 (loopback, unshaped; host told apart by identity, Open MPI btl tcp,self)"))
            self.w(f"**{title}**")
            self.w()
            lim = setting == "simhosts"
            self.w("| bytes |" + (" machine's limit |" if lim else "") + " mwstrat fp32 |" + (" fp32 ÷ limit |"
                                                                                            if lim else "")
                   + " mwstrat bf16 | bf16 speed-up | Gloo | Gloo ÷ mwstrat | Open MPI | Open MPI ÷ mwstrat |")
            self.w("|---" * (10 if lim else 8) + "|")
            for size in sorted({b for _, b in cell}):
                f32, b16, gl, mp = (cell.get((i, size)) for i in ("mwstrat-fp32", "mwstrat-bf16", "gloo", "mpi"))

                def ms(x):
                    return fmt(x["median_s"] * 1e3, 3 if x["median_s"] < 0.01 else 1) + " ms" if x else "—"

                def ratio(x):
                    return times(x["time_over_mwstrat_fp32"]) if x and x.get("time_over_mwstrat_fp32") else "—"
                speed = times(1 / b16["time_over_mwstrat_fp32"]) if b16 and b16.get("time_over_mwstrat_fp32") else "—"
                limit = f"{fmt(f32['link_limit_s'] * 1e3, 3)} ms" if lim and f32 and f32.get("link_limit_s") else "—"
                self.w(f"| {human_bytes(size)} |" + (f" {limit} |" if lim else "") + f" {ms(f32)} |"
                       + (f" {pct(f32['fraction_of_limit']) if f32 else '—'} |" if lim else "")
                       + f" {ms(b16)} | {speed} | {ms(gl)} | {ratio(gl)} | {ms(mp)} | {ratio(mp)} |")
            self.w()
            g = cell.get(("mwstrat-fp32", 11 << 20))
            if lim and g and per_host == 1:
                b = cell.get(("mwstrat-bf16", 11 << 20))
                peers = [f"{times(x['time_over_mwstrat_fp32'])} {n}" for x, n in
                         ((cell.get(("gloo", 11 << 20)), "Gloo's time"), (cell.get(("mpi", 11 << 20)), "Open MPI's"))
                         if x and x.get("time_over_mwstrat_fp32")]
                self.headlines.append((
                    f"All-reduce of 11 MiB between 2 simulated hosts at {rate[:-4]} Gbit/s, fp32 (ms)",
                    fmt(g["median_s"] * 1e3, 1), ", ".join(peers) or "—",
                    f"{pct(g['fraction_of_limit'])} of the link limit ({fmt(g['link_limit_s'] * 1e3, 1)} ms)",
                    short_source(c), c["commands"][0]))
                if b and b.get("time_over_mwstrat_fp32"):
                    # bf16 sends half the bytes, so its time against fp32's link limit is an effective rate that may
                    # pass 100%: the note says so, the cell gives bf16's own limit (half fp32's time).
                    if not any(n.startswith("bf16 on the wire") for n in self.headline_notes):
                        self.headline_notes.append(
                            "bf16 on the wire: the all-reduce sends its values as bf16, half the bytes of fp32. "
                            "Against fp32's link limit its rate is an effective one and may pass 100%; against its "
                            "own limit (half of fp32's time) it is the share of the link it uses.")
                    share = b["fraction_of_limit"] / 2 if b.get("fraction_of_limit") else None
                    self.headlines.append((f"… bf16 on the wire, speed-up over fp32 at {rate[:-4]} Gbit/s",
                                           times(1 / b["time_over_mwstrat_fp32"]), "—",
                                           f"{pct(share)} of bf16's own link limit (note {len(self.headline_notes)})",
                                           short_source(c), c["commands"][0]))
        self.w("Reading the peers: Open MPI's ranks poll while they wait (under `--oversubscribe` they yield between "
               "polls), so with 4 ranks on a machine with fewer free cores than ranks it pays in scheduling, not in "
               "the link; Gloo's all-reduce is one flat ring through all ranks over TCP (no shared memory within a "
               "host), so with 2 ranks per host it moves 2·(4−1)/4 = 1.5× the buffer over each host's link, where a "
               "hierarchical all-reduce moves 1×.")
        self.w()
        if c.get("failures"):
            self.w("Runs that failed (left out of the medians):")
            self.w()
            for f in c["failures"]:
                self.w(f"- `{f[:300]}`")
            self.w()
        self.w("<details><summary>Each implementation's command (first round; later rounds use other ports)"
               "</summary>")
        self.w()
        if c.get("set_note"):
            self.w(c["set_note"] + ".")
            self.w()
        for cmd in c["commands"][1:]:
            self.w(f"- `{cmd}`")
        self.w()
        self.w("</details>")
        self.w()

    def hosts_train(self, t):
        self.w("### Training the MNIST CNN on 2 simulated hosts × 1 worker vs PyTorch DDP")
        self.w()
        self.w(f"Measured: {where(t)}.  ")
        self.w(f"Command: `{t['commands'][0]}` (each configuration's command below).")
        self.w()
        self.busy_note(t)
        cfg = t.get("config", {})
        self.w(f"The tutorial CNN (Conv2D 32 3×3, Dense 128, Dense 10; an 11 MiB gradient) on real MNIST, per-worker "
               f"batch {cfg.get('batch', 64)}, 1 thread per worker, {cfg.get('steps', '?')} timed steps after "
               f"{cfg.get('warmup', '?')} warm-up steps inside one run: mwstrat's `train_throughput` (TF_CONFIG naming "
               "the hosts' addresses; bf16: `MWSTRAT_RING_COMPRESSION=bf16`) and `ddp_throughput.py` (PyTorch DDP, "
               "gloo, Debian's OpenBLAS default). One worker alone runs inside h1 (no link) for the scaling "
               f"efficiency. Median over {t.get('rounds', '?')} rounds in which the configurations took turns; the "
               "ratios (× DDP: steps/s ÷ DDP's at the same workers and layout; scaling: samples/s ÷ (workers × the "
               "same implementation's one-worker samples/s)) are taken within each round. `× 2x2` is 2 hosts × 2 "
               "workers (mwstrat: hierarchical, shared memory within a host). With the default update "
               "placement mwstrat's step reduce-scatters the gradients, updates its shard and gathers the parameters; "
               "the parameters travel exact (fp32), so bf16 narrows only the first half (¾ of fp32's bytes on the "
               "wire); `--update mirrored` all-reduces the gradients, bf16 both ways (½), and every worker applies "
               "the whole update.")
        self.w()
        self.w("| link | configuration | steps/s | samples/s (global) | CPU ms per step (all workers) | scaling | "
               "× DDP |")
        self.w("|---|---|---|---|---|---|---|")
        for x in t.get("summary", []):
            self.w(f"| {x['rate'][:-4]} Gbit/s | {x['label']} | {fmt(x['steps_per_s'], 2)} | "
                   f"{fmt(x['samples_per_s'])} | {fmt(x['cpu_ms_per_step'], 1)} | {pct(x['scaling'])} | "
                   f"{times(x['over_ddp']) if x['impl'] == 'mwstrat' else '—'} |")
        self.w()
        for x in t.get("summary", []):
            if x["workers"] == 2 and x["impl"] == "mwstrat":
                self.headlines.append((
                    f"MNIST CNN, 2 simulated hosts × 1 worker at {x['rate'][:-4]} Gbit/s, {x['label'].split(' ×')[0]} "
                    "(steps/s)", fmt(x["steps_per_s"], 2), f"{times(x['over_ddp'])} DDP (gloo)",
                    f"scaling {pct(x['scaling'])}", short_source(t), t["commands"][0]))
        if t.get("failures"):
            self.w("Runs that failed (left out of the medians):")
            self.w()
            for f in t["failures"]:
                self.w(f"- `{f[:300]}`")
            self.w()
        self.w("<details><summary>Each configuration's command (first round at the first rate)</summary>")
        self.w()
        if t.get("set_note"):
            self.w(t["set_note"] + ".")
            self.w()
        for cmd in t["commands"][1:]:
            self.w(f"- `{cmd}`")
        self.w()
        self.w("</details>")
        self.w()

    def render(self):
        self.machine()
        machine = self.lines
        self.lines = []
        body_start = 0
        for section in (self.train, self.collective, self.nn, self.checkpoint, self.data, self.records, self.resnet, self.kernels,
                        self.isa, self.resnet_time_to_accuracy, self.hosts, self.libtorch, self.security,
                        self.elastic, self.fault_campaign):
            section()
        body = self.lines[body_start:]
        self.lines = self.lines[:body_start]
        w = self.w
        w("# Benchmark results")
        w()
        w("<!-- Generated by benchmarks/report.py from benchmarks/results/*.json: do not edit by hand. "
          "scripts/bench reruns every comparison and rewrites it. -->")
        w()
        w("The current figures of every comparison in `benchmarks/`, each with the command that produced it, its ratio "
          "to the peers (PyTorch DDP, TensorFlow MultiWorkerMirroredStrategy, Gloo, Open MPI, OpenBLAS) and to the "
          "machine's limit (FP32 FMA peak, loopback link, disk). To rerun everything on your machine: `scripts/bench` "
          "(`--quick` for one short repeat of each, `--only "
          "train|collective|nn|checkpoint|data|records|peak|resnet|kernels|isa|tta|hosts|libtorch` for one). How "
          "each figure came about, pass by pass: [history/](history/).")
        w()
        kept = sorted(glob.glob(os.path.join(HERE, "history", "results-*")))
        if kept:
            links = ", ".join(f"[history/{os.path.basename(k)}/](history/{os.path.basename(k)}/)" for k in kept)
            w(f"Results of earlier runs that the run shown here did not measure again (other machines, families it "
              f"left out) are kept apart, with what each is: {links}.")
            w()
        if (any(r.get("source") != "scripts/bench" for r in self.r.values())
                or len({machine_key(r) for r in self.r.values()}) > 1):
            w("**Where these figures come from.** The sections were not all measured by one run of `scripts/bench` on "
              "one machine: the table names each one's date, machine and source. Ratios within a section are of one "
              "run on one machine; figures of different sections are not comparable with each other. A full "
              "`scripts/bench` replaces them all with one machine's.")
            w()
            w("| section | measured | machine | by |")
            w("|---|---|---|---|")
            for fam in FAMILY_ORDER:
                r = self.r.get(fam)
                if r:
                    m = r.get("machine", {})
                    w(f"| {fam} | {r.get('date', '?')} | {m.get('cpu')} × {m.get('cpus')}, {m.get('isa')} | "
                      f"{r.get('pass') or r.get('source')} |")
            w()
        if any(r.get("quick") for r in self.r.values()):
            w("**Quick run**: sections marked `scripts/bench --quick` took one short repeat, a check of the tooling "
              "rather than a result.")
            w()
        self.lines.extend(machine)
        w("## Headline figures")
        w()
        w("| figure | value | against peers (mwstrat ÷ peer) | against the limit | measured | command |")
        w("|---|---|---|---|---|---|")
        for fig, value, peers, limit, src, cmd in self.headlines:
            w(f"| {fig} | **{value}** | {peers or '—'} | {limit or '—'} | {src} | `{cmd}` |")
        w()
        w("*Per CPU second*: samples per second of CPU time of all workers, with n workers over one worker's. On "
          "this machine the workers share two cores with each other and with everything else, so wall-clock scaling "
          "also counts what one worker loses to the other's presence (the machine's); per CPU second counts only what "
          "the library spends on the exchange.")
        w()
        for i, note in enumerate(self.headline_notes, 1):
            w(f"Note {i}. {note}")
            w()
        self.lines.extend(body)
        if not self.plt:
            w("(Plots not drawn: matplotlib is not installed for the Python that ran `benchmarks/report.py`.)")
            w()
        return "\n".join(self.lines).rstrip() + "\n"


def within_run_goodput(t, settle_s=2.0):
    """A campaign's goodput against its own steady throughput, from its timeline (elastic_goodput.py): the steps it
    trained over its span, against the median steps/s of the seconds with the whole group and no membership change
    near (none from a second before a shrink to `settle_s` after the next join). Immune to the drift of the shared
    machine between runs minutes apart, which a ratio to a separate fault-free run is not; None without a timeline."""
    if not t or not t.get("steps_per_s"):
        return None
    rates = t["steps_per_s"]
    quiet = [True] * len(rates)
    changes = sorted([(x, "shrink") for x in t["shrinks_s"]] + [(x, "join") for x in t["joins_s"]])
    away_from = None
    for at, kind in changes:
        if kind == "shrink" and away_from is None:
            away_from = at - 1
        elif kind == "join" and away_from is not None:
            for i in range(max(0, int(away_from)), min(len(rates), int(at + settle_s) + 1)):
                quiet[i] = False
            away_from = None
    if away_from is not None:
        for i in range(max(0, int(away_from)), len(rates)):
            quiet[i] = False
    steady = [r for r, q in zip(rates[:-1], quiet[:-1]) if q]  # the last bin is a partial second
    if not steady:
        return None
    span = t.get("span_s") or (len(rates) - 1) * t["bin_s"]
    return 100 * sum(rates) * t["bin_s"] / (span * statistics.median(steady))


def rate_bits(rate):
    """Bits per second of a tc rate such as 10gbit (0 for none)."""
    if not rate:
        return 0
    for suffix, scale in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3), ("bit", 1)):
        if rate.endswith(suffix):
            return int(rate[:-len(suffix)]) * scale
    return 0


def short_cpu(rec):
    """The record's CPU name, family and model kept (one name covers several generations of cloud CPU)."""
    return rec.get("machine", {}).get("cpu", "?")


def human_bytes(n):
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{n} B"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=os.path.join(HERE, "results"))
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    ap.add_argument("--plots", default=os.path.join(HERE, "plots"))
    a = ap.parse_args()
    results = load(a.results)
    if not results:
        sys.exit(f"no results in {a.results}: run scripts/bench (or benchmarks/run.py) first")
    page = Page(results, a.plots, a.out)
    text = page.render()
    with open(a.out + ".part", "w") as f:
        f.write(text)
    os.replace(a.out + ".part", a.out)
    print(f"wrote {a.out} from {len(results)} result files ({', '.join(sorted(results))})"
          + (f"; plots: {', '.join(page.plots_made)}" if page.plots_made else "; no plots (no matplotlib)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
