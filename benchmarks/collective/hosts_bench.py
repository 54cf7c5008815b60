#!/usr/bin/env python3
"""All-reduce between 2 hosts: mwstrat's ring (fp32, and bf16 on the wire), PyTorch's Gloo and Open MPI, 1 and 2
ranks per host, against the link's limit 2·(H−1)/H · bytes / rate (the bytes each host must send over its link in
any all-reduce, at the link's rate: the machine's limit).

Two settings:
  simhosts  scripts/simhosts' network namespaces (one per host, a private /dev/shm each), both directions of each
            host's link shaped with tbf at each --rates value. mwstrat and Gloo ranks start inside their host
            (`simhosts exec`); Open MPI's mpirun starts inside h1 and reaches h2 through `simhosts rsh` as its rsh
            agent (btl tcp between hosts, vader within one). Skipped, saying why, when `scripts/simhosts check` fails.
  loopback  every rank on 127.0.0.1 (hosts told apart by --host-id for mwstrat; Open MPI restricted to btl tcp,self):
            no link limit, loopback is not shaped.
Within a setting the implementations take turns (mwstrat fp32, mwstrat bf16, gloo, mpi; 1 then 2 ranks per host)
for --rounds rounds, so a slow spell of the shared machine hits all of them; each ratio is taken within a round and
the median over rounds is reported. Every rank times an all-reduce from a barrier's return to the all-reduce's
(median over the repetitions; large sizes take fewer repetitions). A failed run is recorded and the others go on.

  hosts_bench.py --build BUILD [--rates 10gbit,1gbit] [--settings simhosts,loopback] [--impls ...] [--rounds 3]
                 [--reps 20] [--quick] [--json-out FILE]
"""
import argparse
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import benchlib  # noqa: E402
from common import procs  # noqa: E402

SIZES = [4096, 65536, 1 << 20, 11 << 20, 64 << 20]
HOSTS = 2
IMPLS = ["mwstrat-fp32", "mwstrat-bf16", "gloo", "mpi"]
SIMHOSTS = os.path.join(ROOT, "scripts", "simhosts")
TORCH_PYTHON = "/usr/bin/python3"  # Debian's python3-torch


def rate_bytes(rate):
    m = re.fullmatch(r"(\d+)(bit|kbit|mbit|gbit)", rate)
    scale = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[m.group(2)]
    return int(m.group(1)) * scale / 8


