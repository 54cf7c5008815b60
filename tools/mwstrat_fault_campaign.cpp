// mwstrat-fault-campaign --faults K --model FILE [options] -- COMMAND [ARGS...]
//
// Runs a training job (COMMAND: normally `mwstrat-launch -n N --max-restarts R -- PROGRAM ...`) twice: once without
// faults (the reference: its wall time and its final model), then under a seeded schedule of K faults, and reports
// the faults injected and survived, the time lost per fault (the extra wall time over the reference, divided by
// the faults) and whether the final model is byte-identical to the reference's. See docs/fault_campaign.md.
//
// Faults (--kinds): kill (SIGKILL of a worker), stop (SIGSTOP, then SIGKILL after --stop-hold seconds: a hung
// worker), term (SIGTERM: a preemption, the worker's exit-75 path), cut (scripts/simhosts `cut` of a simulated
// host's link, `restore` after --cut-hold seconds) and disk (the file system under --disk filled up until the job's
// save fails, then freed).
//
// The workers are found from the launcher's own lines "mwstrat-launch: worker I: pid P" (each worker leads its own
// process group, which is what is signalled). The schedule is time-based: fault i comes a seeded random gap after
// the job recovered from fault i-1 (the launcher started a new group, or the link/disk was given back); gaps are
// uniform in [--gap-min, --gap-max], by default 0.2 and 0.8 times the reference's wall time / (K + 1), so the
// faults are spread over the first half of the job or so (a loaded machine's timing varies; K must all land).
// The schedule (kinds, gap draws, worker draws) is a pure function of --seed.
//
// --replace-lost passes --replace-lost to the launcher (COMMAND must then start with mwstrat-launch): a killed or
// stopped worker is replaced alone and gets the training state from the survivors' memory (in-memory recovery)
// instead of the whole group restarting from its backup. A fault then counts as recovered once the state has been
// handed over (the source's "[mwstrat.recovery] ... sent from" line), or once a new group started (the survivors
// gave up waiting).
//
// --elastic: the job is elastic (COMMAND is `mwstrat-launch ... --min-workers K [--max-workers N --join-delay MS]`):
// a lost worker is not replaced and the survivors shrink, a joiner may take its place later. A fault counts as
// recovered once the chief trains again ("[mwstrat.recovery] ... training again on"), the next one waits until every
// joiner the launcher started has joined, and the report adds the goodput (the fault-free run's wall time over the
// campaign's: training steps per second, since both train the same steps) and the p50/p99 time from a loss to
// training again. The final model is compared up to the order of additions (a shrunk or grown job sums in another
// order, and over a long run a ReLU near zero may flip): its largest parameter difference relative to the largest
// parameter is reported, not judged.
//
// Exit status: 0 when all K faults were injected, every one survived and the model is byte-identical (--elastic: the
// job finished with a model); 1 when not; 2 for a usage error.
#include <mwstrat/checkpoint/training_state.hpp>
#include <mwstrat/version.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

const std::vector<std::string> all_kinds = {"kill", "stop", "term", "cut", "disk"};

struct options {
  int faults = -1;
  std::uint64_t seed = 1;
  std::vector<std::string> kinds;  // empty: kill, stop, term (+ disk with --disk, + cut with --cut-hosts)
  std::string model;
  std::string reference_model;
  std::optional<double> reference_seconds;
  std::vector<std::string> clean;
  std::string work_dir = "fault-campaign";
  std::optional<double> gap_min, gap_max;
  double stop_hold = 3, cut_hold = 3, disk_hold = 30;
  std::string disk;
  std::string disk_tmpfs;  // size, e.g. 64m
  std::string simhosts_set, simhosts_script;
  std::vector<std::string> cut_hosts;
  std::optional<double> timeout;
  bool print_schedule = false;
  bool replace_lost = false;
  bool elastic = false;  // --elastic: the job shrinks and grows instead of restarting (see the file comment)
  std::vector<std::string> command;
};

[[noreturn]] void usage(const std::string& problem) {
  if (!problem.empty()) std::fprintf(stderr, "mwstrat-fault-campaign: %s\n", problem.c_str());
  std::fprintf(stderr,
               "usage: mwstrat-fault-campaign --faults K --model FILE [--seed S] [--kinds kill,stop,term,cut,disk]\n"
               "  [--reference-model FILE --reference-seconds T] [--clean DIR]... [--work-dir DIR]\n"
               "  [--gap-min S] [--gap-max S] [--stop-hold S] [--timeout S] [--replace-lost | --elastic]\n"
               "  [--disk DIR [--disk-tmpfs SIZE] [--disk-hold S]]\n"
               "  [--simhosts SET --cut-hosts H1,H2... [--simhosts-script PATH] [--cut-hold S]]\n"
               "  -- COMMAND [ARGS...]\n"
               "       mwstrat-fault-campaign --faults K [--seed S] [--kinds ...] --print-schedule\n");
  std::exit(2);
}

