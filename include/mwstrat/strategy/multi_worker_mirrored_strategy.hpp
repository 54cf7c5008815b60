#pragma once
/// \file
/// `multi_worker_mirrored_strategy`: TensorFlow's MultiWorkerMirroredStrategy — one process per worker, joined by
/// the TCP ring, described by a cluster resolver (TF_CONFIG by default).
///
/// Making one blocks until every worker of the cluster is connected (each listens on its own address and connects
/// to the next, until `connect_timeout`); the chief logs `started: tcp://host:port, waiting for N workers`.
/// Without TF_CONFIG, under an MPI launcher the ranks meet through `mpi_resolver`; otherwise (or with an empty
/// TF_CONFIG) the process is a single local worker and nothing listens. The options
/// the code leaves unset are read from the environment here (`with_environment_defaults`), never deeper.

#include <mwstrat/cluster/cluster_config.hpp>
#include <mwstrat/cluster/concepts.hpp>
#include <mwstrat/cluster/environment.hpp>
#include <mwstrat/cluster/mpi_resolver.hpp>
#include <mwstrat/cluster/tf_config.hpp>
#include <mwstrat/collective/ring/host_arena.hpp>
#include <mwstrat/collective/ring/options.hpp>
#include <mwstrat/collective/ring/ring_collective.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/strategy/communication_options.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace mwstrat {

/// MultiWorkerMirroredStrategy: `mirrored_strategy` over a ring of processes.
using multi_worker_mirrored_strategy = mirrored_strategy<std::unique_ptr<ring_collective>>;

/// Builds the strategy for the cluster `config` describes; blocks until every worker is connected. Options left
/// unset are read from `env` (the process environment by default; see `communication_options`).
inline multi_worker_mirrored_strategy make_multi_worker_mirrored_strategy(const cluster_config& config,
                                                                          communication_options options = {},
                                                                          const environment& env = environment{}) {
  if (config.is_evaluator()) {
    throw config_error({"strategy"}, config.source() + ": task.type: this task is the 'evaluator', which does not "
                                     "train; run evaluation in it instead of a training strategy");
  }
  detail::validate(options.gradient_sync, config.rank());  // before blocking on the ring
  options = with_environment_defaults(std::move(options), env, config.rank());
  ring_options ring;
  if (config.is_local()) {
    ring.addresses = {"127.0.0.1:0"};  // a world of one: nothing listens
  } else {
    ring.addresses = config.spec().training_addresses();
    ring.cluster_fingerprint = config.spec().fingerprint();
  }
  ring.rank = config.rank();
  ring.connect_timeout = options.connect_timeout;
  ring.op_timeout = options.op_timeout;
  ring.job_token = std::move(options.job_token);
  ring.transport = *options.transport;
  ring.spin = *options.spin;
  ring.liveness_timeout = *options.liveness_timeout;
  ring.host_identity = std::move(options.host_identity);
  ring.compression = *options.compression;
  ring.topology = *options.topology;
  ring.streams_per_peer = *options.streams_per_peer;
  ring.encrypt = *options.encrypt;
  ring.model_fingerprint = std::move(options.model_fingerprint);
  ring.generation = options.ring_generation.value_or(0);
  ring.join_listen = options.join_listen.value_or(std::string());
  ring.join_via = options.join_via.value_or(std::vector<std::string>{});
  if (options.log) ring.log = std::move(options.log);
  return multi_worker_mirrored_strategy(std::make_unique<ring_collective>(std::move(ring)),
                                        config.task(), options.gradient_sync);
}

/// Builds the strategy for the cluster `resolver` finds (TF_CONFIG, Slurm, an explicit list).
template <cluster_resolver Resolver>
multi_worker_mirrored_strategy make_multi_worker_mirrored_strategy(const Resolver& resolver,
                                                                   communication_options options = {}) {
  return make_multi_worker_mirrored_strategy(resolver.resolve(), std::move(options));
}

/// Builds the strategy from the environment, as `tf.distribute.MultiWorkerMirroredStrategy()` does: from TF_CONFIG;
/// without TF_CONFIG under an MPI launcher (mpirun, Hydra), from the launcher's rank variables, meeting the other
/// ranks within `options.connect_timeout` (cluster/mpi_resolver.hpp); with neither, a single local worker.
inline multi_worker_mirrored_strategy make_multi_worker_mirrored_strategy(communication_options options = {}) {
  const environment env;
  if (!env.get("TF_CONFIG") && mpi_resolver::detected(env)) {
    mpi_resolver_options mpi;
    mpi.timeout = options.connect_timeout;
    return make_multi_worker_mirrored_strategy(mpi_resolver(mpi), std::move(options));
  }
  return make_multi_worker_mirrored_strategy(tf_config_resolver{}, std::move(options));
}

static_assert(strategy<multi_worker_mirrored_strategy>);

}  // namespace mwstrat
