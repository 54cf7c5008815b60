// mwstrat-launch -n N [--base-port P] [--host H] [--max-restarts K] [--grace-ms G] -- PROGRAM ARGS...
// mwstrat-launch --hosts NAME:N[,NAME:N...] [--simhosts SET [--simhosts-script PATH]] [...] -- PROGRAM ARGS...
// mwstrat-launch {--hosts NAME:N,... | --hostfile FILE} [--ssh] [--ssh-connect-timeout S] [--ssh-config FILE]
//                [--ssh-option OPT]... [--remote-launcher PATH] [--workdir DIR] [--env NAME[=VALUE]]...
//                [--liveness-timeout S] [...] -- PROGRAM ARGS...
// mwstrat-launch --remote-agent   (started by the launcher on a node, over ssh; reads its worker's spec from stdin)
// mwstrat-launch --nnodes N --node-rank K --rendezvous HOST:PORT [--rendezvous-timeout S] -n W [...] -- PROGRAM ARGS...
//
// Per-node agents (launch/node_agents.hpp, docs/nodes.md): one launcher per node, started by a scheduler, meets the
// others at node 0's rendezvous and starts workers K*W .. K*W+W-1 of the N*W, on its own node. In an srun step the
// count, the rank and the rendezvous come from Slurm; in a Kubernetes Indexed Job the rank is JOB_COMPLETION_INDEX.
//
// Starts N local workers of PROGRAM, each with its own TF_CONFIG (cluster.worker = N addresses on H, task.index =
// i), prefixes every line they print with "[worker i] ", and waits. When a worker fails (non-zero exit or a
// signal) the others are ended (SIGTERM, then SIGKILL after the grace period) and, while restarts remain, the
// whole group is started again with the same TF_CONFIG — so a job that uses BackupAndRestore resumes by itself. A
// stopped worker (SIGSTOP) that is ended is also sent SIGCONT, so it need not wait for the SIGKILL.
//
// With --hosts, workers are placed host by host (the first host's get ranks 0..N-1, and so on) and each has
// MWSTRAT_HOST_ID set to its host's name. With --simhosts SET the names are simulated hosts of scripts/simhosts
// (h1, h2, ...): the addresses in TF_CONFIG are theirs and each worker is started inside its host
// (`simhosts --name SET exec HOST -- PROGRAM ...`); without it each NAME is an IPv4 address of this machine
// (e.g. 127.0.0.2). Ports: --base-port (default 20000) plus the worker's index.
//
// Other nodes (docs/nodes.md): without --simhosts, a host that is not this machine's (not localhost or its host
// name, not in 127.0.0.0/8, not an address of one of its interfaces; --ssh: every host) is a node, and its workers
// are started there over the system's ssh (BatchMode, --ssh-connect-timeout, the user's ssh configuration or
// --ssh-config, more with --ssh-option), one connection per worker running `mwstrat-launch --remote-agent` (launch/remote_agent.hpp,
// at --remote-launcher, default this launcher's own path). The worker's spec — program, --workdir (default the
// launcher's directory), TF_CONFIG, MWSTRAT_HOST_ID, the launcher's MWSTRAT_* variables with the job token, --env —
// travels on ssh's stdin, never on a command line (launch/agent_protocol.hpp); a job across nodes without
// MWSTRAT_JOB_TOKEN gets one made here. The same stdin carries signals and a ping each second: an agent whose stdin
// closes (the launcher or its ssh died) or stays silent for --liveness-timeout ends its worker's group (SIGTERM,
// SIGKILL after the grace period). ssh's stdout is the worker's output, prefixed as a local worker's; its exit
// status is the worker's, and each remote worker's end is reported ("worker 2 (pid P on node2) exited with status
// 75 on host node2"). A remote worker that cannot be started (ssh cannot connect or log in, the program or the
// launcher is missing) fails the launch at once, naming the host and ssh's reason: the other workers are ended and
// nothing is restarted.
//
// Preemption: a worker that exits with 75 (mwstrat::preempted_exit_code: it was preempted at a step boundary and
// wants to be resumed) is not a failure. The others, which stop at the same step, get the grace period to exit by
// themselves, and the group is restarted without counting against --max-restarts (at most --max-preemptions
// times, default 100). SIGTERM, SIGINT, SIGHUP or SIGQUIT to the launcher is forwarded to every worker (as SIGTERM);
// the launcher then waits for them and does not restart. A launcher that dies without forwarding (SIGKILL) still
// ends its workers: each is started with SIGTERM as its parent-death signal.
//
// Leftovers: each worker leads its own process group. Once a worker's leader has exited, whatever it left in its
// group (a helper, a shell's background job) is ended as a worker is (SIGTERM, then SIGKILL after the grace period),
// and the launcher waits for the group to be gone before it restarts or returns.
// In-memory recovery (--replace-lost, with --max-restarts K): a worker that fails (killed, or exits with a status
// other than 0, 69 and 75) is replaced alone, while the others keep running: the replacement gets the same TF_CONFIG
// and MWSTRAT_RECOVERY_GENERATION = the ring generation it joins (one more per replacement), and the survivors, which
// waited for it (fit turns its in-memory recovery on when it reads MWSTRAT_REPLACE_LOST=1, in any program:
// cluster/launcher_environment.hpp), hand it the training
// state from memory. A worker that hangs (SIGSTOP, a frozen machine) never exits: the survivors write
// "lost RANK GENERATION" lines to the descriptor MWSTRAT_LAUNCH_REPORT_FD names, and the launcher ends that worker's
// process group (SIGKILL) and replaces it. When the survivors give up waiting they exit with 69
// (mwstrat::peer_lost_exit_code), and the whole group is restarted as without --replace-lost (from its last backup).
// Each replacement counts against --max-restarts. Two workers lost at once cannot be replaced this way (their
// replacements join different generations): the survivors time out and the group restarts.
//
// Elastic (--min-workers K, without --replace-lost): every worker is told MWSTRAT_MIN_WORKERS=K, so fit shrinks the
// job instead of waiting for a replacement (train/in_memory_recovery.hpp). A worker that fails is not replaced and
// the others are not ended while at least K still run: its survivors build a smaller ring and go on with the same
// global batch. A stopped one is reported by the survivors and ended, as above. Below K the survivors exit 69 and
// the group is restarted (from its backup) as without the flag. With --max-workers M (and --max-restarts J) every
// worker also gets a join address (MWSTRAT_JOIN_LISTEN: where it hears joiners while it is the chief), and a failed
// worker's place is taken --join-delay MS later by a joiner (MWSTRAT_JOIN: every worker's join address), which the
// job takes in at a step boundary; each counts as a restart. The survivors of a loss first wait --spare-wait MS
// (MWSTRAT_SPARE_WAIT_MS, default 3000) for it. A joiner reports the ring it joined ("joined WORKER GENERATION"),
// so that a loss reported from an earlier ring is taken for the worker it replaced; a joiner still waiting when
// the job finishes is ended, and is not a failure. --grow-after MS grows the job past -n: that long after the start
// the slots -n .. M-1 (ports and join ports of their own) are started as joiners too; with --hosts or --hostfile
// the slots it grows into are named by --grow-hosts NAME:N,... (after the job's own, over ssh where remote).
// Across nodes (--hosts, over ssh) a joiner is started on the lost worker's node, through its agent, as a
// replacement is. Under per-node agents (--nnodes) K and M count the whole job's workers; each agent sees only its
// own node's, so a lost one never ends the agent's others (the survivors, wherever they run, hold the job to K), and
// a lost worker's joiner is started by its own node's agent, in its slot (the ports follow from --base-port alike on
// every node). There a worker counts as lost only when a signal ended it or the survivors removed it (exit 78); one
// that exits with an error of its own ends its node's workers, as without the flag. A node lost whole leaves
// nothing for its agent to do: the other nodes' workers go on without it. A job grows by nodes that come later
// (launch/late_nodes.hpp): with room under --max-workers, node 0's agent keeps a late desk on the rendezvous port + 1,
// and an agent given --node-rank K >= --nnodes registers there and starts its workers as joiners; every node's
// ports are then laid out for --max-workers workers (options::port_slots).
//
// Exit status: 0 when every worker succeeded (under --min-workers: every worker the job went on with); 75 when the
// workers stopped for preemption (and the launcher itself was signalled); otherwise the first failure's (128 + signal
// for a signal).
#include "launch/agent_protocol.hpp"
#include "launch/node_agents.hpp"
#include "launch/remote_agent.hpp"
#include "launch/ssh.hpp"

#include <mwstrat/cluster/free_ports.hpp>
#include <mwstrat/cluster/hostfile.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/version.hpp>

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

using steady_clock = std::chrono::steady_clock;
// No deadline (plain time points, not optionals: GCC 12 under TSan reports a false maybe-uninitialized on the
// optional).
constexpr auto never = steady_clock::time_point::max();

