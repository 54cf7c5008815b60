#pragma once
/// \file
/// The cluster of a job started by an MPI launcher (`mpirun -np 4 program`), for the TCP ring: the rank and the
/// world size come from the launcher's variables, the addresses from a rendezvous over the first host.
///
/// Read, the first that is set: Open MPI's `OMPI_COMM_WORLD_RANK` / `OMPI_COMM_WORLD_SIZE` (and
/// `OMPI_COMM_WORLD_LOCAL_SIZE`), or PMI's `PMI_RANK` / `PMI_SIZE` (MPICH's Hydra, Intel MPI; `MPI_LOCALNRANKS`).
/// MPI itself is never initialised: the ring does the training, MPI only started the processes.
///
/// The rendezvous (detail/rendezvous.hpp): rank 0 listens on `MWSTRAT_RENDEZVOUS` ("ipv4:port", an address of
/// the host rank 0 runs on, e.g. `mpirun -x MWSTRAT_RENDEZVOUS=10.0.0.1:29400`), every other rank connects and
/// registers the address its ring will listen on (the IP its connection came from, a free port), and each gets
/// the list in rank order. Without `MWSTRAT_RENDEZVOUS`, when every rank is on one host (local size = world
/// size), rank 0 listens on 127.0.0.1 at a port derived from the job's id (`OMPI_MCA_ess_base_jobid`,
/// `PMIX_NAMESPACE` or `PMI_KVSNAME`), the same in every rank. Every task is a `worker`; rank 0 is the chief.

#include <mwstrat/cluster/cluster_config.hpp>
#include <mwstrat/cluster/cluster_spec.hpp>
#include <mwstrat/cluster/concepts.hpp>
#include <mwstrat/cluster/detail/diagnostics.hpp>
#include <mwstrat/cluster/detail/rendezvous.hpp>
#include <mwstrat/cluster/environment.hpp>
#include <mwstrat/cluster/task_info.hpp>

#include <arpa/inet.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mwstrat {

/// What the MPI launcher says about this process.
struct mpi_launch_info {
  int rank = 0;
  int size = 1;
  std::optional<int> local_size;  ///< ranks on this host, where the launcher says
  std::string rank_variable;      ///< e.g. "OMPI_COMM_WORLD_RANK", for messages
  std::string job_id;             ///< the launcher's job id ("" when none is set)
};

/// How `mpi_resolver` meets the other ranks.
struct mpi_resolver_options {
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};  ///< the whole rendezvous, every rank
  std::string rpc_layer = {};                                   ///< reported as the config's rpc_layer
};

/// Resolves the cluster of an MPI-launched job (see the file comment).
class mpi_resolver {
 public:
  /// Reads the process environment when `resolve()` is called.
  explicit mpi_resolver(mpi_resolver_options options = {}) : options_(std::move(options)) {}
  /// Reads the variables from `env` (tests, launchers).
  explicit mpi_resolver(environment env, mpi_resolver_options options = {})
      : env_(std::move(env)), options_(std::move(options)) {}

  /// True when an MPI launcher's rank variables are set (Open MPI's or PMI's).
  [[nodiscard]] static bool detected(const environment& env = environment{}) {
    return env.get("OMPI_COMM_WORLD_SIZE").has_value() || env.get("PMI_SIZE").has_value();
  }

