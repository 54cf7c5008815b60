// A program with no recovery wiring of its own (plain_fit_worker.cpp: `fit` with default options) under
// `mwstrat-launch --replace-lost`: the launcher's protocol is the library's (cluster/launcher_environment.hpp), so a
// lost worker is replaced alone, the survivors hand it the training state from memory, and the result is the
// uninterrupted run's, bit for bit.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace launch_recovery_test {

struct run_result {
  int status;
  std::string output;
};

run_result launch(const std::string& args) {
  const std::string command = "timeout 120 " MWSTRAT_LAUNCH " " + args + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  while (pipe && std::fgets(buf.data(), buf.size(), pipe)) out += buf.data();
  const int status = pipe ? ::pclose(pipe) : -1;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// The line "rank 0 done: parameter sum X" (X), or "" when absent.
std::string chief_result(const std::string& output) {
  const std::string key = "rank 0 done: parameter sum ";
  const auto at = output.find(key);
  if (at == std::string::npos) return "";
  return output.substr(at + key.size(), output.find('\n', at) - at - key.size());
}

TEST(launch_recovery, a_program_without_wiring_of_its_own_gets_in_memory_recovery_from_the_launcher) {
  const auto clean = launch("-n 3 --max-restarts 1 --replace-lost -- " MWSTRAT_PLAIN_FIT_WORKER);
  ASSERT_EQ(clean.status, 0) << clean.output;
  const std::string expected = chief_result(clean.output);
  ASSERT_FALSE(expected.empty()) << clean.output;

  const auto r = launch("-n 3 --max-restarts 1 --replace-lost -- " MWSTRAT_PLAIN_FIT_WORKER " 1 5");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 kills itself after global step 5"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("starting a replacement (restart 1 of 1, ring generation 1)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[mwstrat.recovery] rank 0: rank 1 ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("'s memory: "), std::string::npos) << r.output;  // the state came from a survivor
  EXPECT_EQ(r.output.find("restarting the group"), std::string::npos) << r.output;
  EXPECT_EQ(chief_result(r.output), expected) << r.output;  // the uninterrupted run's parameters
}

}  // namespace launch_recovery_test
