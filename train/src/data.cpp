#include "tessera/train/data.h"

#include <zlib.h>

#include <algorithm>
#include <exception>
#include <limits>
#include <numeric>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tessera/checked.h"
#include "tessera/errors.h"
#include "tessera/file.h"
#include "tessera/train/data_loader.h"
#include "tessera/train/random.h"

namespace tessera::train {

namespace fs = std::filesystem;

namespace {

// Deflate never expands data by more than about 1032:1, so a gzip file of N bytes holds at most
// this many times N bytes: a header that claims more is truncated, whatever the data says.
constexpr std::uint64_t kMaxDeflateRatio = 1032;
// Memory for a gzip file's data grows as the data arrives, starting from this much.
constexpr std::size_t kFirstChunk = std::size_t{1} << 20;
// No IDX file of unsigned bytes we read is anywhere near this large.
constexpr std::uint64_t kMaxIdxData = std::uint64_t{1} << 34;

std::string dims_str(const std::vector<std::int64_t>& dims) {
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

}  // namespace

IdxArray read_idx(const fs::path& path) {
  auto bad = [&](const std::string& what) {
    return FileError(fmt::format("{}: {}", path.string(), what));
  };
  RegularFile file(path);  // refuses FIFOs, directories and devices without blocking
  const std::uint64_t file_size = file.size();
  gzFile f = gzdopen(file.fd(), "rb");
  if (!f) throw bad("can not open: out of memory for the gzip reader");
  file.release();  // gzclose closes the descriptor from here on
  struct Closer {
    gzFile f;
    ~Closer() { gzclose(f); }
  } closer{f};
  auto read = [&](void* dst, std::size_t n) -> std::size_t {
    std::size_t done = 0;
    while (done < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - done, 1u << 30));
      const int got = gzread(f, static_cast<char*>(dst) + done, chunk);
      if (got < 0) {
        int errnum = 0;
        throw bad(fmt::format("corrupt gzip data ({})", gzerror(f, &errnum)));
      }
      if (got == 0) break;
      done += static_cast<std::size_t>(got);
    }
    return done;
  };
  unsigned char magic[4];
  if (read(magic, 4) != 4) throw bad("truncated: shorter than the 4-byte IDX magic number");
  if (magic[0] != 0 || magic[1] != 0)
    throw bad("not an IDX file (the magic number must start with two zero bytes)");
  if (magic[2] != 0x08)
    throw bad(fmt::format("element type 0x{:02x} is not supported (only unsigned bytes, 0x08)",
                          magic[2]));
  const int ndims = magic[3];
  if (ndims < 1 || ndims > 4) throw bad(fmt::format("{} dimensions (1 to 4 expected)", ndims));
  IdxArray a;
  for (int i = 0; i < ndims; ++i) {
    unsigned char b[4];
    if (read(b, 4) != 4) throw bad("truncated inside the dimension list");
    const std::uint32_t d = (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) |
                            (std::uint32_t{b[2]} << 8) | b[3];
    a.dims.push_back(d);
  }
  // Everything the dimensions claim is checked against the file before any memory is taken.
  const std::optional<std::int64_t> numel = checked_numel(a.dims);
  if (!numel)
    throw bad(fmt::format("the dimensions {} multiply past 64 bits; the header is corrupt",
                          dims_str(a.dims)));
  const auto total = static_cast<std::uint64_t>(*numel);
  if (total > kMaxIdxData)
    throw bad(
        fmt::format("the dimensions {} describe {} bytes, more than the {} this reader "
                    "accepts",
                    dims_str(a.dims), total, format_bytes(kMaxIdxData)));
  const bool compressed = gzdirect(f) == 0;
  if (!compressed) {
    const std::uint64_t header = 4 + 4 * static_cast<std::uint64_t>(ndims);
    const std::uint64_t have = file_size >= header ? file_size - header : 0;
    if (total > have)
      throw bad(fmt::format("truncated: the dimensions say {} bytes of data, the file has {}",
                            total, have));
    if (total < have)
      throw bad(
          fmt::format("trailing bytes after the {} bytes of data (the file has {})", total, have));
  } else {
    const std::uint64_t most = checked_mul(file_size, kMaxDeflateRatio)
                                   .value_or(std::numeric_limits<std::uint64_t>::max());
    if (total > most)
      throw bad(
          fmt::format("truncated: the dimensions say {} bytes of data, more than the "
                      "{}-byte gzip file can hold (at most {})",
                      total, file_size, most));
  }
  // A plain file's size is now known to match, so its buffer is taken at once; a gzip file's
  // buffer grows only as its data actually arrives.
  const auto want = static_cast<std::size_t>(total);
  a.data.resize(compressed ? std::min(want, kFirstChunk) : want);
  std::size_t got = 0;
  while (got < want) {
    if (got == a.data.size()) a.data.resize(std::min(want, 2 * a.data.size()));
    const std::size_t n = read(a.data.data() + got, a.data.size() - got);
    got += n;
    if (n == 0) break;
  }
  if (got != want)
    throw bad(
        fmt::format("truncated: the dimensions say {} bytes of data, the file has {}", total, got));
  char extra;
  if (read(&extra, 1) != 0)
    throw bad(fmt::format("trailing bytes after the {} bytes of data", total));
  return a;
}

