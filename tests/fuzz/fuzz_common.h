// Shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.cpp).
//
// A harness feeds bytes to one reader of the library. sima::Error is the expected way for a
// reader to refuse input, so it is caught; any other exception escapes and libFuzzer reports
// it (a finding), as it does crashes, sanitizer reports, leaks, timeouts and allocations over
// -malloc_limit_mb.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace sima::fuzz {

// A private scratch folder for readers that take a path (one per process; libFuzzer runs
// inputs one after another in a process, so files are simply overwritten), removed at exit.
// In memory (/dev/shm) unless TMPDIR says otherwise: on this machine's /tmp a harness ran
// ~300 inputs/s, on /dev/shm ~10 000. The process works inside it and readers get relative
// paths ("." and "./name"): the folder's random name then never reaches the code under test,
// where its letters and length would change which branches run (run.sh --ci must try the
// same inputs each time). libFuzzer's own paths (corpus, artifacts) are absolute.
inline const std::string& scratch_dir() {
  static const std::string absolute = [] {
    const char* env = std::getenv("TMPDIR");
    std::string base = env && *env ? env : ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string tmpl = base + "/sima-fuzz-XXXXXX";
    if (!::mkdtemp(tmpl.data()) || ::chdir(tmpl.c_str()) != 0) std::abort();
    return tmpl;
  }();
  static const bool cleanup = [] {
    return std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(absolute, ec);
    }) == 0;
  }();
  (void)cleanup;
  static const std::string relative = ".";
  return relative;
}

// Writes `size` bytes to scratch_dir()/name and returns the path.
inline std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

}  // namespace sima::fuzz
