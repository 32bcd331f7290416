// Files that are never left half-written (contents go to a temporary file in the same directory,
// which is flushed to disk and renamed over the target: atomic on POSIX file systems), and the
// on-disk cache of compiled device code under TESSERA_CACHE_DIR.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace tessera {

// Writes |contents| to |path| atomically, creating missing parent directories. On failure the
// temporary file is removed, |path| is unchanged, and FileError names the path and the reason.
void write_file_atomic(const std::filesystem::path& path, std::string_view contents);

// The mechanism under write_file_atomic, for writers that produce a file themselves (gnuplot):
// creates missing parent directories, calls |write| with a temporary path next to |path|
// (PATH.tmp.PID.THREAD.COUNT), then renames it over |path|. When |write| throws or the rename
// fails, the temporary file is removed, |path| is unchanged and the exception (FileError for the
// rename) propagates. A process killed mid-write leaves its temporary file; each call first
// removes the temporary files of |path| whose writer process no longer exists (best effort,
// never throwing; files of live processes, of other targets and of other names are kept).
// Thread-safe: concurrent writers of one path each write their own temporary file.
void replace_file_atomic(const std::filesystem::path& path,
                         const std::function<void(const std::filesystem::path& tmp)>& write);

// Compiled device code (Vulkan pipeline caches, OpenCL program binaries) is cached best effort:
// entries are files under cache_directory_from_env() (config.h) whose |name| the plugin builds from
// everything the contents depend on. cache_read returns nullopt when the entry is missing or
// unreadable; cache_write writes atomically (a crash never leaves a torn entry; concurrent writers
// of one name are safe) and never throws: a failure is logged at debug level and the cache skipped.
// The caller must still validate what it reads (a foreign or corrupt entry).
std::optional<std::string> cache_read(std::string_view name);
void cache_write(std::string_view name, std::string_view contents) noexcept;

}  // namespace tessera
