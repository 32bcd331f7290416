#include "tessera/file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "tessera/config.h"
#include "tessera/errors.h"
#include "tessera/log.h"

namespace tessera {

namespace fs = std::filesystem;

void replace_file_atomic(const fs::path& path,
                         const std::function<void(const fs::path& tmp)>& write) {
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  if (ec)
    throw FileError(
        fmt::format("can not create directory {}: {}", path.parent_path().string(), ec.message()));
  // Unique per process, thread and call, so concurrent writers of one path never share a file.
  static std::atomic<unsigned> counter{0};
  const fs::path tmp =
      path.string() + fmt::format(".tmp.{}.{}.{}", ::getpid(),
                                  std::hash<std::thread::id>{}(std::this_thread::get_id()) % 100000,
                                  counter.fetch_add(1));
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

std::optional<std::string> cache_read(std::string_view name) {
  const fs::path path = cache_directory_from_env() / name;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  if (!in && !in.eof()) {
    log().debug("cache entry {} is unreadable; ignoring it", path.string());
    return std::nullopt;
  }
  return std::move(s).str();
}

void cache_write(std::string_view name, std::string_view contents) noexcept {
  try {
    write_file_atomic(cache_directory_from_env() / name, contents);
  } catch (const std::exception& e) {
    log().debug("not caching {}: {}", name, e.what());
  }
}

}  // namespace tessera
