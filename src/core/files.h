// Reading whole files a model folder or a user names, refusing anything that is not a regular file (a FIFO, a
// device, a directory) before it is read: opening a FIFO for reading blocks until a writer comes, so `plumb inspect`
// on a folder whose config.json is a FIFO would hang instead of failing.
#pragma once

#include <optional>
#include <string>

namespace plumb {

// The file's bytes. Throws plumb::Error naming `path` when it cannot be opened, is not a regular file, or fails to
// read.
std::string read_regular_file(const std::string& path);
// As read_regular_file, but nullopt when nothing exists at `path`.
std::optional<std::string> read_regular_file_if_exists(const std::string& path);
// Opens `path` read-only (O_CLOEXEC) without blocking on a FIFO and checks that it is a regular file. Returns the
// descriptor, which the caller closes; throws plumb::Error naming `path` otherwise.
int open_regular_file(const std::string& path);

}  // namespace plumb
