// The pieces of a crash-safe file write, shared by every writer of user files
// (core/file_io.h write_file_atomic, models/io/safetensors.h save_safetensors): write a temporary
// beside the target, fsync it, rename it over the target, fsync the folder.
//
// One rule for every writer: no file is written through a symbolic link. A target that is a
// link is refused by name (refuse_symlink), a temporary is created exclusively and never
// through a link (create_temp_file), and a file opened in place (the run lock, metrics.jsonl)
// is opened with O_NOFOLLOW (open_no_follow). A link among the folders of the path is followed
// as usual: only the last component, the file itself, may not be one.
#pragma once
#include <string>

namespace sima {

// The temporary name an atomic write of `path` uses: "<path>.tmp.<pid>".
std::string temp_path_for(const std::string& path);

// sima::Error when `path` itself is a symbolic link (dangling or not):
//   "runs/x/run.lock: is a symbolic link (to victim.txt); sima.cpp does not write through a
//    symbolic link: remove the link or choose another path"
// `what` names the file ("run lock", "checkpoint", ...). A missing path passes.
void refuse_symlink(const std::string& path, const std::string& what = "file");

// Creates temp_path_for(path) for writing, exclusively (O_CREAT | O_EXCL | O_NOFOLLOW): a
// leftover of the same name (a killed writer's file, or a link) is unlinked first, never
// followed. Returns the descriptor; sima::Error naming the file when it cannot be created.
int create_temp_file(const std::string& path);

// open(path, flags | O_NOFOLLOW | O_CLOEXEC, 0644) with refuse_symlink's message when the path
// is a link; -1 with errno set on any other failure.
int open_no_follow(const std::string& path, int flags, const std::string& what = "file");

// fsync of the folder holding `path`, so a rename into it is durable (best effort).
void sync_parent_directory(const std::string& path);

// Removes the "<name>.tmp.<digits>" files a killed writer left in `dir`; returns how many.
int remove_stale_temp_files(const std::string& dir);

}  // namespace sima
