#pragma once
/// \file
/// MirroredStrategy: N replicas as threads of one process, over `local_collective`.
///
/// `run_mirrored_replicas(n, fn)` starts n threads, gives each a strategy for its replica and runs `fn(strategy)`
/// on each; the first failure is rethrown after every replica has stopped (the others see it as a lost peer, so
/// none of them hangs).

#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/strategy/gradient_sync_options.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>

#include <utility>

namespace mwstrat {

/// A replica's strategy in an in-process mirrored group.
using local_mirrored_strategy = mirrored_strategy<local_collective&>;

/// Runs `fn(local_mirrored_strategy&)` on `n` replicas (threads), each strategy synchronising gradients as `sync`
/// says; rethrows the first failure.
template <class Fn>
void run_mirrored_replicas(int n, Fn&& fn, local_options options = {}, gradient_sync_options sync = {}) {
  spawn_ranks(
      n,
      [&](local_collective& c) {
        local_mirrored_strategy strategy(c, sync);
        fn(strategy);
      },
      std::move(options));
}

static_assert(strategy<local_mirrored_strategy>);

}  // namespace mwstrat
