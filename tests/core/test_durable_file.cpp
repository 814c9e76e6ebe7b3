// core/durable_file.h: the temporary name of an atomic write, and the cleanup of the
// temporaries a killed writer leaves (only "<name>.tmp.<digits>", nothing else).
#include <unistd.h>

#include <fstream>

#include "core/durable_file.h"
#include "data/temp_dir.h"
#include "testing.h"

using namespace sima;
using namespace sima::testing;

TEST_CASE("durable_file: temp_path_for names the writer's pid; remove_stale_temp_files removes only those") {
  CHECK(temp_path_for("/a/b.safetensors") == "/a/b.safetensors.tmp." + std::to_string(::getpid()));
  TempDir d;
  for (const char* n : {"train_state.safetensors.tmp.123", "metrics.csv.tmp.9", "model.safetensors",
                        "notes.tmp", "x.tmp.", "x.tmp.12a", "x.tmp.34.bak"})
    std::ofstream(d.file(n)) << "x";
  std::filesystem::create_directories(d.file("folder.tmp.7/inner"));  // a folder is never removed
  CHECK(remove_stale_temp_files(d.str()) == 2);
  CHECK(d.listing() == std::vector<std::string>{"folder.tmp.7", "model.safetensors", "notes.tmp", "x.tmp.",
                                                "x.tmp.12a", "x.tmp.34.bak"});
  CHECK(remove_stale_temp_files(d.str() + "/no_such_folder") == 0);
}
