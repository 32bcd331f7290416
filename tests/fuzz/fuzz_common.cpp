#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fuzz_targets.h"
#include "tessera/runtime.h"

namespace tessera::fuzz {

namespace {

// Not a finding of the code under test: the harness itself can not run.
[[noreturn]] void harness_failed(const char* what) {
  std::fprintf(stderr, "tessera fuzz harness: %s: %s\n", what, std::strerror(errno));
  std::abort();
}

}  // namespace

std::filesystem::path as_file(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path path = [] {
    const int fd = memfd_create("tessera-fuzz-input", 0);
    if (fd >= 0) return std::filesystem::path("/proc/self/fd/" + std::to_string(fd));
    return std::filesystem::temp_directory_path() /
           ("tessera-fuzz-input-" + std::to_string(::getpid()));
  }();
  std::FILE* f = std::fopen(path.c_str(), "wb");  // truncates
  if (!f) harness_failed("can not write the input file");
  if (size && std::fwrite(data, 1, size, f) != size) harness_failed("can not write the input");
  if (std::fclose(f) != 0) harness_failed("can not write the input");
  return path;
}

void finding(std::string_view target, std::string_view what) {
  std::fprintf(stderr, "tessera fuzz finding (%.*s): %.*s\n", static_cast<int>(target.size()),
               target.data(), static_cast<int>(what.size()), what.data());
  std::abort();
}

std::unique_ptr<train::Sequential> checkpoint_model(std::uint64_t seed) {
  DeviceGuard guard(device("cpu"));
  train::Generator gen(seed);
  auto m = std::make_unique<train::Sequential>();
  m->emplace<train::Linear>(4, 3, gen).emplace<train::ReLU>().emplace<train::Linear>(3, 2, gen);
  return m;
}

}  // namespace tessera::fuzz
