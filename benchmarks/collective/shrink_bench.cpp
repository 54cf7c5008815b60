// How long an elastic job's membership change takes, by worker count: N ranks of the TCP ring on loopback (threads of
// this process, each with its own ring, sockets and liveness thread, as separate processes would have), one rank lost
// mid all-reduce (its ring torn down as a process's exit tears it down: connections shut without a goodbye), and the
// survivors' way back: the verdict reaches them (`peer_lost_error`), they build the ring without the lost rank
// (`ring_collective::without_ranks`) and finish one all-reduce on it. The training state's transfer is apart (it is a
// broadcast of the snapshot, timed by the collective benchmarks). Horovod's Gloo re-initialisation is the anchor
// (issue 48: 0.4 / 1.2 / 7.1 / 15.8 s at 2 / 4 / 8 / 16 ranks); the goal is at most 200 ms at 16.
//
//   mwstrat_bench_shrink [--workers 4,8,16] [--rounds R]
// prints one line per worker count: "shrink workers N rounds R: detect p50 .. ms, ring p50 .. ms, total p50 .. p99
// .. max .. ms", where detect is the loss to the last survivor's verdict, ring the verdict to the last survivor's
// first all-reduce on the new ring, and total the loss to that all-reduce.
#include <mwstrat/cluster/free_ports.hpp>
#include <mwstrat/collective/ring/ring_collective.hpp>
#include <mwstrat/error.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

// Thrown inside the lost rank's scope, so that its ring is destroyed by an exception (links shut, no goodbye).
struct lost_on_purpose {};

struct round_times {
  double detect_ms = 0, ring_ms = 0, total_ms = 0;
};

round_times one_round(int n) {
  const auto ports = mwstrat::free_listen_ports("127.0.0.1", n);
  std::vector<std::string> addresses;
  for (const int p : ports) addresses.push_back("127.0.0.1:" + std::to_string(p));
  const int lost = n / 2;
  std::atomic<int> connected{0};
  std::atomic<bool> go{false};
  clock_type::time_point lost_at{};
  std::vector<clock_type::time_point> verdict(static_cast<std::size_t>(n)), back(static_cast<std::size_t>(n));
  std::mutex m;
  std::string failure;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      mwstrat::ring_options o;
      o.addresses = addresses;
      o.rank = r;
      o.connect_timeout = 60s;
      o.op_timeout = 60s;
      o.cluster_fingerprint = "shrink";
      o.log = [](std::string_view) {};
      try {
        auto ring = std::make_unique<mwstrat::ring_collective>(o);
        std::vector<float> v(1024, 1.0f);
        ring->all_reduce(std::span<float>(v), mwstrat::reduce_op::sum);
        ++connected;
        while (!go) std::this_thread::sleep_for(1ms);
        if (r == lost) {
          lost_at = clock_type::now();
          try {
            const auto doomed = std::move(ring);  // destroyed while the exception unwinds: links shut, no goodbye
            throw lost_on_purpose{};
          } catch (const lost_on_purpose&) {
          }
          return;
        }
        try {
          ring->all_reduce(std::span<float>(v), mwstrat::reduce_op::sum);  // a rank is gone: it cannot complete
          throw std::runtime_error("an all-reduce completed without the lost rank");
        } catch (const mwstrat::peer_lost_error& e) {
          verdict[static_cast<std::size_t>(r)] = clock_type::now();
          if (e.peer_rank() != lost) throw std::runtime_error(std::string("wrong culprit: ") + e.what());
        }
        const std::array<int, 1> gone{lost};
        auto smaller = ring->without_ranks(gone, 60s);
        ring.reset();  // its address is the new ring's
        ring = std::make_unique<mwstrat::ring_collective>(std::move(smaller));
        std::fill(v.begin(), v.end(), 1.0f);
        ring->all_reduce(std::span<float>(v), mwstrat::reduce_op::sum);
        back[static_cast<std::size_t>(r)] = clock_type::now();
        if (v[0] != static_cast<float>(n - 1)) throw std::runtime_error("the smaller ring's sum is wrong");
      } catch (const std::exception& e) {
        const std::lock_guard lock(m);
        failure += "rank " + std::to_string(r) + ": " + e.what() + "\n";
      }
    });
  }
  for (int waited = 0; connected < n && waited < 120'000; ++waited) std::this_thread::sleep_for(1ms);
  go = true;
  for (auto& t : threads) t.join();
  if (!failure.empty()) throw std::runtime_error(failure);
  round_times t;
  for (int r = 0; r < n; ++r) {
    if (r == lost) continue;
    const auto i = static_cast<std::size_t>(r);
    t.detect_ms = std::max(t.detect_ms, std::chrono::duration<double, std::milli>(verdict[i] - lost_at).count());
    t.ring_ms = std::max(t.ring_ms, std::chrono::duration<double, std::milli>(back[i] - verdict[i]).count());
    t.total_ms = std::max(t.total_ms, std::chrono::duration<double, std::milli>(back[i] - lost_at).count());
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> counts{4, 8, 16};
  int rounds = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--workers" && i + 1 < argc) {
      counts.clear();
      std::string list = argv[++i];
      for (std::size_t at = 0; at <= list.size();) {
        const std::size_t comma = std::min(list.find(',', at), list.size());
        counts.push_back(std::atoi(list.substr(at, comma - at).c_str()));
        at = comma + 1;
      }
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: mwstrat_bench_shrink [--workers 4,8,16] [--rounds R]\n");
      return 2;
    }
  }
  for (const int n : counts) {
    if (n < 2 || rounds < 1) {
      std::fprintf(stderr, "mwstrat_bench_shrink: need at least 2 workers and 1 round\n");
      return 2;
    }
    std::vector<round_times> all;
    for (int r = 0; r < rounds; ++r) all.push_back(one_round(n));
    const auto pick = [&](auto field, double q) {
      std::vector<double> v;
      for (const auto& t : all) v.push_back(t.*field);
      std::sort(v.begin(), v.end());
      return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5))];
    };
    std::printf("shrink workers %d rounds %d: detect p50 %.1f ms, ring p50 %.1f ms, total p50 %.1f p99 %.1f max "
                "%.1f ms\n",
                n, rounds, pick(&round_times::detect_ms, 0.5), pick(&round_times::ring_ms, 0.5),
                pick(&round_times::total_ms, 0.5), pick(&round_times::total_ms, 0.99),
                pick(&round_times::total_ms, 1.0));
    std::fflush(stdout);
  }
  return 0;
}