// The signals the launcher forwards to its workers. SIGHUP (a closed terminal or ssh session) and SIGQUIT reach the
// launcher alone, since each worker leads its own process group: left at their default, they would end the launcher
// and leave its workers running.
constexpr std::array forwarded_signals = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
// Those of them the launcher handles: one it found ignored (nohup, a background job's SIGINT and SIGQUIT) stays
// ignored, in the launcher and in its workers, as it was before the launcher existed.
sigset_t handled_signals{};
// Whether the launcher was started with SIGPIPE ignored: its workers inherit that, not the launcher's own ignoring.
bool sigpipe_was_ignored = false;

struct options {
  int workers = 0;
  int base_port = 0;  // 0: pick N free ports
  std::string host = "127.0.0.1";
  int max_restarts = 0;
  int max_preemptions = 100;  // a program that always exits 75 must not restart forever
  int grace_ms = 5000;
  bool replace_lost = false;  // --replace-lost: replace a lost worker alone (in-memory recovery)
  int min_workers = 0;        // --min-workers K: elastic, the survivors of a lost worker go on without it
  int max_workers = 0;        // --max-workers M: elastic, growing: a lost worker's slot is filled by a joiner
  int join_delay_ms = 0;      // --join-delay MS: how long after a loss the joiner starts
  int spare_wait_ms = -1;     // --spare-wait MS: after a shrink, the survivors' wait for a joiner (-1: default)
  int grow_after_ms = -1;     // --grow-after MS: then the slots -n .. M-1 are started as joiners (-1: never)
  std::vector<std::string> join_addresses;  // where each worker hears joiners while it is the chief (--max-workers)
  std::vector<std::string> command;
  // --hosts: one entry per worker (filled by resolve_hosts); empty without --hosts.
  std::string hosts_spec;
  std::string grow_hosts_spec;  // --grow-hosts NAME:N,...: the slots --grow-after starts, past the --hosts ones
  int grow_slots = 0;           // how many those are
  std::string simhosts_set;
  std::string simhosts_script;
  std::vector<std::string> worker_host;     // the host's name (MWSTRAT_HOST_ID)
  std::vector<std::string> worker_address;  // the host's IPv4 address (or name, for a node reached over ssh)
  std::vector<bool> worker_remote;          // started over ssh (see ssh.hpp: is_local_host)
  // Other nodes (ssh).
  std::string hostfile;
  bool force_ssh = false;  // --ssh: every host over ssh, even this machine's addresses
  mwstrat_launch::ssh_settings ssh;
  std::string workdir;                // --workdir: the remote workers' directory (default: the launcher's)
  std::vector<std::string> env_names;  // --env NAME[=VALUE]: more of the environment for remote workers
  // Per-node agents (launch/node_agents.hpp): this launcher starts workers first_local .. first_local + local - 1.
  mwstrat_launch::node_agent_settings agents;
  bool agent_flags = false;  // --nnodes, --node-rank or --rendezvous given
  int first_local = 0;
  int local_workers = -1;  // -1: all of them
  // Worker slots: -n, and up to --max-workers where the job grows past it (--grow-after).
  [[nodiscard]] int slots() const {
    if (grow_after_ms < 0) return workers;
    return grow_slots > 0 ? workers + grow_slots : std::max(workers, max_workers);
  }
  // Under per-node agents with --max-workers M the ports are laid out for M workers on every node (worker r at
  // base + r, its join port at base + M + r), so that a late node's workers (launch/late_nodes.hpp) and the first
  // nodes' agree; otherwise for the slots.
  [[nodiscard]] int port_slots() const { return agents.nnodes > 0 ? std::max(slots(), max_workers) : slots(); }
  // A late node's agent: its workers join a running job (launch/late_nodes.hpp).
  [[nodiscard]] bool late_node() const { return agents.nnodes > 0 && agents.node_rank >= agents.nnodes; }
  [[nodiscard]] bool any_remote() const {
    return std::find(worker_remote.begin(), worker_remote.end(), true) != worker_remote.end();
  }
};

[[noreturn]] void usage(const std::string& problem) {
  if (!problem.empty()) std::fprintf(stderr, "mwstrat-launch: %s\n", problem.c_str());
  std::fprintf(stderr,
               "usage: mwstrat-launch -n N [--base-port P] [--host H] [--max-restarts K [--replace-lost]]\n"
               "       [--min-workers K [--max-workers M --max-restarts J [--join-delay MS] [--spare-wait MS]\n"
               "                         [--grow-after MS [--grow-hosts NAME:N,... (with --hosts)]]]]\n"
               "       [--max-preemptions P] [--grace-ms G] -- PROGRAM [ARGS...]\n"
               "       mwstrat-launch --hosts NAME:N[,NAME:N...] [--simhosts SET [--simhosts-script PATH]] [...] -- "
               "PROGRAM [ARGS...]\n"
               "       mwstrat-launch {--hosts NAME:N[,...] | --hostfile FILE} [--ssh] [--ssh-connect-timeout S]\n"
               "       [--ssh-config FILE] [--ssh-option OPT]... [--remote-launcher PATH] [--workdir DIR]\n"
               "       [--env NAME[=VALUE]]... [--liveness-timeout S] [...] -- PROGRAM [ARGS...]\n");
  std::exit(2);
}

int parse_int(const std::string& flag, const char* text, int low, int high) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < low || v > high) {
    usage(flag + ": '" + text + "' is not a number in [" + std::to_string(low) + ", " + std::to_string(high) + "]");
  }
  return static_cast<int>(v);
}

// The address of simulated host `host` of set `o.simhosts_set`, asked of scripts/simhosts.
std::string simulated_host_address(const options& o, const std::string& host) {
  const std::string line = "'" + o.simhosts_script + "' --name '" + o.simhosts_set + "' addr '" + host + "' 2>&1";
  FILE* p = ::popen(line.c_str(), "r");
  if (!p) usage("--simhosts: cannot run " + o.simhosts_script);
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  const int status = ::pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (status != 0) usage("--hosts: no address for host '" + host + "' of simulated set '" + o.simhosts_set + "': " + out);
  return out;
}

// --hosts NAME:N,... or --hostfile FILE: the workers, host by host, with their host's name and address, and
// whether each is started over ssh (see the top of this file).
void resolve_hosts(options& o) {
  if (!o.hostfile.empty() && !o.hosts_spec.empty()) usage("--hosts and --hostfile exclude each other");
  if (o.hosts_spec.empty() && o.hostfile.empty()) {
    if (!o.simhosts_set.empty()) usage("--simhosts needs --hosts");
    if (!o.grow_hosts_spec.empty()) usage("--grow-hosts needs --hosts or --hostfile");
    if (o.force_ssh) usage("--ssh needs --hosts or --hostfile");
    return;
  }
  if (o.workers != 0) usage("-n and --hosts exclude each other (--hosts gives the workers per host)");
  if (!o.simhosts_set.empty() && o.force_ssh) usage("--simhosts and --ssh exclude each other");
  if (o.simhosts_script.empty()) {
    const char* env = std::getenv("MWSTRAT_SIMHOSTS");
    o.simhosts_script = env && *env ? env : "simhosts";
  }
  if (o.simhosts_script.find('\'') != std::string::npos || o.simhosts_set.find('\'') != std::string::npos) {
    usage("--simhosts, --simhosts-script: no quotes, please");
  }
  std::vector<mwstrat::host_slots> hosts;
  try {
    hosts = o.hostfile.empty() ? mwstrat::parse_host_list(o.hosts_spec) : mwstrat::read_hostfile(o.hostfile);
  } catch (const mwstrat::config_error& e) {
    usage(e.detail());
  }
  std::vector<mwstrat::host_slots> grown;
  if (!o.grow_hosts_spec.empty()) {
    try {
      grown = mwstrat::parse_host_list(o.grow_hosts_spec);
    } catch (const mwstrat::config_error& e) {
      usage(std::string("--grow-hosts: ") + e.detail());
    }
  }
  // The job's workers, then (--grow-hosts) the slots it grows into: the same hosts may appear in both.
  int job_slots = 0;
  for (const auto* list : {&hosts, &grown}) {
    for (const auto& [name, count] : *list) {
      std::string address = name;
      bool remote = false;
      if (!o.simhosts_set.empty()) {
        address = simulated_host_address(o, name);
      } else {
        remote = o.force_ssh || !mwstrat_launch::is_local_host(name);
      }
      for (int k = 0; k < count; ++k) {
        o.worker_host.push_back(name);
        o.worker_address.push_back(address);
        o.worker_remote.push_back(remote);
      }
    }
    if (list == &hosts) job_slots = static_cast<int>(o.worker_host.size());
  }
  if (o.worker_host.size() > 1024) usage("--hosts: more than 1024 workers");
  o.workers = job_slots;
  o.grow_slots = static_cast<int>(o.worker_host.size()) - job_slots;
  if (o.base_port == 0) o.base_port = 20000;
}