Dataset Dataset::head(std::int64_t n) const {
  if (n <= 0 || n >= size) return *this;
  Dataset d = *this;
  d.size = n;
  d.images.resize(static_cast<std::size_t>(n * rows * cols));
  d.labels.resize(static_cast<std::size_t>(n));
  return d;
}

namespace {
constexpr const char* kGetTheData =
    "install Debian's dataset-fashion-mnist package (apt-get install dataset-fashion-mnist) or "
    "pass the directory that holds the IDX files";

fs::path find_file(const fs::path& dir, const std::string& stem) {
  for (const std::string& name : {stem + ".gz", stem})
    if (fs::exists(dir / name)) return dir / name;
  throw FileError(
      fmt::format("{}: no such file (nor {}.gz); {}", (dir / stem).string(), stem, kGetTheData));
}
}  // namespace

Dataset load_mnist_split(const fs::path& dir, const std::string& split) {
  if (!fs::is_directory(dir))
    throw FileError(fmt::format("{}: no such directory; {}", dir.string(), kGetTheData));
  const fs::path ip = find_file(dir, split + "-images-idx3-ubyte");
  const fs::path lp = find_file(dir, split + "-labels-idx1-ubyte");
  IdxArray images = read_idx(ip), labels = read_idx(lp);
  if (images.dims.size() != 3)
    throw FileError(fmt::format("{}: images must have 3 dimensions [N, rows, cols], got {}",
                                ip.string(), images.dims.size()));
  if (labels.dims.size() != 1)
    throw FileError(fmt::format("{}: labels must have 1 dimension [N], got {}", lp.string(),
                                labels.dims.size()));
  if (images.dims[0] != labels.dims[0])
    throw FileError(fmt::format("{} has {} images but {} has {} labels", ip.string(),
                                images.dims[0], lp.string(), labels.dims[0]));
  if (images.dims[0] == 0)
    throw FileError(fmt::format("{} and {} hold no samples: the {} split is empty; {}", ip.string(),
                                lp.string(), split, kGetTheData));
  if (images.dims[1] == 0 || images.dims[2] == 0)
    throw FileError(fmt::format("{}: images of {}x{} pixels hold no data", ip.string(),
                                images.dims[1], images.dims[2]));
  const std::optional<std::int64_t> pixels = checked_mul(images.dims[1], images.dims[2]);
  const std::optional<std::int64_t> bytes =
      pixels ? checked_mul(images.dims[0], *pixels) : std::nullopt;
  if (!bytes || images.data.size() != static_cast<std::uint64_t>(*bytes))
    throw FileError(fmt::format("{}: {} images of {}x{} pixels do not match its {} bytes of data",
                                ip.string(), images.dims[0], images.dims[1], images.dims[2],
                                images.data.size()));
  Dataset d;
  d.name = dir.filename().string() + "/" + split;
  d.size = images.dims[0];
  d.rows = images.dims[1];
  d.cols = images.dims[2];
  for (std::size_t i = 0; i < labels.data.size(); ++i)
    if (labels.data[i] >= d.num_classes)
      throw FileError(fmt::format("{}: label {} at index {} is not below {}", lp.string(),
                                  labels.data[i], i, d.num_classes));
  d.images = std::move(images.data);
  d.labels = std::move(labels.data);
  return d;
}

