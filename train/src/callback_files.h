// Checks of the paths callbacks write (callbacks.cpp).
#pragma once

#include <filesystem>
#include <string_view>

namespace tessera::train::detail {

// Creates directory |dir| when missing and checks that a file can be created in it (a probe file,
// removed again), so that a run learns before training, not after its first epoch, that its
// output can not be written. Throws FileError naming |what| and |dir|.
void require_writable_dir(const std::filesystem::path& dir, std::string_view what);
// The same for a file that will be written: its directory, and the path not a directory.
void require_writable_file(const std::filesystem::path& path, std::string_view what);
// Whether |a| and |b| name one existing file.
bool same_file(const std::filesystem::path& a, const std::filesystem::path& b);

}  // namespace tessera::train::detail
