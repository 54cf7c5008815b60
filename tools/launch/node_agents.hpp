#pragma once
// Per-node agents (`mwstrat-launch --nnodes N --node-rank K --rendezvous HOST:PORT -n W`): one launcher per node,
// started by a scheduler (a Slurm step, a Kubernetes Indexed Job) instead of by ssh. The agents meet at the
// rendezvous — node 0 serves it on HOST:PORT, HOST being one of node 0's own addresses — and each learns every
// node's address as node 0 sees it (cluster/detail/rendezvous.hpp, the exchange mpi_resolver uses, with "node" for
// "rank" in its messages). Worker r = K·W + i of the N·W workers runs on node K, listening on that node's address
// at base port + r. A node that does not arrive by the deadline is named by node 0 and, through its answer, on every
// node that did.
//
// An elastic job may grow by nodes that arrive later (`--node-rank K` with K >= N, within --max-workers): node 0's
// agent keeps a late desk for them (launch/late_nodes.hpp).
//
// What the scheduler says, when the flags do not: in an srun step (SLURM_STEP_ID set), Slurm's SLURM_NNODES and
// SLURM_NODEID, and the rendezvous on the first host of SLURM_JOB_NODELIST, port 29500; in a Kubernetes Indexed Job,
// JOB_COMPLETION_INDEX for the node rank (--nnodes and --rendezvous given on the command line).
#include <mwstrat/cluster/detail/rendezvous.hpp>
#include <mwstrat/cluster/hostlist.hpp>
#include <mwstrat/error.hpp>

#include "late_nodes.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace mwstrat_launch {

struct node_agent_settings {
  int nnodes = 0;                 // 0: not a per-node agent
  int node_rank = -1;             // -1: from the environment
  std::string rendezvous;         // HOST:PORT; empty: from the environment
  int rendezvous_timeout_s = 60;  // --rendezvous-timeout
};

// Fills what the flags left open from the scheduler's environment; returns what is still missing, or nothing.
inline std::optional<std::string> settings_from_environment(node_agent_settings& s) {
  const auto number = [](const char* name) -> std::optional<int> {
    const char* v = std::getenv(name);
    if (!v || !*v) return std::nullopt;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end != '\0' || n < 0 || n > 65535) return std::nullopt;
    return static_cast<int>(n);
  };
  if (s.nnodes == 0) {
    if (const auto n = number("SLURM_NNODES")) s.nnodes = *n;
  }
  if (s.node_rank < 0) {
    if (const auto k = number("SLURM_NODEID")) s.node_rank = *k;
    else if (const auto j = number("JOB_COMPLETION_INDEX")) s.node_rank = *j;
  }
  if (s.rendezvous.empty()) {
    if (const char* list = std::getenv("SLURM_JOB_NODELIST"); list && *list) {
      try {
        s.rendezvous = mwstrat::expand_hostlist(list, "Slurm", "SLURM_JOB_NODELIST").front() + ":29500";
      } catch (const mwstrat::config_error& e) {
        return std::string(e.detail());
      }
    }
  }
  if (s.nnodes < 1) return std::string("--nnodes N is needed (or SLURM_NNODES)");
  if (s.node_rank < 0) return std::string("--node-rank K is needed (or SLURM_NODEID, or JOB_COMPLETION_INDEX)");
  // A node rank from N on is a late node's: the launcher checks it against --max-workers.
  if (s.rendezvous.empty()) return std::string("--rendezvous HOST:PORT is needed (or SLURM_JOB_NODELIST)");
  return std::nullopt;
}

// The IPv4 address of `host` (a name is resolved: a Kubernetes headless service, a Slurm node name).
inline std::optional<std::string> ipv4_of(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || !found) return std::nullopt;
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(found->ai_addr)->sin_addr, text, sizeof text);
  ::freeaddrinfo(found);
  return std::string(text);
}

// What an agent learns at the rendezvous: every node's IPv4 address, in node order (a late node's agent: the nodes
// up to its own), and on node 0, where late nodes may come, the desk that serves them (it lives as long as this).
struct met_nodes {
  std::vector<std::string> addresses;
  std::unique_ptr<late_desk> desk;
};

// Meets the other nodes' agents (a late node: registers at node 0's late desk). `end_late`: late nodes N ..
// end_late - 1 may come (node 0 then opens the desk). Throws mwstrat::error (the rendezvous's, naming the nodes that
// never came) or config_error for a malformed --rendezvous.
inline met_nodes meet_nodes(const node_agent_settings& s, int end_late = 0) {
  const std::size_t colon = s.rendezvous.rfind(':');
  const std::string host = colon == std::string::npos ? "" : s.rendezvous.substr(0, colon);
  char* end = nullptr;
  const long port = colon == std::string::npos ? 0 : std::strtol(s.rendezvous.c_str() + colon + 1, &end, 10);
  if (host.empty() || port < 1 || port > 65535 || *end != '\0') {
    throw mwstrat::config_error({"launch"}, "--rendezvous '" + s.rendezvous + "' is not HOST:PORT");
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(s.rendezvous_timeout_s);
  // A Kubernetes service name resolves only once its pod is up: asked again until the deadline.
  auto ip = ipv4_of(host);
  while (!ip && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ip = ipv4_of(host);
  }
  if (!ip) {
    throw mwstrat::config_error({"launch"}, "--rendezvous: '" + host + "' did not resolve to an IPv4 address within " +
                                                std::to_string(s.rendezvous_timeout_s) + " s");
  }
  mwstrat::detail::rendezvous_context ctx;
  ctx.endpoint = *ip + ":" + std::to_string(port);
  ctx.rank = s.node_rank;
  ctx.size = s.nnodes;
  ctx.deadline = deadline;
  ctx.name = "node rendezvous";
  ctx.member = "node";
  const bool late = s.node_rank >= s.nnodes;
  if ((late || end_late > s.nnodes) && port == 65535) {
    throw mwstrat::config_error({"launch"}, "--rendezvous port 65535 leaves no port after it for the late desk");
  }
  if (late) {  // the job runs already: node 0's late desk, as if the job had node_rank + 1 nodes
    ctx.size = s.node_rank + 1;
    ctx.endpoint = *ip + ":" + std::to_string(late_desk_port(static_cast<int>(port)));
    ctx.name = "node 0's late desk";
  }
  const auto p = static_cast<std::uint16_t>(late ? late_desk_port(static_cast<int>(port)) : port);
  std::vector<std::string> endpoints = !late && (s.node_rank == 0 || s.nnodes == 1)
                                           ? mwstrat::detail::rendezvous_serve(ctx, *ip, p)
                                           : mwstrat::detail::rendezvous_join(ctx, *ip, p);
  met_nodes met;
  for (const auto& e : endpoints) met.addresses.push_back(e.substr(0, e.rfind(':')));  // the port was the exchange's
  if (s.node_rank == 0 && end_late > s.nnodes) {
    met.desk = std::make_unique<late_desk>(*ip, late_desk_port(static_cast<int>(port)), met.addresses, end_late);
  }
  return met;
}

}  // namespace mwstrat_launch
