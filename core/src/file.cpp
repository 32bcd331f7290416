#include "tessera/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "tessera/checked.h"
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

namespace {

// "a directory", "a FIFO", ... for what fstat found, or null for a regular file.
const char* not_regular(mode_t mode) {
  if (S_ISREG(mode)) return nullptr;
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

}  // namespace

RegularFile::RegularFile(const fs::path& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) {
    const int err = errno;
    if (err == ENOENT) throw FileError(fmt::format("{}: no such file", path.string()));
    throw FileError(fmt::format("{}: can not open: {}", path.string(), std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    throw FileError(fmt::format("{}: can not stat: {}", path.string(), std::strerror(err)));
  }
  if (const char* kind = not_regular(st.st_mode)) {
    ::close(fd_);
    throw FileError(fmt::format("{}: is {}, not a regular file", path.string(), kind));
  }
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fd_);
    throw FileError(fmt::format("{}: can not open: {}", path.string(), std::strerror(err)));
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
}

RegularFile::RegularFile(RegularFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_), size_(other.size_) {
  other.fd_ = -1;
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

int RegularFile::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void RegularFile::read_at(std::uint64_t offset, void* dst, std::size_t n) const {
  const auto end = checked_add<std::uint64_t>(offset, n);
  if (!end || *end > size_)
    throw FileError(
        fmt::format("{}: truncated: {} bytes at offset {} run past the end of the "
                    "{}-byte file",
                    path_.string(), n, offset, size_));
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got =
        ::pread(fd_, static_cast<char*>(dst) + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw FileError(fmt::format("{}: can not read: {}", path_.string(), std::strerror(errno)));
    }
    if (got == 0)
      throw FileError(
          fmt::format("{}: truncated: the file ended at {} bytes while reading (it "
                      "shrank since it was opened)",
                      path_.string(), offset + done));
    done += static_cast<std::size_t>(got);
  }
}

std::string read_regular_file(const fs::path& path, std::uint64_t max_bytes,
                              std::string_view what) {
  const RegularFile file(path);
  if (file.size() > max_bytes)
    throw FileError(fmt::format("{}: the {} is {}, more than the {} this reader accepts",
                                path.string(), what, format_bytes(file.size()),
                                format_bytes(max_bytes)));
  std::string contents(static_cast<std::size_t>(file.size()), '\0');
  file.read_at(0, contents.data(), contents.size());
  return contents;
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
