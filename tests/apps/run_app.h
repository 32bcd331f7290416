// Runs an app as a user does, for the app tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace tessera::testing {

struct Result {
  int code = -1;
  std::string out, err;
};

// Runs |cmd| under sh with |env| prepended ("A=1 B=2"), capturing stdout and stderr.
inline Result run(const std::string& env, const std::string& cmd) {
  // One file per call and process: ctest runs app tests in parallel.
  static int calls = 0;
  const std::string err_file = ::testing::TempDir() + "/tessera_app_stderr_" +
                               std::to_string(::getpid()) + "_" + std::to_string(++calls) + ".txt";
  const std::string full = "env " + env + " " + cmd + " 2>" + err_file;
  Result r;
  FILE* p = popen(full.c_str(), "r");
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), p)) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_file);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  std::remove(err_file.c_str());
  return r;
}

}  // namespace tessera::testing