double parse_seconds(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || errno != 0 || *end != '\0' || !(v >= 0) || v > 1e7) {
    usage(flag + ": '" + text + "' is not a number of seconds");
  }
  return v;
}

std::uint64_t parse_count(const std::string& flag, const std::string& text, std::uint64_t high) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || text[0] == '-' || errno != 0 || *end != '\0' || v > high) {
    usage(flag + ": '" + text + "' is not a whole number in [0, " + std::to_string(high) + "]");
  }
  return v;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::size_t from = 0;
  while (from <= text.size()) {
    const std::size_t comma = std::min(text.find(',', from), text.size());
    parts.push_back(text.substr(from, comma - from));
    from = comma + 1;
  }
  return parts;
}

options parse(int argc, char** argv) {
  options o;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--") { ++i; break; }
    if (a == "--faults") o.faults = static_cast<int>(parse_count(a, value(), 100000));
    else if (a == "--seed") o.seed = parse_count(a, value(), UINT64_MAX);
    else if (a == "--kinds") o.kinds = split(value());
    else if (a == "--model") o.model = value();
    else if (a == "--reference-model") o.reference_model = value();
    else if (a == "--reference-seconds") o.reference_seconds = parse_seconds(a, value());
    else if (a == "--clean") o.clean.push_back(value());
    else if (a == "--work-dir") o.work_dir = value();
    else if (a == "--gap-min") o.gap_min = parse_seconds(a, value());
    else if (a == "--gap-max") o.gap_max = parse_seconds(a, value());
    else if (a == "--stop-hold") o.stop_hold = parse_seconds(a, value());
    else if (a == "--cut-hold") o.cut_hold = parse_seconds(a, value());
    else if (a == "--disk-hold") o.disk_hold = parse_seconds(a, value());
    else if (a == "--disk") o.disk = value();
    else if (a == "--disk-tmpfs") o.disk_tmpfs = value();
    else if (a == "--simhosts") o.simhosts_set = value();
    else if (a == "--simhosts-script") o.simhosts_script = value();
    else if (a == "--cut-hosts") o.cut_hosts = split(value());
    else if (a == "--timeout") o.timeout = parse_seconds(a, value());
    else if (a == "--print-schedule") o.print_schedule = true;
    else if (a == "--replace-lost") o.replace_lost = true;
    else if (a == "--elastic") o.elastic = true;
    else if (a == "--version") { std::printf("mwstrat-fault-campaign %s\n", mwstrat::version_string); std::exit(0); }
    else if (a == "-h" || a == "--help") usage("");
    else usage("unknown option '" + a + "'");
  }
  for (; i < argc; ++i) o.command.emplace_back(argv[i]);

  if (o.faults < 0) usage("--faults K is required");
  if (o.elastic && o.replace_lost) usage("--elastic and --replace-lost exclude each other");
  if (o.elastic && (o.command.empty() || o.command[0].find("mwstrat-launch") == std::string::npos ||
                    std::find(o.command.begin(), o.command.end(), "--min-workers") == o.command.end())) {
    usage("--elastic: the job must be mwstrat-launch ... --min-workers K (COMMAND starts with it)");
  }
  if (o.replace_lost) {
    if (o.command.empty() || fs::path(o.command[0]).filename() != "mwstrat-launch") {
      usage("--replace-lost: the job must be mwstrat-launch (COMMAND starts with it), which gets --replace-lost");
    }
    o.command.insert(o.command.begin() + 1, "--replace-lost");
  }
  if (o.kinds.empty() && o.elastic) {
    o.kinds = {"kill", "stop"};  // a preemption (term) stops every worker: that is a restart, not a shrink
    if (!o.cut_hosts.empty()) o.kinds.push_back("cut");
  }
  if (o.kinds.empty()) {
    o.kinds = {"kill", "stop", "term"};
    if (!o.disk.empty()) o.kinds.push_back("disk");
    if (!o.cut_hosts.empty()) o.kinds.push_back("cut");
  }
  for (const auto& k : o.kinds) {
    if (std::find(all_kinds.begin(), all_kinds.end(), k) == all_kinds.end()) {
      usage("--kinds: '" + k + "' is not one of kill, stop, term, cut, disk");
    }
  }
  if (o.gap_min && o.gap_max && *o.gap_min > *o.gap_max) usage("--gap-min is larger than --gap-max");
  if (o.print_schedule) return o;

  const bool wants_cut = std::find(o.kinds.begin(), o.kinds.end(), "cut") != o.kinds.end();
  const bool wants_disk = std::find(o.kinds.begin(), o.kinds.end(), "disk") != o.kinds.end();
  if (o.command.empty()) usage("no job given after --");
  if (o.model.empty()) usage("--model FILE (the final model the job writes) is required");
  if (o.reference_seconds && o.reference_model.empty()) usage("--reference-seconds needs --reference-model");
  if (!o.reference_model.empty() && !o.reference_seconds) usage("--reference-model needs --reference-seconds");
  if (wants_cut && (o.simhosts_set.empty() || o.cut_hosts.empty())) {
    usage("--kinds cut needs --simhosts SET and --cut-hosts H1,...");
  }
  if (wants_disk && o.disk.empty()) usage("--kinds disk needs --disk DIR (the job's backup folder)");
  if (!o.disk_tmpfs.empty() && o.disk.empty()) usage("--disk-tmpfs needs --disk DIR");
  if (o.simhosts_script.empty()) {
    const char* env = std::getenv("MWSTRAT_SIMHOSTS");
    o.simhosts_script = env && *env ? env : "simhosts";
  }
  return o;
}

