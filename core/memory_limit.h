// The memory a run may plan to use: the bound that model configs (models/budget.h) and image
// headers (data/image_io.h) are checked against BEFORE anything is allocated, so a few bytes of
// JSON or of an image header cannot make the program zero-fill gigabytes and then fail.
//
//   SIMA_MEMORY_LIMIT=<bytes>[K|M|G|T]   the limit (binary units: 8G = 8 · 2^30 bytes)
//   unset                                3/4 of the physical memory (sysconf(_SC_PHYS_PAGES))
//
// A bad value of SIMA_MEMORY_LIMIT is a sima::Error naming it; the variable is read on every
// call (cheap), so a test can set it.
#pragma once
#include <cstdint>
#include <string>

namespace sima {

// The limit in bytes (> 0).
int64_t memory_limit_bytes();

// "12.0 GiB (3/4 of the physical memory; set SIMA_MEMORY_LIMIT=<bytes>[K|M|G|T] to change it)",
// or "... (SIMA_MEMORY_LIMIT=...)": for error messages.
std::string memory_limit_description();

// 1536 -> "1.5 KiB", 3 << 30 -> "3.0 GiB".
std::string format_bytes(double bytes);

}  // namespace sima
