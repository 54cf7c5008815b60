// Save and load of the tutorial CNN's full training state (2 770 634 weights + Adam's m and v: 33.2 MB of F32)
// against a raw sequential write (with fsync) and read of the same number of bytes, on the same disk.
//
// Folder: $MWSTRAT_BENCH_DIR, else the system's temporary folder. "cold" read benchmarks drop the file from the
// page cache (posix_fadvise DONTNEED after an fsync) before every iteration, so they read from the disk.
#include <mwstrat/checkpoint.hpp>

#include <benchmark/benchmark.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace mwstrat;

std::filesystem::path bench_dir() {
  static const std::filesystem::path dir = [] {
    const char* env = std::getenv("MWSTRAT_BENCH_DIR");
    auto d = std::filesystem::path(env ? env : std::filesystem::temp_directory_path().string()) /
             ("mwstrat-checkpoint-bench-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// The Keras multi-worker tutorial's CNN: Conv2D(32, 3) on 28x28x1, Dense(128), Dense(10).
const training_state& cnn_state() {
  static const training_state state = [] {
    training_state s;
    s.epoch = 3;
    s.step = 1234;
    s.cursor = {3, 34, 42};
    s.rng_state = rng_state_of(std::mt19937_64(1));
    s.world_size = 2;
    s.model_fingerprint = "keras-tutorial-cnn";
    s.optimizer_iterations = 1234;
    const std::vector<std::pair<std::string, std::vector<std::int64_t>>> layers = {
        {"conv2d/kernel", {3, 3, 1, 32}}, {"conv2d/bias", {32}},   {"dense/kernel", {21632, 128}},
        {"dense/bias", {128}},            {"dense_1/kernel", {128, 10}}, {"dense_1/bias", {10}}};
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-0.1f, 0.1f);
    const auto tensor = [&](const std::string& name, const std::vector<std::int64_t>& shape) {
      std::int64_t n = 1;
      for (auto d : shape) n *= d;
      std::vector<float> v(static_cast<std::size_t>(n));
      for (auto& x : v) x = dist(rng);
      return float_tensor{name, shape, std::move(v)};
    };
    for (const auto& [name, shape] : layers) s.weights.push_back(tensor(name, shape));
    for (const auto& [name, shape] : layers) {
      s.optimizer_slots.push_back(tensor("m/" + name, shape));
      s.optimizer_slots.push_back(tensor("v/" + name, shape));
    }
    std::size_t total = 0;
    for (const auto& w : s.weights) total += w.values.size();
    if (total != 2'770'634) throw std::logic_error("the tutorial CNN has 2 770 634 parameters");
    return s;
  }();
  return state;
}

std::size_t state_file_size() {
  static const std::size_t size = encode_training_state(cnn_state()).size();
  return size;
}

void check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(what);
}

void drop_from_cache(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  check(fd >= 0, "open");
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void raw_write(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  check(fd >= 0, "open");
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    check(n > 0, "write");
    done += static_cast<std::size_t>(n);
  }
  check(::fsync(fd) == 0, "fsync");
  check(::close(fd) == 0, "close");
}

// The same, but asking the kernel to start writeback every 8 MiB as the checkpoint writer does: the strongest raw
// baseline.
void raw_write_writeback(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  check(fd >= 0, "open");
  constexpr std::size_t step = std::size_t{8} << 20;
  std::size_t done = 0;
  std::size_t started = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, std::min(step, bytes.size() - done));
    check(n > 0, "write");
    done += static_cast<std::size_t>(n);
    if (done - started >= step) {
      ::sync_file_range(fd, static_cast<off_t>(started), static_cast<off_t>(done - started), SYNC_FILE_RANGE_WRITE);
      started = done;
    }
  }
  check(::fsync(fd) == 0, "fsync");
  check(::close(fd) == 0, "close");
}

void raw_read(const std::filesystem::path& path, std::vector<std::byte>& into) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  check(fd >= 0, "open");
  std::size_t done = 0;
  while (done < into.size()) {
    const ssize_t n = ::read(fd, into.data() + done, into.size() - done);
    check(n > 0, "read");
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
}

// --- writes -------------------------------------------------------------------------------------------------

