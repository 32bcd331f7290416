// Helpers for tests that feed crafted files to the readers: a temporary directory, the message of
// the FileError a call throws, and a watchdog for calls that must not block on a FIFO.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <string>

#include "tessera/errors.h"

namespace tessera::testing {

// A fresh directory under the system's temporary directory, removed with everything in it.
class TempDir {
 public:
  explicit TempDir(const std::string& tag)
      : path_(std::filesystem::temp_directory_path() /
              ("tessera-" + tag + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// The message of the FileError that |f| throws; a test failure when it throws none.
template <typename F>
std::string file_error(F f) {
  try {
    f();
  } catch (const FileError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no FileError";
  return {};
}

// file_error(f) for a call given the FIFO |fifo|, run on another thread (load the runtime before:
// see SafetensorsInput.OnlyRegularFilesAreOpened). When the call has not
// returned after a minute it is stuck in open() or read() waiting for a writer: the test fails
// saying so, and the FIFO's write end is opened and closed so that the call sees the end of the
// data and returns instead of hanging the suite.
template <typename F>
std::string fifo_error(F f, const std::filesystem::path& fifo) {
  auto result = std::async(std::launch::async, [f] { return file_error(f); });
  if (result.wait_for(std::chrono::minutes(1)) != std::future_status::ready) {
    ADD_FAILURE() << "reading the FIFO " << fifo.string()
                  << " blocked waiting for a writer; only regular files may be opened";
    const int fd = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  return result.get();
}

}  // namespace tessera::testing
