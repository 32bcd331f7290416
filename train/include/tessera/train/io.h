// Files that are never left half-written: contents go to a temporary file in the same directory,
// which is flushed to disk and renamed over the target (atomic on POSIX file systems).
#pragma once

#include <filesystem>
#include <string_view>

namespace tessera::train {

// Writes |contents| to |path| atomically, creating missing parent directories. On failure the
// temporary file is removed, |path| is unchanged, and FileError names the path and the reason.
void write_file_atomic(const std::filesystem::path& path, std::string_view contents);

}  // namespace tessera::train
