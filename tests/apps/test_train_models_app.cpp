// tessera-train's built-in ResNet and GPT as a user runs them, reduced to seconds: on cpu:0,
// vulkan:0 and opencl:0, the same GPT run ends at the same validation loss (within 1%), weights
// files sample through tessera-generate, a resumed run continues where it stopped, and bad flags
// are refused. (The GPT trains on Debian's fortunes, which scripts/setup.sh installs.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <string>

#include "run_app.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

const char* kDevices[] = {"cpu:0", "vulkan:0", "opencl:0"};

std::string train() {
  return std::string(TRAIN_BIN) + " ";
}

// A GPT small enough for seconds per run: 2 layers, 2 heads, width 32, context 32, batch 8.
std::string tiny_gpt(int steps, int val_every, int sample_chars = 40) {
  return train() + "--model gpt --layers 2 --heads 2 --width 32 --context 32 --batch-size 8 " +
         "--lr 0.003 --warmup-steps 4 --limit-test-batches 2 --sample-chars " +
         std::to_string(sample_chars) + " --max-steps " + std::to_string(steps) + " --val-every " +
         std::to_string(val_every);
}

// The value of "Validation loss: X nats/char after N step(s)", or NaN.
double val_loss(const std::string& out, int steps) {
  std::smatch m;
  const std::regex re("Validation loss: ([0-9.]+) nats/char after " + std::to_string(steps) +
                      " step\\(s\\)");
  return std::regex_search(out, m, re) ? std::stod(m[1]) : NAN;
}

class TrainModelsApp : public ::testing::Test {
 protected:
  fs::path dir_ = fs::path(::testing::TempDir()) /
                  ("tessera_train_models_" + std::to_string(::getpid()) + "_" +
                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  void SetUp() override { fs::create_directories(dir_); }
  void TearDown() override { fs::remove_all(dir_); }
};

TEST_F(TrainModelsApp, GptLearnsAndEndsAtTheSameValidationLossOnEveryDevice) {
  double cpu_loss = NAN;
  for (const char* dev : kDevices) {
    const fs::path weights = dir_ / (std::string(dev).substr(0, 3) + ".safetensors");
    const Result r =
        run("", tiny_gpt(16, 8) + " --accelerator " + dev + " --save-weights " + weights.string());
    ASSERT_EQ(r.code, 0) << dev << ": " << r.err << r.out;
    const double loss = val_loss(r.out, 16);
    ASSERT_FALSE(std::isnan(loss)) << dev << ": " << r.out;
    // Better than a uniform guess over fortunes' 114 characters (ln 114 = 4.74).
    EXPECT_LT(loss, 4.2) << dev;
    EXPECT_NE(r.out.find("step 8: val_loss"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("step 16: val_loss"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("a sample:"), std::string::npos) << r.out;
    if (std::string(dev) == "cpu:0")
      cpu_loss = loss;
    else
      EXPECT_NEAR(loss, cpu_loss, 0.01 * cpu_loss) << dev << " against cpu:0";
    // The weights file samples through tessera-generate.
    const Result g = run("", std::string(GENERATE_BIN) + " -q " + weights.string() +
                                 " --prompt 'Q: ' --max-new-tokens 20 --accelerator " + dev);
    ASSERT_EQ(g.code, 0) << g.err;
    EXPECT_EQ(g.out.substr(0, 3), "Q: ");
    EXPECT_EQ(g.out.size(), 3 + 20 + 1u);
  }
}

TEST_F(TrainModelsApp, GptResumesFromItsCheckpointAsIfUninterrupted) {
  const std::string ckpt = " --checkpoint-dir " + (dir_ / "ckpt").string();
  const std::string base = tiny_gpt(12, 6, 0) + " --accelerator cpu -q";
  const Result whole = run("", base);
  ASSERT_EQ(whole.code, 0) << whole.err;
  const Result first = run("", base + " --epochs 1" + ckpt);  // stops after 6 of 12 steps
  ASSERT_EQ(first.code, 0) << first.err;
  const Result rest = run("", base + ckpt + " --resume");
  ASSERT_EQ(rest.code, 0) << rest.err;
  EXPECT_EQ(val_loss(rest.out, 12), val_loss(whole.out, 12)) << whole.out << rest.out;
  // A checkpoint carries the vocabulary too: tessera-generate samples from it.
  const Result g = run("", std::string(GENERATE_BIN) + " -q " +
                               (dir_ / "ckpt" / "epoch-0002.safetensors").string() +
                               " --max-new-tokens 10 --accelerator cpu");
  EXPECT_EQ(g.code, 0) << g.err;
}

TEST_F(TrainModelsApp, ResNetTrainsOnEveryDevice) {
  for (const char* dev : kDevices) {
    const bool cpu = std::string(dev) == "cpu:0";
    const std::string steps = cpu ? "24" : "4";
    const fs::path weights = dir_ / "resnet.safetensors";
    const Result r =
        run("", train() + "--model resnet --depth 8 --width 4 --batch-size 16 " +
                    "--limit-test-batches 1 --max-steps " + steps + (cpu ? " --augment" : "") +
                    " -q --accelerator " + dev + " --save-weights " + weights.string());
    ASSERT_EQ(r.code, 0) << dev << ": " << r.err << r.out;
    EXPECT_NE(r.out.find("Test accuracy:"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(steps + " step(s)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("resnet on " + std::string(dev)), std::string::npos) << r.out;
    EXPECT_TRUE(fs::exists(weights)) << dev;
  }
}

TEST_F(TrainModelsApp, BadModelFlagsExitTwo) {
  for (const auto& [args, what] : {
           std::pair{"--model transformer", "--model: use mlp, cnn, resnet or gpt"},
           std::pair{"--model resnet --depth 9", "--depth: use 6n+2"},
           std::pair{"--model gpt --optimizer sgd", "adamw"},
           std::pair{"--model gpt --width 32 --heads 3", "--heads"},
           std::pair{"--model gpt --scheduler onecycle", "--scheduler"},
           std::pair{"--model gpt --val-every 0.5", "--val-every"},
           std::pair{"--model gpt --max-steps -1", "--max-steps"},
           std::pair{"--scheduler sometimes", "--scheduler: use none, step, cosine or onecycle"},
           std::pair{"--model gpt --dropout 1", "--dropout"},
       }) {
    const Result r = run("", train() + args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.err;
    EXPECT_NE(r.err.find(what), std::string::npos) << args << ": " << r.err;
  }
  const Result missing =
      run("", train() + "--model gpt --accelerator cpu --text " + (dir_ / "none.txt").string());
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("none.txt"), std::string::npos) << missing.err;
  EXPECT_NE(missing.err.find("apt-get install fortunes"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace tessera::testing
