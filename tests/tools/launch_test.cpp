// mwstrat-launch, run for real: it starts shell workers, and the tests read what it printed and returned.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>

namespace launch_test {

struct run_result {
  int status;
  std::string output;
  double seconds;
};

// Runs the launcher with `args` under `timeout` (bounded: a hung launcher fails the test, never blocks it).
run_result launch(const std::string& args) {
  const std::string command = "timeout 60 " MWSTRAT_LAUNCH " " + args + " 2>&1";
  const auto started = std::chrono::steady_clock::now();
  FILE* pipe = ::popen(command.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  while (pipe && std::fgets(buf.data(), buf.size(), pipe)) out += buf.data();
  const int status = pipe ? ::pclose(pipe) : -1;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()};
}

TEST(launch, gives_each_worker_its_tf_config_and_prefixes_output) {
  const auto r = launch("-n 3 --base-port 45100 -- sh -c 'echo \"$TF_CONFIG\"'");
  EXPECT_EQ(r.status, 0) << r.output;
  for (int i = 0; i < 3; ++i) {
    const std::string expected =
        "[worker " + std::to_string(i) +
        "] {\"cluster\": {\"worker\": [\"127.0.0.1:45100\", \"127.0.0.1:45101\", \"127.0.0.1:45102\"]}, \"task\": "
        "{\"type\": \"worker\", \"index\": " + std::to_string(i) + "}}\n";
    EXPECT_NE(r.output.find(expected), std::string::npos) << r.output;
  }
}

TEST(launch, a_failing_worker_ends_the_others_and_its_code_is_returned) {
  // Worker 1 fails at once; worker 0 would sleep for 50 s, but is ended.
  const auto r = launch("-n 2 --grace-ms 500 -- sh -c 'case \"$TF_CONFIG\" in *'\"'\"'\"index\": 1'\"'\"'*) exit 7;; "
                        "esac; exec sleep 50'");
  EXPECT_EQ(r.status, 7) << r.output;
  EXPECT_NE(r.output.find("worker 1 (pid"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exited with status 7; ending the other workers"), std::string::npos);
  EXPECT_LT(r.seconds, 30.0);
}

TEST(launch, a_stopped_worker_is_continued_so_that_it_ends_at_once_not_after_the_grace_period) {
  // Worker 0 stops itself (a hung machine); worker 1 fails a moment later. Worker 0's SIGTERM would stay pending
  // until the SIGKILL 30 s later; the launcher continues it, so its TERM trap runs now.
  const auto r = launch("-n 2 --grace-ms 30000 -- sh -c 'case \"$TF_CONFIG\" in *'\"'\"'\"index\": 1'\"'\"'*) "
                        "sleep 0.5; exit 7;; esac; trap \"echo got TERM; exit 3\" TERM; kill -STOP $$; exec sleep 50'");
  EXPECT_EQ(r.status, 7) << r.output;
  EXPECT_NE(r.output.find("[worker 0] got TERM"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 15.0) << r.output;
}

TEST(launch, restarts_the_group_until_it_succeeds) {
  // Each worker fails on the first attempt and succeeds on the second.
  const auto r = launch("-n 2 --max-restarts 2 -- sh -c '[ \"$MWSTRAT_LAUNCH_ATTEMPT\" = 1 ] && echo done || exit 5'");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("restarting the group (restart 1 of 2)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[worker 0] done"), std::string::npos);
  EXPECT_NE(r.output.find("[worker 1] done"), std::string::npos);
}

TEST(launch, gives_up_after_max_restarts_with_the_failure_code) {
  const auto r = launch("-n 1 --max-restarts 1 -- sh -c 'exit 4'");
  EXPECT_EQ(r.status, 4);
  EXPECT_NE(r.output.find("giving up after 1 restart(s)"), std::string::npos) << r.output;
}

TEST(launch, a_killed_worker_reports_the_signal) {
  const auto r = launch("-n 1 -- sh -c 'kill -9 $$'");
  EXPECT_EQ(r.status, 128 + 9) << r.output;
  EXPECT_NE(r.output.find("was killed by signal 9"), std::string::npos) << r.output;
}

// --replace-lost: worker 1 fails in the first generation and is started again alone, in generation 1; worker 0 runs
// once, from start to end.
TEST(launch, replace_lost_starts_a_failed_worker_again_alone_in_the_next_generation) {
  const auto r = launch("-n 2 --max-restarts 2 --replace-lost -- sh -c 'echo \"gen=$MWSTRAT_RECOVERY_GENERATION "
                        "on=$MWSTRAT_REPLACE_LOST\"; case \"$TF_CONFIG\" in *\"index\\\": 1\"*) "
                        "[ \"$MWSTRAT_RECOVERY_GENERATION\" = 0 ] && exit 3;; esac; sleep 1; echo done'");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("exited with status 3; starting a replacement (restart 1 of 2, ring generation 1)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[worker 1] gen=1 on=1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[worker 1] done"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[worker 0] gen=0 on=1"), std::string::npos) << r.output;
  std::size_t pid_lines = 0;
  const std::string pid_line = "worker 0: pid";
  for (std::size_t at = r.output.find(pid_line); at != std::string::npos; at = r.output.find(pid_line, at + 1)) {
    ++pid_lines;
  }
  EXPECT_EQ(pid_lines, 1u) << "worker 0 never restarted\n" << r.output;
  EXPECT_EQ(r.output.find("restarting the group"), std::string::npos) << r.output;
}

// A worker that stops never exits: a survivor's "lost RANK GENERATION" report makes the launcher kill it and start its
// replacement.
TEST(launch, replace_lost_ends_a_stopped_worker_on_a_survivors_report) {
  const auto r = launch("-n 2 --max-restarts 1 --replace-lost -- sh -c 'case \"$TF_CONFIG\" in "
                        "*\"index\\\": 1\"*) [ \"$MWSTRAT_RECOVERY_GENERATION\" = 0 ] && kill -STOP $$; "
                        "echo replaced;; "
                        "*) sleep 0.5; echo \"lost 1 0\" >&$MWSTRAT_LAUNCH_REPORT_FD; sleep 1; echo done;; esac'");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("the survivors report worker 1 (pid "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("killed by signal 9 (Killed); starting a replacement (restart 1 of 1, ring generation 1)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[worker 1] replaced"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[worker 0] done"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 20.0) << r.output;
}

// --max-workers: worker 1 fails at once and a joiner takes its place (MWSTRAT_JOIN set, the join addresses every
// worker has); worker 0 then reports worker 1 lost from ring 0 — its predecessor's loss, which must not end the
// joiner. Both exit 0: the job ends well.
TEST(launch, a_joiner_takes_a_failed_workers_place_and_a_loss_reported_from_an_earlier_ring_does_not_end_it) {
  const auto r = launch("-n 2 --min-workers 1 --max-workers 2 --max-restarts 1 --spare-wait 0 -- sh -c '"
                        "case \"$TF_CONFIG\" in "
                        "*\"index\\\": 1\"*) if [ -z \"$MWSTRAT_JOIN\" ]; then exit 1; fi; "
                        "echo \"joiner via $MWSTRAT_JOIN listens $MWSTRAT_JOIN_LISTEN max $MWSTRAT_MAX_WORKERS\"; "
                        "sleep 1.5; echo joiner done;; "
                        "*) sleep 0.5; echo \"lost 1 0\" >&$MWSTRAT_LAUNCH_REPORT_FD; sleep 2; echo done;; esac'");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("the job goes on without it (1 workers, --min-workers 1)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("a joiner takes worker 1's place in 0 ms (restart 1 of 1)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(a joiner)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[worker 1] joiner via 127.0.0.1:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" max 2"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("the survivors report worker 1"), std::string::npos) << "the joiner was ended\n" << r.output;
  EXPECT_NE(r.output.find("[worker 1] joiner done"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[worker 0] done"), std::string::npos) << r.output;
}

// --grow-after: one worker, and 0.3 s later a second started as a joiner in the slot after it, with a TF_CONFIG of
// both slots (its task index 1) and the join addresses; both end well.
TEST(launch, grow_after_starts_the_slots_past_n_as_joiners_later) {
  const auto r = launch("-n 1 --min-workers 1 --max-workers 2 --max-restarts 1 --grow-after 300 -- sh -c '"
                        "case \"$TF_CONFIG\" in "
                        "*\"index\\\": 1\"*) echo \"grown: $TF_CONFIG via $MWSTRAT_JOIN\"; echo joiner done;; "
                        "*) echo \"first: $TF_CONFIG\"; sleep 2; echo done;; esac'");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("the job grows to 2 workers in 300 ms (--grow-after)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("worker 1: pid"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(a joiner)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[worker 0] first: {\"cluster\": {\"worker\": [\"127.0.0.1:"), std::string::npos)
      << r.output;
  // The first worker's TF_CONFIG names its slot alone; the joiner's names both, and it is told the join addresses.
  const auto line_after = [&](const std::string& marker) {
    const auto at = r.output.find(marker);
    return at == std::string::npos ? std::string() : r.output.substr(at, r.output.find('\n', at) - at);
  };
  const auto addresses_in = [](const std::string& text) {
    int n = 0;
    for (auto at = text.find("127.0.0.1:"); at != std::string::npos; at = text.find("127.0.0.1:", at + 1)) ++n;
    return n;
  };
  const std::string first_line = line_after("[worker 0] first: ");
  EXPECT_EQ(addresses_in(first_line), 1) << first_line;
  const std::string grown_line = line_after("[worker 1] grown: ");
  const auto via = grown_line.find(" via ");
  ASSERT_NE(via, std::string::npos) << r.output;
  EXPECT_EQ(addresses_in(grown_line.substr(0, via)), 2) << grown_line;
  EXPECT_NE(grown_line.find("\"index\": 1}"), std::string::npos) << grown_line;
  EXPECT_EQ(addresses_in(grown_line.substr(via)), 2) << "both slots' join addresses: " << grown_line;
  EXPECT_NE(r.output.find("[worker 1] joiner done"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[worker 0] done"), std::string::npos) << r.output;
}

TEST(launch, rejects_bad_arguments_clearly) {
  const std::pair<std::string, std::string> elastic[] = {
      {"-n 2 --max-workers 2 -- true", "--max-workers needs --min-workers K"},
      {"-n 2 --min-workers 1 --max-workers 2 -- true", "--max-workers needs --max-restarts J"},
      {"-n 3 --min-workers 1 --max-workers 2 --max-restarts 1 -- true", "--max-workers: fewer than the job's 3 workers"},
      {"-n 2 --join-delay 5 -- true", "--join-delay, --spare-wait and --grow-after need --max-workers"},
      {"-n 2 --min-workers 1 --max-workers 2 --max-restarts 1 --grow-after 0 -- true",
       "--grow-after: --max-workers 2 leaves no slot past the -n 2 workers to grow into"},
      {"--hosts a:1,b:1 --min-workers 1 --max-workers 3 --max-restarts 1 --grow-after 0 -- true",
       "--grow-after with --hosts or --hostfile needs --grow-hosts NAME:N,..."},
  };
  for (const auto& [args, expected] : elastic) {
    const auto bad = launch(args);
    EXPECT_EQ(bad.status, 2) << args << "\n" << bad.output;
    EXPECT_NE(bad.output.find(expected), std::string::npos) << args << "\n" << bad.output;
  }
  const auto replace = launch("-n 2 --replace-lost -- true");
  EXPECT_EQ(replace.status, 2);
  EXPECT_NE(replace.output.find("--replace-lost needs --max-restarts K"), std::string::npos) << replace.output;
  EXPECT_EQ(launch("-n 0 -- true").status, 2);
  const auto r = launch("-n 2 --base-port 70000 -- true");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--base-port: '70000' is not a number in [1, 65535]"), std::string::npos) << r.output;
  EXPECT_NE(launch("-n 2").output.find("no program given after --"), std::string::npos);
  EXPECT_EQ(launch("-n 1 -- /nonexistent/program").status, 127);
}

}  // namespace launch_test
