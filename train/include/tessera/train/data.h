// Datasets: the IDX format of MNIST and Fashion-MNIST (plain or gzip), and a loader that
// shuffles per epoch from the seed and prepares normalised (optionally augmented) batches on a
// background thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
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

// Reads an IDX file of unsigned bytes (type 0x08), gzip-compressed or not. Only a regular file is
// opened (tessera/file.h's RegularFile: a FIFO, directory or device is refused at once). What
// the header claims is checked before any memory is taken: the product of the dimensions is
// overflow-checked; for a plain file it must equal the bytes after the header; for a gzip file it
// must fit in what the compressed size can expand to (deflate's ratio is at most about 1032:1),
// and the buffer then grows only as data arrives. Throws FileError naming the file and what is
// wrong: missing, not a regular file, not IDX (magic), another element type, dimensions that
// overflow, truncated (fewer bytes than the dimensions say), corrupt gzip data, or trailing bytes.
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
// SPLIT-labels-idx1-ubyte[.gz]). Throws FileError naming the files when one is missing or
// malformed (read_idx), when image and label counts differ, when the split holds no samples or
// its images no pixels, or when a label is not below 10; a missing or empty split's message says
// how to get the data.
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
  // Augmentation, off by default (then batches are exactly the normalised images). As
  // torchvision's transforms.RandomCrop(size=(rows, cols), padding=random_crop_padding) followed by
  // RandomHorizontalFlip(p=0.5), applied to the raw image before ToTensor/Normalize: the image is
  // padded on every side with pixels of value 0 (so a padded pixel normalises to -mean/std, as in
  // torchvision, not to 0), a rows x cols window is cut at an offset drawn uniformly from
  // [0, 2 * padding] in each direction, and then mirrored left-right with probability 1/2.
  // Each sample's draws are a pure function of (seed, epoch, the sample's index in the dataset),
  // so a resumed run repeats them and the shuffle order does not change them.
  std::int64_t random_crop_padding = 0;  // 0: no crop; must be in [0, 2^20]
  bool random_horizontal_flip = false;
};

// The augmentation of one sample: the crop offset (padded-image coordinates minus the padding,
// each in [-padding, padding]) and whether it is mirrored. Output pixel (r, c) is the source pixel
// (r + dy, c' + dx), with c' = cols - 1 - c when flipped and c otherwise, or a pixel of value 0
// (before normalisation) when that lies outside the image. With an option off, its draw is still
// made (so turning one on does not change the other's draws) but not applied: dy = dx = 0 or
// flip = false. augment_draw is the loader's draw for |sample| (the index in the dataset) in
// |epoch|; a pure function of options.seed, random_crop_padding (taken as clamped to [0, 2^20])
// and random_horizontal_flip, epoch and sample. Never throws.
struct AugmentDraw {
  std::int64_t dy = 0, dx = 0;
  bool flip = false;
};
AugmentDraw augment_draw(const LoaderOptions& options, std::int64_t epoch, std::int64_t sample);

// Iterates a dataset in batches. begin_epoch(e) starts a background thread that gathers, in the
// order permutation(size, derive_seed(seed, e)), augments (when asked) and normalises up to
// |prefetch| batches ahead; next() hands them over in order. One consumer thread; the dataset must
// outlive the loader and keep its sizes (each epoch's worker checks them again). An exception on
// the worker (a dataset that changed, std::bad_alloc) never terminates the process: the worker
// stops, and next() rethrows it on the consumer thread once the batches made before it are handed
// over, and again on every later call until begin_epoch. Stopping (begin_epoch, the destructor)
// never waits on a worker that failed.
class BatchLoader {
 public:
  // Throws InvalidArgument for a batch size that is not positive, a std that is not positive, a
  // random_crop_padding outside [0, 2^20], or a dataset whose images and labels do not hold size *
  // rows * cols and size bytes.
  BatchLoader(const Dataset& data, LoaderOptions options);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  std::int64_t num_batches() const { return batches_; }
  std::int64_t num_samples() const;
  std::int64_t batch_size() const { return options_.batch_size; }
  const Dataset& dataset() const { return data_; }
  // DataLoader::set_distributed (data_loader.h), as torch's DistributedSampler(shuffle, seed,
  // drop_last=False) under a DataLoader(batch_size, drop_last): of the epoch's order (padded by
  // repeating its first samples to a multiple of |world_size| when |pad_to_equal|), this loader
  // takes positions rank, rank + world_size, ... and batches them. Ends the epoch under way;
  // num_batches() and num_samples() count the share at once. Throws InvalidArgument for a rank
  // outside [0, world_size) or world_size < 1.
  void set_distributed(int rank, int world_size, bool pad_to_equal);
  void begin_epoch(std::int64_t epoch);
  // The next batch of the epoch, or false at its end (or before the first begin_epoch). Rethrows
  // what the worker threw (see above).
  bool next(Batch& out);

 private:
  void stop();
  void produce(std::vector<std::int64_t> order, std::int64_t epoch);
  void check_dataset() const;
  void count_batches();

  const Dataset& data_;
  LoaderOptions options_;
  std::int64_t batches_ = 0;
  std::int64_t size_ = 0, pixels_ = 0;  // the dataset's shape when the loader was made
  int rank_ = 0, world_ = 1;            // set_distributed
  bool pad_ = true;
  std::int64_t share_ = 0;  // the samples of an epoch this loader yields (before batching)
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Batch> ready_;
  std::int64_t produced_ = 0, consumed_ = 0;
  bool stopping_ = false;
  bool finished_ = false;     // the worker has returned (normally or by an exception)
  std::exception_ptr error_;  // what the worker threw, for next() to rethrow
};

}  // namespace tessera::train