// The program line of worker `index`: the command itself, or run inside its simulated host.
std::vector<std::string> worker_argv(const options& o, int index) {
  if (o.simhosts_set.empty()) return o.command;
  std::vector<std::string> argv = {o.simhosts_script, "--name", o.simhosts_set, "exec",
                                   o.worker_host[static_cast<std::size_t>(index)], "--"};
  argv.insert(argv.end(), o.command.begin(), o.command.end());
  return argv;
}

// The address worker `index` listens on.
const std::string& worker_address(const options& o, int index) {
  return o.worker_address.empty() ? o.host : o.worker_address[static_cast<std::size_t>(index)];
}

options parse(int argc, char** argv) {
  options o;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--") { ++i; break; }
    if (a == "-n" || a == "--workers") o.workers = parse_int(a, value(), 1, 1024);
    else if (a == "--base-port") o.base_port = parse_int(a, value(), 1, 65535);
    else if (a == "--host") o.host = value();
    else if (a == "--max-restarts") o.max_restarts = parse_int(a, value(), 0, 1000);
    else if (a == "--max-preemptions") o.max_preemptions = parse_int(a, value(), 0, 100000);
    else if (a == "--grace-ms") o.grace_ms = parse_int(a, value(), 0, 600000);
    else if (a == "--replace-lost") o.replace_lost = true;
    else if (a == "--min-workers") o.min_workers = parse_int(a, value(), 1, 1024);
    else if (a == "--max-workers") o.max_workers = parse_int(a, value(), 1, 1024);
    else if (a == "--join-delay") o.join_delay_ms = parse_int(a, value(), 0, 3600000);
    else if (a == "--spare-wait") o.spare_wait_ms = parse_int(a, value(), 0, 3600000);
    else if (a == "--grow-after") o.grow_after_ms = parse_int(a, value(), 0, 86400000);
    else if (a == "--hosts") o.hosts_spec = value();
    else if (a == "--grow-hosts") o.grow_hosts_spec = value();
    else if (a == "--simhosts") o.simhosts_set = value();
    else if (a == "--simhosts-script") o.simhosts_script = value();
    else if (a == "--hostfile") o.hostfile = value();
    else if (a == "--ssh") o.force_ssh = true;
    else if (a == "--ssh-connect-timeout") o.ssh.connect_timeout_s = parse_int(a, value(), 1, 3600);
    else if (a == "--liveness-timeout") o.ssh.liveness_timeout_s = parse_int(a, value(), 1, 3600);
    else if (a == "--ssh-config") o.ssh.config = value();
    else if (a == "--ssh-option") o.ssh.options.emplace_back(value());
    else if (a == "--remote-launcher") o.ssh.remote_launcher = value();
    else if (a == "--workdir") o.workdir = value();
    else if (a == "--env") o.env_names.emplace_back(value());
    else if (a == "--nnodes") { o.agents.nnodes = parse_int(a, value(), 1, 65535); o.agent_flags = true; }
    else if (a == "--node-rank") { o.agents.node_rank = parse_int(a, value(), 0, 65534); o.agent_flags = true; }
    else if (a == "--rendezvous") { o.agents.rendezvous = value(); o.agent_flags = true; }
    else if (a == "--rendezvous-timeout") o.agents.rendezvous_timeout_s = parse_int(a, value(), 1, 86400);
    else if (a == "--version") { std::printf("mwstrat-launch %s\n", mwstrat::version_string); std::exit(0); }
    else if (a == "-h" || a == "--help") usage("");
    else usage("unknown option '" + a + "'");
  }
  for (; i < argc; ++i) o.command.emplace_back(argv[i]);
  resolve_hosts(o);
  if (o.workers == 0) usage("-n N is required");
  // A per-node agent: by its flags (a Kubernetes Indexed Job gives the node rank), or started by srun in a Slurm
  // step (not in a batch script or an salloc shell, where `-n` keeps meaning local workers).
  const bool slurm_step = std::getenv("SLURM_STEP_ID") && std::getenv("SLURM_NNODES") && std::getenv("SLURM_NODEID");
  int job_workers = o.workers;  // the whole job's: -n on every node under per-node agents
  if (o.agent_flags || slurm_step) {
    if (!o.worker_host.empty()) {
      if (o.agent_flags) usage("--hosts/--hostfile and --nnodes/--node-rank/--rendezvous exclude each other");
    } else {
      if (auto missing = mwstrat_launch::settings_from_environment(o.agents)) usage(*missing);
      if (o.replace_lost) usage("--replace-lost is not available with per-node agents (--nnodes)");
      job_workers = o.workers * o.agents.nnodes;
      // A node rank from --nnodes on is a late node's, whose workers join the running job within --max-workers.
      const int k = o.agents.node_rank;
      if (k >= o.agents.nnodes && (!o.min_workers || o.max_workers < (k + 1) * o.workers)) {
        usage("--node-rank " + std::to_string(k) + " is not below --nnodes " + std::to_string(o.agents.nnodes) +
              " (a late node, whose workers join the running job, needs --min-workers and --max-workers of at "
              "least " + std::to_string((k + 1) * o.workers) + ")");
      }
    }
  }
  if (o.command.empty()) usage("no program given after --");
  if (o.replace_lost && o.max_restarts == 0) {
    usage("--replace-lost needs --max-restarts K (K >= 1): each replacement counts as a restart");
  }
  if (o.min_workers > job_workers) usage("--min-workers: more than the job's " + std::to_string(job_workers) + " workers");
  if (o.max_workers && !o.min_workers) {
    usage("--max-workers needs --min-workers K: only an elastic job takes joiners in");
  }
  if (o.max_workers && o.max_workers < job_workers) {
    usage("--max-workers: fewer than the job's " + std::to_string(job_workers) + " workers");
  }
  if (o.max_workers && o.max_restarts == 0) {
    usage("--max-workers needs --max-restarts J (J >= 1): each joiner started in a lost worker's place counts as a "
          "restart");
  }
  if ((o.join_delay_ms || o.spare_wait_ms >= 0 || o.grow_after_ms >= 0) && !o.max_workers) {
    usage("--join-delay, --spare-wait and --grow-after need --max-workers");
  }
  if (o.grow_after_ms >= 0 && o.max_workers <= o.workers) {
    usage("--grow-after: --max-workers " + std::to_string(o.max_workers) + " leaves no slot past the -n " +
          std::to_string(o.workers) + " workers to grow into");
  }
  if (o.grow_after_ms >= 0 && o.agent_flags) {
    usage("--grow-after is not for per-node agents: a job under agents grows by nodes that come later (--node-rank "
          "K >= --nnodes)");
  }
  if (o.grow_after_ms >= 0 && !o.worker_host.empty() && o.grow_slots == 0) {
    usage("--grow-after with --hosts or --hostfile needs --grow-hosts NAME:N,...: where the slots it grows into are");
  }
  if (o.grow_slots > 0 && o.grow_after_ms < 0) usage("--grow-hosts needs --grow-after MS: when to start them");
  if (o.grow_slots > 0 && o.max_workers < o.workers + o.grow_slots) {
    usage("--grow-hosts: " + std::to_string(o.workers) + " workers and " + std::to_string(o.grow_slots) +
          " to grow into are more than --max-workers " + std::to_string(o.max_workers));
  }
  if (o.spare_wait_ms < 0) o.spare_wait_ms = o.max_workers ? 3000 : 0;
  if (o.min_workers && o.replace_lost) {
    usage("--min-workers and --replace-lost exclude each other: an elastic job takes a lost worker's place back with "
          "--max-workers (a joiner at a step boundary), not with a replacement");
  }
  if (o.base_port != 0 && o.base_port + (o.max_workers ? 2 : 1) * o.port_slots() - 1 > 65535) {
    usage("--base-port: ports run past 65535 (--max-workers takes a join port per worker after the workers' ports)");
  }
  if (o.any_remote()) {
    std::error_code ec;
    if (o.workdir.empty()) o.workdir = std::filesystem::current_path(ec).string();
    // The same path on every node unless told otherwise (a shared or identical installation).
    if (o.ssh.remote_launcher.empty()) {
      o.ssh.remote_launcher = std::filesystem::canonical("/proc/self/exe", ec).string();
    }
  }
  return o;
}

// N ports that are free now, outside the ephemeral range (mwstrat/cluster/free_ports.hpp says why).
std::vector<int> free_ports(const std::string& host, int n) {
  try {
    return mwstrat::free_listen_ports(host, n);
  } catch (const mwstrat::config_error& e) {
    usage(std::string("--host: ") + e.detail());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mwstrat-launch: %s\n", e.what());
    std::exit(1);
  }
}