// ---- The schedule: a pure function of the seed -------------------------------------------------------------------

// splitmix64: a small generator whose output is the same on every platform and standard library.
struct splitmix64 {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

struct planned_fault {
  std::string kind;
  double gap_draw;     // the gap is gap_min + gap_draw * (gap_max - gap_min)
  double target_draw;  // the worker (or host) is floor(target_draw * count)
};

std::vector<planned_fault> make_schedule(const options& o) {
  splitmix64 rng{o.seed};
  std::vector<planned_fault> plan;
  for (int i = 0; i < o.faults; ++i) {
    const auto kind = o.kinds[static_cast<std::size_t>(rng.next() % o.kinds.size())];
    const double gap = rng.uniform();
    const double target = rng.uniform();
    plan.push_back({kind, gap, target});
  }
  return plan;
}

std::size_t pick(double draw, std::size_t count) {
  return std::min(count - 1, static_cast<std::size_t>(draw * static_cast<double>(count)));
}

// ---- Running the job -----------------------------------------------------------------------------------------------

volatile sig_atomic_t interrupted = 0;
void on_signal(int sig) { interrupted = sig; }

clock_type::duration seconds(double s) {
  return std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(s));
}

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

struct fault_record {
  std::string kind;
  std::string target;    // "worker 1 (pid 123)", "host h2", the disk folder
  double at = 0;         // seconds since the run started
  bool recovered = false;
  double recovery = 0;   // seconds from the fault to the job's recovery
  std::string detail;
  bool resumed_seen = false;
};

struct run_result {
  int status = -1;  // the job's exit status (128 + signal), or -1 when it timed out
  double seconds = 0;
  int groups = 0;   // worker groups the launcher started
  int replacements = 0;  // workers the launcher replaced alone (--replace-lost)
  std::vector<fault_record> faults;
};

// A worker group that mwstrat-launch started: pids (= process group ids) by worker index.
struct group {
  std::vector<pid_t> pids;
};

// Whether `pid` still leads a process group (a worker not yet reaped); guards against signalling a reused pid.
bool leads_group(pid_t pid) { return pid > 0 && ::getpgid(pid) == pid; }

int run_shell(const std::vector<std::string>& argv) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::_Exit(127);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

const std::string filler_name = ".mwstrat-fault-campaign-filler";

// Fills the file system under `dir` with one file; returns the bytes written.
std::uint64_t fill_disk(const std::string& dir) {
  const std::string path = (fs::path(dir) / filler_name).string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return 0;
  std::vector<char> block(1 << 20, 'x');
  std::uint64_t written = 0;
  for (std::size_t size = block.size(); size >= 512;) {
    const ssize_t n = ::write(fd, block.data(), size);
    if (n > 0) { written += static_cast<std::uint64_t>(n); continue; }
    if (n < 0 && errno == EINTR) continue;
    size /= 2;  // ENOSPC: finish the last blocks with smaller writes
  }
  ::close(fd);
  return written;
}

void free_disk(const std::string& dir) {
  std::error_code ignored;
  fs::remove(fs::path(dir) / filler_name, ignored);
}

