// Datasets: the IDX format of MNIST and Fashion-MNIST (plain or gzip), and a loader that
// shuffles per epoch from the seed and prepares normalised batches on a background thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tessera::train {

// Where Debian's dataset-fashion-mnist package installs the data.
inline constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// One IDX file: unsigned bytes with their dimensions.
struct IdxArray {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> data;
};

// Reads an IDX file of unsigned bytes (type 0x08), gzip-compressed or not. Throws FileError
// naming the file and what is wrong: missing, not IDX (magic), another element type, truncated
// (fewer bytes than the dimensions say), or trailing bytes.
IdxArray read_idx(const std::filesystem::path& path);

// Images [N, rows, cols] as bytes and their labels [N].
struct Dataset {
  std::string name;  // "fashion-mnist/train"
  std::int64_t size = 0, rows = 0, cols = 0;
  int num_classes = 10;
  std::vector<std::uint8_t> images;
  std::vector<std::uint8_t> labels;
  // The first |n| samples (all when n <= 0 or n >= size).
  Dataset head(std::int64_t n) const;
};

// Loads split "train" or "t10k" from |dir| (files SPLIT-images-idx3-ubyte[.gz] and
// SPLIT-labels-idx1-ubyte[.gz]). Throws FileError when a file is missing or malformed, or when
// image and label counts differ or a label is not below 10; the message says how to get the data.
Dataset load_mnist_split(const std::filesystem::path& dir, const std::string& split);

// One batch, ready to copy to a device: x [size, 1, rows, cols] normalised, y [size] as i32.
struct Batch {
  std::int64_t index = 0;  // within the epoch
  std::int64_t size = 0;
  std::vector<float> x;
  std::vector<std::int32_t> y;
};

struct LoaderOptions {
  std::int64_t batch_size = 128;
  bool shuffle = true;
  std::uint64_t seed = 0;
  bool drop_last = false;
  std::int64_t limit_batches = 0;  // 0: every batch
  float mean = 0.2860f;            // Fashion-MNIST's pixel mean and standard deviation (of x/255)
  float std = 0.3530f;
  std::size_t prefetch = 4;  // batches prepared ahead
};

// Iterates a dataset in batches. begin_epoch(e) starts a background thread that gathers, in the
// order permutation(size, derive_seed(seed, e)), and normalises up to |prefetch| batches ahead;
// next() hands them over in order. One consumer thread; the dataset must outlive the loader.
class BatchLoader {
 public:
  BatchLoader(const Dataset& data, LoaderOptions options);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  std::int64_t num_batches() const { return batches_; }
  std::int64_t num_samples() const;
  const Dataset& dataset() const { return data_; }
  void begin_epoch(std::int64_t epoch);
  // The next batch of the epoch, or false at its end.
  bool next(Batch& out);

 private:
  void stop();
  void produce(std::vector<std::int64_t> order);

  const Dataset& data_;
  LoaderOptions options_;
  std::int64_t batches_ = 0;
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Batch> ready_;
  std::int64_t produced_ = 0, consumed_ = 0;
  bool stopping_ = false;
};

}  // namespace tessera::train