void BM_raw_write_fsync(benchmark::State& st) {
  const std::vector<std::byte> bytes(state_file_size(), std::byte{0x5A});
  const auto path = bench_dir() / "raw.bin";
  for (auto _ : st) raw_write(path, bytes);
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * bytes.size()));
}
BENCHMARK(BM_raw_write_fsync)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_raw_write_fsync_writeback(benchmark::State& st) {
  const std::vector<std::byte> bytes(state_file_size(), std::byte{0x5A});
  const auto path = bench_dir() / "raw.bin";
  for (auto _ : st) raw_write_writeback(path, bytes);
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * bytes.size()));
}
BENCHMARK(BM_raw_write_fsync_writeback)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_save_training_state(benchmark::State& st) {
  const training_state_view view = view_of(cnn_state());
  const auto path = bench_dir() / "state.safetensors";
  for (auto _ : st) save_training_state(path, view);
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * state_file_size()));
}
BENCHMARK(BM_save_training_state)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_manager_save(benchmark::State& st) {
  const training_state_view view = view_of(cnn_state());
  checkpoint_manager manager(bench_dir() / "managed", 2);
  std::int64_t step = 0;
  for (auto _ : st) manager.save(view, step++);
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * state_file_size()));
  manager.remove_all();
}
BENCHMARK(BM_manager_save)->Unit(benchmark::kMillisecond)->UseRealTime();

// What a background backup costs the training thread: the copy of the state into the reused snapshot buffer.
void BM_snapshot_into(benchmark::State& st) {
  const training_state_view view = view_of(cnn_state());
  training_state snapshot;
  snapshot_into(view, snapshot);
  for (auto _ : st) {
    snapshot_into(view, snapshot);
    benchmark::DoNotOptimize(snapshot.weights.front().values.data());
    benchmark::ClobberMemory();
  }
  check(snapshot == cnn_state(), "snapshot");
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * state_file_size()));
}
BENCHMARK(BM_snapshot_into)->Unit(benchmark::kMillisecond)->UseRealTime();

// --- reads, page cache warm -------------------------------------------------------------------------------

void BM_raw_read_warm(benchmark::State& st) {
  const auto path = bench_dir() / "raw.bin";
  raw_write(path, std::vector<std::byte>(state_file_size(), std::byte{0x5A}));
  std::vector<std::byte> buffer(state_file_size());
  for (auto _ : st) raw_read(path, buffer);
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * buffer.size()));
}
BENCHMARK(BM_raw_read_warm)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_load_training_state_into_warm(benchmark::State& st) {
  const auto path = bench_dir() / "state.safetensors";
  save_training_state(path, cnn_state());
  training_state into = load_training_state(path);
  for (auto _ : st) load_training_state(path, into);
  check(into == cnn_state(), "round trip");
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * state_file_size()));
}
BENCHMARK(BM_load_training_state_into_warm)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_load_training_state_fresh_warm(benchmark::State& st) {
  const auto path = bench_dir() / "state.safetensors";
  save_training_state(path, cnn_state());
  for (auto _ : st) benchmark::DoNotOptimize(load_training_state(path));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * state_file_size()));
}
BENCHMARK(BM_load_training_state_fresh_warm)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_safetensors_file_open_warm(benchmark::State& st) {
  const auto path = bench_dir() / "state.safetensors";
  save_training_state(path, cnn_state());
  for (auto _ : st) benchmark::DoNotOptimize(safetensors_file::open(path, {.rank = {}, .require_crc = true}));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * state_file_size()));
}
BENCHMARK(BM_safetensors_file_open_warm)->Unit(benchmark::kMillisecond)->UseRealTime();

// --- reads from the disk (page cache dropped before each iteration) --------------------------------------------

void BM_raw_read_cold(benchmark::State& st) {
  const auto path = bench_dir() / "raw.bin";
  raw_write(path, std::vector<std::byte>(state_file_size(), std::byte{0x5A}));
  std::vector<std::byte> buffer(state_file_size());
  for (auto _ : st) {
    st.PauseTiming();
    drop_from_cache(path);
    st.ResumeTiming();
    raw_read(path, buffer);
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * buffer.size()));
}
BENCHMARK(BM_raw_read_cold)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_load_training_state_into_cold(benchmark::State& st) {
  const auto path = bench_dir() / "state.safetensors";
  save_training_state(path, cnn_state());
  training_state into = load_training_state(path);
  for (auto _ : st) {
    st.PauseTiming();
    drop_from_cache(path);
    st.ResumeTiming();
    load_training_state(path, into);
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * state_file_size()));
}
BENCHMARK(BM_load_training_state_into_cold)->Unit(benchmark::kMillisecond)->UseRealTime();

// --- the checksum alone ------------------------------------------------------------------------------------

void BM_crc32c(benchmark::State& st) {
  const auto bytes = encode_training_state(cnn_state());
  for (auto _ : st) benchmark::DoNotOptimize(crc32c(bytes));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * bytes.size()));
}
BENCHMARK(BM_crc32c)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_crc32c_portable(benchmark::State& st) {
  const auto bytes = encode_training_state(cnn_state());
  for (auto _ : st)
    benchmark::DoNotOptimize(~detail::crc32c_update_portable(~0u, bytes.data(), bytes.size()));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * bytes.size()));
}
BENCHMARK(BM_crc32c_portable)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::error_code ec;
  std::filesystem::remove_all(bench_dir(), ec);
  return 0;
}
