#pragma once
// Liveness checks shared by the collective suite and its Release-only suite: real ring processes on 127.0.0.1.

#include "process.hpp"

#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

namespace mwstrat::test {

// A rank alternately stopped and continued every 2 s is alive but slow: never declared lost (5 s liveness timeout),
// the job finishes with the right results. Returns the stop/continue cycles it went through.
inline int stopped_and_continued_finishes(int steps) {
  using namespace std::chrono_literals;
  ring_run ring(3, "steps", {"steps=" + std::to_string(steps), "compute_ms=100", "timeout_ms=60000"});
  EXPECT_TRUE(wait_for_output(ring.workers[1], "ready", 30s)) << ring.report();
  int cycles = 0;
  const auto limit = std::chrono::steady_clock::now() + 5min;
  while (!ring.all_exited() && std::chrono::steady_clock::now() < limit) {
    ::kill(ring.workers[1].pid, SIGSTOP);
    std::this_thread::sleep_for(2s);
    ::kill(ring.workers[1].pid, SIGCONT);
    ++cycles;
    for (int i = 0; i < 200 && !ring.all_exited(); ++i) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(ring.wait_all(30s)) << ring.report();
  for (const auto& w : ring.workers) {
    EXPECT_EQ(w.exit_code, 0) << ring.report();
    EXPECT_NE(w.stdout_text().find("steps=" + std::to_string(steps) + "\nOK"), std::string::npos) << ring.report();
  }
  std::printf("[ liveness ] %d steps, rank 1 stopped for 2 s then continued for 2 s %d times: finished\n", steps, cycles);
  return cycles;
}

}  // namespace mwstrat::test