namespace {
// Padding beyond this is surely a mistake (and keeps every offset far from overflow).
constexpr std::int64_t kMaxCropPadding = std::int64_t{1} << 20;
// The stream of the augmentation draws, apart from the shuffle's derive_seed(seed, epoch).
constexpr std::uint64_t kAugmentStream = 0x6175676d656e74;  // "augment"

// Writes the augmented, normalised copy of the rows x cols image |src| to |dst| (see AugmentDraw).
void augment_image(const std::uint8_t* src, float* dst, std::int64_t rows, std::int64_t cols,
                   const AugmentDraw& d, float scale, float shift) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t sr = r + d.dy;
    float* out = dst + r * cols;
    if (sr < 0 || sr >= rows) {
      std::fill(out, out + cols, -shift);  // a padded pixel: 0 * scale - shift
      continue;
    }
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::int64_t sc = (d.flip ? cols - 1 - c : c) + d.dx;
      const std::uint8_t v = sc >= 0 && sc < cols ? src[sr * cols + sc] : 0;
      out[c] = static_cast<float>(v) * scale - shift;
    }
  }
}
}  // namespace

AugmentDraw augment_draw(const LoaderOptions& options, std::int64_t epoch, std::int64_t sample) {
  const std::uint64_t epoch_seed =
      derive_seed(derive_seed(options.seed, kAugmentStream), static_cast<std::uint64_t>(epoch));
  const std::uint64_t sample_seed = derive_seed(epoch_seed, static_cast<std::uint64_t>(sample));
  // One generator per draw, so that no draw depends on how many values another one took.
  auto draw = [&](std::uint64_t which, std::uint64_t n) {
    return Generator(derive_seed(sample_seed, which)).below(n);
  };
  const std::int64_t p = std::clamp<std::int64_t>(options.random_crop_padding, 0, kMaxCropPadding);
  const auto span = static_cast<std::uint64_t>(2 * p + 1);
  AugmentDraw d;
  d.dy = static_cast<std::int64_t>(draw(0, span)) - p;
  d.dx = static_cast<std::int64_t>(draw(1, span)) - p;
  d.flip = draw(2, 2) == 1 && options.random_horizontal_flip;
  return d;
}

BatchLoader::BatchLoader(const Dataset& data, LoaderOptions options)
    : data_(data), options_(options) {
  if (options.batch_size <= 0)
    throw InvalidArgument(fmt::format("batch size must be positive, got {}", options.batch_size));
  if (!(options.std > 0)) throw InvalidArgument("normalisation std must be positive");
  if (options.random_crop_padding < 0 || options.random_crop_padding > kMaxCropPadding)
    throw InvalidArgument(fmt::format("random_crop_padding must be in [0, {}], got {}",
                                      kMaxCropPadding, options.random_crop_padding));
  const std::optional<std::int64_t> pixels =
      data.rows >= 0 && data.cols >= 0 ? checked_mul(data.rows, data.cols) : std::nullopt;
  const std::optional<std::int64_t> bytes =
      pixels && data.size >= 0 ? checked_mul(data.size, *pixels) : std::nullopt;
  if (!bytes || data.images.size() != static_cast<std::uint64_t>(*bytes) ||
      data.labels.size() != static_cast<std::uint64_t>(data.size))
    throw InvalidArgument(fmt::format(
        "dataset '{}': {} samples of {}x{} pixels need {} image bytes and {} labels, it holds {} "
        "and {}",
        data.name, data.size, data.rows, data.cols,
        bytes ? fmt::to_string(*bytes) : std::string("more than 64 bits of"), data.size,
        data.images.size(), data.labels.size()));
  size_ = data.size;
  pixels_ = *pixels;
  count_batches();
  if (options_.prefetch == 0) options_.prefetch = 1;
}

void BatchLoader::count_batches() {
  share_ = distributed_share(size_, rank_, world_, pad_);
  const std::int64_t b = options_.batch_size;
  batches_ = options_.drop_last ? share_ / b : (share_ + b - 1) / b;
  if (options_.limit_batches > 0) batches_ = std::min(batches_, options_.limit_batches);
}

void BatchLoader::set_distributed(int rank, int world_size, bool pad_to_equal) {
  check_distributed(rank, world_size);
  stop();
  produced_ = consumed_ = 0;
  rank_ = rank;
  world_ = world_size;
  pad_ = pad_to_equal;
  count_batches();
}

