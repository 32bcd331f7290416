// The IDX reader and the batch loader: good files (plain and gzip) read back, every malformed
// file gives a FileError naming it, and batches are shuffled deterministically per epoch.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "input_files.h"
#include "tessera/errors.h"
#include "tessera/train/data.h"

using namespace tessera;
using namespace tessera::train;
using tessera::testing::file_error;
using tessera::testing::TempDir;
namespace fs = std::filesystem;

namespace {

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

}  // namespace

TEST(Idx, ReadsPlainAndGzipFiles) {
  TempDir dir("data");
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
  TempDir dir("data");
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
  TempDir dir("data");
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
// The message of the FileError that read_idx(p) throws for |bytes| written to p (gzip or not);
// the test fails unless it names the file and contains |expect|.
std::string idx_error(const fs::path& p, const std::string& bytes, bool gz,
                      const std::string& expect) {
  write(p, bytes, gz);
  const std::string msg = file_error([&] { read_idx(p); });
  EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find(expect), std::string::npos) << msg;
  return msg;
}
}  // namespace

// [4, 2^31, 2^31] wrapped the size to 0 (then an out-of-bounds write); [65536, 2^24, 2^24] threw
// std::bad_alloc on the loader thread. Both products pass 64 bits and are refused as such.
TEST(Idx, DimensionsThatOverflowAreRefused) {
  TempDir dir("data");
  for (bool gz : {false, true}) {
    const fs::path p = dir.path() / (gz ? "big.gz" : "big");
    idx_error(p, idx_bytes({4, 1u << 31, 1u << 31}, iota_bytes(16)), gz,
              "the dimensions [4, 2147483648, 2147483648] multiply past 64 bits");
    idx_error(p, idx_bytes({65536, 1u << 24, 1u << 24}, iota_bytes(16)), gz,
              "the dimensions [65536, 16777216, 16777216] multiply past 64 bits");
  }
}

// A 784 KB file claiming 16.8 M images of 28x28 (13 GB) allocated all of it before saying
// "truncated". The claim is now checked against the file first: for a plain file its real size,
// for gzip what its compressed size can expand to. (read_idx allocates only after these checks.)
TEST(Idx, ClaimsBeyondTheFileAreTruncatedBeforeAnyAllocation) {
  TempDir dir("data");
  const std::string bytes = idx_bytes({1u << 24, 28, 28}, iota_bytes(784000));
  idx_error(dir.path() / "claim", bytes, false,
            "truncated: the dimensions say 13153337344 bytes of data, the file has 784000");
  const std::string gz = idx_error(dir.path() / "claim.gz", bytes, true,
                                   "truncated: the dimensions say 13153337344 bytes of data, more "
                                   "than the ");
  EXPECT_NE(gz.find("-byte gzip file can hold"), std::string::npos) << gz;
  // Within the bound, a gzip file's data is read as it arrives and its real length reported.
  idx_error(dir.path() / "short.gz", idx_bytes({3u << 20}, iota_bytes(1u << 20)), true,
            "truncated: the dimensions say 3145728 bytes of data, the file has 1048576");
}

TEST(Idx, GzipDataLargerThanOneChunkReadsBack) {
  TempDir dir("data");
  const auto data = iota_bytes(3 << 20);  // the buffer grows twice on the way
  const fs::path p = dir.path() / "large.gz";
  write(p, idx_bytes({3, 1024, 1024}, data), true);
  const IdxArray a = read_idx(p);
  EXPECT_EQ(a.dims, (std::vector<std::int64_t>{3, 1024, 1024}));
  EXPECT_TRUE(a.data == data);
}