class job_runner {
 public:
  job_runner(const options& o, std::vector<planned_fault> plan, double gap_min, double gap_max, double limit,
             const std::string& log_path)
      : o_(o), plan_(std::move(plan)), gap_min_(gap_min), gap_max_(gap_max), limit_(limit), log_(log_path) {}

  run_result run() {
    int fds[2];
    if (::pipe(fds) != 0) { std::perror("mwstrat-fault-campaign: pipe"); std::exit(1); }
    start_ = clock_type::now();
    job_ = ::fork();
    if (job_ < 0) { std::perror("mwstrat-fault-campaign: fork"); std::exit(1); }
    if (job_ == 0) {
      ::setpgid(0, 0);
      ::dup2(fds[1], STDOUT_FILENO);
      ::dup2(fds[1], STDERR_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      std::vector<char*> argv;
      for (const auto& a : o_.command) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      std::fprintf(stderr, "mwstrat-fault-campaign: cannot run '%s': %s\n", argv[0], std::strerror(errno));
      std::_Exit(127);
    }
    ::setpgid(job_, job_);
    ::close(fds[1]);
    out_ = fds[0];
    ::fcntl(out_, F_SETFL, ::fcntl(out_, F_GETFL) | O_NONBLOCK);
    recovered_at_ = start_;
    if (!plan_.empty()) schedule_next();

    std::optional<int> status;
    bool timed_out = false;
    while (!status || out_ >= 0) {
      if (out_ >= 0) {
        pollfd p{out_, POLLIN, 0};
        ::poll(&p, 1, 50);
        read_output();
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!status) {
        int s = 0;
        if (::waitpid(job_, &s, WNOHANG) == job_) status = WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s);
      }
      if (!status) step_faults();
      if (!status && (seconds_since(start_) > limit_ || interrupted)) {
        if (!timed_out && interrupted) std::fprintf(stderr, "mwstrat-fault-campaign: interrupted; killing the job\n");
        if (!timed_out && !interrupted) {
          std::fprintf(stderr, "mwstrat-fault-campaign: the run passed its limit of %.0f s (--timeout); killing the "
                       "job\n", limit_);
        }
        timed_out = true;
        kill_everything();
      }
      // The job exited but a worker it left behind keeps the pipe open: stop reading after a bounded wait.
      if (status && out_ >= 0 && ++drain_ticks_ > 200) { ::close(out_); out_ = -1; }
    }
    give_back_resources();
    run_result r;
    r.status = timed_out ? -1 : *status;
    r.seconds = seconds_since(start_);
    r.groups = static_cast<int>(groups_.size());
    r.replacements = replacements_;
    r.faults = std::move(done_);
    return r;
  }

 private:
  // waiting_transfer: a replacement was started (--replace-lost); recovered once the survivors hand it the state.
  enum class phase { waiting_gap, stop_hold, cut_hold, disk_hold, waiting_restart, waiting_transfer, finished };

  void read_output() {
    char buf[65536];
    for (;;) {
      const ssize_t got = ::read(out_, buf, sizeof buf);
      if (got > 0) { pending_.append(buf, static_cast<std::size_t>(got)); continue; }
      if (got == 0) { ::close(out_); out_ = -1; pending_ += '\n'; }
      break;
    }
    std::size_t start = 0;
    for (std::size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1) {
      line(pending_.substr(start, nl - start));
    }
    pending_.erase(0, start);
  }

