// world() and init_distributed() (train/distributed/distributed.h) without MPI: the MPI backend
// registers itself from libsima_mpi (train/distributed/comm_mpi.h, use_mpi).
#include <cstdlib>

#include "core/error.h"
#include "train/distributed/distributed.h"

namespace sima {

namespace {

bool launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

int env_world_size() {
  const char* v = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (!v) v = std::getenv("PMI_SIZE");
  return v ? std::atoi(v) : 1;
}

Comm* g_world = nullptr;
MpiStart g_mpi_start = nullptr;

}  // namespace

void register_mpi_backend(MpiStart start) { g_mpi_start = start; }

Comm& world() { return g_world ? *g_world : comm_single(); }

void init_distributed(int* argc, char*** argv) {
  if (g_world || !launched_by_mpirun()) return;
  if (g_mpi_start) {
    g_world = g_mpi_start(argc, argv);
    return;
  }
  check(env_world_size() <= 1, "launched by mpirun with ", env_world_size(),
        " ranks, but this program has no MPI backend (a build with SIMA_MPI=ON links libsima_mpi and calls "
        "sima::use_mpi(), train/distributed/comm_mpi.h): install libopenmpi-dev and rebuild");
}

}  // namespace sima