// A FIFO named as a data file blocked forever in open(); a directory gave
// "basic_filebuf::underflow ... Is a directory". Only regular files are opened.
TEST(Idx, OnlyRegularFilesAreOpened) {
  TempDir dir("data");
  const fs::path fifo = dir.path() / "fifo-idx3-ubyte";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string msg = tessera::testing::fifo_error([&] { read_idx(fifo); }, fifo);
  EXPECT_NE(msg.find(fifo.string() + ": is a FIFO, not a regular file"), std::string::npos) << msg;

  msg = file_error([&] { read_idx(dir.path()); });
  EXPECT_NE(msg.find(dir.path().string() + ": is a directory, not a regular file"),
            std::string::npos)
      << msg;
  msg = file_error([&] { read_idx("/dev/null"); });
  EXPECT_NE(msg.find("/dev/null: is a character device, not a regular file"), std::string::npos)
      << msg;

  // Through load_mnist_split: a directory and a FIFO where the files should be.
  write(dir.path() / "train-labels-idx1-ubyte", idx_bytes({1}, {0}));
  fs::create_directory(dir.path() / "train-images-idx3-ubyte");
  msg = file_error([&] { load_mnist_split(dir.path(), "train"); });
  EXPECT_NE(msg.find("train-images-idx3-ubyte: is a directory, not a regular file"),
            std::string::npos)
      << msg;
  fs::remove(dir.path() / "train-images-idx3-ubyte");
  write(dir.path() / "train-images-idx3-ubyte", idx_bytes({1, 1, 1}, {0}));
  fs::remove(dir.path() / "train-labels-idx1-ubyte");
  ASSERT_EQ(::mkfifo((dir.path() / "train-labels-idx1-ubyte.gz").c_str(), 0600), 0);
  msg = tessera::testing::fifo_error([&] { load_mnist_split(dir.path(), "train"); },
                                     dir.path() / "train-labels-idx1-ubyte.gz");
  EXPECT_NE(msg.find("train-labels-idx1-ubyte.gz: is a FIFO, not a regular file"),
            std::string::npos)
      << msg;
}

// An empty split gave "Test accuracy: 0.00%" (test) or "/train has no samples" (train), naming no
// file; images of no pixels were accepted.
TEST(Idx, EmptySplitsAndEmptyImagesNameTheFiles) {
  TempDir dir("data");
  const fs::path ip = dir.path() / "t10k-images-idx3-ubyte",
                 lp = dir.path() / "t10k-labels-idx1-ubyte";
  write(ip, idx_bytes({0, 28, 28}, {}));
  write(lp, idx_bytes({0}, {}));
  std::string msg = file_error([&] { load_mnist_split(dir.path(), "t10k"); });
  EXPECT_NE(
      msg.find(ip.string() + " and " + lp.string() + " hold no samples: the t10k split is empty"),
      std::string::npos)
      << msg;
  write(ip, idx_bytes({2, 0, 28}, {}));
  write(lp, idx_bytes({2}, {1, 2}));
  msg = file_error([&] { load_mnist_split(dir.path(), "t10k"); });
  EXPECT_NE(msg.find(ip.string() + ": images of 0x28 pixels hold no data"), std::string::npos)
      << msg;
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

// An exception on the worker thread (here: the dataset shrank after the loader was made; before,
// a std::bad_alloc from a huge IDX header) terminated the process. It now reaches next().
TEST(BatchLoader, WorkerErrorsAreRethrownByNext) {
  Dataset d = synthetic(10);
  LoaderOptions o;
  o.batch_size = 4;
  o.shuffle = false;
  BatchLoader loader(d, o);
  EXPECT_EQ(epoch_order(loader, 1, o).size(), 10u);

  d.images.resize(3);
  loader.begin_epoch(2);
  Batch b;
  try {
    loader.next(b);
    ADD_FAILURE() << "next() did not rethrow the worker's error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("changed after its BatchLoader was made"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(loader.next(b), InvalidArgument);  // until the next epoch begins
  d = synthetic(10);
  EXPECT_EQ(epoch_order(loader, 3, o).size(), 10u);  // a new epoch starts clean

  d.labels.pop_back();
  loader.begin_epoch(4);  // the destructor then stops a worker that failed, without waiting
  EXPECT_THROW(loader.next(b), InvalidArgument);
}

TEST(BatchLoader, RefusesADatasetWhoseSizesDisagree) {
  Dataset d = synthetic(10);
  d.images.resize(39);
  LoaderOptions o;
  try {
    BatchLoader loader(d, o);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("10 samples of 2x2 pixels need 40 image bytes and 10 "
                                         "labels, it holds 39 and 10"),
              std::string::npos)
        << e.what();
  }
  d = synthetic(10);
  d.rows = std::int64_t{1} << 40;
  d.cols = std::int64_t{1} << 40;
  EXPECT_THROW(BatchLoader(d, o), InvalidArgument);
}
