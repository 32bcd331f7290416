#include "tessera/file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>
#include <thread>

#include <fmt/format.h>

#include "tessera/checked.h"
#include "tessera/config.h"
#include "tessera/errors.h"
#include "tessera/log.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

// Whether |name| is a temporary file of target |base| as replace_file_atomic names them
// (BASE.tmp.PID.THREAD.COUNT, decimal numbers) whose writer process no longer exists; a process
// that exists (kill answers anything but ESRCH, EPERM included) is a live writer.
bool stale_temporary(std::string_view name, std::string_view base) {
  const std::string prefix = std::string(base) + ".tmp.";
  if (!name.starts_with(prefix)) return false;
  std::string_view rest = name.substr(prefix.size());
  long long numbers[3] = {};
  for (int i = 0; i < 3; ++i) {
    const std::size_t dot = i < 2 ? rest.find('.') : rest.size();
    if (dot == std::string_view::npos || dot == 0) return false;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + dot, numbers[i]);
    if (ec != std::errc() || end != rest.data() + dot || numbers[i] < 0) return false;
    rest = i < 2 ? rest.substr(dot + 1) : std::string_view();
  }
  const long long pid = numbers[0];
  if (pid <= 0 || pid > std::numeric_limits<pid_t>::max() || pid == ::getpid()) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == -1 && errno == ESRCH;
}

// Removes the temporary files of |path| that writers killed mid-save left behind. Best effort:
// never throws, never removes a live writer's file (nor anything not a regular file).
void remove_stale_temporaries(const fs::path& path) noexcept {
  try {
    const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
    const std::string base = path.filename().string();
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (!stale_temporary(name, base) || !it->is_regular_file(ec) || ec) continue;
      if (::unlink(it->path().c_str()) == 0)
        log().debug("removed {}, left by a writer that no longer runs", it->path().string());
    }
  } catch (...) {
  }
}

}  // namespace

void replace_file_atomic(const fs::path& path,
                         const std::function<void(const fs::path& tmp)>& write) {
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  if (ec)
    throw FileError(
        fmt::format("can not create directory {}: {}", path.parent_path().string(), ec.message()));
  remove_stale_temporaries(path);
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
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  try {
    // A regular file only (a FIFO planted in the cache must not block), and no entry over 1 GiB.
    return read_regular_file(path, std::uint64_t{1} << 30, "cache entry");
  } catch (const Error& e) {
    log().debug("cache entry {} is unusable ({}); ignoring it", path.string(), e.what());
    return std::nullopt;
  }
}

void cache_write(std::string_view name, std::string_view contents) noexcept {
  try {
    write_file_atomic(cache_directory_from_env() / name, contents);
  } catch (const std::exception& e) {
    log().debug("not caching {}: {}", name, e.what());
  }
}

}  // namespace tessera
