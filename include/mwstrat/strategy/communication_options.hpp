#pragma once
/// \file
/// `communication_options`: how the workers of a multi-worker strategy talk to each other and synchronise their
/// gradients (TensorFlow's `CommunicationOptions`, plus deadlines, the ring's transport and the gradient policy).
///
/// The environment is read here and only here, at the edge, by `make_multi_worker_mirrored_strategy` (where
/// TF_CONFIG is read): a field the code left unset (nullopt) takes the variable's value, and a field the code set is
/// never overridden by the environment.
///   - `transport`: `MWSTRAT_RING_TRANSPORT` (`tcp` or `auto`), else `ring_transport::automatic`;
///   - `spin`: `MWSTRAT_RING_SPIN_US` (microseconds in 0..1000000), else 200 µs;
///   - `liveness_timeout`: `MWSTRAT_RING_LIVENESS_MS` (0 = silence never judged, or milliseconds in 100..3600000), else 5 s;
///   - `job_token`: `MWSTRAT_JOB_TOKEN`, else no token (an empty token is no token);
///   - `topology`: `MWSTRAT_RING_TOPOLOGY` (`flat` or `hierarchical`), else hierarchical;
///   - `compression`: `MWSTRAT_RING_COMPRESSION` (`none`, `bf16` or `fp16`), else none;
///   - `host_identity`: `MWSTRAT_HOST_ID`, else derived from the kernel's boot id (an empty value is no value);
///   - `streams_per_peer`: `MWSTRAT_RING_STREAMS` (1..16), else the ring's default;
///   - `encrypt`: `MWSTRAT_RING_ENCRYPT` (`1` or `0`), else off (encryption needs a job token);
///   - `ring_generation`: `MWSTRAT_RECOVERY_GENERATION` (set by `mwstrat-launch --replace-lost` for a replacement
///     worker), else 0.

#include <mwstrat/cluster/environment.hpp>
#include <mwstrat/cluster/launcher_environment.hpp>
#include <mwstrat/collective/ring/options.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/strategy/gradient_sync_options.hpp>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace mwstrat {

/// How workers talk to each other (TensorFlow's `CommunicationOptions`, plus deadlines).
struct communication_options {
  /// The collective implementation. `ring` (and `auto_select`, which picks it) is the TCP ring; in-process
  /// replicas are `mirrored_strategy` over `local_collective` instead (see `run_mirrored_replicas`).
  enum class implementation { auto_select, ring };
  implementation implementation = implementation::auto_select;
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};  ///< waiting for every worker at start
  std::chrono::milliseconds op_timeout{std::chrono::seconds(60)};       ///< each collective operation
  std::optional<std::string> job_token;  ///< shared secret; nullopt: the environment's MWSTRAT_JOB_TOKEN; "": none
  /// How ring links carry payloads; nullopt: the environment's MWSTRAT_RING_TRANSPORT, else automatic.
  std::optional<ring_transport> transport;
  /// How long an idle rank polls before it sleeps (`ring_options::spin`); nullopt: the environment's
  /// MWSTRAT_RING_SPIN_US, else the ring's default (200 µs).
  std::optional<std::chrono::microseconds> spin;
  /// How long a worker may stay silent (stopped, frozen, cut off) before the others name it lost
  /// (`ring_options::liveness_timeout`); nullopt: the environment's MWSTRAT_RING_LIVENESS_MS, else 5 s.
  std::optional<std::chrono::milliseconds> liveness_timeout;
  /// Which host this worker is on, for shared memory and the hierarchical all-reduce (`ring_options::host_identity`);
  /// nullopt: the environment's MWSTRAT_HOST_ID, else derived from the kernel's boot id, user and namespaces.
  std::optional<std::string> host_identity;
  /// What the all-reduce's payloads between hosts are narrowed to on the wire (`ring_options::compression`);
  /// nullopt: the environment's MWSTRAT_RING_COMPRESSION, else none.
  std::optional<wire_compression> compression;
  /// Flat or hierarchical all-reduce across hosts (`ring_options::topology`); nullopt: the environment's
  /// MWSTRAT_RING_TOPOLOGY, else hierarchical (which is flat unless several hosts each run the same number, at least
  /// two, of workers).
  std::optional<ring_topology> topology;
  /// TCP data connections per link between hosts (`ring_options::streams_per_peer`); nullopt: the environment's
  /// MWSTRAT_RING_STREAMS, else the ring's default.
  std::optional<int> streams_per_peer;
  /// Encrypt frames between hosts (`ring_options::encrypt`; needs a job token); nullopt: the environment's
  /// MWSTRAT_RING_ENCRYPT, else off. With a token they are authenticated either way (docs/security.md).
  std::optional<bool> encrypt;
  /// The ring generation this worker joins (`ring_options::generation`): 0 for a worker of the job's first ring; a
  /// replacement of a lost worker joins the survivors' rebuilt ring (in-memory recovery). nullopt: the environment's
  /// MWSTRAT_RECOVERY_GENERATION, else 0.
  std::optional<std::uint64_t> ring_generation;
  std::string model_fingerprint;         ///< checked in the handshake when set (fit also checks it)
  /// Elastic training (`ring_options::join_listen`, `join_via`); nullopt: the launcher's MWSTRAT_JOIN_LISTEN and
  /// MWSTRAT_JOIN, else none.
  std::optional<std::string> join_listen;
  std::optional<std::vector<std::string>> join_via;
  std::function<void(std::string_view)> log;  ///< where the ring logs; default: standard error
  gradient_sync_options gradient_sync;   ///< buckets, overlap and where the update runs
};

