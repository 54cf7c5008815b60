#pragma once
// Which ring_options a ring_collective accepts: every refusal is a config_error naming the option and the value,
// raised before anything listens or connects.

#include <mwstrat/collective/ring/detail/wire.hpp>
#include <mwstrat/collective/ring/options.hpp>
#include <mwstrat/error.hpp>

#include <chrono>
#include <string>
#include <utility>

namespace mwstrat::detail {

// Checks everything but the addresses' form (parsed where they are used); `options.rank` names the errors' rank.
inline void check_ring_options(const ring_options& options) {
  const auto n = static_cast<int>(options.addresses.size());
  const int rank = options.rank;
  if (n < 1) throw config_error({"ring"}, "ring_options.addresses is empty");
  if (rank < 0 || rank >= n)
    throw config_error({"ring"}, "rank " + std::to_string(rank) + " is out of range for " + std::to_string(n) +
                                     " addresses");
  if (options.spin < std::chrono::microseconds::zero())
    throw config_error({"ring", rank}, "ring_options.spin is negative");
  static_assert(ring_max_streams_per_peer == static_cast<int>(max_streams_per_peer));
  if (options.streams_per_peer < 1 || options.streams_per_peer > static_cast<int>(max_streams_per_peer))
    throw config_error({"ring", rank}, "ring_options.streams_per_peer is " + std::to_string(options.streams_per_peer) +
                                           ": expected 1.." + std::to_string(max_streams_per_peer) +
                                           " connections per link between hosts");
  if (options.encrypt && options.job_token.value_or(std::string()).empty())
    throw config_error({"ring", rank}, "ring_options.encrypt (MWSTRAT_RING_ENCRYPT=1) needs a job token "
                                       "(ring_options.job_token, MWSTRAT_JOB_TOKEN): the frame keys derive from it");
  if (options.host_identity && options.host_identity->empty())
    throw config_error({"ring", rank}, "ring_options.host_identity is empty (leave it unset to derive it)");
  for (const auto& [name, value] : {std::pair{"connect_timeout", options.connect_timeout},
                                    std::pair{"op_timeout", options.op_timeout},
                                    std::pair{"handshake_timeout", options.handshake_timeout}})
    if (value <= std::chrono::milliseconds::zero())
      throw config_error({"ring", rank}, std::string("ring_options.") + name + " is " +
                                             std::to_string(value.count()) + " ms: expected a positive time");
  if (options.liveness_timeout < std::chrono::milliseconds::zero() ||
      (options.liveness_timeout.count() != 0 && options.liveness_timeout < std::chrono::milliseconds(100)))
    throw config_error({"ring", rank}, "ring_options.liveness_timeout is " +
                                           std::to_string(options.liveness_timeout.count()) +
                                           " ms: expected 0 (never judged) or at least 100 ms (heartbeats every "
                                           "fifth of it must outrun scheduling noise)");
}

}  // namespace mwstrat::detail
