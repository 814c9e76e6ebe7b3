// sima::Error — the one exception type for everything a user can get wrong.
//
// Messages name the op, the shapes, the file or the key at fault, e.g.
//   "add: shapes (2, 3) and (4, 3) cannot be broadcast".
// Apps catch it, print "error: <what>" and exit non-zero.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace sima {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Build a message from any streamable pieces: fail("matmul: ", a.shape(), " vs ", b.shape()).
template <class... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  throw Error(os.str());
}

// check(cond, pieces...) throws sima::Error built from the pieces when cond is false.
template <class... Parts>
inline void check(bool cond, Parts&&... parts) {
  if (!cond) fail(std::forward<Parts>(parts)...);
}

}  // namespace sima