// A worker of the first -n lists those; one in a slot past them (--grow-after) lists the slots up to its own, its
// task index its slot (a joiner takes only its own address from it: the chief tells it the ring).
std::string tf_config(const options& o, const std::vector<int>& ports, int index) {
  std::string workers;
  const std::size_t listed = std::min(ports.size(), static_cast<std::size_t>(std::max(o.workers, index + 1)));
  for (std::size_t k = 0; k < listed; ++k) {
    workers += (k ? ", \"" : "\"") + worker_address(o, static_cast<int>(k)) + ':' + std::to_string(ports[k]) + '"';
  }
  return "{\"cluster\": {\"worker\": [" + workers + "]}, \"task\": {\"type\": \"worker\", \"index\": " +
         std::to_string(index) + "}}";
}

// What is left of a worker's process group once its leader has been reaped.
enum class leftovers {
  leader_runs,
  terminated,  // the group has had SIGTERM; SIGKILL at `leftovers_deadline`
  killed,      // the group has had SIGKILL; waited for until `leftovers_deadline`
  gone,        // nothing left to wait for; the output pipe is closed
};

struct worker {
  int index = 0;
  pid_t pid = -1;        // also its process group's id
  int out = -1;          // read end of the worker's stdout+stderr
  std::string pending;   // a partial line
  std::optional<int> status;
  bool ended = false;    // the launcher killed it on the survivors' report
  leftovers rest = leftovers::leader_runs;
  steady_clock::time_point leftovers_deadline = never;
  // A worker on another node: `pid` is its ssh client, whose stdin carries the agent's spec and control lines.
  bool remote = false;
  int control = -1;               // write end of ssh's stdin
  int err = -1;                   // read end of ssh's stderr: the agent's lines and ssh's own messages
  std::string err_pending;
  bool agent_started = false;     // the agent said "started": ssh got through and the program runs
  long remote_pid = 0;
  int remote_signal = 0;          // the signal that ended the worker on its node (0: none)
  std::vector<std::string> said;  // ssh's (or the agent's) own messages: why a start failed
  steady_clock::time_point start_deadline = never;
  steady_clock::time_point next_ping = never;
  std::string relayed;            // survivors' "lost RANK GENERATION" lines, relayed by the agent
  bool ended_unstarted = false;   // the launcher ended its ssh before the agent started the worker
  bool agent_finished = false;    // the agent said how the worker ended (else the connection was lost)
  bool joiner = false;            // started to join the running job in a lost worker's place (--max-workers)
  std::optional<std::uint64_t> joined_generation;  // the ring it joined, as it reported ("joined W G")
  steady_clock::time_point join_at = never;  // when to start a joiner in this lost worker's place
};

// How a reaped worker ended, for local and remote workers alike.
struct outcome {
  int code = 0;
  std::string text;
  bool start_failed = false;  // a remote worker that never started: the launch fails, nothing is restarted
};

// A control line to a remote worker's agent; a full pipe drops it (the agent reads all the time; a ping may be lost).
void send_control(worker& w, const std::string& line) {
  if (w.control < 0) return;
  const ssize_t n = ::write(w.control, line.data(), line.size());
  (void)n;
}

// `sig` to a worker's process group; a remote worker's goes through its agent. A remote worker not yet started
// (ssh still connecting) is ended by ending its ssh: the agent, if it got that far, sees EOF and ends its worker.
void signal_worker(worker& w, int sig) {
  if (w.pid <= 0) return;  // a slot never started (--grow-after)
  if (!w.remote) {
    ::kill(-w.pid, sig);
    // A stopped worker (SIGSTOP, a hung machine) would hold a SIGTERM pending until the SIGKILL after the grace
    // period: continue it so it ends now (as shells do for a stopped job they kill).
    if (sig == SIGTERM || sig == SIGKILL) ::kill(-w.pid, SIGCONT);
    return;
  }
  if (!w.agent_started) {
    w.ended_unstarted = true;
    ::kill(-w.pid, sig == SIGKILL ? SIGKILL : SIGTERM);
    return;
  }
  send_control(w, "signal " + std::to_string(sig) + "\n");
  if (sig == SIGKILL && w.control >= 0) {  // and EOF: whatever happens to the line, the agent ends everything
    ::close(w.control);
    w.control = -1;
  }
}

void emit(worker& w, bool flush_partial) {
  std::size_t start = 0;
  for (std::size_t nl; (nl = w.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string line = w.pending.substr(start, nl - start);
    if (const auto cr = line.rfind('\r'); cr != std::string::npos) line.erase(0, cr + 1);  // keep a bar's last state
    std::printf("[worker %d] %s\n", w.index, line.c_str());
  }
  w.pending.erase(0, start);
  if (flush_partial && !w.pending.empty()) {
    std::printf("[worker %d] %s\n", w.index, w.pending.c_str());
    w.pending.clear();
  }
  std::fflush(stdout);
}

// `report_fd`: the write end of the survivors' report channel (--replace-lost), inherited by the worker; -1: none.
worker start_remote(const options& o, const std::vector<int>& ports, int index, int attempt,
                    std::uint64_t generation, bool joiner);

// `joiner`: it joins the running job in a lost worker's place (--max-workers: MWSTRAT_JOIN).
worker start(const options& o, const std::vector<int>& ports, int index, int attempt, std::uint64_t generation,
             int report_fd, bool joiner = false) {
  if (!o.worker_remote.empty() && o.worker_remote[static_cast<std::size_t>(index)]) {
    return start_remote(o, ports, index, attempt, generation, joiner);
  }
  int fds[2];
  if (::pipe(fds) != 0) {
    std::perror("mwstrat-launch: pipe");
    std::exit(1);
  }
  const std::string config = tf_config(o, ports, index);
  // Held back over the fork: until the child has reset them, a signal sent to end it would run the launcher's
  // handler, which only sets a flag, and be lost.
  sigset_t forwarded{};
  sigset_t mask_before{};
  ::sigemptyset(&forwarded);
  for (const int sig : forwarded_signals) ::sigaddset(&forwarded, sig);
  ::sigprocmask(SIG_BLOCK, &forwarded, &mask_before);
  const pid_t launcher = ::getpid();
  // The launcher forks from its only thread: a parent-death signal fires when the forking thread ends, not the process.
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("mwstrat-launch: fork");
    std::exit(1);
  }
  if (pid == 0) {
    ::setpgid(0, 0);  // its own group, so ending it ends whatever it started
    for (const int sig : forwarded_signals)
      if (::sigismember(&handled_signals, sig) == 1) ::signal(sig, SIG_DFL);
    if (!sigpipe_was_ignored) ::signal(SIGPIPE, SIG_DFL);  // the launcher ignores its own (see main)
    // A launcher killed outright cannot forward anything; SIGTERM, not SIGKILL, so that an mwstrat worker stops at a
    // step boundary and backs up, as on preemption.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    ::sigprocmask(SIG_SETMASK, &mask_before, nullptr);
    if (::getppid() != launcher) std::_Exit(128 + SIGTERM);  // it died before the signal was armed
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    ::setenv("TF_CONFIG", config.c_str(), 1);
    ::setenv("MWSTRAT_LAUNCH_ATTEMPT", std::to_string(attempt).c_str(), 1);
    if (o.replace_lost) {
      ::setenv("MWSTRAT_REPLACE_LOST", "1", 1);
      ::setenv("MWSTRAT_RECOVERY_GENERATION", std::to_string(generation).c_str(), 1);
      ::setenv("MWSTRAT_LAUNCH_REPORT_FD", std::to_string(report_fd).c_str(), 1);
    }
    if (o.min_workers) {
      ::setenv("MWSTRAT_MIN_WORKERS", std::to_string(o.min_workers).c_str(), 1);
      ::setenv("MWSTRAT_LAUNCH_REPORT_FD", std::to_string(report_fd).c_str(), 1);
    }
    if (o.max_workers) {
      ::setenv("MWSTRAT_MAX_WORKERS", std::to_string(o.max_workers).c_str(), 1);
      ::setenv("MWSTRAT_SPARE_WAIT_MS", std::to_string(o.spare_wait_ms).c_str(), 1);
      ::setenv("MWSTRAT_JOIN_LISTEN", o.join_addresses[static_cast<std::size_t>(index)].c_str(), 1);
      std::string all;
      for (const auto& a : o.join_addresses) all += (all.empty() ? "" : ",") + a;
      if (joiner) ::setenv("MWSTRAT_JOIN", all.c_str(), 1);
    }
    if (!o.worker_host.empty()) ::setenv("MWSTRAT_HOST_ID", o.worker_host[static_cast<std::size_t>(index)].c_str(), 1);
    const std::vector<std::string> command = worker_argv(o, index);
    std::vector<char*> argv;
    for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "mwstrat-launch: cannot run '%s': %s\n", argv[0], std::strerror(errno));
    std::_Exit(127);
  }
  ::sigprocmask(SIG_SETMASK, &mask_before, nullptr);
  ::setpgid(pid, pid);
  ::close(fds[1]);
  ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  worker w;
  w.index = index;
  w.pid = pid;
  w.out = fds[0];
  w.joiner = joiner;
  return w;
}

