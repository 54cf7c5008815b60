// mwstrat-launch leaves nothing running, run for real with shell workers: what a worker started in its process group
// is ended with it, and a launcher that is hung up on or killed outright takes its workers with it. Each worker
// writes the pids to watch into files; every wait is bounded.
#include <support/process.hpp>
#include <tools/launcher_path.hpp>
#include <support/temp_dir.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace launch_orphans_test {

using namespace std::chrono_literals;

using mwstrat::test::launcher;

// A worker script; `$i` is its index, from TF_CONFIG.
std::string write_worker(const mwstrat::test::temp_dir& dir, const std::string& body) {
  const std::string path = (dir / "worker.sh").string();
  std::ofstream(path) << "i=${TF_CONFIG##*\\\"index\\\": }; i=${i%%\\}*}\n" << body << "\n";
  return path;
}

// Running and not a zombie: an orphan that died waits as a zombie until whoever inherited it reaps it.
bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z' && line[paren + 2] != 'X';
}

bool gone_within(pid_t pid, std::chrono::milliseconds limit) {
  const auto give_up = std::chrono::steady_clock::now() + limit;
  while (running(pid) && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(20ms);
  return !running(pid);
}

// The pid a worker wrote into `path` (written to a temporary name and renamed, so never half there), waited for.
std::optional<pid_t> read_pid(const std::filesystem::path& path, std::chrono::milliseconds limit) {
  const auto give_up = std::chrono::steady_clock::now() + limit;
  for (;;) {
    pid_t pid = 0;
    if (std::ifstream(path) >> pid && pid > 0) return pid;
    if (std::chrono::steady_clock::now() >= give_up) return std::nullopt;
    std::this_thread::sleep_for(20ms);
  }
}

// Kills, at the end of a test, what a failing launcher left running (a sleep of 60 s at most otherwise), with its
// group when it leads one.
struct reaper {
  std::vector<pid_t> pids;
  ~reaper() {
    for (const pid_t pid : pids) {
      if (!running(pid)) continue;
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
    }
  }
};

// The launcher in the background, its output in `log`.
pid_t spawn_launcher(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> line = {launcher};
  line.insert(line.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : line) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int error = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  return error == 0 ? pid : -1;
}

// The launcher's wait status, or nullopt when it did not end within `limit` (it is then killed).
std::optional<int> wait_for(pid_t pid, std::chrono::milliseconds limit) {
  const auto give_up = std::chrono::steady_clock::now() + limit;
  for (int status = 0;; std::this_thread::sleep_for(20ms)) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    if (std::chrono::steady_clock::now() >= give_up) break;
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return std::nullopt;
}

std::string read_all(const std::filesystem::path& path) {
  std::ostringstream text;
  text << std::ifstream(path).rdbuf();
  return text.str();
}

// Workers that stop on SIGTERM as mwstrat workers do (exit 75), once their pid files are written; 60 s at most.
const std::string patient_worker =
    "trap 'echo got TERM; exit 75' TERM\n"
    "echo $$ > \"$0.$i.tmp\" && mv \"$0.$i.tmp\" \"$0.$i\"\n"
    "n=0; while [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done; exit 9";

// Starts two patient workers under the launcher and returns their pids (nullopt when they did not start in time).
std::optional<std::vector<pid_t>> start_patient_workers(const mwstrat::test::temp_dir& dir, pid_t& launched,
                                                        reaper& cleanup) {
  const std::string script = write_worker(dir, patient_worker);
  launched = spawn_launcher({"-n", "2", "--grace-ms", "2000", "--", "sh", script}, (dir / "log").string());
  if (launched < 0) return std::nullopt;
  std::vector<pid_t> pids;
  for (int i = 0; i < 2; ++i) {
    const auto pid = read_pid(script + "." + std::to_string(i), 20s);
    if (!pid) return std::nullopt;
    cleanup.pids.push_back(*pid);
    pids.push_back(*pid);
  }
  return pids;
}

TEST(launch_orphans, a_failed_workers_background_child_is_ended_and_does_not_hold_the_launcher) {
  mwstrat::test::temp_dir dir("mwstrat-launch");
  // Worker 0 starts a child that keeps its output pipe open, and fails; worker 1 would run for 30 s.
  const std::string script = write_worker(
      dir, "case $i in 0) sleep 30 & echo $! > \"$0.child.tmp\"; mv \"$0.child.tmp\" \"$0.child\"; exit 3;; esac\n"
           "exec sleep 30");
  const auto r = mwstrat::test::run(launcher + " -n 2 --grace-ms 2000 -- sh " + script, 20);
  const auto child = read_pid(script + ".child", 1s);
  ASSERT_TRUE(child) << r.output;
  reaper cleanup{{*child}};
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("worker 0 (pid"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 10.0) << r.output;
  EXPECT_TRUE(gone_within(*child, 3s)) << "the failed worker's background child outlived it\n" << r.output;
}

TEST(launch_orphans, a_background_child_that_ignores_sigterm_is_killed_after_the_grace_period) {
  mwstrat::test::temp_dir dir("mwstrat-launch");
  const std::string script = write_worker(
      dir, "(trap '' TERM; exec sleep 30) & echo $! > \"$0.child.tmp\"; mv \"$0.child.tmp\" \"$0.child\"; exit 3");
  const auto r = mwstrat::test::run(launcher + " -n 1 --grace-ms 300 -- sh " + script, 20);
  const auto child = read_pid(script + ".child", 1s);
  ASSERT_TRUE(child) << r.output;
  reaper cleanup{{*child}};
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_LT(r.seconds, 10.0) << r.output;
  EXPECT_TRUE(gone_within(*child, 3s)) << r.output;
}

TEST(launch_orphans, a_succeeding_workers_background_child_is_ended_too) {
  mwstrat::test::temp_dir dir("mwstrat-launch");
  // The child's output goes elsewhere, so only ending the group stops it; the other worker still runs meanwhile.
  const std::string script = write_worker(
      dir, "case $i in 0) sleep 30 > /dev/null 2>&1 & echo $! > \"$0.child.tmp\"; mv \"$0.child.tmp\" \"$0.child\";"
           " exit 0;; esac\nsleep 0.5");
  const auto r = mwstrat::test::run(launcher + " -n 2 -- sh " + script, 20);
  const auto child = read_pid(script + ".child", 1s);
  ASSERT_TRUE(child) << r.output;
  reaper cleanup{{*child}};
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(gone_within(*child, 3s)) << "the finished worker's background child outlived the job\n" << r.output;
}

TEST(launch_orphans, sighup_or_sigquit_to_the_launcher_is_forwarded_like_sigterm) {
  for (const int sig : {SIGHUP, SIGQUIT}) {
    SCOPED_TRACE(strsignal(sig));
    mwstrat::test::temp_dir dir("mwstrat-launch");
    reaper cleanup;
    pid_t launched = -1;
    const auto workers = start_patient_workers(dir, launched, cleanup);
    ASSERT_TRUE(workers) << read_all(dir / "log");
    ::kill(launched, sig);
    const auto status = wait_for(launched, 15s);
    const std::string log = read_all(dir / "log");
    ASSERT_TRUE(status) << "the launcher did not end\n" << log;
    // As for SIGTERM: the workers stopped for preemption, and so does the launcher.
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 75) << "wait status " << *status << "\n" << log;
    EXPECT_NE(log.find(std::string(strsignal(sig)) + "; forwarding SIGTERM to the workers"), std::string::npos) << log;
    for (const pid_t pid : *workers) EXPECT_TRUE(gone_within(pid, 5s)) << "worker pid " << pid << "\n" << log;
  }
}

