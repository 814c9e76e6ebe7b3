// SIGINT and SIGTERM as a stop flag for a training loop (TrainerOptions::stop_flag), received by a
// thread of their own so that no compute thread is ever interrupted by them.
//
// Why not a plain signal handler: the kernel runs a handler on whichever thread it picks, in the
// middle of what that thread was doing, and oneDNN's JIT GEMM kernels (core/ops/gemm_backend.cpp) do
// not survive that. Measured: sima-train SIGTERMed at a random moment of its first epoch died with
// "corrupted size vs. prev_size" (glibc's heap check, inside dnnl_sgemm's free) in 4 of 10 runs
// with oneDNN and 0 of 10 with SIMA_GEMM=openblas, with a handler that only stored an atomic.
// Here the two signals are blocked in the calling thread, so every thread created after it inherits
// the mask (OpenMP's pool, the batch pipeline, MPI's), and one thread takes them with sigwait().
//
// Call it first thing in main(), before anything starts a thread. A signal that arrives
// before the training loop runs stays in the flag: the loop stops after its first step and saves.
#pragma once

#include <atomic>

namespace sima {

// Blocks SIGINT and SIGTERM in the calling thread, starts the thread that waits for them (once per
// process) and returns the flag they set; every call returns the same flag. The flag and the thread
// live until the process exits.
const std::atomic<bool>* stop_on_signals();

}  // namespace sima