  void line(const std::string& text) {
    log_ << text << '\n';
    log_.flush();
    int index = -1, pid = -1;
    // --replace-lost: the launcher starts one worker again, in the same group (its next pid line).
    if (text.rfind("mwstrat-launch: worker ", 0) == 0 && text.find("starting a replacement") != std::string::npos) {
      replacing_ = true;
      return;
    }
    if (phase_ == phase::waiting_transfer && text.find("[mwstrat.recovery]") != std::string::npos &&
        text.find(" sent from rank ") != std::string::npos) {
      recovered(clock_type::now());
      return;
    }
    // --elastic: the launcher starts a joiner in a lost worker's place; the chief says when it has joined.
    if (o_.elastic && text.rfind("mwstrat-launch: a joiner takes worker ", 0) == 0) ++joiners_due_;
    if (o_.elastic && text.find("[mwstrat.recovery]") != std::string::npos) {
      if (const std::size_t j = text.find(" joined: "); j != std::string::npos) {
        // "worker 2 joined", "worker 1, worker 2 joined": one fewer due for each.
        for (std::size_t at = text.find("worker "); at < j; at = text.find("worker ", at + 1)) {
          joiners_due_ = std::max(0, joiners_due_ - 1);
        }
      }
      if (text.find("training again on ") != std::string::npos &&
          text.find("after the loss was seen") != std::string::npos &&
          (phase_ == phase::waiting_restart || phase_ == phase::stop_hold)) {
        if (phase_ == phase::stop_hold) current_.detail = "named by the survivors' liveness before the SIGKILL";
        recovered(clock_type::now());
        return;
      }
    }
    if (std::sscanf(text.c_str(), "mwstrat-launch: worker %d: pid %d", &index, &pid) == 2 && index >= 0) {
      if (replacing_ && !groups_.empty()) {
        replacing_ = false;
        ++replacements_;
        auto& g = groups_.back().pids;
        if (static_cast<std::size_t>(index) < g.size()) g[static_cast<std::size_t>(index)] = pid;
        if (phase_ == phase::waiting_restart || phase_ == phase::stop_hold) {
          if (phase_ == phase::stop_hold) current_.detail = "the launcher ended it on the survivors' report";
          phase_ = phase::waiting_transfer;
        }
        return;
      }
      // A joiner (--elastic) takes a lost worker's place in the running group, whichever its index.
      if (index == 0 && text.find("(a joiner)") == std::string::npos) groups_.emplace_back();
      if (!groups_.empty()) {
        auto& g = groups_.back().pids;
        if (g.size() <= static_cast<std::size_t>(index)) g.resize(static_cast<std::size_t>(index) + 1, -1);
        g[static_cast<std::size_t>(index)] = pid;
      }
      return;
    }
    // The resume point after the last fault (a backup that stayed valid), told by BackupAndRestore.
    if (!done_.empty() && !done_.back().resumed_seen &&
        text.find("restored ") != std::string::npos && text.find("resuming at") != std::string::npos) {
      done_.back().resumed_seen = true;
      const std::size_t from = text.find("restored ");
      done_.back().detail += (done_.back().detail.empty() ? "" : "; ") + text.substr(from);
    }
    if (phase_ == phase::disk_hold && text.find(std::strerror(ENOSPC)) != std::string::npos) {
      if (current_.detail.empty()) current_.detail = "the save failed: " + text;
      disk_failure_seen_ = true;
    }
  }

  void schedule_next() {
    const auto& f = plan_[next_];
    const double gap = gap_min_ + f.gap_draw * (gap_max_ - gap_min_);
    fire_at_ = recovered_at_ + seconds(gap);
    phase_ = phase::waiting_gap;
  }

  void recovered(clock_type::time_point when) {
    current_.recovered = true;
    current_.recovery = std::chrono::duration<double>(when - fault_at_).count();
    done_.push_back(current_);
    recovered_at_ = when;
    if (++next_ < plan_.size()) schedule_next();
    else phase_ = phase::finished;
  }

  // Whether the newest group has all its workers up (the launcher prints them one after the other); --elastic: and
  // every joiner started has joined.
  bool group_ready() const {
    if (groups_.empty() || joiners_due_ > 0) return false;
    const auto& g = groups_.back().pids;
    return !g.empty() && std::all_of(g.begin(), g.end(), [](pid_t p) { return leads_group(p); });
  }

  void step_faults() {
    const auto now = clock_type::now();
    switch (phase_) {
      case phase::finished: return;
      case phase::waiting_gap:
        if (now >= fire_at_ && (group_ready() || plan_[next_].kind == "cut" || plan_[next_].kind == "disk")) inject();
        return;
      case phase::stop_hold:
        if (groups_.size() > fault_group_) { kill_stopped_worker(); return; }  // the others timed out first
        if (now >= hold_until_) kill_stopped_worker();
        return;
      case phase::cut_hold:
        if (now >= hold_until_) {
          const int rc = run_shell({o_.simhosts_script, "--name", o_.simhosts_set, "restore", cut_host_});
          if (rc != 0) current_.detail += (current_.detail.empty() ? "" : "; ") + std::string("restore failed");
          // A cut shorter than the operation timeout is ridden out by TCP; a longer one made the job restart.
          recovered(now);
        }
        return;
      case phase::disk_hold:
        if (disk_failure_seen_ || now >= hold_until_) {
          free_disk(o_.disk);
          if (!disk_failure_seen_) {
            current_.detail = "no save failed while the disk was full";
            recovered(now);
          } else if (groups_.size() > fault_group_) {
            recovered(now);
          } else {
            phase_ = phase::waiting_restart;  // the chief fails at its next save point; the launcher restarts
          }
        }
        return;
      case phase::waiting_restart:
      case phase::waiting_transfer:
        if (groups_.size() > fault_group_) recovered(now);
        return;
    }
  }

