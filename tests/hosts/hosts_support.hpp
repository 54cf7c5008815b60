#pragma once
// Shared by the tests of tests/hosts/: simulated hosts, the example programs, and this test executable itself
// (`self`), which doubles as a TCP sender and receiver (see main.cpp).
#include <examples/example_support.hpp>
#include <support/simulated_hosts.hpp>

#include <string>

namespace mwstrat::test {

/// This test executable's path: `self + " tcp-sink PORT"` and `self + " tcp-source ..."` run main.cpp's tools.
extern std::string self;

#ifdef MWSTRAT_EXAMPLE_MNIST_MPI
inline const std::string example_mpi = MWSTRAT_EXAMPLE_MNIST_MPI;  ///< the example built with --collective mpi
#endif

}  // namespace mwstrat::test
