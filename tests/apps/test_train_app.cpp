// tessera-train run as a user runs it: command-line and data errors, checkpoints that resume
// bit-identically and load in Python's safetensors, metrics and plot files, and the same reduced
// run agreeing across every device present.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "run_app.h"
#include "tessera/runtime.h"
#include "tessera/train/safetensors.h"

using tessera::testing::Result;
using tessera::testing::run;
namespace fs = std::filesystem;

namespace {

// A reduced run: 20 batches of 128 to train, 8 to test.
const std::string kSmall = " -q --limit-train-batches 20 --limit-test-batches 8";

std::string train(const std::string& args) {
  return std::string(TRAIN_BIN) + " " + args;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path p =
      fs::path(::testing::TempDir()) / fmt::format("tessera-train-{}-{}", name, ::getpid());
  fs::remove_all(p);
  return p;
}

std::vector<std::vector<std::string>> read_csv(const fs::path& p) {
  std::vector<std::vector<std::string>> rows;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
    rows.push_back(cells);
  }
  return rows;
}

}  // namespace

TEST(TesseraTrain, BadCommandLinesExitWithTwoAndSayWhy) {
  Result r = run("", train("--model resnet"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--model: use mlp or cnn"), std::string::npos) << r.err;
  r = run("", train("--epochs 0"));
  EXPECT_EQ(r.code, 2);
  r = run("", train("--resume"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--resume needs --checkpoint-dir"), std::string::npos) << r.err;
  r = run("", train("--accelerator tpu"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("You selected an invalid accelerator name: accelerator='tpu'"),
            std::string::npos)
      << r.err;
  r = run("", train("--plot curves.bmp"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("use .png, .svg or .pdf"), std::string::npos) << r.err;
}

TEST(TesseraTrain, MissingOrBrokenDataNamesTheFile) {
  Result r = run("", train("--data /nonexistent/fmnist"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("/nonexistent/fmnist: no such directory"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("apt-get install dataset-fashion-mnist"), std::string::npos) << r.err;
  const fs::path dir = fresh_dir("broken-data");
  fs::create_directories(dir);
  std::ofstream(dir / "train-images-idx3-ubyte") << "not idx";
  std::ofstream(dir / "train-labels-idx1-ubyte") << "not idx";
  r = run("", train("--data " + dir.string()));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find((dir / "train-images-idx3-ubyte").string() + ": not an IDX file"),
            std::string::npos)
      << r.err;
  r = run("", train(fmt::format("--resume --checkpoint-dir {}", dir.string())));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("no checkpoint"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST(TesseraTrain, ResumeIsBitIdenticalAndFilesAreReadable) {
  const fs::path straight = fresh_dir("straight"), resumed = fresh_dir("resumed");
  Result r = run("TESSERA_DEVICE=cpu",
                 train(fmt::format("--epochs 2 --checkpoint-dir {}{}", straight.string(), kSmall)));
  ASSERT_EQ(r.code, 0) << r.err;
  r = run("TESSERA_DEVICE=cpu",
          train(fmt::format("--epochs 1 --checkpoint-dir {0} --metrics {0}/m.csv{1}",
                            resumed.string(), kSmall)));
  ASSERT_EQ(r.code, 0) << r.err;
  r = run("TESSERA_DEVICE=cpu",
          train(fmt::format("--epochs 2 --resume --checkpoint-dir {0} --metrics {0}/m.csv "
                            "--plot {0}/curves.png{1}",
                            resumed.string(), kSmall)));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Test accuracy: "), std::string::npos) << r.out;

  // Weights and optimizer state, bit for bit.
  tessera::Device& cpu = tessera::device("cpu");
  const auto a = tessera::train::load_safetensors(straight / "epoch-0002.safetensors", &cpu);
  const auto b = tessera::train::load_safetensors(resumed / "epoch-0002.safetensors", &cpu);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  ASSERT_EQ(a.tensors.size(), 18u);  // 6 parameters, Adam's 2 moments each
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].first, b.tensors[i].first);
    EXPECT_EQ(a.tensors[i].second.to_vector<float>(), b.tensors[i].second.to_vector<float>())
        << a.tensors[i].first;
  }

  const auto csv = read_csv(resumed / "m.csv");
  ASSERT_EQ(csv.size(), 3u);
  EXPECT_EQ(csv[0], (std::vector<std::string>{"epoch", "train_loss", "train_accuracy", "test_loss",
                                              "test_accuracy", "seconds", "samples_per_second"}));
  EXPECT_EQ(csv[1][0], "1");
  EXPECT_EQ(csv[2][0], "2");
  std::ifstream png(resumed / "curves.png", std::ios::binary);
  std::string magic(8, '\0');
  png.read(magic.data(), 8);
  EXPECT_EQ(magic, "\x89PNG\r\n\x1a\n");

  // Python's safetensors library reads the checkpoint (TESSERA_TEST_PYTHON: a Python that has
  // it, as scripts/test.sh provides).
  const char* py = std::getenv("TESSERA_TEST_PYTHON");
  const std::string python = py && *py ? py : "python3";
  r = run("", fmt::format("{} -c \"from safetensors.numpy import load_file; "
                          "d = load_file('{}'); print(d['1.weight'].shape, d['5.bias'].dtype, "
                          "len(d))\"",
                          python, (resumed / "epoch-0002.safetensors").string()));
  EXPECT_EQ(r.code, 0) << r.err
                       << "\n(needs Python with safetensors and numpy: pip install safetensors "
                          "numpy, or run scripts/test.sh)";
  EXPECT_EQ(r.out, "(512, 784) float32 18\n");
  fs::remove_all(straight);
  fs::remove_all(resumed);
}

TEST(TesseraTrain, EveryDeviceReachesTheAccuracyOfCpu) {
  // The same reduced run (seed, data, batches) on every device: test accuracies within 0.5
  // points of cpu:0's.
  std::map<std::string, double> accuracy;
  for (tessera::Device* d : tessera::devices()) {
    const fs::path csv = fresh_dir("acc-" + d->id()).string() + ".csv";
    const Result r =
        run("", train(fmt::format("--accelerator {} --epochs 1 --seed 3 --metrics {}{}", d->id(),
                                  csv.string(), kSmall)));
    ASSERT_EQ(r.code, 0) << d->id() << ": " << r.err;
    const auto rows = read_csv(csv);
    ASSERT_EQ(rows.size(), 2u);
    accuracy[d->id()] = 100 * std::stod(rows[1][4]);
    fs::remove(csv);
  }
  ASSERT_TRUE(accuracy.count("cpu:0"));
  EXPECT_GT(accuracy["cpu:0"], 60.0);  // 20 steps learn most of Fashion-MNIST's easy classes
  for (const auto& [id, acc] : accuracy)
    EXPECT_NEAR(acc, accuracy["cpu:0"], 0.5) << id << " vs cpu:0";
}
