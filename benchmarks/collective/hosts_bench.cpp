// One rank of the all-reduce benchmark between hosts (driven by hosts_bench.py, which starts every rank, on
// 127.0.0.1 with a host identity per rank or inside scripts/simhosts' simulated hosts). Rank 0 prints one line per
// buffer size: "size=<bytes> median_s=<s> min_s=<s> reps=<n>", the time of one all-reduce (sum of floats) from a
// barrier to its return, over `reps` repetitions after a warm-up. hosts_bench_gloo.py and hosts_bench_mpi.cpp time
// Gloo and Open MPI the same way and print the same lines.
//
//   mwstrat_bench_hosts --rank R --addresses H:P,H:P,... [--host-id ID] [--compression none|bf16|fp16]
//                       [--topology hierarchical|flat] [--sizes 4096,11534336:8] [--reps 20] [--transport auto|tcp]
//                       [--streams N]   (TCP connections per link between hosts: ring_options::streams_per_peer)
//                       [--token T] [--encrypt 0|1]   (frames between hosts sealed: authenticated, or encrypted too)
// Rank 0 ends with "cpu_s=<its user+system CPU seconds> bytes=<bytes it all-reduced>" (the cost of sealing).
// A size may carry its own repetitions ("11534336:8": large buffers on a slow link take long).

#include "hosts_timing.hpp"

#include <mwstrat/collective.hpp>

#include <sys/resource.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  mwstrat::ring_options o;
  o.topology = mwstrat::ring_topology::hierarchical;
  std::vector<std::string> size_args = {"4096", std::to_string(11u << 20)};
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--rank") o.rank = std::stoi(v);
    else if (k == "--addresses") o.addresses = hosts_bench::split(v);
    else if (k == "--host-id") o.host_identity = v;
    else if (k == "--compression")
      o.compression = v == "bf16" ? mwstrat::wire_compression::bf16
                      : v == "fp16" ? mwstrat::wire_compression::fp16 : mwstrat::wire_compression::none;
    else if (k == "--topology") o.topology = v == "flat" ? mwstrat::ring_topology::flat : mwstrat::ring_topology::hierarchical;
    else if (k == "--transport") o.transport = v == "tcp" ? mwstrat::ring_transport::tcp : mwstrat::ring_transport::automatic;
    else if (k == "--streams") o.streams_per_peer = std::stoi(v);
    else if (k == "--token") o.job_token = v;
    else if (k == "--encrypt") o.encrypt = v == "1";
    else if (k == "--reps") reps = std::stoi(v);
    else if (k == "--sizes") size_args = hosts_bench::split(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  o.cluster_fingerprint = "hosts-bench";
  const auto sizes = hosts_bench::parse_sizes(size_args, reps);
  try {
    mwstrat::ring_collective ring(o);
    hosts_bench::time_all_reduces(
        sizes, ring.rank(), [&] { ring.barrier(); },
        [&](std::vector<float>& data) { ring.all_reduce(std::span<float>(data), mwstrat::reduce_op::sum); });
    ring.barrier();
    if (ring.rank() == 0) {
      rusage u{};
      ::getrusage(RUSAGE_SELF, &u);
      const double cpu = static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
                         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
      double bytes = 0;
      for (const auto& s : sizes) bytes += static_cast<double>(s.bytes) * (s.reps + 3);  // + the warm-up
      std::printf("cpu_s=%.3f bytes=%.0f\n", cpu, bytes);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", o.rank, e.what());
    return 3;
  }
  return 0;
}
