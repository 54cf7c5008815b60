#!/usr/bin/env bash
# Reference CNN: mwstrat vs PyTorch (python3-torch) training samples/s, and mwstrat's dense GEMMs vs OpenBLAS
# sgemm, on this machine, in one run. PyTorch and OpenBLAS are run with and without OPENBLAS_CORETYPE forced to the
# CPU's best kernel family (SkylakeX with AVX-512, Haswell with AVX2; Debian's OpenBLAS may pick a generic kernel
# otherwise) and compared at their faster.
# The training figures are taken in ROUNDS rounds (3; environment variable), mwstrat and both PyTorch settings once
# per round, so a change of load on a shared machine hits all of them alike; the table shows each one's median and
# the median of the per-round ratios.
#   usage: benchmarks/nn/compare.sh BUILD_DIR [RESULTS_DIR [SUMMARY_JSON]]   (a Release build with
#          MWSTRAT_BUILD_BENCHMARKS=ON; the raw JSON and PyTorch figures are kept in RESULTS_DIR when given, and the
#          tables are also written as SUMMARY_JSON for benchmarks/report.py)
set -euo pipefail
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"  # named in every output
build=${1:?usage: compare.sh BUILD_DIR [RESULTS_DIR [SUMMARY_JSON]]}
summary=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
bench=$build/benchmarks/nn/mwstrat_bench_nn
blas=$build/benchmarks/nn/mwstrat_bench_nn_openblas
if [[ $# -ge 2 ]]; then
  tmp=$2
  mkdir -p "$tmp"
else
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
fi
rounds=${ROUNDS:-3}
if grep -qw avx512f /proc/cpuinfo; then coretype=SkylakeX; else coretype=Haswell; fi
started="$(date -u '+%Y-%m-%d %H:%M UTC')|$(cut -d' ' -f1-3 /proc/loadavg)"
echo "cpu: $cpu × $(nproc); OPENBLAS_CORETYPE=$coretype"
echo "load before: $(uptime)"

"$bench" --benchmark_filter=Dense --benchmark_out="$tmp/mw_dense.json" --benchmark_out_format=json >/dev/null 2>&1
if [[ -x $blas ]]; then
  OPENBLAS_CORETYPE= "$blas" --benchmark_out="$tmp/blas_default.json" --benchmark_out_format=json >/dev/null 2>&1
  OPENBLAS_CORETYPE=$coretype "$blas" --benchmark_out="$tmp/blas_skx.json" --benchmark_out_format=json >/dev/null 2>&1
fi
for ((r = 1; r <= rounds; r++)); do
  "$bench" --benchmark_filter=Train --benchmark_out="$tmp/mw_train_$r.json" --benchmark_out_format=json >/dev/null 2>&1
  for b in 64 128; do
    for t in 1 2; do
      env -u OPENBLAS_CORETYPE OMP_NUM_THREADS=$t /usr/bin/python3 "$here/torch_cnn.py" $b $t >"$tmp/torch_${b}_${t}_default_$r"
      OPENBLAS_CORETYPE=$coretype OMP_NUM_THREADS=$t /usr/bin/python3 "$here/torch_cnn.py" $b $t >"$tmp/torch_${b}_${t}_skx_$r"
    done
  done
done
echo "load after:  $(uptime)"

python3 - "$tmp" "$rounds" "$summary" "$here/.." "$build" "$started" "$coretype" <<'PY'
import json, os, statistics, sys
tmp, rounds, summary = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sys.path.insert(0, sys.argv[4])
import benchlib
out = {"train": [], "dense": []}
def load(name):
    path = os.path.join(tmp, name)
    if not os.path.exists(path):
        return {}
    out = {}
    for b in json.load(open(path))["benchmarks"]:
        out[b["name"].split("/min_time")[0].split("/real_time")[0]] = b
    return out
mw = load("mw_dense.json")
trains = [load(f"mw_train_{r}.json") for r in range(1, rounds + 1)]
def torch(b, t, variant, r):
    return float(open(os.path.join(tmp, f"torch_{b}_{t}_{variant}_{r}")).read())
print(f"\nTraining, reference CNN (forward + backward + SGD), samples/s, medians of {rounds} rounds")
print(f"{'batch':>5} {'threads':>7} {'mwstrat':>9} {'torch':>9} {'torch SKX':>10} {'ratio vs faster':>16} "
      f"{'per-round ratios':>20}")
for b in (64, 128):
    for t in (1, 2):
        ms = [tr[f"Train/batch:{b}/threads:{t}"]["samples/s"] for tr in trains]
        tds = [torch(b, t, "default", r) for r in range(1, rounds + 1)]
        tss = [torch(b, t, "skx", r) for r in range(1, rounds + 1)]
        ratios = [m / max(d, s) for m, d, s in zip(ms, tds, tss)]
        each = " ".join(f"{x:.2f}" for x in ratios)
        out["train"].append({"batch": b, "threads": t, "mwstrat": statistics.median(ms),
                             "torch_default": statistics.median(tds), "torch_coretype": statistics.median(tss),
                             "ratio": statistics.median(ratios), "per_round": ratios})
        print(f"{b:>5} {t:>7} {statistics.median(ms):>9.0f} {statistics.median(tds):>9.0f} "
              f"{statistics.median(tss):>10.0f} {statistics.median(ratios):>15.2f}x {each:>20}")
bd, bs = load("blas_default.json"), load("blas_skx.json")
names = {0: "forward X K^T", 1: "dK = dZ^T X", 2: "dX = dZ K"}
print("\nDense(21632 -> 128) GEMMs, GFLOP/s")
print(f"{'product':>14} {'batch':>5} {'threads':>7} {'mwstrat':>8} {'OpenBLAS':>9} {'OB SKX':>7} {'% of faster':>12}")
for kind in (0, 1, 2):
    for b in (64, 128):
        for t in (1, 2):
            key = f"Dense/batch:{b}/threads:{t}/kind:{kind}"
            m = mw[key]["GFLOP/s"]
            d = bd.get(key, {}).get("GFLOP/s", float("nan"))
            s = bs.get(key, {}).get("GFLOP/s", float("nan"))
            print(f"{names[kind]:>14} {b:>5} {t:>7} {m:>8.1f} {d:>9.1f} {s:>7.1f} {100 * m / max(d, s):>11.0f}%")
            out["dense"].append({"product": names[kind], "kind": kind, "batch": b, "threads": t, "mwstrat_gflops": m,
                                 "openblas_gflops": None if d != d else d,
                                 "openblas_coretype_gflops": None if s != s else s})
if summary:
    date, load = sys.argv[6].split("|")
    record = benchlib.meta("nn", [f"ROUNDS={rounds} benchmarks/nn/compare.sh {benchlib.rel(sys.argv[5])}"],
                           os.environ.get("MWSTRAT_BENCH_QUICK") == "1", (date, load))
    record.update(rounds=rounds, coretype=sys.argv[7], **out)
    benchlib.write_json(summary, record)
PY