/// `options` with every field the code left unset (nullopt) filled from `env` (the file comment lists them), so
/// that afterwards `job_token`, `transport`, `spin`, `liveness_timeout`, `topology`, `compression`,
/// `streams_per_peer` and `encrypt` all hold values
/// (`host_identity` only when its variable is set). Throws `environment_error` (a `config_error`, naming `rank` when given) for a variable whose value is not one of
/// those listed.
[[nodiscard]] inline communication_options with_environment_defaults(communication_options options,
                                                                     const environment& env,
                                                                     std::optional<int> rank = std::nullopt) {
  if (!options.job_token) options.job_token = env.get("MWSTRAT_JOB_TOKEN").value_or("");
  if (!options.transport) {
    options.transport = ring_transport::automatic;
    if (const auto v = env.get("MWSTRAT_RING_TRANSPORT")) {
      if (*v == "tcp") options.transport = ring_transport::tcp;
      else if (*v != "auto")
        throw environment_error({"strategy", rank}, "MWSTRAT_RING_TRANSPORT is '" + *v + "', expected tcp or auto");
    }
  }
  if (!options.spin) {
    options.spin = ring_options{}.spin;
    if (const auto v = env.get("MWSTRAT_RING_SPIN_US")) {
      long long us = -1;
      const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), us);
      if (ec != std::errc{} || end != v->data() + v->size() || us < 0 || us > 1'000'000)
        throw environment_error({"strategy", rank},
                           "MWSTRAT_RING_SPIN_US is '" + *v + "', expected microseconds in 0..1000000");
      options.spin = std::chrono::microseconds(us);
    }
  }
  if (!options.liveness_timeout) {
    options.liveness_timeout = ring_options{}.liveness_timeout;
    if (const auto v = env.get("MWSTRAT_RING_LIVENESS_MS")) {
      long long ms = -1;
      const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), ms);
      // Below 100 ms a heartbeat every timeout/5 would be judged by scheduling noise, not by the peer.
      if (ec != std::errc{} || end != v->data() + v->size() || (ms != 0 && ms < 100) || ms > 3'600'000)
        throw environment_error({"strategy", rank},
                           "MWSTRAT_RING_LIVENESS_MS is '" + *v + "', expected 0 (never judged) or milliseconds in 100..3600000");
      options.liveness_timeout = std::chrono::milliseconds(ms);
    }
  }
  if (!options.topology) {
    options.topology = ring_options{}.topology;
    if (const auto v = env.get("MWSTRAT_RING_TOPOLOGY")) {
      if (*v == "hierarchical") options.topology = ring_topology::hierarchical;
      else if (*v == "flat") options.topology = ring_topology::flat;
      else
        throw environment_error({"strategy", rank}, "MWSTRAT_RING_TOPOLOGY is '" + *v + "', expected flat or hierarchical");
    }
  }
  if (!options.compression) {
    options.compression = wire_compression::none;
    if (const auto v = env.get("MWSTRAT_RING_COMPRESSION")) {
      if (*v == "bf16") options.compression = wire_compression::bf16;
      else if (*v == "fp16") options.compression = wire_compression::fp16;
      else if (*v != "none")
        throw environment_error({"strategy", rank}, "MWSTRAT_RING_COMPRESSION is '" + *v + "', expected none, bf16 or fp16");
    }
  }
  if (!options.streams_per_peer) {
    options.streams_per_peer = ring_options{}.streams_per_peer;
    if (const auto v = env.get("MWSTRAT_RING_STREAMS")) {
      int streams = 0;
      const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), streams);
      constexpr int most = ring_max_streams_per_peer;
      if (ec != std::errc{} || end != v->data() + v->size() || streams < 1 || streams > most)
        throw environment_error({"strategy", rank}, "MWSTRAT_RING_STREAMS is '" + *v + "', expected 1.." +
                                                   std::to_string(most) + " connections");
      options.streams_per_peer = streams;
    }
  }
  if (!options.encrypt) {
    options.encrypt = false;
    if (const auto v = env.get("MWSTRAT_RING_ENCRYPT")) {
      if (*v == "1") options.encrypt = true;
      else if (*v != "0")
        throw environment_error({"strategy", rank}, "MWSTRAT_RING_ENCRYPT is '" + *v + "', expected 1 or 0");
    }
  }
  if (!options.host_identity)
    if (auto v = env.get("MWSTRAT_HOST_ID"); v && !v->empty()) options.host_identity = std::move(*v);
  // The launcher's protocol has one reader (cluster/launcher_environment.hpp), which refuses every malformed variable
  // of it here too, before any connection.
  const launcher_environment launcher = launcher_environment::read(env);
  if (!options.ring_generation) options.ring_generation = launcher.generation;
  if (!options.join_listen) options.join_listen = launcher.join_listen;
  if (!options.join_via) options.join_via = launcher.join_via;
  return options;
}

}  // namespace mwstrat