extern "C" char** environ;

// What a remote worker's environment holds besides what its node's login gives it: the launcher's MWSTRAT_*
// variables (the job token among them: through ssh's stdin, never a command line), --env's, and the launcher's
// protocol (launcher_environment.hpp) as a local worker gets it.
std::vector<std::pair<std::string, std::string>> remote_environment(const options& o, const std::vector<int>& ports,
                                                                    int index, int attempt,
                                                                    std::uint64_t generation, bool joiner) {
  std::vector<std::pair<std::string, std::string>> env;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    const std::size_t eq = entry.find('=');
    if (eq == std::string::npos || entry.rfind("MWSTRAT_", 0) != 0) continue;
    const std::string name = entry.substr(0, eq);
    if (name == "MWSTRAT_LAUNCH_REPORT_FD") continue;  // the agent gives the worker a descriptor of its own
    env.emplace_back(name, entry.substr(eq + 1));
  }
  for (const auto& item : o.env_names) {
    const std::size_t eq = item.find('=');
    if (eq != std::string::npos) {
      env.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    } else if (const char* v = std::getenv(item.c_str())) {
      env.emplace_back(item, v);
    }
  }
  env.emplace_back("TF_CONFIG", tf_config(o, ports, index));
  env.emplace_back("MWSTRAT_LAUNCH_ATTEMPT", std::to_string(attempt));
  env.emplace_back("MWSTRAT_HOST_ID", o.worker_host[static_cast<std::size_t>(index)]);
  if (o.replace_lost) {
    env.emplace_back("MWSTRAT_REPLACE_LOST", "1");
    env.emplace_back("MWSTRAT_RECOVERY_GENERATION", std::to_string(generation));
  }
  if (o.min_workers) env.emplace_back("MWSTRAT_MIN_WORKERS", std::to_string(o.min_workers));
  if (o.max_workers) {  // as a local worker's (start)
    env.emplace_back("MWSTRAT_MAX_WORKERS", std::to_string(o.max_workers));
    env.emplace_back("MWSTRAT_SPARE_WAIT_MS", std::to_string(o.spare_wait_ms));
    env.emplace_back("MWSTRAT_JOIN_LISTEN", o.join_addresses[static_cast<std::size_t>(index)]);
    if (joiner) {
      std::string all;
      for (const auto& a : o.join_addresses) all += (all.empty() ? "" : ",") + a;
      env.emplace_back("MWSTRAT_JOIN", all);
    }
  }
  return env;
}

// A worker on another node: ssh to it runs the remote agent (launch/remote_agent.hpp), which reads the worker's
// spec from ssh's stdin and starts it there. ssh's stdout is the worker's output; its stderr the agent's lines.
worker start_remote(const options& o, const std::vector<int>& ports, int index, int attempt,
                    std::uint64_t generation, bool joiner) {
  const std::string& host = o.worker_host[static_cast<std::size_t>(index)];
  mwstrat_launch::agent_spec spec;
  spec.host = host;
  spec.cwd = o.workdir;
  spec.argv = o.command;
  spec.env = remote_environment(o, ports, index, attempt, generation, joiner);
  spec.grace_ms = o.grace_ms;
  spec.liveness_ms = o.ssh.liveness_timeout_s * 1000;
  spec.report = o.replace_lost || o.min_workers != 0;  // --max-workers needs --min-workers
  const std::string encoded = mwstrat_launch::encode(spec);
  int in[2];
  int out[2];
  int err[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    std::perror("mwstrat-launch: pipe");
    std::exit(1);
  }
  const std::vector<std::string> command = mwstrat_launch::ssh_argv(o.ssh, host);
  sigset_t forwarded{};
  sigset_t mask_before{};
  ::sigemptyset(&forwarded);
  for (const int sig : forwarded_signals) ::sigaddset(&forwarded, sig);
  ::sigprocmask(SIG_BLOCK, &forwarded, &mask_before);
  const pid_t launcher = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("mwstrat-launch: fork");
    std::exit(1);
  }
  if (pid == 0) {
    ::setpgid(0, 0);  // the launcher's signals reach the worker through its agent, not through ssh
    for (const int sig : forwarded_signals)
      if (::sigismember(&handled_signals, sig) == 1) ::signal(sig, SIG_DFL);
    if (!sigpipe_was_ignored) ::signal(SIGPIPE, SIG_DFL);  // the launcher ignores its own (see main)
    // A launcher killed outright takes its ssh connections along; each agent then sees EOF and ends its worker.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    ::sigprocmask(SIG_SETMASK, &mask_before, nullptr);
    if (::getppid() != launcher) std::_Exit(128 + SIGTERM);
    ::dup2(in[0], STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    std::vector<char*> argv;
    for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "cannot run '%s': %s\n", argv[0], std::strerror(errno));
    std::_Exit(255);
  }
  ::sigprocmask(SIG_SETMASK, &mask_before, nullptr);
  ::setpgid(pid, pid);
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  // The spec is small (kilobytes) and the pipe takes it whole before ssh reads a byte; a larger pipe for a large
  // --env, so that the launcher never waits here for a node that is slow to log in.
  ::fcntl(in[1], F_SETPIPE_SZ, 1 << 20);
  for (std::size_t sent = 0; sent < encoded.size();) {
    const ssize_t n = ::write(in[1], encoded.data() + sent, encoded.size() - sent);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // ssh is gone already: its exit says why
    sent += static_cast<std::size_t>(n);
  }
  ::fcntl(in[1], F_SETFL, ::fcntl(in[1], F_GETFL) | O_NONBLOCK);
  ::fcntl(out[0], F_SETFL, ::fcntl(out[0], F_GETFL) | O_NONBLOCK);
  ::fcntl(err[0], F_SETFL, ::fcntl(err[0], F_GETFL) | O_NONBLOCK);
  worker w;
  w.index = index;
  w.pid = pid;
  w.out = out[0];
  w.remote = true;
  w.joiner = joiner;
  w.control = in[1];
  w.err = err[0];
  // ssh's connect timeout bounds the TCP connection; this bounds the rest (key exchange, the login, the agent).
  w.start_deadline = steady_clock::now() + std::chrono::seconds(2 * o.ssh.connect_timeout_s + 5);
  w.next_ping = steady_clock::now() + std::chrono::seconds(1);
  return w;
}

constexpr int preempted_code = 75;  // mwstrat::preempted_exit_code (train/preemption.hpp)

int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) +
         ")";
}

volatile sig_atomic_t interrupted = 0;
void on_signal(int sig) { interrupted = sig; }

// A remote worker's stderr: the agent's lines (agent_protocol.hpp) and ssh's own messages. `at_end`: ssh has exited;
// read what is left and close.
void read_agent(const options& o, worker& w, bool at_end) {
  if (w.err < 0) return;
  char buf[16384];
  for (;;) {
    const ssize_t got = ::read(w.err, buf, sizeof buf);
    if (got > 0) {
      w.err_pending.append(buf, static_cast<std::size_t>(got));
      continue;
    }
    if (got == 0 || at_end) {
      ::close(w.err);
      w.err = -1;
      if (!w.err_pending.empty() && w.err_pending.back() != '\n') w.err_pending += '\n';
    }
    break;
  }
  const std::string& host = o.worker_host[static_cast<std::size_t>(w.index)];
  const std::string_view prefix = mwstrat_launch::agent_line_prefix;
  for (std::size_t nl; (nl = w.err_pending.find('\n')) != std::string::npos; w.err_pending.erase(0, nl + 1)) {
    std::string line = w.err_pending.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (line.compare(0, prefix.size(), prefix) != 0) {  // ssh's own (or the remote shell's) message
      if (w.said.size() == 8) w.said.erase(w.said.begin());
      w.said.push_back(line);
      std::fprintf(stderr, "mwstrat-launch: worker %d: ssh %s: %s\n", w.index, host.c_str(), line.c_str());
      continue;
    }
    const std::string said = line.substr(prefix.size());
    long pid = 0;
    int sig = 0;
    if (std::sscanf(said.c_str(), "started %ld", &pid) == 1) {
      w.agent_started = true;
      w.remote_pid = pid;
      w.start_deadline = never;
      std::fprintf(stderr, "mwstrat-launch: worker %d: pid %ld on %s\n", w.index, pid, host.c_str());
    } else if (said.rfind("lost ", 0) == 0) {
      w.relayed += said + "\n";
    } else if (std::sscanf(said.c_str(), "signal %d", &sig) == 1) {
      w.remote_signal = sig;
      w.agent_finished = true;
    } else if (said.rfind("exit ", 0) == 0) {
      w.agent_finished = true;
    } else if (said.rfind("error ", 0) == 0) {
      w.said.push_back(said.substr(6));
    } else {
      std::fprintf(stderr, "mwstrat-launch: worker %d: agent on %s: %s\n", w.index, host.c_str(), said.c_str());
    }
  }
}

