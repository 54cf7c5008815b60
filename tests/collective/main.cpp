// The collective suite's main: normally GoogleTest; with `--ring-worker <scenario> <rank> <ports> [k=v...]` one
// rank of a ring test (a real process on 127.0.0.1), reporting "transport=<shm|tcp>" once connected, then "OK" or
// "ERROR <kind> <peer> <message>" on stdout. `transport=tcp` forces TCP payloads (default: automatic).

#include "hierarchy.hpp"
#include "process.hpp"
#include "sweep.hpp"

#include <mwstrat/collective.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace collective_main {

using namespace mwstrat;

// The "regroup" scenario: all-reduces of a one until a peer is lost (bounded: 60 s); then the survivors' regroup,
// the ring without those it left out, and one all-reduce of a one on it. Prints the agreed old ranks and the sum.
int run_regroup(const ring_options& o) {
  auto ring = std::make_unique<ring_collective>(o);
  std::vector<float> one{1.0f};
  int culprit = -1;
  const auto stop = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  try {
    for (int i = 0; std::chrono::steady_clock::now() < stop; ++i) {
      ring->all_reduce(std::span<float>(one), reduce_op::sum);
      if (i == 0) {
        std::printf("ready\n");
        std::fflush(stdout);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::printf("ERROR none -1 no loss was found\n");
    return 3;
  } catch (const peer_lost_error& e) {
    culprit = e.peer_rank();
  }
  const auto members = ring->agree_survivors(culprit, o.op_timeout);
  std::vector<int> gone;
  std::string listed;
  for (int r = 0; r < ring->size(); ++r) {
    if (std::find(members.begin(), members.end(), r) == members.end()) gone.push_back(r);
  }
  for (const int r : members) {
    if (!listed.empty()) listed += ',';
    listed += std::to_string(r);
  }
  auto smaller_options = ring->without_ranks(std::span<const int>(gone), o.connect_timeout);
  ring.reset();  // the smaller ring listens on this rank's address
  ring_collective smaller(std::move(smaller_options));
  std::vector<float> ones{1.0f};
  smaller.all_reduce(std::span<float>(ones), reduce_op::sum);
  std::printf("members=%s size=%d sum=%d\nOK\n", listed.c_str(), smaller.size(), static_cast<int>(ones[0]));
  return 0;
}

int run_worker(int argc, char** argv) {
  if (argc < 5) return 2;
  const std::string scenario = argv[2];
  const int rank = std::stoi(argv[3]);
  std::map<std::string, std::string> kv;
  for (int i = 5; i < argc; ++i) {
    const std::string a = argv[i];
    const auto eq = a.find('=');
    if (eq != std::string::npos) kv[a.substr(0, eq)] = a.substr(eq + 1);
  }
  const auto get = [&](const std::string& k, const std::string& fallback) {
    const auto it = kv.find(k);
    return it == kv.end() ? fallback : it->second;
  };
  ring_options o;
  std::string ports = argv[4];
  for (std::size_t at = 0; at <= ports.size();) {
    const auto comma = std::min(ports.find(',', at), ports.size());
    o.addresses.push_back("127.0.0.1:" + ports.substr(at, comma - at));
    at = comma + 1;
  }
  o.rank = rank;
  o.connect_timeout = std::chrono::milliseconds(std::stoi(get("connect_ms", "20000")));
  o.op_timeout = std::chrono::milliseconds(std::stoi(get("timeout_ms", "30000")));
  o.chunk_bytes = std::stoul(get("chunk", "16384"));
  o.liveness_timeout = std::chrono::milliseconds(std::stoi(get("liveness_ms", "5000")));
  o.cluster_fingerprint = get("fingerprint", "test-cluster");
  if (kv.count("token")) o.job_token = kv["token"];
  o.encrypt = get("encrypt", "0") == "1";  // needs a token: frames between hosts encrypted (frame_seal.hpp)
  // "1,2": this rank's peers at other ports than their own (a test proxy in between); index = rank.
  if (kv.count("connect_ports")) {
    const std::string via = kv["connect_ports"];
    for (std::size_t r = 0; r < o.addresses.size(); ++r)
      if (const auto p = test::nth_field(via, static_cast<int>(r)); !p.empty() && p != "-" && static_cast<int>(r) != rank)
        o.addresses[r] = "127.0.0.1:" + p;
  }
  o.transport = get("transport", "auto") == "tcp" ? ring_transport::tcp : ring_transport::automatic;
  if (kv.count("host")) o.host_identity = kv["host"];
  if (kv.count("hosts")) o.host_identity = test::nth_field(kv["hosts"], rank);  // "a,a,b,b": rank r's host
  // Hierarchical unless told (the ring's default too); identical to flat while every rank is on one host.
  // "default": the ring's own topology and size threshold; otherwise every all-reduce (any size) as told.
  if (get("topology", "hierarchical") != "default") {
    o.topology = get("topology", "hierarchical") == "flat" ? ring_topology::flat : ring_topology::hierarchical;
    o.hierarchical_min_bytes = 0;
  }
  if (get("compression", "none") == "bf16") o.compression = wire_compression::bf16;
  if (get("compression", "none") == "fp16") o.compression = wire_compression::fp16;
  // "2", or one value per rank ("2,1"): TCP connections per link between hosts.
  if (kv.count("streams"))
    o.streams_per_peer = std::stoi(kv["streams"].find(',') == std::string::npos ? kv["streams"]
                                                                                 : test::nth_field(kv["streams"], rank));
  try {
    if (scenario == "regroup") return run_regroup(o);
    ring_collective ring(o);
    std::printf("transport=%s\n", ring.uses_shared_memory() ? "shm" : "tcp");
    std::fflush(stdout);
    if (scenario == "sweep") {
      test::run_sweep(ring, get("large", "0") == "1");
    } else if (scenario == "loop") {
      std::fprintf(stderr, "hierarchical=%d hosts=%d\n", ring.hierarchical() ? 1 : 0, ring.hosts());
      std::vector<float> g(std::size_t{1} << 20, 1.0f);
      const auto stop = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      for (int i = 0; i < 100000 && std::chrono::steady_clock::now() < stop; ++i) {
        ring.all_reduce(std::span<float>(g), reduce_op::mean);
        if (i == 0) {
          std::printf("ready\n");
          std::fflush(stdout);
        }
      }
    } else if (scenario == "steps") {
      // `steps` all-reduces, each after `compute_ms` of "compute" (a sleep of the training thread); rank
      // `slow_rank` computes `slow_ms` instead. Checks every result, then prints how many steps it did.
      const int steps = std::stoi(get("steps", "10"));
      const int slow_rank = std::stoi(get("slow_rank", "-1"));
      const auto compute = std::chrono::milliseconds(std::stoi(get(rank == slow_rank ? "slow_ms" : "compute_ms", "0")));
      std::vector<float> g(std::stoul(get("count", "65536")));
      for (int i = 0; i < steps; ++i) {
        std::this_thread::sleep_for(compute);
        std::fill(g.begin(), g.end(), static_cast<float>(rank + i));
        ring.all_reduce(std::span<float>(g), reduce_op::sum);
        const float want = static_cast<float>(ring.size() * i + ring.size() * (ring.size() - 1) / 2);
        if (g.front() != want || g.back() != want) {
          std::printf("ERROR wrong -1 step %d: %g, expected %g\n", i, static_cast<double>(g.front()), static_cast<double>(want));
          return 3;
        }
        if (i == 0) {
          std::printf("ready\n");
          std::fflush(stdout);
        }
      }
      std::printf("steps=%d\n", steps);
      if (rank == std::stoi(get("linger_rank", "-1")))  // the ring outlives its neighbours' by linger_ms
        std::this_thread::sleep_for(std::chrono::milliseconds(std::stoi(get("linger_ms", "0"))));
    } else if (scenario == "mismatch") {
      std::vector<float> g(static_cast<std::size_t>(1000 + 10 * rank), 1.0f);
      ring.all_reduce(std::span<float>(g), reduce_op::sum);
    } else if (scenario == "arena_loop") {
      // host_arena steps until killed: every rank's gradients meaned into one shared parameter copy.
      auto arena = host_arena::open(ring, std::size_t{1} << 20);
      std::printf("arena=%s\n", arena ? "yes" : "no");
      std::fflush(stdout);
      if (!arena) return 4;
      const auto stop = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      for (int i = 0; i < 100000 && std::chrono::steady_clock::now() < stop; ++i) {
        for (auto& g : arena->gradients()) g = 1.0f;
        const auto params = arena->parameters();
        const auto grads = arena->gradients();
        arena->mean_and_update([&](std::size_t first, std::size_t count) {
          for (std::size_t e = first; e < first + count; ++e) params[e] -= 0.5f * grads[e];
        });
        if (i == 0) {
          std::printf("ready\n");
          std::fflush(stdout);
        }
      }
    } else if (scenario == "dump") {
      // One all-reduce of test::varied_input floats, written to `<out><rank>.bin` for the test to compare.
      std::fprintf(stderr, "hierarchical=%d hosts=%d\n", ring.hierarchical() ? 1 : 0, ring.hosts());
      std::vector<float> data(std::stoul(get("count", "1000")));
      for (std::size_t i = 0; i < data.size(); ++i) data[i] = test::varied_input(rank, i);
      ring.all_reduce(std::span<float>(data), get("op", "sum") == "mean" ? reduce_op::mean : reduce_op::sum);
      test::write_floats(get("out", "") + std::to_string(rank) + ".bin", data);
    } else if (scenario == "dump_update") {
      // all_reduce_update (sum) of test::varied_input into zero parameters (params -= reduced); writes -params.
      std::fprintf(stderr, "hierarchical=%d hosts=%d\n", ring.hierarchical() ? 1 : 0, ring.hosts());
      std::vector<float> grads(std::stoul(get("count", "1000"))), params(grads.size(), 0.0f);
      for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = test::varied_input(rank, i);
      ring.all_reduce_update(std::span<float>(grads), reduce_op::sum, std::span<float>(params),
                             [&](std::size_t first, std::size_t count) {
                               for (std::size_t i = first; i < first + count; ++i) params[i] -= grads[i];
                             });
      for (auto& v : params) v = -v;
      test::write_floats(get("out", "") + std::to_string(rank) + ".bin", params);
    } else if (scenario == "dump_streamed") {
      // all_reduce_streamed (sum) of test::varied_input, each reported part subtracted from zero parameters as it
      // comes (the synchroniser's streamed update); writes -params.
      std::vector<float> grads(std::stoul(get("count", "1000"))), params(grads.size(), 0.0f);
      for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = test::varied_input(rank, i);
      ring.all_reduce_streamed(std::span<float>(grads), reduce_op::sum, [&](std::size_t first, std::size_t count) {
        for (std::size_t i = first; i < first + count; ++i) params[i] -= grads[i];
      });
      for (auto& v : params) v = -v;
      test::write_floats(get("out", "") + std::to_string(rank) + ".bin", params);
    } else if (scenario == "pair") {
      test::check_all_reduce<float>(ring, 1001, reduce_op::sum);
      ring.barrier();
    } else {
      return 2;
    }
    std::printf("OK\n");
    return 0;
  } catch (const peer_lost_error& e) {
    std::printf("ERROR peer_lost %d %s\n", e.peer_rank(), e.what());
  } catch (const timeout_error& e) {
    std::printf("ERROR timeout %d %s\n", e.peer_rank().value_or(-1), e.what());
  } catch (const error& e) {
    std::printf("ERROR %s -1 %s\n", std::string(to_string(e.kind())).c_str(), e.what());
  } catch (const std::exception& e) {
    std::printf("ERROR other -1 %s\n", e.what());
  }
  std::fflush(stdout);
  return 3;
}

}  // namespace collective_main

int main(int argc, char** argv) {
  mwstrat::test::self_exe() = "/proc/self/exe";
  if (argc > 1 && std::string(argv[1]) == "--ring-worker") return collective_main::run_worker(argc, argv);
  // Resolve our own path once: /proc/self/exe of a forked child is still this binary, but be explicit.
  char path[4096];
  const auto len = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (len > 0) mwstrat::test::self_exe() = std::string(path, static_cast<std::size_t>(len));
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
