#include "tessera/train/io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "tessera/errors.h"

namespace tessera::train {

namespace fs = std::filesystem;

void replace_file_atomic(const fs::path& path,
                         const std::function<void(const fs::path& tmp)>& write) {
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  if (ec)
    throw FileError(
        fmt::format("can not create directory {}: {}", path.parent_path().string(), ec.message()));
  const fs::path tmp = path.string() + fmt::format(".tmp.{}", ::getpid());
  try {
    write(tmp);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw FileError(fmt::format("can not rename {} to {}: {}", tmp.string(), path.string(),
                                std::strerror(err)));
  }
}

void write_file_atomic(const fs::path& path, std::string_view contents) {
  replace_file_atomic(path, [&](const fs::path& tmp) {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
      throw FileError(fmt::format("can not write {}: {}", tmp.string(), std::strerror(errno)));
    auto fail = [&](const char* what) {
      const int err = errno;
      ::close(fd);
      throw FileError(
          fmt::format("can not write {} ({}): {}", path.string(), what, std::strerror(err)));
    };
    std::size_t done = 0;
    while (done < contents.size()) {
      const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        fail("write");
      }
      done += static_cast<std::size_t>(n);
    }
    if (::fsync(fd) != 0) fail("fsync");
    if (::close(fd) != 0)
      throw FileError(
          fmt::format("can not write {} (close): {}", path.string(), std::strerror(errno)));
  });
}

}  // namespace tessera::train
