#pragma once
/// \file
/// The collective family: the `collective` concept, the in-process backend (`local_collective`,
/// `spawn_ranks`) and the TCP ring (`ring_collective`). The MPI adapter is separate:
/// <mwstrat/collective/mpi/mpi_collective.hpp>, only where MPI is installed.

#include <mwstrat/collective/concepts.hpp>
#include <mwstrat/collective/handle.hpp>
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/collective/ring/host_arena.hpp>
#include <mwstrat/collective/ring/options.hpp>
#include <mwstrat/collective/ring/ring_collective.hpp>
#include <mwstrat/collective/types.hpp>
