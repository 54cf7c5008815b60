// The typed sweep over mpi_collective, run under mpirun (one CTest test per world size). Each rank prints
// "OK" or the error; the exit status is non-zero on any failure.

#include "sweep.hpp"

#include <mwstrat/collective/mpi/mpi_collective.hpp>

#include <mpi.h>

#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int status = 0;
  try {
    mwstrat::mpi_collective c;
    mwstrat::test::run_sweep(c, argc > 1 && std::string(argv[1]) == "large");
    std::printf("rank %d: OK\n", c.rank());
  } catch (const std::exception& e) {
    std::printf("ERROR %s\n", e.what());
    status = 1;
  }
  std::fflush(stdout);
  int worst = 0;
  MPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
