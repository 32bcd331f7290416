// Files that are never left half-written: contents go to a temporary file in the same directory,
// which is flushed to disk and renamed over the target (atomic on POSIX file systems).
#pragma once

#include <filesystem>
#include <functional>
#include <string_view>

namespace tessera::train {

// Writes |contents| to |path| atomically, creating missing parent directories. On failure the
// temporary file is removed, |path| is unchanged, and FileError names the path and the reason.
void write_file_atomic(const std::filesystem::path& path, std::string_view contents);

// The mechanism under write_file_atomic, for writers that produce a file themselves (gnuplot):
// creates missing parent directories, calls |write| with a temporary path next to |path|, then
// renames it over |path|. When |write| throws or the rename fails, the temporary file is removed,
// |path| is unchanged and the exception (FileError for the rename) propagates.
void replace_file_atomic(const std::filesystem::path& path,
                         const std::function<void(const std::filesystem::path& tmp)>& write);

}  // namespace tessera::train