def size_args(reps, sizes=None):
    """"4096:20,...": fewer repetitions for the large buffers (64 MiB takes over half a second at 1 Gbit/s)."""
    def n(size):
        return reps if size <= (1 << 20) else max(5, reps // 2) if size <= (16 << 20) else max(3, reps // 4)
    return ",".join(f"{s}:{n(s)}" for s in (sizes or SIZES))


def parse_rows(text):
    rows = {}
    for line in text.splitlines():
        c = re.search(r"cpu_s=([0-9.]+) bytes=([0-9]+)", line)
        if c:  # rank 0's CPU seconds over the whole run, and the bytes it all-reduced (every size)
            rows["cpu"] = {"cpu_s": float(c.group(1)), "bytes": int(c.group(2))}
        m = re.search(r"size=(\d+) median_s=([0-9.]+) min_s=([0-9.]+) reps=(\d+)", line)
        if m:
            rows[int(m.group(1))] = {"median_s": float(m.group(2)), "min_s": float(m.group(3)),
                                     "reps": int(m.group(4))}
    return rows


def run_ranks(commands, timeout, env=None):
    """Starts every rank's command at once (rank 0 first); the rows rank 0 printed, after all exited 0. When one
    fails or the deadline passes the others are killed (a peer would otherwise wait for its own timeout)."""
    codes, texts, problem = procs.run_together([(c, env) for c in commands], timeout, session=True)
    if not problem and any(codes):
        problem = f"exit codes {codes}"
    if problem:
        err = "".join(e for _, e in texts).strip()
        raise RuntimeError(f"{problem}: {err[-1500:]}")
    return parse_rows(texts[0][0])


class Runner:
    """Builds each implementation's commands for one setting (loopback, or a simhosts set)."""

    def __init__(self, build, setting, name, reps, sizes=None):
        self.build, self.setting, self.name = build, setting, name
        self.sizes = size_args(reps, sizes)
        self.port = 20000  # inside a set's namespaces no one else listens; a fresh port per run all the same

    def next_ports(self, n):
        if self.setting == "loopback":
            return procs.free_ports(n)
        self.port += 10
        return [self.port + i for i in range(n)]

    def host(self, rank, per_host):
        return f"h{rank // per_host + 1}"

    def addr(self, rank, per_host):
        return "127.0.0.1" if self.setting == "loopback" else f"10.77.0.{rank // per_host + 1}"

    def in_host(self, rank, per_host, argv):
        if self.setting == "loopback":
            return argv
        return [SIMHOSTS, "--name", self.name, "exec", self.host(rank, per_host), "--"] + argv

    def mwstrat(self, per_host, compression, streams=1, topology="hierarchical", seal=""):
        n = HOSTS * per_host
        ports = self.next_ports(n)
        addresses = ",".join(f"{self.addr(r, per_host)}:{ports[r]}" for r in range(n))
        bench = os.path.join(self.build, "benchmarks", "collective", "mwstrat_bench_hosts")
        return [self.in_host(r, per_host, [bench, "--rank", str(r), "--addresses", addresses, "--host-id",
                                           self.host(r, per_host), "--compression", compression,
                                           "--sizes", self.sizes, "--streams", str(streams),
                                           "--topology", topology] + (
                                               ["--token", "bench-token", "--encrypt", "1" if seal == "enc" else "0"]
                                               if seal else [])) for r in range(n)]

    def gloo(self, per_host):
        n = HOSTS * per_host
        port = self.next_ports(1)[0]
        script = os.path.join(HERE, "hosts_bench_gloo.py")
        iface = "lo" if self.setting == "loopback" else "eth0"
        return [self.in_host(r, per_host, [
            "env", f"RANK={r}", f"WORLD_SIZE={n}", f"MASTER_ADDR={self.addr(0, per_host)}", f"MASTER_PORT={port}",
            f"GLOO_SOCKET_IFNAME={iface}", "OMP_NUM_THREADS=1", TORCH_PYTHON, script, "--sizes", self.sizes])
            for r in range(n)]

    def mpi(self, per_host):
        n = HOSTS * per_host
        bench = os.path.join(self.build, "benchmarks", "collective", "mwstrat_bench_hosts_mpi")
        common = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(n)]
        if self.setting == "loopback":
            return [common + ["--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo", bench,
                              "--sizes", self.sizes]]
        hosts = ",".join(f"10.77.0.{h + 1}:{per_host}" for h in range(HOSTS))
        agent = f"{SIMHOSTS} --name {self.name} rsh"
        return [self.in_host(0, per_host, common + [
            "--host", hosts, "--mca", "plm_rsh_agent", agent, "--mca", "btl", "tcp,self,vader",
            "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0", bench,
            "--sizes", self.sizes])]

    def commands(self, impl, per_host):
        # "-flat": one flat ring through every rank (default: hierarchical); "-sN": N TCP streams per link between
        # hosts; "-mac": a job token, so frames between hosts carry an AES-256-GCM tag; "-enc": encrypted too
        m = re.fullmatch(r"mwstrat-(fp32|bf16)(-flat)?(?:-s(\d+))?(?:-(mac|enc))?", impl)
        if m:
            return self.mwstrat(per_host, "none" if m.group(1) == "fp32" else "bf16", int(m.group(3) or 1),
                                "flat" if m.group(2) else "hierarchical", m.group(4) or "")
        return getattr(self, impl)(per_host)


def shown(argv, name):
    """A command as a shell reads it, paths relative to the repository, the set's name as $SET."""
    words = [benchlib.rel(x) if x.startswith("/") else x for x in argv]
    text = shlex.join(words)
    return text.replace(name, "$SET") if name else text


def available(impls, build):
    """The implementations that can run here, and why the others cannot."""
    ok, missing = [], {}
    for impl in impls:
        if impl == "gloo":
            r = subprocess.run([TORCH_PYTHON, "-c", "import torch.distributed as d; assert d.is_gloo_available()"],
                               capture_output=True, text=True) if os.access(TORCH_PYTHON, os.X_OK) else None
            if r is None or r.returncode != 0:
                missing[impl] = f"no torch with gloo in {TORCH_PYTHON} (Debian's python3-torch)"
                continue
        if impl == "mpi":
            bench = os.path.join(build, "benchmarks", "collective", "mwstrat_bench_hosts_mpi")
            if not shutil.which("mpirun") or not os.access(bench, os.X_OK):
                missing[impl] = "no mpirun or no mwstrat_bench_hosts_mpi (Open MPI not installed when built)"
                continue
        ok.append(impl)
    return ok, missing


