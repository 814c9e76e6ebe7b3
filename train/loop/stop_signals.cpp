// stop_on_signals() (stop_signals.h): SIGINT / SIGTERM blocked everywhere, taken by one sigwait() thread.
#include "train/loop/stop_signals.h"

#include <pthread.h>

#include <csignal>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace sima {

const std::atomic<bool>* stop_on_signals() {
  static std::atomic<bool> flag{false};
  static std::once_flag once;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  const int rc = pthread_sigmask(SIG_BLOCK, &set, nullptr);
  check(rc == 0, "cannot block SIGINT/SIGTERM (pthread_sigmask returned ", rc, ")");
  std::call_once(once, [set] {
    // Detached, blocked in sigwait() between signals. A second Ctrl-C only sets the flag again,
    // as the first did (the loop is already finishing its step).
    std::thread([set] {
      for (int sig = 0;;)
        if (sigwait(&set, &sig) == 0) flag.store(true);
    }).detach();
  });
  return &flag;
}

}  // namespace sima
