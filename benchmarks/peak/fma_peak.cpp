// The FP32 fused-multiply-add peak of this machine, measured: the ceiling every compute-bound figure in
// benchmarks/RESULTS.md is read against.
//   mwstrat_bench_peak [--threads 1,2] [--seconds 0.5] [--repeats 5]
// prints one JSON line per thread count:
//   {"impl":"fma_peak","cpu":"<model name>","isa":"AVX-512","vector_floats":16,"threads":T,"pinned":true,
//    "accumulators":N,"gflops":<best>,"gflops_runs":[...],"cpu_mhz":<from /proc/cpuinfo>}
//
// Each thread runs N independent chains acc[i] = acc[i] * m + a in vector registers. One chain would measure the
// FMA's latency; the peak needs at least latency × issue width chains in flight (4 cycles × 2 pipes = 8 on
// current x86 cores), so every N that fits the register file is tried and the best kept. The vector width is the
// widest the compiler targets (-march=native): AVX-512, AVX2 + FMA, or SSE (multiply then add: two instructions
// for the same two flops, so its "peak" is that of a machine without FMA). Threads are pinned to distinct CPUs of
// the process's affinity mask where the system allows it; the figure for T threads is the flops of all of them
// over the wall time from a common start to the last one's end.
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

#if defined(__AVX512F__)
using vec = __m512;
constexpr int lanes = 16;
constexpr const char* isa = "AVX-512";
inline vec splat(float x) { return _mm512_set1_ps(x); }
inline vec fmadd(vec acc, vec m, vec a) { return _mm512_fmadd_ps(acc, m, a); }
inline float first(vec v) { return _mm512_cvtss_f32(v); }
#elif defined(__AVX2__) && defined(__FMA__)
using vec = __m256;
constexpr int lanes = 8;
constexpr const char* isa = "AVX2+FMA";
inline vec splat(float x) { return _mm256_set1_ps(x); }
inline vec fmadd(vec acc, vec m, vec a) { return _mm256_fmadd_ps(acc, m, a); }
inline float first(vec v) { return _mm256_cvtss_f32(v); }
#elif defined(__SSE2__)
using vec = __m128;
constexpr int lanes = 4;
constexpr const char* isa = "SSE (multiply + add, no FMA)";
inline vec splat(float x) { return _mm_set1_ps(x); }
inline vec fmadd(vec acc, vec m, vec a) { return _mm_add_ps(_mm_mul_ps(acc, m), a); }
inline float first(vec v) { return _mm_cvtss_f32(v); }
#else
using vec = float;
constexpr int lanes = 1;
constexpr const char* isa = "scalar";
inline vec splat(float x) { return x; }
inline vec fmadd(vec acc, vec m, vec a) { return acc * m + a; }
inline float first(vec v) { return v; }
#endif

// N chains for `iterations` rounds of 4 FMAs each; returns a value that depends on every chain (so none is dead).
template <int N>
float chains(std::uint64_t iterations) {
  vec acc[N];
  for (int i = 0; i < N; ++i) acc[i] = splat(1.0f + 0.001f * static_cast<float>(i));
  // acc converges towards a / (1 - m) = 1: no overflow, no denormals, the same work every round.
  const vec m = splat(0.999999f), a = splat(0.000001f);
  for (std::uint64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 4
    for (int round = 0; round < 4; ++round) {
#pragma GCC unroll 32
      for (int i = 0; i < N; ++i) acc[i] = fmadd(acc[i], m, a);
    }
  }
  float sum = 0.0f;
  for (int i = 0; i < N; ++i) sum += first(acc[i]);
  return sum;
}

using kernel = float (*)(std::uint64_t);
struct candidate {
  int accumulators;
  kernel run;
};
// Chains that fit the register file with m and a beside them: 16 vector registers below AVX-512, 32 with it.
#if defined(__AVX512F__)
const candidate candidates[] = {{8, chains<8>}, {12, chains<12>}, {16, chains<16>}, {20, chains<20>},
                                {24, chains<24>}, {28, chains<28>}};
#else
const candidate candidates[] = {{6, chains<6>}, {8, chains<8>}, {10, chains<10>}, {12, chains<12>},
                                {14, chains<14>}};
#endif

double flops(int accumulators, std::uint64_t iterations) {
  return 2.0 * lanes * 4.0 * accumulators * static_cast<double>(iterations);
}