  /// The launcher's rank, size, local size and job id. Throws `config_error` (component "cluster", source "MPI")
  /// naming the variable and its value when one is missing, malformed or out of range.
  [[nodiscard]] mpi_launch_info launch_info() const {
    mpi_launch_info info;
    std::string size_variable, local_variable;
    if (env_.get("OMPI_COMM_WORLD_SIZE") || env_.get("OMPI_COMM_WORLD_RANK")) {
      info.rank_variable = "OMPI_COMM_WORLD_RANK";
      size_variable = "OMPI_COMM_WORLD_SIZE";
      local_variable = "OMPI_COMM_WORLD_LOCAL_SIZE";
    } else if (env_.get("PMI_SIZE") || env_.get("PMI_RANK")) {
      info.rank_variable = "PMI_RANK";
      size_variable = "PMI_SIZE";
      local_variable = "MPI_LOCALNRANKS";
    } else {
      fail("OMPI_COMM_WORLD_RANK", "not set (nor PMI_RANK); is this process running under mpirun?");
    }
    info.size = number(size_variable, 1);
    info.rank = number(info.rank_variable, 0);
    if (info.rank >= info.size) {
      fail(info.rank_variable, std::to_string(info.rank) + " is out of range (" + size_variable + " is " +
                                   std::to_string(info.size) + ")");
    }
    if (env_.get(local_variable)) info.local_size = number(local_variable, 1);
    for (const char* id : {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_KVSNAME"}) {
      if (const auto v = env_.get(id); v && !v->empty()) {
        info.job_id = std::string(id) + '=' + *v;
        break;
      }
    }
    return info;
  }

  /// Where rank 0 listens for the rendezvous, "ipv4:port" (see the file comment). Throws `config_error`.
  [[nodiscard]] std::string rendezvous_endpoint(const mpi_launch_info& info) const {
    if (const auto given = env_.get("MWSTRAT_RENDEZVOUS")) {
      const auto colon = given->rfind(':');
      in_addr probe{};
      int port = 0;
      const bool ok = colon != std::string::npos &&
                      ::inet_pton(AF_INET, given->substr(0, colon).c_str(), &probe) == 1 &&
                      parse_int(given->substr(colon + 1), port) && port >= 1 && port <= 65535;
      if (!ok) fail("MWSTRAT_RENDEZVOUS", detail::quote(*given) + " is not \"ipv4:port\" (port in 1..65535)");
      return *given;
    }
    if (!info.local_size || *info.local_size != info.size) {
      fail("MWSTRAT_RENDEZVOUS", "not set, and the ranks are not all on one host; give rank 0's host address, e.g. "
                                 "mpirun -x MWSTRAT_RENDEZVOUS=10.0.0.1:29400");
    }
    if (info.job_id.empty()) {
      fail("MWSTRAT_RENDEZVOUS", "not set, and the launcher gives no job id to derive a port from; set it, e.g. "
                                 "mpirun -x MWSTRAT_RENDEZVOUS=127.0.0.1:29400");
    }
    // FNV-1a of the job id: the same port in every rank of the job, different ports for different jobs.
    std::uint32_t h = 2166136261u;
    for (const char c : info.job_id) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
    return "127.0.0.1:" + std::to_string(30000 + h % 20000);
  }

  /// The job's cluster with this process as `worker:<rank>`, after the rendezvous (which every rank of the job
  /// must reach within `options.timeout`). A world of one is a single local worker. Throws `config_error` for bad
  /// variables or a rendezvous that disagrees, `timeout_error` naming the ranks that did not come, `io_error`.
  [[nodiscard]] cluster_config resolve() const {
    const mpi_launch_info info = launch_info();
    if (info.size == 1) return cluster_config::local("MPI (a world of 1)");
    const std::string endpoint = rendezvous_endpoint(info);
    const auto colon = endpoint.rfind(':');
    const std::string ip = endpoint.substr(0, colon);
    int port = 0;
    (void)parse_int(endpoint.substr(colon + 1), port);
    detail::rendezvous_context ctx{endpoint, info.rank, info.size,
                                   std::chrono::steady_clock::now() + options_.timeout};
    std::vector<std::string> addresses =
        info.rank == 0 ? detail::rendezvous_serve(ctx, ip, static_cast<std::uint16_t>(port))
                       : detail::rendezvous_join(ctx, ip, static_cast<std::uint16_t>(port));
    cluster_spec spec = cluster_spec::from_jobs({{job::worker, std::move(addresses)}}, source, "rendezvous");
    return cluster_config(std::move(spec), task_info{job::worker, info.rank}, options_.rpc_layer, std::string(source));
  }

  /// "MPI".
  [[nodiscard]] std::string_view name() const noexcept { return source; }

 private:
  static constexpr std::string_view source = "MPI";

  [[noreturn]] static void fail(std::string_view variable, const std::string& what) {
    detail::throw_cluster_error(source, variable, what);
  }
  static bool parse_int(const std::string& text, int& out) {
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc{} && end == text.data() + text.size() && !text.empty();
  }
  [[nodiscard]] int number(const std::string& variable, int low) const {
    const auto text = env_.get(variable);
    if (!text) fail(variable, "not set");
    int v = 0;
    if (!parse_int(*text, v) || v < low) {
      fail(variable, detail::quote(*text) + " is not an integer >= " + std::to_string(low));
    }
    return v;
  }

  environment env_;
  mpi_resolver_options options_;
};

static_assert(cluster_resolver<mpi_resolver>);

}  // namespace mwstrat
