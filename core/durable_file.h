// The pieces of a crash-safe file write, shared by every writer of user files
// (core/file_io.h write_file_atomic, models/safetensors.h save_safetensors): write a temporary
// beside the target, fsync it, rename it over the target, fsync the folder.
#pragma once
#include <string>

namespace sima {

// The temporary name an atomic write of `path` uses: "<path>.tmp.<pid>".
std::string temp_path_for(const std::string& path);

// fsync of the folder holding `path`, so a rename into it is durable (best effort).
void sync_parent_directory(const std::string& path);

// Removes the "<name>.tmp.<digits>" files a killed writer left in `dir`; returns how many.
int remove_stale_temp_files(const std::string& dir);

}  // namespace sima
