// tessera-bench's train and fit cases of the ResNet and the GPT at --model-size tiny on cpu:0,
// beside the PyTorch peers: a smoke test of the cases and of their JSON, not a measurement (no
// timing is checked beyond being positive).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
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

const char* kNoPeer =
    "(the peer needs Debian's python3-torch: apt-get install python3-torch, or run "
    "scripts/test.sh)";

// A text of about 40 KB (ten 4 KiB blocks: one for validation) of words from a small alphabet.
std::filesystem::path write_corpus() {
  const auto path = std::filesystem::temp_directory_path() /
                    ("tessera-bench-corpus-" + std::to_string(::getpid()) + ".txt");
  std::mt19937 rng(7);
  const char* words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat.\n", "dog ", "ran ", "far, "};
  std::ofstream out(path);
  for (int i = 0; i < 10000; ++i) out << words[rng() % 9];
  return path;
}

}  // namespace

TEST(TesseraBench, TrainCaseRunsResnetAndGptAtATinySizeBesidePyTorch) {
  const Result r = run("TESSERA_DISABLE_PLUGINS=opencl,vulkan",
                       std::string(BENCH_BIN) +
                           " --devices cpu --cases train --models resnet,gpt --model-size tiny"
                           " --train-steps 2 --repeat 1 --torch-python " +
                           peer_python());
  ASSERT_EQ(r.code, 0) << r.err;
  const json out = json::parse(r.out);  // alive for the loop (not a temporary's element)
  std::set<std::string> seen;
  for (const json& res : out["results"]) {
    const std::string model = res["model"];
    SCOPED_TRACE(model);
    seen.insert(model);
    EXPECT_EQ(res["case"], "train");
    EXPECT_EQ(res["device"], "cpu:0");
    EXPECT_EQ(res["model_size"], "tiny");
    EXPECT_EQ(res["sample"], model == "gpt" ? "token" : "image");
    const std::int64_t batch = res["batch"];
    const std::int64_t per_step =
        model == "gpt" ? batch * res["config"]["block_size"].get<std::int64_t>() : batch;
    EXPECT_NEAR(res["samples_per_second"].get<double>(),
                static_cast<double>(per_step * 2) / res["seconds"].get<double>(), 1e-6);
    ASSERT_FALSE(res.contains("peer_error")) << res["peer_error"] << "\n" << kNoPeer;
    EXPECT_NE(res["peer"].get<std::string>().find("PyTorch"), std::string::npos);
    EXPECT_EQ(res["config"], res["peer_config"]);  // both sides ran the same network and batch
    EXPECT_GT(res["peer_samples_per_second"].get<double>(), 0);
    EXPECT_DOUBLE_EQ(res["ratio"].get<double>(), res["samples_per_second"].get<double>() /
                                                     res["peer_samples_per_second"].get<double>());
  }
  EXPECT_EQ(seen, (std::set<std::string>{"resnet", "gpt"}));
}

TEST(TesseraBench, ModelSizeMustBeKnown) {
  const Result r = run("", std::string(BENCH_BIN) + " --cases train --model-size huge");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("'huge' is not a model size (full, small, tiny)"), std::string::npos)
      << r.err;
  EXPECT_EQ(run("", std::string(BENCH_BIN) + " --cases fit --max-steps -1").code, 2);
}

// Whole tessera-train runs of both models beside fit_peer.py, each a few steps long.
TEST(TesseraBench, FitCaseRunsResnetAndGptAtATinySizeBesidePyTorch) {
  const auto corpus = write_corpus();
  const Result r =
      run("TESSERA_DISABLE_PLUGINS=opencl,vulkan",
          std::string(BENCH_BIN) +
              " --devices cpu --cases fit --models resnet,gpt --model-size tiny --epochs 1"
              " --limit-train-batches 2 --limit-test-batches 1 --fit-timeout 300 --text " +
              corpus.string() + " --torch-python " + peer_python());
  std::filesystem::remove(corpus);
  ASSERT_EQ(r.code, 0) << r.err;
  const json out = json::parse(r.out);  // alive for the loop (not a temporary's element)
  std::set<std::string> seen;
  for (const json& res : out["results"]) {
    const std::string model = res["model"];
    SCOPED_TRACE(model);
    seen.insert(model);
    EXPECT_EQ(res["case"], "fit");
    EXPECT_EQ(res["model_size"], "tiny");
    for (const char* side : {"tessera", "peer"}) {
      SCOPED_TRACE(side);
      const json& s = res[side];
      ASSERT_FALSE(s.contains("error")) << s["error"] << "\n" << kNoPeer;
      EXPECT_GT(s["seconds"].get<double>(), 0);
      if (model == "gpt") {
        // Near ln(vocabulary size) after 4 steps of a fresh model: the loss in nats per character.
        EXPECT_TRUE(std::isfinite(s["val_loss"].get<double>()));
        EXPECT_GT(s["val_loss"].get<double>(), 1.0);
        EXPECT_LT(s["val_loss"].get<double>(), 5.0);
        EXPECT_EQ(s["steps"], 4);
      } else {
        EXPECT_GE(s["test_accuracy"].get<double>(), 0);
        EXPECT_EQ(s["epoch_test_accuracy"].size(), 1u);
      }
    }
    EXPECT_DOUBLE_EQ(res["ratio"].get<double>(), res["peer"]["seconds"].get<double>() /
                                                     res["tessera"]["seconds"].get<double>());
  }
  EXPECT_EQ(seen, (std::set<std::string>{"resnet", "gpt"}));
}
