#pragma once
/// \file
/// The strategy family: the `strategy` concept, `mirrored_strategy` over any collective, the multi-worker
/// (ring) and in-process (local) strategies, their communication options, and gradient synchronisation (its
/// policy value, the synchroniser and its bucketed reduction, and `after_backward`, the `on_ready` of a step
/// that reduces only once backward has finished).

#include <mwstrat/strategy/after_backward.hpp>
#include <mwstrat/strategy/bucketed_reduction.hpp>
#include <mwstrat/strategy/communication_options.hpp>
#include <mwstrat/strategy/concepts.hpp>
#include <mwstrat/strategy/gradient_sync.hpp>
#include <mwstrat/strategy/gradient_sync_options.hpp>
#include <mwstrat/strategy/local_mirrored_strategy.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/strategy/multi_worker_mirrored_strategy.hpp>
