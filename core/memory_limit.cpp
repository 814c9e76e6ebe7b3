// The planning bound on memory (see memory_limit.h).
#include "core/memory_limit.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <limits>

#include "core/error.h"

namespace sima {

namespace {

constexpr const char* kVariable = "SIMA_MEMORY_LIMIT";

// "<digits>[K|M|G|T]" -> bytes; sima::Error naming the variable otherwise.
int64_t parse_limit(const std::string& s) {
  size_t i = 0;
  int64_t n = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    check(n <= (std::numeric_limits<int64_t>::max() - 9) / 10, kVariable, "='", s, "' is too large");
    n = n * 10 + (s[i++] - '0');
  }
  int shift = 0;
  if (i + 1 == s.size()) {
    const char u = s[i++];
    shift = u == 'K' || u == 'k' ? 10 : u == 'M' || u == 'm' ? 20 : u == 'G' || u == 'g' ? 30 : u == 'T' || u == 't' ? 40 : -1;
  }
  check(i > 0 && i == s.size() && shift >= 0 && n > 0, kVariable, "='", s,
        "' is not a positive byte count with an optional unit K, M, G or T (e.g. 8G)");
  check(n <= (std::numeric_limits<int64_t>::max() >> shift), kVariable, "='", s, "' is too large");
  return n << shift;
}

int64_t physical_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return int64_t(8) << 30;  // unknown: assume 8 GiB
  return int64_t(pages) * int64_t(page);
}

}  // namespace

int64_t memory_limit_bytes() {
  const char* v = std::getenv(kVariable);
  if (v != nullptr && *v != '\0') return parse_limit(v);
  return physical_memory() / 4 * 3;
}

std::string memory_limit_description() {
  const char* v = std::getenv(kVariable);
  const std::string size = format_bytes(double(memory_limit_bytes()));
  if (v != nullptr && *v != '\0') return size + " (" + kVariable + "=" + v + ")";
  return size + " (3/4 of the physical memory; set " + kVariable + "=<bytes>[K|M|G|T] to change it)";
}

std::string format_bytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 6) bytes /= 1024.0, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, kUnits[u]);
  return buf;
}

}  // namespace sima