BatchLoader::~BatchLoader() {
  stop();
}

std::int64_t BatchLoader::num_samples() const {
  return std::min(share_, batches_ * options_.batch_size);
}

void BatchLoader::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  ready_.clear();
  stopping_ = false;
  finished_ = false;
  error_ = nullptr;
}

void BatchLoader::begin_epoch(std::int64_t epoch) {
  stop();
  std::vector<std::int64_t> order;
  if (options_.shuffle) {
    order = permutation(size_, derive_seed(options_.seed, static_cast<std::uint64_t>(epoch)));
  } else {
    order.resize(static_cast<std::size_t>(size_));
    std::iota(order.begin(), order.end(), 0);
  }
  if (world_ > 1) {  // this rank's positions of the (padded) order
    std::vector<std::int64_t> mine(static_cast<std::size_t>(share_));
    for (std::int64_t q = 0; q < share_; ++q) {
      const std::int64_t p = q * world_ + rank_;
      mine[static_cast<std::size_t>(q)] =
          order[static_cast<std::size_t>(p < size_ ? p : (p - size_) % size_)];
    }
    order = std::move(mine);
  }
  produced_ = consumed_ = 0;
  worker_ =
      std::thread([this, o = std::move(order), epoch]() mutable { produce(std::move(o), epoch); });
}

void BatchLoader::check_dataset() const {
  const std::optional<std::int64_t> pixels = checked_mul(data_.rows, data_.cols);
  if (data_.size != size_ || pixels != pixels_ ||
      data_.images.size() != static_cast<std::uint64_t>(size_ * pixels_) ||
      data_.labels.size() != static_cast<std::uint64_t>(size_))
    throw InvalidArgument(fmt::format(
        "dataset '{}' changed after its BatchLoader was made (it had {} samples of {} pixels; now "
        "{} samples of {}x{}, {} image bytes and {} labels); make a new loader",
        data_.name, size_, pixels_, data_.size, data_.rows, data_.cols, data_.images.size(),
        data_.labels.size()));
}

void BatchLoader::produce(std::vector<std::int64_t> order, std::int64_t epoch) {
  try {
    check_dataset();
    const std::int64_t pixels = pixels_;
    const bool augment = options_.random_crop_padding > 0 || options_.random_horizontal_flip;
    const float scale = 1.0f / (255.0f * options_.std), shift = options_.mean / options_.std;
    for (std::int64_t b = 0; b < batches_; ++b) {
      Batch batch;
      batch.index = b;
      const std::int64_t begin = b * options_.batch_size;
      batch.size = std::min(options_.batch_size, static_cast<std::int64_t>(order.size()) - begin);
      batch.x.resize(static_cast<std::size_t>(batch.size * pixels));
      batch.y.resize(static_cast<std::size_t>(batch.size));
      for (std::int64_t i = 0; i < batch.size; ++i) {
        const std::int64_t s = order[static_cast<std::size_t>(begin + i)];
        const std::uint8_t* src = data_.images.data() + s * pixels;
        float* dst = batch.x.data() + i * pixels;
        if (augment)
          augment_image(src, dst, data_.rows, data_.cols, augment_draw(options_, epoch, s), scale,
                        shift);
        else
          for (std::int64_t p = 0; p < pixels; ++p)
            dst[p] = static_cast<float>(src[p]) * scale - shift;
        batch.y[static_cast<std::size_t>(i)] = data_.labels[static_cast<std::size_t>(s)];
      }
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || ready_.size() < options_.prefetch; });
      if (stopping_) break;
      ready_.push_back(std::move(batch));
      ++produced_;
      cv_.notify_all();
    }
  } catch (...) {
    std::lock_guard lock(mutex_);
    error_ = std::current_exception();
  }
  {
    std::lock_guard lock(mutex_);
    finished_ = true;
  }
  cv_.notify_all();
}

bool BatchLoader::next(Batch& out) {
  if (!worker_.joinable() || consumed_ >= batches_) return false;
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return !ready_.empty() || finished_; });
  if (ready_.empty()) {
    if (error_) std::rethrow_exception(error_);
    return false;  // the worker stopped early without an error: nothing more will come
  }
  out = std::move(ready_.front());
  ready_.pop_front();
  ++consumed_;
  cv_.notify_all();
  return true;
}

}  // namespace tessera::train