// Reads what is left of a finished worker's output (a replaced worker's) and closes it.
void drain(worker& w) {
  for (int* fd : {&w.err, &w.control}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  if (w.out < 0) return;
  char buf[65536];
  for (ssize_t got; (got = ::read(w.out, buf, sizeof buf)) > 0;) w.pending.append(buf, static_cast<std::size_t>(got));
  ::close(w.out);
  w.out = -1;
  emit(w, true);
}

bool group_gone(pid_t pgid) { return ::kill(-pgid, 0) != 0 && errno == ESRCH; }

// A SIGKILLed process is gone at once; one that outlasts this is a zombie nobody reaps or stuck in the kernel.
constexpr auto kill_wait = std::chrono::seconds(1);

// Called once the leader of `w` is reaped, whether it failed or succeeded: what it left in its group would hold the
// output pipe open (the launcher would wait for it), could hold its port (a restart would fail to bind), and would
// outlive the job unnoticed. It is ended as a worker is, SIGTERM first, so that a helper can clean up.
void end_leftovers(worker& w, steady_clock::time_point kill_at) {
  w.rest = leftovers::terminated;
  w.leftovers_deadline = kill_at;
  ::kill(-w.pid, SIGTERM);
  ::kill(-w.pid, SIGCONT);
}

// Each turn: SIGKILL the leftovers of `w` when their time is up, and stop waiting for them once they are gone or have
// been killed for `kill_wait`. Their pipe is then closed, read or not: a process that left the group (a daemon) may
// hold it for ever.
void settle_leftovers(worker& w, steady_clock::time_point now) {
  if (w.rest != leftovers::terminated && w.rest != leftovers::killed) return;
  const bool gone = group_gone(w.pid);
  if (!gone && now < w.leftovers_deadline) return;
  if (!gone && w.rest == leftovers::terminated) {
    ::kill(-w.pid, SIGKILL);
    w.rest = leftovers::killed;
    w.leftovers_deadline = now + kill_wait;
    return;
  }
  w.rest = leftovers::gone;
  drain(w);
}

// The leftovers of a worker about to be replaced, at once: its replacement binds the same port, and the survivors
// are waiting for it.
void kill_leftovers_now(worker& w) {
  if (w.pid <= 0) return;  // a slot never started (--grow-after): -(-1) would be init
  ::kill(-w.pid, SIGKILL);
  const auto give_up = steady_clock::now() + kill_wait;
  while (!group_gone(w.pid) && steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  w.rest = leftovers::gone;
  drain(w);
}

constexpr int peer_lost_code = 69;  // mwstrat::peer_lost_exit_code: a survivor that gave up waiting

// The pid a user would look for: a remote worker's on its node.
long shown_pid(const worker& w) { return w.remote ? w.remote_pid : static_cast<long>(w.pid); }

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += (out.empty() ? "" : "; ") + l;
  return out;
}

// How reaped worker `w` ended. A remote worker's ssh exits with its agent's status, which is its worker's; what
// ssh and the agent said tells a start that failed (ssh could not connect or log in, the program is missing) from
// a worker that ran.
outcome judge(const options& o, worker& w, int status) {
  if (!w.remote) return {exit_code(status), describe(status), false};
  read_agent(o, w, true);
  if (w.control >= 0) {
    ::close(w.control);
    w.control = -1;
  }
  const std::string& host = o.worker_host[static_cast<std::size_t>(w.index)];
  const int code = exit_code(status);
  if (!w.agent_started && w.ended_unstarted) {
    return {128 + SIGTERM, "was ended by the launcher before it started on host " + host, false};
  }
  if (!w.agent_started) {
    const std::string why = w.said.empty() ? "ssh " + describe(status) : joined(w.said);
    return {code == 0 ? 1 : code, "could not be started on host " + host + " over ssh: " + why, true};
  }
  if (w.remote_signal != 0) {
    return {128 + w.remote_signal, "was killed by signal " + std::to_string(w.remote_signal) + " (" +
                                       strsignal(w.remote_signal) + ") on host " + host, false};
  }
  if (!w.agent_finished) {
    return {code == 0 ? 255 : code,
            "lost its ssh connection to host " + host + (w.said.empty() ? "" : ": " + joined(w.said)), false};
  }
  return {code, "exited with status " + std::to_string(code) + " on host " + host, false};
}

// Set when a remote worker could not be started: the launch has failed, and restarting it would fail again.
bool launch_failed = false;

// Runs one attempt of the whole group; returns 0, preempted_code when the workers stopped for preemption (none
// failed otherwise), or the first failure's exit code. `restarts` counts failures restarted so far (replacements
// included), against --max-restarts.
int run_group(const options& o, const std::vector<int>& ports, int attempt, int& restarts) {
  // The survivors' report channel (--replace-lost): its write end is every worker's, its read end the launcher's.
  int report[2] = {-1, -1};
  if (o.replace_lost || o.min_workers != 0) {
    if (::pipe(report) != 0) {
      std::perror("mwstrat-launch: pipe");
      std::exit(1);
    }
    ::fcntl(report[0], F_SETFD, FD_CLOEXEC);
    ::fcntl(report[0], F_SETFL, ::fcntl(report[0], F_GETFL) | O_NONBLOCK);
  }
  std::string reports;          // a partial report line
  std::uint64_t generation = 0;  // the ring generation of the latest replacement (0: none yet)
  std::vector<worker> ws;
  const int first = o.first_local;
  const int count = o.local_workers < 0 ? o.workers : o.local_workers;
  const int slots = count + (o.slots() - o.workers);  // ws's workers: the local ones, then --grow-after's
  for (int i = first; i < first + count; ++i) {
    ws.push_back(start(o, ports, i, attempt, 0, report[1], o.late_node()));  // a late node's workers join
    // A remote worker's pid on its node comes with the agent's "started" (read_agent).
    if (!ws.back().remote) {
      std::fprintf(stderr, "mwstrat-launch: worker %d: pid %d\n", i, static_cast<int>(ws.back().pid));
    }
  }
  // --grow-after: the slots past -n, each started as a joiner at that time (below, as a lost worker's joiner is).
  for (int i = o.workers; i < o.slots(); ++i) {
    worker slot;
    slot.index = i;
    slot.status = 0;
    slot.rest = leftovers::gone;
    slot.join_at = steady_clock::now() + std::chrono::milliseconds(o.grow_after_ms);
    ws.push_back(std::move(slot));
  }
  if (o.slots() > o.workers) {
    std::fprintf(stderr, "mwstrat-launch: the job grows to %d workers in %d ms (--grow-after)\n", o.slots(),
                 o.grow_after_ms);
  }
  bool finishing = false;        // a worker finished the job (exit 0): no more joiners
  auto end_joiners_at = never;   // then, after the grace period, joiners still waiting to be admitted are ended
  std::optional<int> failure;    // the first exit that is neither 0 nor the preemption code
  bool preempted = false;        // a worker exited with the preemption code
  bool forwarded = false;        // the launcher's own signal went to the workers
  // When the workers still running are asked to end (SIGTERM) and killed (SIGKILL); `never`: no such deadline.
  auto term_at = never;
  auto kill_at = never;
  auto end_all = [&](int sig) {
    for (auto& w : ws) {
      if (w.status) continue;  // its group was ended when it was reaped (settle_leftovers)
      signal_worker(w, sig);
    }
  };
  auto grace = [&] { return steady_clock::now() + std::chrono::milliseconds(o.grace_ms); };
  // "lost RANK GENERATION" from a survivor: end that worker, if it still runs in that generation (a stopped one
  // never exits by itself); its exit then gets it replaced below.
  auto read_reports = [&] {
    if (report[0] < 0) return;
    char buf[4096];
    for (ssize_t got; (got = ::read(report[0], buf, sizeof buf)) > 0;) {
      reports.append(buf, static_cast<std::size_t>(got));
    }
    for (auto& w : ws) {
      reports += w.relayed;
      w.relayed.clear();
    }
    for (std::size_t nl; (nl = reports.find('\n')) != std::string::npos; reports.erase(0, nl + 1)) {
      int rank = -1;
      unsigned long long gen = 0;
      // A joiner says which ring it joined: a loss reported from an earlier ring is its predecessor's.
      if (std::sscanf(reports.substr(0, nl).c_str(), "joined %d %llu", &rank, &gen) == 2) {
        if (rank >= first && rank < first + slots && ws[static_cast<std::size_t>(rank - first)].joiner) {
          ws[static_cast<std::size_t>(rank - first)].joined_generation = gen;
        }
        continue;
      }
      if (std::sscanf(reports.substr(0, nl).c_str(), "lost %d %llu", &rank, &gen) != 2) continue;
      if (rank >= first && rank < first + slots) {
        const worker& now = ws[static_cast<std::size_t>(rank - first)];
        if (now.joiner && (!now.joined_generation || gen < *now.joined_generation)) continue;  // about its predecessor
      }
      // An elastic job's survivors name the job's first ranks whatever ring they are on; a replacement's must be on
      // the latest generation (a report from before it joined names the worker it replaced).
      const bool stale = o.replace_lost && gen != generation;
      if (rank < first || rank >= first + slots || stale || failure || forwarded) continue;
      worker& lost = ws[static_cast<std::size_t>(rank - first)];
      if (lost.status || lost.ended) continue;
      lost.ended = true;
      std::fprintf(stderr, "mwstrat-launch: the survivors report worker %d (pid %ld) lost; ending it\n", rank,
                   shown_pid(lost));
      signal_worker(lost, SIGKILL);
    }
  };
  for (;;) {
    std::vector<pollfd> pfds;
    for (auto& w : ws) {
      if (w.out >= 0) pfds.push_back({w.out, POLLIN, 0});
      if (w.err >= 0) pfds.push_back({w.err, POLLIN, 0});
    }
    if (report[0] >= 0) pfds.push_back({report[0], POLLIN, 0});
    if (!pfds.empty()) ::poll(pfds.data(), pfds.size(), 50);
    else std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (auto& w : ws) {
      if (w.out < 0) continue;
      char buf[65536];
      for (;;) {
        const ssize_t got = ::read(w.out, buf, sizeof buf);
        if (got > 0) { w.pending.append(buf, static_cast<std::size_t>(got)); continue; }
        if (got == 0) { ::close(w.out); w.out = -1; emit(w, true); }
        break;
      }
      emit(w, false);
    }
    const auto turn = steady_clock::now();
    for (auto& w : ws) {
      if (!w.remote) continue;
      read_agent(o, w, false);
      if (w.status) continue;
      // The launcher is alive: an agent that hears nothing for the liveness timeout ends its worker.
      if (turn >= w.next_ping) {
        send_control(w, "ping\n");
        w.next_ping = turn + std::chrono::seconds(1);
      }
      if (turn >= w.start_deadline) {
        w.said.push_back("no word from the remote agent within " + std::to_string(2 * o.ssh.connect_timeout_s + 5) +
                         " s of starting ssh");
        w.start_deadline = never;
        ::kill(-w.pid, SIGKILL);
      }
    }
    read_reports();
    for (auto& w : ws) {
      if (w.status) continue;
      int status = 0;
      if (::waitpid(w.pid, &status, WNOHANG) == w.pid) {
        w.status = status;
        end_leftovers(w, grace());
        const outcome ended = judge(o, w, status);
        if (w.remote && w.agent_started) {  // exit statuses come back per worker
          std::fprintf(stderr, "mwstrat-launch: worker %d (pid %ld on %s) %s\n", w.index, w.remote_pid,
                       o.worker_host[static_cast<std::size_t>(w.index)].c_str(), ended.text.c_str());
        } else if (w.remote && !ended.start_failed) {
          std::fprintf(stderr, "mwstrat-launch: worker %d %s\n", w.index, ended.text.c_str());
        }
        if (ended.code == 0) {
          if (!finishing) end_joiners_at = grace();  // a joiner not yet admitted will never be
          finishing = true;
          continue;
        }
        if (ended.start_failed) {
          if (!launch_failed) {
            std::fprintf(stderr, "mwstrat-launch: worker %d %s; ending the other workers\n", w.index,
                         ended.text.c_str());
          }
          launch_failed = true;
          if (!failure) failure = ended.code;
          end_all(SIGTERM);
          term_at = never;
          if (kill_at == never) kill_at = grace();
          continue;
        }
        // --replace-lost: this worker alone is started again, and the others (waiting for it) go on.
        const int code = ended.code;
        const bool was_lost = code != preempted_code && code != peer_lost_code;  // not a stop, not a survivor giving up
        if (o.replace_lost && was_lost && !failure && !forwarded && !preempted && restarts < o.max_restarts) {
          ++restarts;
          ++generation;
          std::fprintf(stderr,
                       "mwstrat-launch: worker %d (pid %ld) %s; starting a replacement (restart %d of %d, ring "
                       "generation %llu)\n",
                       w.index, shown_pid(w), ended.text.c_str(), restarts,
                       o.max_restarts, static_cast<unsigned long long>(generation));
          kill_leftovers_now(w);
          w = start(o, ports, w.index, attempt, generation, report[1]);
          if (!w.remote) std::fprintf(stderr, "mwstrat-launch: worker %d: pid %d\n", w.index, static_cast<int>(w.pid));
          continue;
        }
        // --min-workers: the survivors shrink the job and go on without this worker (also one that exited 78,
        // mwstrat::removed_exit_code: they went on without it while it was stopped).
        if (o.min_workers && was_lost && !failure && !forwarded && !preempted) {
          int running = 0;
          for (const auto& other : ws) running += other.status ? 0 : 1;
          // A per-node agent sees its own node's workers only: the survivors, wherever they run, hold the job to
          // --min-workers (below it they exit 69, and their agents end as for any failure). So that a job whose
          // workers all fail by themselves (a bad flag, a bug) never ends "well" on every node, an agent goes on
          // only without a worker that was lost: killed by a signal, or removed by the survivors (exit 78).
          const bool agent = o.agents.nnodes > 0;
          const bool killed_or_removed = code > 128 || code == mwstrat::removed_exit_code;
          if (agent ? killed_or_removed : running >= o.min_workers) {
            if (agent) {
              std::fprintf(stderr,
                           "mwstrat-launch: worker %d (pid %ld) %s; the job goes on without it (%d of this node's "
                           "workers run; the survivors hold it to --min-workers %d)\n",
                           w.index, shown_pid(w), ended.text.c_str(), running, o.min_workers);
            } else {
              std::fprintf(stderr,
                           "mwstrat-launch: worker %d (pid %ld) %s; the job goes on without it (%d workers, "
                           "--min-workers %d)\n",
                           w.index, shown_pid(w), ended.text.c_str(), running, o.min_workers);
            }
            if (o.max_workers && !finishing && restarts < o.max_restarts) {
              ++restarts;
              w.join_at = steady_clock::now() + std::chrono::milliseconds(o.join_delay_ms);
              std::fprintf(stderr, "mwstrat-launch: a joiner takes worker %d's place in %d ms (restart %d of %d)\n",
                           w.index, o.join_delay_ms, restarts, o.max_restarts);
            }
            continue;
          }
          if (w.joiner && finishing) {
            // It was still waiting to be admitted when the job finished: nothing of the job's was lost.
            std::fprintf(stderr, "mwstrat-launch: joiner %d (pid %ld) %s after the job finished\n", w.index,
                         shown_pid(w), ended.text.c_str());
            continue;
          }
        }
        if (code == preempted_code && !failure) {
          if (!preempted && !forwarded) {
            std::fprintf(stderr,
                         "mwstrat-launch: worker %d (pid %ld) stopped for preemption (exit %d); waiting for the others "
                         "to stop at the same step\n",
                         w.index, shown_pid(w), preempted_code);
            // They agreed on the same step and are exiting by themselves (the chief may be writing a backup).
            if (term_at == never) term_at = grace();
          }
          preempted = true;
          continue;
        }
        if (!failure) {
          failure = code;
          std::fprintf(stderr, "mwstrat-launch: worker %d (pid %ld) %s; ending the other workers\n", w.index,
                       shown_pid(w), ended.text.c_str());
          end_all(SIGTERM);
          term_at = never;
          kill_at = grace();
        }
      }
    }
    for (auto& w : ws) {
      if (!w.status || w.join_at == never || steady_clock::now() < w.join_at) continue;
      if (finishing || failure || forwarded || preempted) {
        w.join_at = never;
        continue;
      }
      kill_leftovers_now(w);
      w = start(o, ports, w.index, attempt, 0, report[1], true);
      if (w.remote) {
        std::fprintf(stderr, "mwstrat-launch: worker %d: a joiner started over ssh on %s\n", w.index,
                     o.worker_host[static_cast<std::size_t>(w.index)].c_str());
      } else {
        std::fprintf(stderr, "mwstrat-launch: worker %d: pid %d (a joiner)\n", w.index, static_cast<int>(w.pid));
      }
    }
    if (end_joiners_at != never && steady_clock::now() >= end_joiners_at) {
      end_joiners_at = never;
      for (auto& w : ws) {
        if (w.joiner && !w.status) signal_worker(w, SIGTERM);
      }
    }
    if (interrupted && !forwarded) {
      forwarded = true;
      std::fprintf(stderr, "mwstrat-launch: %s; forwarding SIGTERM to the workers\n", strsignal(interrupted));
      end_all(SIGTERM);  // mwstrat workers stop at the next step boundary and exit with the preemption code
      term_at = never;
      if (kill_at == never) kill_at = grace();
    }
    const auto now = steady_clock::now();
    if (term_at != never && now >= term_at) {
      end_all(SIGTERM);
      term_at = never;
      kill_at = grace();
    }
    if (kill_at != never && now >= kill_at) {
      end_all(SIGKILL);
      kill_at = never;
    }
    for (auto& w : ws) settle_leftovers(w, now);
    bool running = false;
    for (auto& w : ws) running = running || !w.status || w.rest != leftovers::gone;
    if (!running) break;
  }
  if (report[0] >= 0) {
    ::close(report[0]);
    ::close(report[1]);
  }
  if (failure) return *failure;
  if (preempted) return preempted_code;
  return forwarded ? 128 + interrupted : 0;
}

}  // namespace