  void inject() {
    const auto& f = plan_[next_];
    fault_at_ = clock_type::now();
    current_ = fault_record{};
    current_.kind = f.kind;
    current_.at = seconds_since(start_);
    fault_group_ = groups_.size();
    if (f.kind == "cut") {
      cut_host_ = o_.cut_hosts[pick(f.target_draw, o_.cut_hosts.size())];
      current_.target = "host " + cut_host_;
      const int rc = run_shell({o_.simhosts_script, "--name", o_.simhosts_set, "cut", cut_host_});
      if (rc != 0) current_.detail = "simhosts cut failed (status " + std::to_string(rc) + ")";
      hold_until_ = fault_at_ + seconds(o_.cut_hold);
      phase_ = phase::cut_hold;
    } else if (f.kind == "disk") {
      current_.target = o_.disk;
      const std::uint64_t bytes = fill_disk(o_.disk);
      current_.detail = "";
      disk_filled_ = bytes;
      disk_failure_seen_ = false;
      hold_until_ = fault_at_ + seconds(o_.disk_hold);
      phase_ = phase::disk_hold;
    } else {
      const auto& g = groups_.back().pids;
      const std::size_t w = pick(f.target_draw, g.size());
      target_pid_ = g[w];
      current_.target = "worker " + std::to_string(w) + " (pid " + std::to_string(target_pid_) + ")";
      if (f.kind == "kill") {
        ::kill(-target_pid_, SIGKILL);
        phase_ = phase::waiting_restart;
      } else if (f.kind == "term") {
        ::kill(-target_pid_, SIGTERM);
        phase_ = phase::waiting_restart;
      } else {
        ::kill(-target_pid_, SIGSTOP);
        hold_until_ = fault_at_ + seconds(o_.stop_hold);
        phase_ = phase::stop_hold;
      }
    }
  }

  void kill_stopped_worker() {
    if (groups_.size() == fault_group_ && leads_group(target_pid_)) {
      ::kill(-target_pid_, SIGKILL);
    } else {
      current_.detail = "the other workers gave up on it before the SIGKILL";
    }
    phase_ = phase::waiting_restart;
  }

  void kill_everything() {
    ::kill(-job_, SIGKILL);
    for (const auto& g : groups_) {
      for (const pid_t p : g.pids) if (leads_group(p)) ::kill(-p, SIGKILL);
    }
  }

  // Whatever a fault still holds when the job ends: a cut link, a full disk.
  void give_back_resources() {
    if (phase_ == phase::cut_hold) run_shell({o_.simhosts_script, "--name", o_.simhosts_set, "restore", cut_host_});
    if (phase_ == phase::disk_hold) free_disk(o_.disk);
    if (phase_ != phase::finished && phase_ != phase::waiting_gap) {
      current_.detail += (current_.detail.empty() ? "" : "; ") + std::string("the job ended before it recovered");
      done_.push_back(current_);
    }
  }

  const options& o_;
  std::vector<planned_fault> plan_;
  double gap_min_, gap_max_, limit_;
  std::ofstream log_;
  clock_type::time_point start_, recovered_at_, fire_at_, fault_at_, hold_until_;
  pid_t job_ = -1;
  int out_ = -1;
  int drain_ticks_ = 0;
  std::string pending_;
  std::vector<group> groups_;
  bool replacing_ = false;  // the launcher said it starts a replacement: its next pid line is one
  int joiners_due_ = 0;     // --elastic: joiners the launcher started that have not joined yet
  int replacements_ = 0;
  std::size_t next_ = 0;
  phase phase_ = phase::finished;
  std::size_t fault_group_ = 0;
  pid_t target_pid_ = -1;
  std::string cut_host_;
  std::uint64_t disk_filled_ = 0;
  bool disk_failure_seen_ = false;
  fault_record current_;
  std::vector<fault_record> done_;
};

