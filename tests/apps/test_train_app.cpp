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
  Result r = run("", train("--model transformer"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--model: use mlp, cnn, resnet or gpt"), std::string::npos) << r.err;
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
  for (const auto& [args, says] :
       {std::pair{"--max-steps 0", "--max-steps: use 1 or more, or -1 (no limit)"},
        std::pair{"--val-every 0", "--val-every: use a fraction in (0, 1] or a whole number"},
        std::pair{"--val-every 2.5", "--val-every: use a fraction in (0, 1] or a whole number"},
        std::pair{"--grad-clip -1", "--grad-clip: use 0 (off) or a positive number"},
        std::pair{"--accumulate 0", "--accumulate: use 1 or more"}}) {
    r = run("", train(args));
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_NE(r.err.find(says), std::string::npos) << args << ": " << r.err;
  }
}

TEST(TesseraTrain, MaxStepsStopWithinAnEpochAndValEveryValidatesWithin) {
  const fs::path dir = fresh_dir("max-steps");
  const Result r = run(
      "TESSERA_DEVICE=cpu",
      train(fmt::format("--epochs 3 --max-steps 30 --val-every 10 --metrics {0}/m.csv "
                        "--checkpoint-dir {0} -q --limit-train-batches 20 --limit-test-batches 4",
                        dir.string())));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Test accuracy: "), std::string::npos) << r.out;
  const auto csv = read_csv(dir / "m.csv");
  ASSERT_EQ(csv.size(), 4u);  // validations at steps 10, 20 (epoch 1's end) and 30 (the stop)
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"1", "10"}, {"1", "20"}, {"2", "30"}};
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(csv[i + 1][0], rows[i].first) << i;
    EXPECT_EQ(csv[i + 1][1], rows[i].second) << i;
  }
  // Checkpoints after epoch 1 and at the stop within epoch 2.
  EXPECT_TRUE(fs::exists(dir / "epoch-0001.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "epoch-0002.safetensors"));
  fs::remove_all(dir);
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
  EXPECT_EQ(csv[0],
            (std::vector<std::string>{"epoch", "step", "lr", "train_acc", "train_loss", "val_acc",
                                      "val_loss", "seconds", "samples_per_second"}));
  EXPECT_EQ(csv[1][2], "0.001");  // Adam's default learning rate
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
    ASSERT_EQ(rows[0][5], "val_acc");
    accuracy[d->id()] = 100 * std::stod(rows[1][5]);
    fs::remove(csv);
  }
  ASSERT_TRUE(accuracy.count("cpu:0"));
  EXPECT_GT(accuracy["cpu:0"], 60.0);  // 20 steps learn most of Fashion-MNIST's easy classes
  for (const auto& [id, acc] : accuracy)
    EXPECT_NEAR(acc, accuracy["cpu:0"], 0.5) << id << " vs cpu:0";
}

