// The IDX reader and the batch loader: good files (plain and gzip) read back, every malformed
// file gives a FileError naming it, and batches are shuffled deterministically per epoch.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "tessera/errors.h"
#include "tessera/train/data.h"

using namespace tessera;
using namespace tessera::train;
namespace fs = std::filesystem;

namespace {

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("tessera-data-" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string idx_bytes(const std::vector<std::uint32_t>& dims, const std::vector<std::uint8_t>& data,
                      std::uint8_t type = 0x08) {
  std::string s{'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (std::uint32_t d : dims)
    for (int shift : {24, 16, 8, 0}) s += static_cast<char>((d >> shift) & 0xff);
  s.append(data.begin(), data.end());
  return s;
}

void write(const fs::path& p, const std::string& bytes, bool gzip = false) {
  if (gzip) {
    gzFile f = gzopen(p.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream(p, std::ios::binary) << bytes;
  }
}

std::vector<std::uint8_t> iota_bytes(std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i * 7 % 251);
  return v;
}

// The message of the FileError that |f| throws.
template <typename F>
std::string file_error(F f) {
  try {
    f();
  } catch (const FileError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no FileError";
  return {};
}

}  // namespace

TEST(Idx, ReadsPlainAndGzipFiles) {
  TempDir dir;
  const auto data = iota_bytes(3 * 4 * 5);
  for (bool gz : {false, true}) {
    const fs::path p = dir.path() / (gz ? "a.gz" : "a");
    write(p, idx_bytes({3, 4, 5}, data), gz);
    const IdxArray a = read_idx(p);
    EXPECT_EQ(a.dims, (std::vector<std::int64_t>{3, 4, 5}));
    EXPECT_EQ(a.data, data);
  }
}

TEST(Idx, MalformedFilesNameTheFileAndTheProblem) {
  TempDir dir;
  const fs::path p = dir.path() / "bad-idx";
  auto check = [&](const std::string& bytes, const std::string& expect, bool gz = false) {
    write(p, bytes, gz);
    const std::string msg = file_error([&] { read_idx(p); });
    EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(expect), std::string::npos) << msg;
  };
  check("", "truncated");
  check(idx_bytes({10}, iota_bytes(9)),
        "truncated: the dimensions say 10 bytes of data, the file has 9");
  check(idx_bytes({10}, iota_bytes(9)), "truncated", true);
  check(idx_bytes({2}, iota_bytes(3)), "trailing bytes");
  check(std::string("\x01\x00\x08\x01", 4) + std::string(8, '\0'), "not an IDX file");
  check(idx_bytes({2}, iota_bytes(8), 0x0d), "element type 0x0d is not supported");
  check(std::string("\x00\x00\x08\x03\x00\x00", 6), "truncated inside the dimension list");
  // A gzip stream cut short.
  write(p, idx_bytes({1000}, iota_bytes(1000)), true);
  std::string gz;
  {
    std::ifstream in(p, std::ios::binary);
    gz.assign(std::istreambuf_iterator<char>(in), {});
  }
  check(gz.substr(0, gz.size() / 2), "");
  EXPECT_NE(file_error([&] { read_idx(dir.path() / "missing"); }).find("no such file"),
            std::string::npos);
}

TEST(Idx, LoadSplitChecksCountsLabelsAndSaysHowToGetTheData) {
  TempDir dir;
  write(dir.path() / "train-images-idx3-ubyte.gz", idx_bytes({4, 2, 3}, iota_bytes(24)), true);
  write(dir.path() / "train-labels-idx1-ubyte", idx_bytes({4}, {1, 2, 3, 9}));
  const Dataset d = load_mnist_split(dir.path(), "train");
  EXPECT_EQ(d.size, 4);
  EXPECT_EQ(d.rows, 2);
  EXPECT_EQ(d.cols, 3);
  EXPECT_EQ(d.labels, (std::vector<std::uint8_t>{1, 2, 3, 9}));

  write(dir.path() / "train-labels-idx1-ubyte", idx_bytes({3}, {1, 2, 3}));
  EXPECT_NE(file_error([&] { load_mnist_split(dir.path(), "train"); }).find("has 4 images but"),
            std::string::npos);
  write(dir.path() / "train-labels-idx1-ubyte", idx_bytes({4}, {1, 2, 10, 0}));
  EXPECT_NE(file_error([&] {
              load_mnist_split(dir.path(), "train");
            }).find("label 10 at index 2 is not below 10"),
            std::string::npos);
  const std::string missing = file_error([&] { load_mnist_split(dir.path(), "t10k"); });
  EXPECT_NE(missing.find("t10k-images-idx3-ubyte"), std::string::npos) << missing;
  EXPECT_NE(missing.find("apt-get install dataset-fashion-mnist"), std::string::npos) << missing;
  EXPECT_NE(
      file_error([&] { load_mnist_split(dir.path() / "nope", "train"); }).find("no such directory"),
      std::string::npos);
}

namespace {
Dataset synthetic(std::int64_t n) {
  Dataset d;
  d.size = n;
  d.rows = 2;
  d.cols = 2;
  d.images.resize(static_cast<std::size_t>(n * 4));
  d.labels.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    d.labels[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i % 10);
    for (int p = 0; p < 4; ++p)
      d.images[static_cast<std::size_t>(i * 4 + p)] = static_cast<std::uint8_t>(i);
  }
  return d;
}

// The sample order of one epoch (pixel 0 of each sample is its index).
std::vector<int> epoch_order(BatchLoader& loader, std::int64_t epoch, const LoaderOptions& o) {
  loader.begin_epoch(epoch);
  std::vector<int> order;
  Batch b;
  while (loader.next(b)) {
    EXPECT_EQ(b.x.size(), static_cast<std::size_t>(b.size * 4));
    for (std::int64_t i = 0; i < b.size; ++i)
      order.push_back(static_cast<int>(
          std::lround((b.x[static_cast<std::size_t>(i * 4)] * o.std + o.mean) * 255)));
  }
  return order;
}
}  // namespace

TEST(BatchLoader, ShufflesEveryEpochFromTheSeedAndCoversEverySample) {
  const Dataset d = synthetic(250);
  LoaderOptions o;
  o.batch_size = 32;
  o.seed = 7;
  BatchLoader a(d, o), b(d, o);
  EXPECT_EQ(a.num_batches(), 8);  // 7 full batches and one of 26
  const auto e1 = epoch_order(a, 1, o), e2 = epoch_order(a, 2, o);
  EXPECT_EQ(e1, epoch_order(b, 1, o));  // same seed and epoch: same order
  EXPECT_NE(e1, e2);
  std::vector<int> sorted = e1;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> all(250);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(sorted, all);
  // Restarting an epoch mid-way (the worker is stopped) starts it over.
  a.begin_epoch(3);
  Batch first;
  ASSERT_TRUE(a.next(first));
  EXPECT_EQ(epoch_order(a, 1, o), e1);
}

TEST(BatchLoader, LimitsAndDropLast) {
  const Dataset d = synthetic(100);
  LoaderOptions o;
  o.batch_size = 30;
  o.drop_last = true;
  EXPECT_EQ(BatchLoader(d, o).num_batches(), 3);
  o.limit_batches = 2;
  BatchLoader l(d, o);
  EXPECT_EQ(l.num_batches(), 2);
  EXPECT_EQ(epoch_order(l, 1, o).size(), 60u);
  o.batch_size = 0;
  EXPECT_THROW(BatchLoader(d, o), InvalidArgument);
}