void empty_folder(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  for (const auto& entry : fs::directory_iterator(dir, ec)) fs::remove_all(entry.path(), ec);
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A tmpfs of `size` on `dir`, seen only by this process and the job (a private mount namespace): it goes away with
// them, so nothing is left mounted whatever happens.
void mount_private_tmpfs(const std::string& dir, const std::string& size) {
  if (size.find(',') != std::string::npos) usage("--disk-tmpfs: '" + size + "' is not a size");
  if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    usage(std::string("--disk-tmpfs: cannot make a private mount namespace (root needed): ") + std::strerror(errno));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string data = "size=" + size + ",mode=0755";
  if (::mount("mwstrat-fault-campaign", dir.c_str(), "tmpfs", 0, data.c_str()) != 0) {
    usage("--disk-tmpfs: cannot mount a tmpfs of " + size + " on " + dir + ": " + std::strerror(errno));
  }
}

// The largest difference between the two saved models' parameters relative to their largest magnitude; nullopt when
// they cannot be compared (unreadable, or other tensors).
std::optional<double> relative_difference(const std::string& a_path, const std::string& b_path) {
  try {
    const mwstrat::training_state a = mwstrat::load_training_state(a_path);
    const mwstrat::training_state b = mwstrat::load_training_state(b_path);
    if (a.weights.size() != b.weights.size()) return std::nullopt;
    double largest = 0, worst = 0;
    for (std::size_t t = 0; t < a.weights.size(); ++t) {
      const auto& x = a.weights[t].values;
      const auto& y = b.weights[t].values;
      if (x.size() != y.size()) return std::nullopt;
      for (std::size_t i = 0; i < x.size(); ++i) {
        largest = std::max(largest, static_cast<double>(std::abs(y[i])));
        worst = std::max(worst, static_cast<double>(std::abs(x[i] - y[i])));
      }
    }
    return largest > 0 ? worst / largest : worst;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string fixed(double v, int digits = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  const auto plan = make_schedule(o);
  if (o.print_schedule) {
    std::printf("seed %llu, %d fault(s)\n", static_cast<unsigned long long>(o.seed), o.faults);
    for (std::size_t i = 0; i < plan.size(); ++i) {
      std::printf("fault %zu: %s gap-draw %.6f target-draw %.6f\n", i + 1, plan[i].kind.c_str(), plan[i].gap_draw,
                  plan[i].target_draw);
    }
    return 0;
  }
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  if (!o.disk_tmpfs.empty()) mount_private_tmpfs(o.disk, o.disk_tmpfs);
  if (!o.disk.empty() && !fs::is_directory(o.disk)) usage("--disk: " + o.disk + " is not a folder");
  if (std::find(o.kinds.begin(), o.kinds.end(), "disk") != o.kinds.end()) {
    // A disk fault fills the whole file system under --disk: never the machine's own disk by mistake.
    struct statvfs fsinfo{};
    constexpr double limit_gib = 4;
    if (::statvfs(o.disk.c_str(), &fsinfo) == 0) {
      const double free_gib = static_cast<double>(fsinfo.f_bavail) * static_cast<double>(fsinfo.f_frsize) / (1 << 30);
      if (free_gib > limit_gib) {
        usage("--disk: the file system under " + o.disk + " has " + fixed(free_gib) + " GiB free (more than " +
              fixed(limit_gib, 0) + "); a disk fault would fill all of it: give a folder on a small file system of its "
              "own, or --disk-tmpfs SIZE");
      }
    }
  }
  std::error_code ec;
  fs::create_directories(o.work_dir, ec);
  if (ec) usage("--work-dir: cannot create " + o.work_dir + ": " + ec.message());
  auto prepare = [&] {
    for (const auto& d : o.clean) empty_folder(d);
    if (!o.disk.empty()) free_disk(o.disk);
    fs::remove(o.model, ec);
  };

  std::string report;
  auto say = [&](const std::string& text) {
    std::printf("%s\n", text.c_str());
    std::fflush(stdout);
    report += text + "\n";
  };

  // The fault-free reference.
  std::string reference_path = o.reference_model;
  double reference_seconds = o.reference_seconds.value_or(0);
  if (reference_path.empty()) {
    prepare();
    std::printf("mwstrat-fault-campaign: the fault-free reference run (log: %s/reference.log)\n", o.work_dir.c_str());
    std::fflush(stdout);
    job_runner ref(o, {}, 0, 0, o.timeout.value_or(86400), o.work_dir + "/reference.log");
    const run_result r = ref.run();
    if (r.status != 0) {
      std::fprintf(stderr, "mwstrat-fault-campaign: the fault-free run %s; see %s/reference.log\n",
                   r.status < 0 ? "timed out" : ("failed (status " + std::to_string(r.status) + ")").c_str(),
                   o.work_dir.c_str());
      return 1;
    }
    reference_path = o.work_dir + "/reference-model";
    fs::copy_file(o.model, reference_path, fs::copy_options::overwrite_existing, ec);
    if (ec) {
      std::fprintf(stderr, "mwstrat-fault-campaign: the fault-free run wrote no model at %s (--model): %s\n",
                   o.model.c_str(), ec.message().c_str());
      return 1;
    }
    reference_seconds = r.seconds;
  }
  const auto reference = read_file(reference_path);
  if (!reference) {
    std::fprintf(stderr, "mwstrat-fault-campaign: cannot read the reference model %s\n", reference_path.c_str());
    return 1;
  }

  const double mean_gap = reference_seconds / (o.faults + 1);
  const double gap_min = o.gap_min.value_or(o.gap_max ? std::min(*o.gap_max, 0.2 * mean_gap) : 0.2 * mean_gap);
  const double gap_max = o.gap_max.value_or(std::max(gap_min, 0.8 * mean_gap));
  const double limit = o.timeout.value_or(4 * reference_seconds + 60.0 * (o.faults + 1));

  prepare();
  std::string kinds;
  for (const auto& k : o.kinds) kinds += (kinds.empty() ? "" : ",") + k;
  std::printf("mwstrat-fault-campaign: %d fault(s) (%s), seed %llu, gaps %s..%s s (log: %s/campaign.log)\n", o.faults,
              kinds.c_str(), static_cast<unsigned long long>(o.seed), fixed(gap_min, 2).c_str(),
              fixed(gap_max, 2).c_str(), o.work_dir.c_str());
  std::fflush(stdout);
  job_runner campaign(o, plan, gap_min, gap_max, limit, o.work_dir + "/campaign.log");
  const run_result r = campaign.run();

  const bool finished = r.status == 0;
  int survived = 0;
  for (std::size_t i = 0; i < r.faults.size(); ++i) {
    const auto& f = r.faults[i];
    const bool ok = f.recovered && finished;
    survived += ok ? 1 : 0;
    say("fault " + std::to_string(i + 1) + " at " + fixed(f.at) + " s: " + f.kind + " " + f.target + ": " +
        (ok ? "survived" : "NOT survived") + (f.recovered ? ", recovered in " + fixed(f.recovery) + " s" : "") +
        (f.detail.empty() ? "" : " (" + f.detail + ")"));
  }
  const auto model = finished ? read_file(o.model) : std::nullopt;
  const bool identical = model && *model == *reference;
  const int injected = static_cast<int>(r.faults.size());
  const double lost = r.seconds - reference_seconds;
  say("seed: " + std::to_string(o.seed) + ", kinds: " + kinds);
  say("faults scheduled: " + std::to_string(o.faults));
  say("faults injected: " + std::to_string(injected));
  say("faults survived: " + std::to_string(survived));
  say("job exit status: " + (r.status < 0 ? std::string("timed out") : std::to_string(r.status)));
  say("worker groups started: " + std::to_string(r.groups));
  if (o.replace_lost) say("workers replaced alone (in-memory recovery): " + std::to_string(r.replacements));
  say("fault-free run: " + fixed(reference_seconds) + " s; campaign run: " + fixed(r.seconds) + " s");
  say("time lost: " + fixed(lost) + " s; per fault: " + (injected > 0 ? fixed(lost / injected, 2) + " s" : "n/a"));
  say(std::string("final model byte-identical to the fault-free run: ") +
      (identical ? "yes" : model ? "NO" : "no model (" + o.model + ")"));
  bool close = identical;  // --elastic: a model was written (its difference is reported)
  if (o.elastic) {
    say("goodput: " + (r.seconds > 0 ? fixed(100 * reference_seconds / r.seconds, 1) + "%" : std::string("n/a")) +
        " of the fault-free run's training steps per second (its wall time over the campaign's: the same steps)");
    std::vector<double> times;
    for (const auto& f : r.faults) if (f.recovered) times.push_back(f.recovery);
    if (!times.empty()) {
      std::sort(times.begin(), times.end());
      const auto at = [&](double q) {
        const auto i = static_cast<std::size_t>(q * static_cast<double>(times.size()));
        return times[std::min(times.size() - 1, i)];
      };
      say("from a loss to training again: p50 " + fixed(1000 * at(0.5), 0) + " ms, p99 " + fixed(1000 * at(0.99), 0) +
          " ms, max " + fixed(1000 * times.back(), 0) + " ms over " + std::to_string(times.size()) + " fault(s)");
    }
    if (model) {
      const auto difference = relative_difference(o.model, reference_path);
      close = true;
      say("final model against the fault-free run, up to the order of additions: " +
          (difference ? "largest difference " + fixed(*difference * 1e6, 1) + "e-6 of the largest parameter"
                      : std::string("not comparable (other tensors)")));
    }
  }
  if (injected < o.faults) {
    say("the job finished before all faults were injected: lengthen the job or lower --gap-max");
  }
  std::ofstream(o.work_dir + "/report.txt") << report;
  return injected == o.faults && survived == injected && (o.elastic ? close : identical) ? 0 : 1;
}
