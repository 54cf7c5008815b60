// Gloo's ring all-reduce (TCP transport) on loopback, same sizes and table as mwstrat_bench_collective.
//   mwstrat_bench_collective_gloo [--ranks 2,4] [--min B] [--max B]

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace {

struct result {
  std::size_t bytes;
  double seconds;
  double cpu;  // CPU seconds per all-reduce of rank 0 (all its threads)
};

double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

void run_rank(int n, int rank, const std::string& dir, const std::vector<std::size_t>& sizes, int out) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(dir);
  gloo::rendezvous::PrefixStore prefix("bench", store);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, n);
  context->connectFullMesh(prefix, device);
  std::vector<float> data(sizes.back() / sizeof(float), 1.0f);
  const auto reduce = [&](std::size_t count) {
    gloo::AllreduceOptions opts(context);
    opts.setOutput(data.data(), count);
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    gloo::allreduce(opts);
  };
  for (auto bytes : sizes) {
    const std::size_t count = bytes / sizeof(float);
    for (int i = 0; i < 3; ++i) reduce(count);
    auto t0 = std::chrono::steady_clock::now();
    reduce(count);
    double one = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Every rank must run the same number of iterations: take rank 0's estimate through an all-reduce (max).
    double iters_d = rank == 0 ? std::clamp(0.5 / std::max(one, 1e-6), 5.0, 20000.0) : 0.0;
    {
      gloo::AllreduceOptions opts(context);
      opts.setOutput(&iters_d, 1);
      opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<double>));
      gloo::allreduce(opts);
    }
    const auto iters = static_cast<long>(iters_d);
    t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_seconds();
    for (long i = 0; i < iters; ++i) reduce(count);
    const double per = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
    if (rank == 0) {
      const result r{bytes, per, (cpu_seconds() - c0) / static_cast<double>(iters)};
      if (::write(out, &r, sizeof r) != sizeof r) std::_Exit(3);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> ranks = {2, 4};
  std::size_t min_bytes = 4096, max_bytes = std::size_t{64} << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--ranks") {
      ranks.clear();
      std::string v = argv[i + 1];
      for (std::size_t at = 0; at <= v.size();) {
        const auto c = std::min(v.find(',', at), v.size());
        ranks.push_back(std::stoi(v.substr(at, c - at)));
        at = c + 1;
      }
    } else if (a == "--min") {
      min_bytes = std::stoul(argv[i + 1]);
    } else if (a == "--max") {
      max_bytes = std::stoul(argv[i + 1]);
    }
  }
  std::vector<std::size_t> sizes;
  for (std::size_t b = min_bytes; b <= max_bytes; b *= 4) sizes.push_back(b);
  if (max_bytes >= (std::size_t{11} << 20)) {
    sizes.push_back(std::size_t{11} << 20);
    std::sort(sizes.begin(), sizes.end());
  }
  std::printf("%-6s %10s %10s %10s %9s %11s\n", "ranks", "bytes", "time_us", "busbw", "cpu_us", "cpu_busbw");
  for (int n : ranks) {
    const auto dir = std::filesystem::temp_directory_path() / ("mwstrat-gloo-" + std::to_string(::getpid()) + "-" +
                                                               std::to_string(n));
    std::filesystem::create_directories(dir);
    int fds[2];
    if (::pipe(fds) != 0) return 1;
    std::vector<pid_t> pids;
    for (int r = 0; r < n; ++r) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::close(fds[0]);
        run_rank(n, r, dir.string(), sizes, fds[1]);
        std::_Exit(0);
      }
      pids.push_back(pid);
    }
    ::close(fds[1]);
    result r{};
    while (::read(fds[0], &r, sizeof r) == sizeof r) {
      const double moved = static_cast<double>(r.bytes) * 2.0 * (n - 1) / n;
      std::printf("%-6d %10zu %10.1f %10.2f %9.1f %11.2f\n", n, r.bytes, r.seconds * 1e6, moved / r.seconds / 1e9,
                  r.cpu * 1e6, moved / r.cpu / 1e9);
      std::fflush(stdout);
    }
    ::close(fds[0]);
    for (auto pid : pids) ::waitpid(pid, nullptr, 0);
    std::filesystem::remove_all(dir);
  }
  return 0;
}
