// One rank of the all-reduce benchmark between hosts (driven by hosts_bench.py, which starts every rank, on
// 127.0.0.1 with a host identity per rank or inside scripts/simhosts' simulated hosts). Rank 0 prints one line per
// buffer size: "size=<bytes> median_s=<s> min_s=<s> reps=<n>", the time of one all-reduce (sum of floats) from a
// barrier to its return, over `reps` repetitions after a warm-up. hosts_bench_gloo.py and hosts_bench_mpi.cpp time
// Gloo and Open MPI the same way and print the same lines.
//
//   mwstrat_bench_hosts --rank R --addresses H:P,H:P,... [--host-id ID] [--compression none|bf16|fp16]
//                       [--topology hierarchical|flat] [--sizes 4096,11534336:8] [--reps 20] [--transport auto|tcp]
//                       [--streams N]   (TCP connections per link between hosts: ring_options::streams_per_peer)
// A size may carry its own repetitions ("11534336:8": large buffers on a slow link take long).

#include <mwstrat/collective.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at <= s.size();) {
    const auto comma = std::min(s.find(',', at), s.size());
    out.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  mwstrat::ring_options o;
  o.topology = mwstrat::ring_topology::hierarchical;
  std::vector<std::string> size_args = {"4096", std::to_string(11u << 20)};
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--rank") o.rank = std::stoi(v);
    else if (k == "--addresses") o.addresses = split(v);
    else if (k == "--host-id") o.host_identity = v;
    else if (k == "--compression")
      o.compression = v == "bf16" ? mwstrat::wire_compression::bf16
                      : v == "fp16" ? mwstrat::wire_compression::fp16 : mwstrat::wire_compression::none;
    else if (k == "--topology") o.topology = v == "flat" ? mwstrat::ring_topology::flat : mwstrat::ring_topology::hierarchical;
    else if (k == "--transport") o.transport = v == "tcp" ? mwstrat::ring_transport::tcp : mwstrat::ring_transport::automatic;
    else if (k == "--streams") o.streams_per_peer = std::stoi(v);
    else if (k == "--reps") reps = std::stoi(v);
    else if (k == "--sizes") size_args = split(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  o.cluster_fingerprint = "hosts-bench";
  std::vector<std::pair<std::size_t, int>> sizes;  // bytes, repetitions
  for (const auto& s : size_args) {
    const auto colon = s.find(':');
    const int n = colon == std::string::npos ? reps : std::stoi(s.substr(colon + 1));
    sizes.emplace_back(std::stoul(s.substr(0, colon)), n);
  }
  try {
    mwstrat::ring_collective ring(o);
    for (const auto& [bytes, size_reps] : sizes) {
      std::vector<float> data(bytes / sizeof(float));
      for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>((i + static_cast<std::size_t>(o.rank)) % 97) * 0.01f;
      std::vector<double> times;
      for (int r = -3; r < size_reps; ++r) {
        ring.barrier();
        const auto t0 = std::chrono::steady_clock::now();
        ring.all_reduce(std::span<float>(data), mwstrat::reduce_op::sum);
        const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
        if (r >= 0) times.push_back(dt.count());
      }
      std::sort(times.begin(), times.end());
      if (ring.rank() == 0) {
        std::printf("size=%zu median_s=%.9f min_s=%.9f reps=%d\n", bytes, times[times.size() / 2], times.front(),
                    size_reps);
        std::fflush(stdout);
      }
    }
    ring.barrier();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", o.rank, e.what());
    return 3;
  }
  return 0;
}