def summarise(rows):
    """Per (setting, rate, ranks per host, impl, size): the median over rounds, and mwstrat fp32's speed-up over
    each implementation taken within each round (that impl's time ÷ mwstrat fp32's), median over rounds."""
    groups = {}
    for r in rows:
        groups.setdefault((r["setting"], r["rate"], r["ranks_per_host"], r["impl"], r["bytes"]), []).append(r)
    out = []
    for (setting, rate, per_host, impl, size), rs in sorted(groups.items(), key=lambda kv: str(kv[0])):
        med = statistics.median(x["median_s"] for x in rs)
        ratios = []
        for x in rs:
            ref = next((y for y in rows if (y["setting"], y["rate"], y["ranks_per_host"], y["impl"], y["bytes"],
                                             y["round"]) == (setting, rate, per_host, "mwstrat-fp32", size,
                                                             x["round"])), None)
            if ref:
                ratios.append(x["median_s"] / ref["median_s"])
        limit = rs[0]["link_limit_s"]
        cpus = [x["rank0_cpu_s_per_gib"] for x in rs if x.get("rank0_cpu_s_per_gib") is not None]
        out.append({"setting": setting, "rate": rate, "hosts": HOSTS, "ranks_per_host": per_host, "impl": impl,
                    "bytes": size, "median_s": med, "min_s": min(x["min_s"] for x in rs), "rounds": len(rs),
                    "link_limit_s": limit, "fraction_of_limit": limit / med if limit else None,
                    "time_over_mwstrat_fp32": statistics.median(ratios) if ratios else None,
                    "ratios_per_round": ratios,
                    "rank0_cpu_s_per_gib": statistics.median(cpus) if cpus else None})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--rates", default="10gbit,1gbit")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1 round, 5 repetitions")
    ap.add_argument("--json-out")
    ap.add_argument("--family", default="collective_hosts",
                    help="the result's family (report.py's key): collective_sealed for the sealed comparison")
    ap.add_argument("--settings", default="simhosts,loopback")
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--ranks-per-host", default="1,2")
    ap.add_argument("--sizes", help="bytes, comma-separated (default: %s)" % ",".join(map(str, SIZES)))
    ap.add_argument("--sysctl", action="append", default=[],
                    help="KEY=VALUE set in every simulated host's network namespace after it is made (repeatable)")
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")] if a.sizes else SIZES
    a.build = os.path.abspath(a.build)
    reps, rounds = (5, 1) if a.quick else (a.reps, a.rounds)
    started = benchlib.start()
    impls, missing = available(a.impls.split(","), a.build)
    for impl, why in missing.items():
        print(f"{impl} skipped: {why}", flush=True)
    per_hosts = [int(x) for x in a.ranks_per_host.split(",")]
    rows, failures, commands, skipped = [], [], [], None

    def run_setting(setting, rate, name):
        runner = Runner(a.build, setting, name, reps, sizes)
        for rnd in range(1, rounds + 1):
            for per_host in per_hosts:
                for impl in impls:
                    cmds = runner.commands(impl, per_host)
                    if rnd == 1:
                        commands.append(f"[{setting} {rate or ''} {HOSTS}x{per_host} {impl}] " + " & ".join(
                            shown(c, name) for c in cmds))
                    load = benchlib.loadavg()
                    try:
                        got = run_ranks(cmds, 900 if setting == "simhosts" else 300)
                        cpu = got.pop("cpu", None)
                        if set(got) != set(sizes):
                            raise RuntimeError(f"rank 0 reported sizes {sorted(got)}, expected {sizes}")
                    except (RuntimeError, OSError) as e:
                        failures.append(f"{setting} {rate or ''} {HOSTS}x{per_host} {impl} round {rnd}: {e}")
                        print("FAILED " + failures[-1], flush=True)
                        continue
                    for size, r in sorted(got.items()):
                        limit = 2 * (HOSTS - 1) / HOSTS * size / rate_bytes(rate) if rate else None
                        rows.append({"setting": setting, "rate": rate, "hosts": HOSTS, "ranks_per_host": per_host,
                                     "impl": impl, "round": rnd, "bytes": size, "median_s": r["median_s"],
                                     "min_s": r["min_s"], "reps": r["reps"], "link_limit_s": limit,
                                     "load_at_start": load,
                                     "rank0_cpu_s_per_gib": cpu["cpu_s"] / (cpu["bytes"] / 2**30) if cpu else None})
                        print("round %d %-8s %-6s %dx%d %-12s %9d B  median %9.3f ms  min %9.3f ms%s" % (
                            rnd, setting, rate or "-", HOSTS, per_host, impl, size, r["median_s"] * 1e3,
                            r["min_s"] * 1e3, "  limit %.3f ms = %.0f%% of it" % (
                                limit * 1e3, 100 * limit / r["median_s"]) if limit else ""), flush=True)

    settings = a.settings.split(",")
    if "simhosts" in settings:
        check = subprocess.run([SIMHOSTS, "check"], capture_output=True, text=True) \
            if os.access(SIMHOSTS, os.X_OK) else None
        if check is None or check.returncode != 0:
            skipped = "scripts/simhosts unavailable: " + (check.stdout.strip() if check else "no scripts/simhosts")
            print("simhosts skipped: " + skipped, flush=True)
        else:
            subprocess.run([SIMHOSTS, "gc"], capture_output=True)  # sets whose owner died (a killed earlier run)
            for rate in a.rates.split(","):
                name = subprocess.run([SIMHOSTS, "up", str(HOSTS), "--rate", rate, "--owner", str(os.getpid())],
                                      capture_output=True, text=True, check=True).stdout.strip()
                for h in range(1, 3):  # --sysctl: e.g. net.ipv4.tcp_congestion_control=cubic in every simulated host
                    for kv in a.sysctl:
                        subprocess.run([SIMHOSTS, "--name", name, "exec", f"h{h}", "--", "sysctl", "-qw", kv], check=True)
                try:
                    run_setting("simhosts", rate, name)
                finally:
                    subprocess.run([SIMHOSTS, "--name", name, "down"], capture_output=True)
    if "loopback" in settings:
        run_setting("loopback", None, None)
    summary = summarise(rows)
    for s in summary:
        print("%-8s %-6s %dx%d %-12s %9d B  median %9.3f ms%s%s%s" % (
            s["setting"], s["rate"] or "-", HOSTS, s["ranks_per_host"], s["impl"], s["bytes"], s["median_s"] * 1e3,
            "  %.0f%% of the link limit" % (100 * s["fraction_of_limit"]) if s["fraction_of_limit"] else "",
            "  %.2fx mwstrat fp32's time" % s["time_over_mwstrat_fp32"] if s["time_over_mwstrat_fp32"] else "",
            "  rank 0 %.2f CPU s/GiB" % s["rank0_cpu_s_per_gib"] if s["rank0_cpu_s_per_gib"] else ""))
    if a.json_out:
        argv = ["benchmarks/collective/hosts_bench.py", "--build", benchlib.rel(a.build), "--rates", a.rates,
                "--settings", a.settings] + (["--quick"] if a.quick else ["--rounds", str(rounds), "--reps", str(reps)])
        if a.impls != ",".join(IMPLS):
            argv += ["--impls", a.impls]
        if a.ranks_per_host != "1,2":
            argv += ["--ranks-per-host", a.ranks_per_host]
        if a.sizes:
            argv += ["--sizes", a.sizes]
        if a.family != "collective_hosts":
            argv += ["--family", a.family]
        rec = benchlib.meta(a.family, [" ".join(argv)] + commands, a.quick, started)
        rec.update(set_note="$SET: the simulated hosts made by `scripts/simhosts up 2 --rate RATE` for each rate; "
                            "the ranks of one command line start together ('&')", rows=rows, summary=summary,
                   failures=failures, missing=missing, simhosts_skipped=skipped, reps=reps, rounds=rounds, sizes=sizes, impls=impls,
                   link_limit="2*(H-1)/H*bytes/rate, H=2 hosts, rate = the tbf rate of each host's link")
        benchlib.write_json(a.json_out, rec)
    return 1 if failures and not rows else 0


if __name__ == "__main__":
    sys.exit(main())
