// tessera_fuzz_replay TARGET [--valid-accepted] PATH...: feeds every file of each PATH (a file, or
// a directory read recursively in name order; a missing path is skipped) to fuzz target TARGET, the
// way libFuzzer replays a corpus, but built by any compiler. Exits 0 when every input kept the
// target's contract (fuzz_targets.h), 1 on the first that did not (an exception other than
// tessera::Error; a crash or sanitizer report ends the process with the file already named), 2 on
// bad usage. With --valid-accepted, a file whose name starts with "valid-" must also be accepted,
// so that seed files stay valid as the formats change.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "fuzz_targets.h"

namespace fs = std::filesystem;

namespace {

struct Named {
  std::string_view name;
  tessera::fuzz::Target run;
};
constexpr Named kTargets[] = {{"idx", tessera::fuzz::idx},
                              {"safetensors", tessera::fuzz::safetensors},
                              {"checkpoint", tessera::fuzz::checkpoint},
                              {"env", tessera::fuzz::env}};

std::vector<fs::path> inputs(const fs::path& p) {
  std::vector<fs::path> out;
  if (fs::is_regular_file(p)) out.push_back(p);
  if (fs::is_directory(p))
    for (const auto& e : fs::recursive_directory_iterator(p))
      if (e.is_regular_file()) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const Named* target = nullptr;
  for (const Named& t : kTargets)
    if (argc > 1 && argv[1] == t.name) target = &t;
  if (!target) {
    std::fprintf(stderr,
                 "usage: tessera_fuzz_replay idx|safetensors|checkpoint|env [--valid-accepted] "
                 "PATH...\n");
    return 2;
  }
  bool valid_accepted = false;
  int files = 0;
  for (int i = 2; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--valid-accepted") {
      valid_accepted = true;
      continue;
    }
    for (const fs::path& file : inputs(argv[i])) {
      std::ifstream in(file, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      std::fprintf(stderr, "%s: %s (%zu bytes)\n", argv[1], file.c_str(), bytes.size());
      bool accepted = false;
      try {
        accepted = target->run(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "FINDING: %s: %s escaped: %s\n  replay: %s %s %s\n", file.c_str(),
                     typeid(e).name(), e.what(), argv[0], argv[1], file.c_str());
        return 1;
      }
      if (valid_accepted && file.filename().string().starts_with("valid-") && !accepted) {
        std::fprintf(stderr,
                     "%s: a valid seed was refused; regenerate the seeds "
                     "(tessera_fuzz_make_corpus, tests/fuzz/README.md)\n",
                     file.c_str());
        return 1;
      }
      ++files;
    }
  }
  std::fprintf(stderr, "%s: %d inputs kept the contract\n", argv[1], files);
  return 0;
}
