#include "tessera/train/data.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/train/random.h"

namespace tessera::train {

namespace fs = std::filesystem;

IdxArray read_idx(const fs::path& path) {
  auto bad = [&](const std::string& what) {
    return FileError(fmt::format("{}: {}", path.string(), what));
  };
  if (!fs::exists(path)) throw bad("no such file");
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw bad(fmt::format("can not open: {}", std::strerror(errno)));
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
  std::size_t total = 1;
  for (int i = 0; i < ndims; ++i) {
    unsigned char b[4];
    if (read(b, 4) != 4) throw bad("truncated inside the dimension list");
    const std::uint32_t d = (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) |
                            (std::uint32_t{b[2]} << 8) | b[3];
    a.dims.push_back(d);
    total *= d;
  }
  if (total > (std::size_t{1} << 34)) throw bad("dimensions describe more than 16 GiB");
  a.data.resize(total);
  const std::size_t got = read(a.data.data(), total);
  if (got != total)
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

BatchLoader::BatchLoader(const Dataset& data, LoaderOptions options)
    : data_(data), options_(options) {
  if (options.batch_size <= 0)
    throw InvalidArgument(fmt::format("batch size must be positive, got {}", options.batch_size));
  if (!(options.std > 0)) throw InvalidArgument("normalisation std must be positive");
  batches_ = options.drop_last ? data.size / options.batch_size
                               : (data.size + options.batch_size - 1) / options.batch_size;
  if (options.limit_batches > 0) batches_ = std::min(batches_, options.limit_batches);
  if (options_.prefetch == 0) options_.prefetch = 1;
}

BatchLoader::~BatchLoader() {
  stop();
}

std::int64_t BatchLoader::num_samples() const {
  return std::min(data_.size, batches_ * options_.batch_size);
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
}

void BatchLoader::begin_epoch(std::int64_t epoch) {
  stop();
  std::vector<std::int64_t> order;
  if (options_.shuffle) {
    order = permutation(data_.size, derive_seed(options_.seed, static_cast<std::uint64_t>(epoch)));
  } else {
    order.resize(static_cast<std::size_t>(data_.size));
    std::iota(order.begin(), order.end(), 0);
  }
  produced_ = consumed_ = 0;
  worker_ = std::thread([this, o = std::move(order)]() mutable { produce(std::move(o)); });
}

void BatchLoader::produce(std::vector<std::int64_t> order) {
  const std::int64_t pixels = data_.rows * data_.cols;
  const float scale = 1.0f / (255.0f * options_.std), shift = options_.mean / options_.std;
  for (std::int64_t b = 0; b < batches_; ++b) {
    Batch batch;
    batch.index = b;
    const std::int64_t begin = b * options_.batch_size;
    batch.size = std::min(options_.batch_size, data_.size - begin);
    batch.x.resize(static_cast<std::size_t>(batch.size * pixels));
    batch.y.resize(static_cast<std::size_t>(batch.size));
    for (std::int64_t i = 0; i < batch.size; ++i) {
      const std::int64_t s = order[static_cast<std::size_t>(begin + i)];
      const std::uint8_t* src = data_.images.data() + s * pixels;
      float* dst = batch.x.data() + i * pixels;
      for (std::int64_t p = 0; p < pixels; ++p) dst[p] = static_cast<float>(src[p]) * scale - shift;
      batch.y[static_cast<std::size_t>(i)] = data_.labels[static_cast<std::size_t>(s)];
    }
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return stopping_ || ready_.size() < options_.prefetch; });
    if (stopping_) return;
    ready_.push_back(std::move(batch));
    ++produced_;
    cv_.notify_all();
  }
}

bool BatchLoader::next(Batch& out) {
  if (!worker_.joinable() || consumed_ >= batches_) return false;
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return !ready_.empty(); });
  out = std::move(ready_.front());
  ready_.pop_front();
  ++consumed_;
  cv_.notify_all();
  return true;
}

}  // namespace tessera::train