// A job token for a job that spans nodes and has none: without one, anyone who reaches a worker's port could join
// the ring. Made here, it reaches local workers through the environment and remote ones through ssh's stdin.
void ensure_job_token(const options& o) {
  const char* given = std::getenv("MWSTRAT_JOB_TOKEN");
  if (!o.any_remote() || (given && *given)) return;
  unsigned char bytes[32];
  std::ifstream random("/dev/urandom", std::ios::binary);
  if (!random.read(reinterpret_cast<char*>(bytes), sizeof bytes)) {
    std::fprintf(stderr, "mwstrat-launch: cannot read /dev/urandom for a job token; set MWSTRAT_JOB_TOKEN\n");
    std::exit(1);
  }
  static constexpr char hex[] = "0123456789abcdef";
  std::string token;
  for (const unsigned char b : bytes) {
    token += hex[b >> 4];
    token += hex[b & 15];
  }
  ::setenv("MWSTRAT_JOB_TOKEN", token.c_str(), 1);
  std::fprintf(stderr, "mwstrat-launch: made a job token for this job (MWSTRAT_JOB_TOKEN was not set)\n");
}

// Node 0's desk for late nodes (launch/late_nodes.hpp), open for the rest of the job once the nodes have met.
std::unique_ptr<mwstrat_launch::late_desk> late_nodes_desk;

