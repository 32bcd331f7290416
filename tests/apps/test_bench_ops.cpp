// tessera-bench's op cases at a tiny size on cpu:0, beside the PyTorch peer: a smoke test of the
// cases and of their JSON, not a measurement (no timing is checked beyond being positive).
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "run_app.h"

using nlohmann::json;
using tessera::testing::Result;
using tessera::testing::run;

namespace {

// Debian's python3-torch, which scripts/test.sh installs (TESSERA_TEST_TORCH_PYTHON names another).
std::string peer_python() {
  const char* py = std::getenv("TESSERA_TEST_TORCH_PYTHON");
  return py && *py ? py : "/usr/bin/python3";
}

// tessera-bench's op cases (apps/bench_ops.h).
const std::set<std::string> kOpCases{"bmm", "layer_norm", "attention", "embedding_backward",
                                     "transpose"};

}  // namespace

TEST(TesseraBench, OpCasesRunAtATinySizeBesidePyTorch) {
  const Result r = run("TESSERA_DISABLE_PLUGINS=opencl,vulkan",
                       std::string(BENCH_BIN) +
                           " --devices cpu --cases "
                           "bmm,layer_norm,attention,embedding_backward,transpose"
                           " --op-size tiny --repeat 1 --torch-python " +
                           peer_python());
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  std::set<std::string> seen;
  for (const json& res : j["results"]) {
    const std::string name = res["case"];
    SCOPED_TRACE(name);
    seen.insert(name);
    EXPECT_EQ(res["device"], "cpu:0");
    EXPECT_EQ(res["size"], "tiny");
    EXPECT_FALSE(res["shape"].get<std::string>().empty());
    EXPECT_GT(res["seconds"].get<double>(), 0);
    ASSERT_FALSE(res.contains("peer_error"))
        << res["peer_error"] << "\n(the peer needs Debian's python3-torch: apt-get install "
        << "python3-torch, or run scripts/test.sh)";
    EXPECT_NE(res["peer"].get<std::string>().find("PyTorch"), std::string::npos);
    EXPECT_GT(res["peer_seconds"].get<double>(), 0);
    EXPECT_DOUBLE_EQ(res["ratio"].get<double>(),
                     res["peer_seconds"].get<double>() / res["seconds"].get<double>());
    if (name == "transpose") {  // bytes moved a second, each element read and written once
      EXPECT_DOUBLE_EQ(res["gb_per_s"].get<double>(),
                       8.0 * 40 * 36 / res["seconds"].get<double>() / 1e9);
    }
  }
  EXPECT_EQ(seen, kOpCases);
  EXPECT_EQ(run("", std::string(BENCH_BIN) + " --cases attention --op-size huge").code, 2);
}

// --profile: each result carries its kernels (name, launches and seconds per call), on the cpu
// plugin (each op timed) and on a GPU plugin (lavapipe here: timed on the device); the table goes
// to stderr.
TEST(TesseraBench, ProfileAddsEachCasesKernels) {
  const Result r = run("", std::string(BENCH_BIN) +
                               " --devices cpu:0,vulkan:0 --cases bmm,sgemm --sizes 64 --op-size "
                               "tiny --repeat 1 --profile --torch-python " +
                               peer_python());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("device time of"), std::string::npos) << r.err;
  const json j = json::parse(r.out);
  int profiled = 0;
  for (const json& res : j["results"]) {
    SCOPED_TRACE(res.dump());
    ASSERT_TRUE(res.contains("kernels"));
    const json& k = res["kernels"];
    ASSERT_TRUE(k.is_array());
    ASSERT_FALSE(k.empty());
    const std::string kernel = k[0]["kernel"];
    // sgemm and bmm are one kernel per call: the op on cpu:0, the portable GEMM on vulkan:0.
    EXPECT_EQ(kernel,
              res["device"] == "cpu:0" ? (res["case"] == "bmm" ? "bmm" : "matmul") : "gemm");
    EXPECT_DOUBLE_EQ(k[0]["launches"].get<double>(), 1.0);
    EXPECT_GT(k[0]["seconds"].get<double>(), 0.0);
    ++profiled;
  }
  EXPECT_EQ(profiled, 4);
}

// A peer that can not run is an error in each result, not a failed benchmark.
TEST(TesseraBench, OpCasesReportAPeerThatCanNotRun) {
  const Result r = run("TESSERA_DISABLE_PLUGINS=opencl,vulkan",
                       std::string(BENCH_BIN) +
                           " --devices cpu --cases attention --op-size tiny --repeat 1"
                           " --torch-python /bin/false");
  ASSERT_EQ(r.code, 0) << r.err;
  const json res = json::parse(r.out)["results"][0];
  EXPECT_EQ(res["case"], "attention");
  EXPECT_GT(res["seconds"].get<double>(), 0);
  EXPECT_NE(res["peer_error"].get<std::string>().find("failed"), std::string::npos) << res.dump();
  EXPECT_FALSE(res.contains("ratio"));
}