// Started with SIGHUP ignored (nohup), the launcher leaves it ignored: a hangup ends neither it nor its workers.
TEST(launch_orphans, a_launcher_started_under_nohup_ignores_sighup_and_so_do_its_workers) {
  mwstrat::test::temp_dir dir("mwstrat-launch");
  reaper cleanup;
  const std::string script =
      write_worker(dir, "echo $$ > \"$0.$i.tmp\" && mv \"$0.$i.tmp\" \"$0.$i\"\nsleep 1.5\necho finished $i");
  struct sigaction ignore{}, before{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGHUP, &ignore, &before);  // inherited by the launcher, as nohup leaves it
  const pid_t launched = spawn_launcher({"-n", "2", "--", "sh", script}, (dir / "log").string());
  ::sigaction(SIGHUP, &before, nullptr);
  ASSERT_GT(launched, 0);
  cleanup.pids.push_back(launched);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(read_pid(script + "." + std::to_string(i), 20s)) << read_all(dir / "log");
  ::kill(launched, SIGHUP);
  for (int i = 0; i < 2; ++i) {
    const auto worker = read_pid(script + "." + std::to_string(i), 1s);
    if (worker) ::kill(*worker, SIGHUP);
  }
  const auto status = wait_for(launched, 20s);
  const std::string log = read_all(dir / "log");
  ASSERT_TRUE(status) << "the launcher did not end\n" << log;
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "wait status " << *status << "\n" << log;
  EXPECT_NE(log.find("finished 0"), std::string::npos) << log;
  EXPECT_NE(log.find("finished 1"), std::string::npos) << log;
}

TEST(launch_orphans, a_launcher_killed_outright_takes_its_workers_with_it) {
  mwstrat::test::temp_dir dir("mwstrat-launch");
  reaper cleanup;
  pid_t launched = -1;
  const auto workers = start_patient_workers(dir, launched, cleanup);
  ASSERT_TRUE(workers) << read_all(dir / "log");
  ::kill(launched, SIGKILL);
  ASSERT_TRUE(wait_for(launched, 5s));
  for (const pid_t pid : *workers) {
    EXPECT_TRUE(gone_within(pid, 5s)) << "worker pid " << pid << " outlived its launcher\n" << read_all(dir / "log");
  }
}

}  // namespace launch_orphans_test