// A per-node agent: meets the other nodes' agents, then knows every worker's address and which are its own.
void meet_other_nodes(options& o) {
  const auto& a = o.agents;
  std::vector<std::string> nodes;
  // Late nodes may come where --max-workers leaves room for whole nodes past the first ones.
  const int end_late = o.max_workers ? o.max_workers / o.workers : 0;
  try {
    auto met = mwstrat_launch::meet_nodes(a, end_late);
    nodes = std::move(met.addresses);
    late_nodes_desk = std::move(met.desk);
  } catch (const mwstrat::config_error& e) {
    usage(e.detail());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mwstrat-launch: node %d of %d: %s\n", a.node_rank, a.nnodes, e.what());
    std::exit(1);
  }
  const int per_node = o.workers;
  o.worker_host.clear();
  o.worker_address.clear();
  o.worker_remote.clear();
  for (const auto& address : nodes) {
    for (int i = 0; i < per_node; ++i) {
      o.worker_host.push_back(address);
      o.worker_address.push_back(address);
      o.worker_remote.push_back(false);
    }
  }
  o.workers = per_node * a.nnodes;  // the job's first workers; a late node's come past them
  o.first_local = per_node * a.node_rank;
  o.local_workers = per_node;
  if (o.base_port == 0) o.base_port = 20000;
  if (o.base_port + (o.max_workers ? 2 : 1) * o.port_slots() - 1 > 65535) usage("--base-port: ports run past 65535");
  std::string list;
  for (const auto& n : nodes) list += (list.empty() ? "" : ", ") + n;
  if (o.late_node()) {
    std::fprintf(stderr,
                 "mwstrat-launch: node %d (late: the job has %d nodes) registered at node 0's late desk: nodes %s; "
                 "workers %d..%d are this node's and join the running job\n",
                 a.node_rank, a.nnodes, list.c_str(), o.first_local, o.first_local + per_node - 1);
  } else {
    std::fprintf(stderr,
                 "mwstrat-launch: node %d of %d met the others at %s: nodes %s; workers %d..%d are this node's\n",
                 a.node_rank, a.nnodes, a.rendezvous.c_str(), list.c_str(), o.first_local,
                 o.first_local + per_node - 1);
  }
  if (late_nodes_desk) {
    const int rendezvous_port = std::stoi(a.rendezvous.substr(a.rendezvous.rfind(':') + 1));  // checked when met
    std::fprintf(stderr, "mwstrat-launch: node 0: late nodes %d..%d may join at port %d (--max-workers %d)\n", a.nnodes,
                 end_late - 1, mwstrat_launch::late_desk_port(rendezvous_port), o.max_workers);
  }
}

int main(int argc, char** argv) {
  if (argc == 2 && std::string_view(argv[1]) == "--remote-agent") return mwstrat_launch::run_remote_agent();
  options o = parse(argc, argv);
  if (o.agents.nnodes > 0) meet_other_nodes(o);
  ensure_job_token(o);
  // A write to a remote worker's ssh that has just exited must fail, not kill the launcher; its workers get the
  // default back.
  struct sigaction pipe_before{};
  sigpipe_was_ignored = ::sigaction(SIGPIPE, nullptr, &pipe_before) == 0 && pipe_before.sa_handler == SIG_IGN;
  ::signal(SIGPIPE, SIG_IGN);
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  ::sigemptyset(&handled_signals);
  for (const int sig : forwarded_signals) {
    struct sigaction before{};
    if (::sigaction(sig, nullptr, &before) == 0 && before.sa_handler == SIG_IGN) continue;
    ::sigaction(sig, &sa, nullptr);
    ::sigaddset(&handled_signals, sig);
  }
  std::vector<int> ports;
  std::vector<int> join_ports;  // --max-workers: one join address per worker (whichever is the chief listens there)
  const int per_worker = o.max_workers ? 2 : 1;
  const int slots = o.port_slots();
  if (o.base_port != 0) {
    for (int i = 0; i < per_worker * slots; ++i) (i < slots ? ports : join_ports).push_back(o.base_port + i);
  } else {
    // One call, so that the join ports are not the workers' (the ports are free now, not held).
    for (const int p : free_ports(o.host, per_worker * slots)) {
      (static_cast<int>(ports.size()) < slots ? ports : join_ports).push_back(p);
    }
  }
  // Under agents, the workers of the nodes this one knows (a late node's stand-ins included: launch/late_nodes.hpp).
  const std::size_t known =
      o.worker_address.empty() ? join_ports.size() : std::min(join_ports.size(), o.worker_address.size());
  for (std::size_t i = 0; i < known; ++i) {
    o.join_addresses.push_back(worker_address(o, static_cast<int>(i)) + ":" + std::to_string(join_ports[i]));
  }
  int restarts = 0;     // restarts after failures (preemptions are not counted)
  int preemptions = 0;  // restarts after preemptions, bounded by --max-preemptions
  for (int attempt = 0;; ++attempt) {
    const int code = run_group(o, ports, attempt, restarts);
    if (code == 0) return 0;
    if (interrupted) return code;  // the launcher itself was told to stop: its workers have stopped too
    if (launch_failed) return code;  // a node could not be reached or could not run the program
    if (code == preempted_code) {
      if (preemptions >= o.max_preemptions) {
        std::fprintf(stderr, "mwstrat-launch: giving up after %d preemption restart(s) (--max-preemptions)\n",
                     preemptions);
        return code;
      }
      ++preemptions;
      std::fprintf(stderr, "mwstrat-launch: restarting the preempted group (not counted against --max-restarts)\n");
      // A short pause: a worker that exits 75 at once, again and again, must not spin the machine.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    if (restarts >= o.max_restarts) {
      if (o.max_restarts > 0) std::fprintf(stderr, "mwstrat-launch: giving up after %d restart(s)\n", o.max_restarts);
      return code;
    }
    ++restarts;
    std::fprintf(stderr, "mwstrat-launch: restarting the group (restart %d of %d)\n", restarts, o.max_restarts);
  }
}