std::string cpuinfo_field(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        auto value = line.substr(colon + 1);
        value.erase(0, value.find_first_not_of(" \t"));
        return value;
      }
    }
  }
  return "";
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
    }
  }
  return cpus;
}

// Runs `threads` copies of one kernel from a common start; returns the wall seconds to the last one's end.
double timed_run(const candidate& k, int threads, std::uint64_t iterations, bool& pinned) {
  const auto cpus = allowed_cpus();
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<float> sinks(static_cast<std::size_t>(threads));
  std::vector<std::thread> pool;
  pinned = !cpus.empty() && static_cast<int>(cpus.size()) >= threads;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      sinks[static_cast<std::size_t>(t)] = k.run(iterations);
    });
    if (pinned) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpus[static_cast<std::size_t>(t)], &one);
      if (pthread_setaffinity_np(pool.back().native_handle(), sizeof(one), &one) != 0) pinned = false;
    }
  }
  while (ready.load() < threads) std::this_thread::yield();
  const auto start = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  for (auto& th : pool) th.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  float sum = 0.0f;
  for (float s : sinks) sum += s;
  if (sum == -1.0f) std::puts("");  // keeps every chain's result alive
  return seconds;
}

// Iterations that take about `seconds` on one thread.
std::uint64_t calibrate(const candidate& k, double seconds) {
  std::uint64_t iterations = 1 << 12;
  bool pinned = false;
  for (;;) {
    const double took = timed_run(k, 1, iterations, pinned);
    if (took > 0.05 || iterations > (std::uint64_t{1} << 40)) {
      return std::max<std::uint64_t>(1, static_cast<std::uint64_t>(static_cast<double>(iterations) * seconds / took));
    }
    iterations *= 4;
  }
}

std::vector<int> parse_list(const char* text) {
  std::vector<int> out;
  std::string s(text);
  std::size_t at = 0;
  while (at < s.size()) {
    auto comma = s.find(',', at);
    if (comma == std::string::npos) comma = s.size();
    out.push_back(std::atoi(s.substr(at, comma - at).c_str()));
    at = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> thread_counts{1, 2};
  double seconds = 0.5;
  int repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--threads") {
      thread_counts = parse_list(argv[i + 1]);
    } else if (flag == "--seconds") {
      seconds = std::atof(argv[i + 1]);
    } else if (flag == "--repeats") {
      repeats = std::max(1, std::atoi(argv[i + 1]));
    } else {
      std::fprintf(stderr, "usage: %s [--threads 1,2] [--seconds 0.5] [--repeats 5]\n", argv[0]);
      return 2;
    }
  }
  const std::string cpu = cpuinfo_field("model name");
  const std::string mhz = cpuinfo_field("cpu MHz");

  // The accumulator count: the best of the candidates on one thread (short runs), then kept for every count.
  const candidate* best = &candidates[0];
  double best_rate = 0.0;
  for (const auto& k : candidates) {
    const auto iterations = calibrate(k, seconds / 5);
    bool pinned = false;
    for (int r = 0; r < 2; ++r) {
      const double rate = flops(k.accumulators, iterations) / timed_run(k, 1, iterations, pinned) / 1e9;
      if (rate > best_rate) best_rate = rate, best = &k;
    }
  }
  const auto iterations = calibrate(*best, seconds);
  for (int threads : thread_counts) {
    if (threads < 1) continue;
    std::vector<double> runs;
    bool pinned = false;
    for (int r = 0; r < repeats; ++r) {
      const double took = timed_run(*best, threads, iterations, pinned);
      runs.push_back(threads * flops(best->accumulators, iterations) / took / 1e9);
    }
    std::printf("{\"impl\":\"fma_peak\",\"cpu\":\"%s\",\"isa\":\"%s\",\"vector_floats\":%d,\"threads\":%d,"
                "\"pinned\":%s,\"accumulators\":%d,\"gflops\":%.2f,\"gflops_runs\":[",
                json_escape(cpu.empty() ? "unknown" : cpu).c_str(), isa, lanes, threads, pinned ? "true" : "false",
                best->accumulators, *std::max_element(runs.begin(), runs.end()));
    for (std::size_t i = 0; i < runs.size(); ++i) std::printf("%s%.2f", i ? "," : "", runs[i]);
    std::printf("],\"cpu_mhz\":%s}\n", mhz.empty() ? "null" : mhz.c_str());
  }
  return 0;
}
