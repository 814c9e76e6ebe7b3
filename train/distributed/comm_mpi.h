// The MPI backend of data-parallel training (train/distributed/distributed.h), in its own library:
// libsima_mpi (CMake: find_package(sima COMPONENTS mpi), target sima::sima_mpi; pkg-config:
// sima-mpi), built when the library is built with MPI (SIMA_MPI). A program that never runs
// under mpirun links libsima alone, without MPI.
//
//   sima::use_mpi();                          // first thing in main(), before init_distributed
//   sima::init_distributed(&argc, &argv);     // under mpirun: MPI_Init_thread, world() is MPI's
#pragma once

namespace sima {

// Registers MPI as the backend init_distributed starts when launched by mpirun.
void use_mpi();

}  // namespace sima
