#pragma once
// Ring ranks as threads of one test process, on free loopback ports: for tests of what runs over a ring (gradient
// synchronisation, fit) that need no separate processes.

#include <mwstrat/collective/ring/ring_collective.hpp>

#include <support/process.hpp>

#include <chrono>
#include <exception>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace mwstrat::test {

/// The options of rank `r` of a ring on loopback `ports`: every rank's address and this rank, 20 s for start-up and
/// for each operation, no log.
inline ring_options loopback_ring_options(const std::vector<int>& ports, int r) {
  using namespace std::chrono_literals;
  ring_options o;
  for (int port : ports) o.addresses.push_back("127.0.0.1:" + std::to_string(port));
  o.rank = r;
  o.connect_timeout = 20s;
  o.op_timeout = 20s;
  o.log = [](std::string_view) {};
  return o;
}

/// Makes `n` ring ranks, each on a thread of its own, and runs `body(ring)` on each. The options are
/// `loopback_ring_options`; `configure(options)` may change them before the ring starts. Rethrows the first rank's
/// exception (by rank) once every thread has ended.
template <class Configure, class Body>
void on_ring_threads(int n, Configure&& configure, Body&& body) {
  const auto ports = free_ports(n);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        ring_options o = loopback_ring_options(ports, r);
        configure(o);
        ring_collective ring(o);
        body(ring);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace mwstrat::test
