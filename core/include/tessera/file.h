// Files that are never left half-written (contents go to a temporary file in the same directory,
// which is flushed to disk and renamed over the target: atomic on POSIX file systems), files read
// from outside that are only ever regular files, read against their real size, and the on-disk
// cache of compiled device code under TESSERA_CACHE_DIR.
#pragma once

#include <cstdint>
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

// A regular file open for reading; the descriptor is closed on destruction. Opening never blocks
// and never accepts what is not a regular file: the path is opened with O_RDONLY | O_NONBLOCK |
// O_CLOEXEC (so a FIFO named by mistake does not wait for a writer), fstat()ed, refused unless
// S_ISREG, and O_NONBLOCK is then cleared. size() is the size fstat reported, so a reader can check
// what a header claims against the real file before it allocates anything. Reads go through
// pread, so read_at may be called from several threads at once; release() may not.
class RegularFile {
 public:
  // Throws FileError naming |path| and what is wrong: "PATH: no such file", "PATH: is a
  // directory, not a regular file" (likewise a FIFO, a character or block device, a socket),
  // "PATH: can not open: REASON" (permissions and other OS errors).
  explicit RegularFile(const std::filesystem::path& path);
  ~RegularFile();
  RegularFile(RegularFile&& other) noexcept;
  RegularFile& operator=(RegularFile&&) = delete;
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The descriptor, or -1 after release().
  int fd() const { return fd_; }
  // The file's size in bytes when it was opened.
  std::uint64_t size() const { return size_; }
  // Reads exactly |n| bytes at |offset| into |dst|. Throws FileError naming the path when the
  // range is not inside size() ("truncated"), when the file ends early (it shrank since it was
  // opened) or with the OS error.
  void read_at(std::uint64_t offset, void* dst, std::size_t n) const;
  // Hands the descriptor to the caller (for example to gzdopen, which closes it); the object then
  // holds none and its destructor closes nothing.
  int release();

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// The whole contents of the regular file |path| (opened as RegularFile does). The buffer is sized
// from fstat, never from the data, and is allocated only after the size is checked against
// |max_bytes|. Throws FileError naming the path: the RegularFile errors, "PATH: the WHAT is
// 3.0 GiB, more than the 1.0 GiB this reader accepts", or a file that changed while being read.
// Thread-safe (no shared state).
std::string read_regular_file(const std::filesystem::path& path, std::uint64_t max_bytes,
                              std::string_view what);

// Compiled device code (Vulkan pipeline caches, OpenCL program binaries) is cached best effort:
// entries are files under cache_directory_from_env() (config.h) whose |name| the plugin builds from
// everything the contents depend on. cache_read returns nullopt when the entry is missing,
// unreadable, not a regular file or over 1 GiB; cache_write writes atomically (a crash never leaves
// a torn entry; concurrent writers of one name are safe) and never throws: a failure is logged at
// debug level and the cache skipped. The caller must still validate what it reads (a foreign or
// corrupt entry).
std::optional<std::string> cache_read(std::string_view name);
void cache_write(std::string_view name, std::string_view contents) noexcept;

// The 64-bit FNV-1a hash of |bytes|, with which the plugins name their cache entries and check
// their contents. Not cryptographic: an entry found under a name must still be validated.
inline std::uint64_t cache_hash(std::string_view bytes) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

}  // namespace tessera
