#pragma once
/// \file
/// The strategy family: the `strategy` concept, `mirrored_strategy` over any collective, the multi-worker
/// (ring) and in-process (local) strategies, and bucketed gradient reduction.

#include <mwstrat/strategy/bucketed_reduction.hpp>
#include <mwstrat/strategy/concepts.hpp>
#include <mwstrat/strategy/local_mirrored_strategy.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/strategy/multi_worker_mirrored_strategy.hpp>
