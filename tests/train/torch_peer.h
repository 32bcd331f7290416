// Runs a Python script with PyTorch (Debian's python3-torch; TESSERA_TEST_TORCH_PYTHON names
// another Python) on a JSON input and returns its JSON output: the reference values of the
// optimizer, clipping and scheduler tests.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace tessera::train::torch_peer {

inline std::string torch_python() {
  const char* py = std::getenv("TESSERA_TEST_TORCH_PYTHON");
  return py && *py ? py : "/usr/bin/python3";
}

// Whether the Python imports torch; in CI a missing torch is a failure, not a skip.
inline bool torch_available() {
  static const bool ok =
      std::system((torch_python() + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0;
  return ok;
}

#define TESSERA_REQUIRE_TORCH()                                                            \
  do {                                                                                     \
    if (!::tessera::train::torch_peer::torch_available()) {                                \
      if (std::getenv("CI") != nullptr)                                                    \
        FAIL() << ::tessera::train::torch_peer::torch_python() << " can not import torch " \
               << "(apt-get install python3-torch, or run scripts/test.sh)";               \
      GTEST_SKIP() << ::tessera::train::torch_peer::torch_python() << " has no torch";     \
    }                                                                                      \
  } while (0)

// Runs |script| with the path of a file holding |input| as its argument; returns what it printed
// as JSON. Throws std::runtime_error with the output when it fails.
inline nlohmann::json run_torch(const std::string& script, const nlohmann::json& input) {
  namespace fs = std::filesystem;
  static int counter = 0;
  const fs::path dir =
      fs::temp_directory_path() / fmt::format("tessera-torch-peer-{}-{}", ::getpid(), counter++);
  fs::create_directories(dir);
  std::ofstream(dir / "peer.py") << script;
  std::ofstream(dir / "input.json") << input.dump();
  const std::string cmd = fmt::format("{} {} {} 2>&1", torch_python(), (dir / "peer.py").string(),
                                      (dir / "input.json").string());
  std::string out;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed: " + cmd);
  std::array<char, 4096> buf;
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  fs::remove_all(dir);
  if (status != 0) throw std::runtime_error(cmd + " failed:\n" + out);
  return nlohmann::json::parse(out);
}

}  // namespace tessera::train::torch_peer
