#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>

#include "tessera/file.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// A FIFO (or a directory) planted as a compiled-code cache entry is ignored at once, never read
// with a blocking open, and the next write replaces it.
TEST(Cache, EntriesThatAreNotRegularFilesAreIgnoredAndReplaced) {
  const fs::path dir =
      fs::temp_directory_path() / ("tessera-cache-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "a-directory.bin");
  ASSERT_EQ(::mkfifo((dir / "a-fifo.bin").c_str(), 0600), 0);
  ::setenv("TESSERA_CACHE_DIR", dir.c_str(), 1);
  for (const char* name : {"a-fifo.bin", "a-directory.bin"}) {
    auto read = std::async(std::launch::async, [name] { return tessera::cache_read(name); });
    if (read.wait_for(60s) != std::future_status::ready) {
      std::ofstream unblock(dir / name);  // let the reader go so that the suite ends
      FAIL() << "cache_read blocked on " << name;
    }
    EXPECT_FALSE(read.get().has_value()) << name;
  }
  tessera::cache_write("a-fifo.bin", "compiled");
  EXPECT_EQ(tessera::cache_read("a-fifo.bin"), std::optional<std::string>("compiled"));
  EXPECT_FALSE(tessera::cache_read("missing.bin").has_value());
  ::unsetenv("TESSERA_CACHE_DIR");
  fs::remove_all(dir);
}