namespace {

// An IDX file of unsigned bytes with |dims|, zeros for the data.
void write_idx(const fs::path& p, const std::vector<std::uint32_t>& dims) {
  std::string s{'\0', '\0', '\x08', static_cast<char>(dims.size())};
  std::uint64_t n = 1;
  for (std::uint32_t d : dims) {
    for (int b = 3; b >= 0; --b) s += static_cast<char>(d >> (8 * b));
    n *= d;
  }
  s.append(n, '\0');
  std::ofstream(p, std::ios::binary) << s;
}

// A checkpoint's metadata edited in place (the tensors kept).
void edit_metadata(const fs::path& p, const std::string& key, const std::string& value) {
  tessera::Device& cpu = tessera::device("cpu");
  auto c = tessera::train::load_safetensors(p, &cpu);
  c.metadata[key] = value;
  tessera::train::save_safetensors(p, c.tensors, c.metadata);
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

TEST(TesseraTrain, HelpPrintsDefaultsAsAUserWritesThem) {
  const Result r = run("", train("--help"));
  ASSERT_EQ(r.code, 0) << r.err;
  // Observed on main: --momentum arg (=0.90000000000000002).
  EXPECT_NE(r.out.find("--momentum arg (=0.9) "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--weight-decay arg (=0) "), std::string::npos) << r.out;
  for (const char* opt :
       {"--model arg (=mlp)", "--epochs arg (=10)", "--batch-size arg (=128)",
        "--optimizer arg (=adam)", "--seed arg (=0)", "--accelerator arg (=auto)",
        "--devices arg (=1)", "--limit-train-batches arg (=0)", "--limit-test-batches arg (=0)",
        "--data arg (=/usr/share/datasets/fashion-mnist)"})
    EXPECT_NE(r.out.find(opt), std::string::npos) << opt << " in:\n" << r.out;
  EXPECT_EQ(r.out.find("0000"), std::string::npos) << r.out;
}

TEST(TesseraTrain, BadOutputPathsFailBeforeTraining) {
  const fs::path dir = fresh_dir("bad-out");
  fs::create_directories(dir);
  const fs::path file = dir / "a-file";
  std::ofstream(file) << "x";
  // Observed on main: found only after epoch 1 had trained.
  Result r = run("TESSERA_DEVICE=cpu",
                 train(fmt::format("--epochs 1 --checkpoint-dir {}{}", file.string(), kSmall)));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("checkpoint directory " + file.string() + ": not a directory"),
            std::string::npos)
      << r.err;
  r = run("TESSERA_DEVICE=cpu", train(fmt::format("--epochs 1 --metrics {}{}", dir.string(),
                                                  " --limit-train-batches 1")));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("metrics file " + dir.string() + ": is a directory"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("epoch 1"), std::string::npos) << r.out;
  if (::geteuid() != 0) {
    const fs::path ro = dir / "read-only";
    fs::create_directory(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    r = run("TESSERA_DEVICE=cpu",
            train(fmt::format("--epochs 1 --checkpoint-dir {}{}", ro.string(), kSmall)));
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find(ro.string() + ": can not write files in this directory"),
              std::string::npos)
        << r.err;
    fs::permissions(ro, fs::perms::owner_all);
  }
  r = run("", train("--limit-test-batches -1"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--limit-test-batches: use 0 (all) or more"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST(TesseraTrain, EmptyTestSplitIsAnError) {
  const fs::path dir = fresh_dir("empty-test");
  fs::create_directories(dir);
  write_idx(dir / "train-images-idx3-ubyte", {4, 28, 28});
  write_idx(dir / "train-labels-idx1-ubyte", {4});
  write_idx(dir / "t10k-images-idx3-ubyte", {0, 28, 28});
  write_idx(dir / "t10k-labels-idx1-ubyte", {0});
  // Observed on main: "Test accuracy: 0.00%", exit 0.
  const Result r = run("TESSERA_DEVICE=cpu", train("--epochs 1 --data " + dir.string()));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.out.find("Test accuracy"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("t10k"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no samples"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST(TesseraTrain, CraftedCheckpointsAreRefusedAndNeverOverwritten) {
  const fs::path dir = fresh_dir("crafted");
  const std::string args = fmt::format("--checkpoint-dir {}{}", dir.string(), kSmall);
  Result r = run("TESSERA_DEVICE=cpu", train("--epochs 1 " + args));
  ASSERT_EQ(r.code, 0) << r.err;
  const fs::path first = dir / "epoch-0001.safetensors";
  const std::string good = bytes_of(first);

  // Resuming at max_epochs trains nothing and says so.
  r = run("TESSERA_DEVICE=cpu", train("--epochs 1 --resume " + args));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Nothing to train: " + first.string() + " already has 1 epoch(s)"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(bytes_of(first), good);

  // Observed on main: epoch 2147483647 wrote checkpoints forever; -5 trained epochs -4 to 0 and
  // wrote over the file it resumed from.
  for (const char* epoch : {"2147483647", "-5"}) {
    edit_metadata(first, "epoch", epoch);
    const std::string crafted = bytes_of(first);
    r = run("TESSERA_DEVICE=cpu", train("--epochs 3 --resume " + args));
    EXPECT_EQ(r.code, 1) << epoch;
    EXPECT_NE(r.err.find(first.string() + ": malformed checkpoint"), std::string::npos) << r.err;
    EXPECT_EQ(bytes_of(first), crafted);
    EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1) << epoch;
  }

  // A checkpoint of epoch 1 named as epoch 3's: continuing would write over it.
  std::ofstream(first, std::ios::binary) << good;
  fs::rename(first, dir / "epoch-0003.safetensors");
  r = run("TESSERA_DEVICE=cpu", train("--epochs 3 --resume " + args));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("holds epoch 1 while its name says epoch 3"), std::string::npos) << r.err;
  EXPECT_EQ(bytes_of(dir / "epoch-0003.safetensors"), good);
  EXPECT_FALSE(fs::exists(dir / "epoch-0002.safetensors"));

  // Observed on main: "stol", naming no file.
  const fs::path huge = dir / "epoch-99999999999999999999.safetensors";
  std::ofstream(huge) << "x";
  r = run("TESSERA_DEVICE=cpu", train("--epochs 3 --resume " + args));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find(huge.string() + ": the epoch number in the file name is more than"),
            std::string::npos)
      << r.err;
  fs::remove_all(dir);
}

TEST(TesseraTrain, ReadmeTrainerExampleShowsProgress) {
  // Observed on main: the README's example printed nothing for its whole run.
  const Result r = run("TESSERA_DEVICE=cpu", TRAINER_EXAMPLE_BIN);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Training on cpu:0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("epoch 1: train_acc "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" val_loss "), std::string::npos) << r.out;
}

TEST(TesseraTrain, LightningExampleTrainsAndPredictsInANewProcess) {
  // docs/training.md's LightningModule: a few batches of training with the best weights saved
  // alone, then a second process loads them for inference on the same 512 test images.
  const fs::path dir = fresh_dir("lightning-cnn");
  Result r =
      run("TESSERA_DEVICE=cpu", fmt::format("{} train {} 4", LIGHTNING_EXAMPLE_BIN, dir.string()));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto best = r.out.find("best val_acc ");
  ASSERT_NE(best, std::string::npos) << r.out;
  const std::string accuracy = r.out.substr(best + 13, 6);
  EXPECT_TRUE(fs::exists(dir / "best.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "metrics.csv"));
  r = run("TESSERA_DEVICE=cpu", fmt::format("{} predict {}", LIGHTNING_EXAMPLE_BIN, dir.string()));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "predicted 512 images, accuracy " + accuracy + "\n");
  fs::remove_all(dir);
}
