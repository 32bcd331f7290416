#include "tessera/train/text_data.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tessera/checked.h"
#include "tessera/errors.h"
#include "tessera/file.h"
#include "tessera/runtime.h"
#include "tessera/tensor.h"
#include "tessera/train/random.h"

namespace tessera::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kGetText =
    "install Debian's fortunes package (apt-get install fortunes) for the default corpus "
    "/usr/share/games/fortunes, or pass --text FILE (any plain text file, or a directory of them)";
// The streams of the split and of the training windows (apart from every other use of the seed).
constexpr std::uint64_t kSplitStream = 0x73706c6974;       // "split"
constexpr std::uint64_t kWindowStream = 0x77696e646f7773;  // "windows"
// How many unknown characters an encode error lists.
constexpr std::size_t kMaxListed = 20;

// A byte as a message shows it: 'a', '\n', or 0xc3.
std::string show_byte(unsigned char c) {
  if (c == '\n') return "'\\n'";
  if (c == '\t') return "'\\t'";
  if (c == '\'') return "'\\''";
  if (c >= 0x20 && c < 0x7f) return fmt::format("'{}'", static_cast<char>(c));
  return fmt::format("0x{:02x}", c);
}

std::string show_vocab(std::string_view vocab) {
  std::string s;
  for (unsigned char c : vocab) {
    if (c == '\n')
      s += "\\n";
    else if (c >= 0x20 && c < 0x7f)
      s += static_cast<char>(c);
    else
      s += fmt::format("\\x{:02x}", c);
  }
  return s;
}

bool is_text_file(const fs::directory_entry& e) {
  const std::string name = e.path().filename().string();
  std::error_code ec;
  return !name.empty() && name[0] != '.' && e.path().extension() != ".dat" && !e.is_symlink(ec) &&
         e.is_regular_file(ec);
}

// Checks what a corpus must have to train a character model; |fail| makes the exception.
template <typename Fail>
void check_text(const std::string& text, std::string_view vocab, Fail fail) {
  if (text.empty()) throw fail("the text is empty");
  if (vocab.size() < 2)
    throw fail(fmt::format(
        "the text ({} bytes) holds only one distinct character ({}); a character-level model "
        "needs at least two",
        text.size(), show_byte(static_cast<unsigned char>(vocab[0]))));
}

}  // namespace

std::string make_vocab(std::string_view text) {
  bool seen[256] = {};
  for (unsigned char c : text) seen[c] = true;
  std::string vocab;
  for (int c = 0; c < 256; ++c)
    if (seen[c]) vocab += static_cast<char>(c);
  return vocab;
}

void check_vocab(std::string_view vocab) {
  if (vocab.empty()) throw InvalidArgument("vocabulary: empty (it must hold at least one byte)");
  for (std::size_t i = 1; i < vocab.size(); ++i)
    if (static_cast<unsigned char>(vocab[i - 1]) >= static_cast<unsigned char>(vocab[i]))
      throw InvalidArgument(fmt::format(
          "vocabulary: its bytes must be distinct and increasing, but byte {} ({}) follows {}", i,
          show_byte(static_cast<unsigned char>(vocab[i])),
          show_byte(static_cast<unsigned char>(vocab[i - 1]))));
}

std::vector<std::int32_t> encode_text(std::string_view vocab, std::string_view text) {
  check_vocab(vocab);
  std::int32_t lookup[256];
  std::fill(std::begin(lookup), std::end(lookup), -1);
  for (std::size_t i = 0; i < vocab.size(); ++i)
    lookup[static_cast<unsigned char>(vocab[i])] = static_cast<std::int32_t>(i);
  std::vector<std::int32_t> ids(text.size());
  bool unknown[256] = {};
  std::size_t unknown_count = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    ids[i] = lookup[c];
    if (ids[i] < 0 && !unknown[c]) {
      unknown[c] = true;
      ++unknown_count;
    }
  }
  if (unknown_count > 0) {
    std::vector<std::string> listed;
    for (int c = 0; c < 256 && listed.size() < kMaxListed; ++c)
      if (unknown[c]) listed.push_back(show_byte(static_cast<unsigned char>(c)));
    throw InvalidArgument(fmt::format(
        "encode: the text holds {} character(s) that are not in the model's vocabulary: {}{}; "
        "the vocabulary of {} characters is \"{}\"",
        unknown_count, fmt::join(listed, ", "), unknown_count > listed.size() ? ", ..." : "",
        vocab.size(), show_vocab(vocab)));
  }
  return ids;
}

std::string decode_text(std::string_view vocab, std::span<const std::int32_t> ids) {
  check_vocab(vocab);
  std::string text(ids.size(), '\0');
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || static_cast<std::size_t>(ids[i]) >= vocab.size())
      throw InvalidArgument(fmt::format(
          "decode: token id {} at position {} is outside the vocabulary of {} characters", ids[i],
          i, vocab.size()));
    text[i] = vocab[static_cast<std::size_t>(ids[i])];
  }
  return text;
}

TextCorpus text_corpus(std::string text, std::string name) {
  TextCorpus c;
  c.vocab = make_vocab(text);
  check_text(text, c.vocab, [&](const std::string& what) {
    return InvalidArgument(fmt::format("text corpus '{}': {}", name, what));
  });
  c.name = std::move(name);
  c.text = std::move(text);
  return c;
}

TextCorpus load_text(const fs::path& path, std::uint64_t max_bytes) {
  auto fail = [&](const std::string& what) {
    return FileError(fmt::format("{}: {}", path.string(), what));
  };
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)
    throw fail(fmt::format("can not access: {}", ec.message()));
  if (!fs::exists(st)) throw fail(fmt::format("no such file or directory; {}", kGetText));
  std::vector<fs::path> files;
  if (fs::is_directory(st)) {
    fs::directory_iterator it(path, ec);
    if (ec) throw fail(fmt::format("can not list the directory: {}", ec.message()));
    for (const fs::directory_entry& e : it)
      if (is_text_file(e)) files.push_back(e.path());
    if (files.empty())
      throw fail(fmt::format(
          "the directory holds no text files (regular files not named .* or *.dat; symlinks "
          "and subdirectories are skipped); {}",
          kGetText));
    std::sort(files.begin(), files.end(),
              [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });
  } else {
    files.push_back(path);  // RegularFile refuses what is not a regular file
  }
  TextCorpus c;
  c.name = path.string();
  std::uint64_t total = 0;
  for (const fs::path& p : files) {
    RegularFile f(p);
    const std::optional<std::uint64_t> sum = checked_add(total, f.size());
    if (!sum || *sum > max_bytes)
      throw fail(fmt::format(
          "the text is larger than the {} a corpus may hold (reading {} of {} bytes made it {} "
          "bytes); pass a smaller --text FILE",
          format_bytes(max_bytes), p.string(), f.size(),
          sum ? fmt::to_string(*sum) : std::string("more than 2^64")));
    c.text.resize(static_cast<std::size_t>(*sum));
    f.read_at(0, c.text.data() + total, static_cast<std::size_t>(f.size()));
    total = *sum;
    c.files.push_back(p.string());
  }
  c.vocab = make_vocab(c.text);
  check_text(c.text, c.vocab, [&](const std::string& what) {
    return fail(fmt::format("{}{}; {}", what,
                            files.size() > 1 ? fmt::format(" (in {} files)", files.size()) : "",
                            kGetText));
  });
  return c;
}

TextSplit split_text(const TextCorpus& corpus, const TextSplitOptions& options) {
  if (options.block_size <= 0)
    throw InvalidArgument(
        fmt::format("split_text: block_size must be positive, got {}", options.block_size));
  if (!(options.val_fraction >= 0 && options.val_fraction < 1))
    throw InvalidArgument(
        fmt::format("split_text: val_fraction must be in [0, 1), got {}", options.val_fraction));
  const auto len = static_cast<std::int64_t>(corpus.text.size());
  const std::int64_t blocks = len / options.block_size + (len % options.block_size != 0);
  std::int64_t n_val = 0;
  if (options.val_fraction > 0) {
    if (blocks < 2)
      throw InvalidArgument(fmt::format(
          "split_text: text corpus '{}' of {} bytes is {} block(s) of {} bytes; a validation "
          "split needs at least 2 (use a larger text or smaller blocks)",
          corpus.name, len, blocks, options.block_size));
    n_val = std::clamp<std::int64_t>(
        static_cast<std::int64_t>(std::llround(options.val_fraction * static_cast<double>(blocks))),
        1, blocks - 1);
  }
  TextSplit s;
  s.vocab = corpus.vocab;
  s.num_blocks = blocks;
  const std::vector<std::int64_t> order =
      permutation(blocks, derive_seed(options.seed, kSplitStream));
  s.val_blocks.assign(order.begin(), order.begin() + n_val);
  std::sort(s.val_blocks.begin(), s.val_blocks.end());
  std::string train, val;
  val.reserve(static_cast<std::size_t>(n_val * options.block_size));
  train.reserve(corpus.text.size() - std::min(corpus.text.size(), val.capacity()));
  std::size_t next_val = 0;
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::string_view block = std::string_view(corpus.text)
                                       .substr(static_cast<std::size_t>(b * options.block_size),
                                               static_cast<std::size_t>(options.block_size));
    const bool is_val = next_val < s.val_blocks.size() && s.val_blocks[next_val] == b;
    (is_val ? val : train).append(block);
    next_val += is_val;
  }
  s.train = std::make_shared<const std::string>(std::move(train));
  s.val = std::make_shared<const std::string>(std::move(val));
  return s;
}

TextBatchLoader::TextBatchLoader(const TextSplit& split, TextLoaderOptions options)
    : text_(options.part == TextPart::train ? split.train : split.val),
      vocab_(split.vocab),
      options_(options) {
  const char* part = options.part == TextPart::train ? "train" : "val";
  if (!text_) throw InvalidArgument(fmt::format("TextBatchLoader: the {} text is missing", part));
  check_vocab(vocab_);
  if (options.batch_size <= 0 || options.context <= 0)
    throw InvalidArgument(
        fmt::format("TextBatchLoader: batch_size and context must be positive, got {} and {}",
                    options.batch_size, options.context));
  if (options.batches_per_epoch < 0 || options.eval_batches < 0)
    throw InvalidArgument(fmt::format(
        "TextBatchLoader: batches_per_epoch and eval_batches must not be negative, got {} and {}",
        options.batches_per_epoch, options.eval_batches));
  if (options.context == std::numeric_limits<std::int64_t>::max() ||
      !checked_mul(options.batch_size, options.context + 1))
    throw InvalidArgument(
        fmt::format("TextBatchLoader: a batch of {} windows of {} characters overflows",
                    options.batch_size, options.context));
  const auto len = static_cast<std::int64_t>(text_->size());
  if (len < options.context + 1)
    throw InvalidArgument(fmt::format(
        "TextBatchLoader: the {} text holds {} characters, fewer than context + 1 = {} (a window "
        "and its next character); use a smaller --context or a larger text",
        part, len, options.context + 1));
  std::fill(std::begin(lookup_), std::end(lookup_), 0);
  for (std::size_t i = 0; i < vocab_.size(); ++i)
    lookup_[static_cast<unsigned char>(vocab_[i])] = static_cast<std::int32_t>(i);
  bool known[256] = {};
  for (unsigned char c : vocab_) known[c] = true;
  for (unsigned char c : make_vocab(*text_))
    if (!known[c]) (void)encode_text(vocab_, *text_);  // throws, listing what is missing
  if (options.part == TextPart::val) windows_ = (len - 1) / options.context;
  count_batches();
}

void TextBatchLoader::count_batches() {
  const std::int64_t b = options_.batch_size, t = options_.context;
  if (options_.part == TextPart::train) {
    const auto len = static_cast<std::int64_t>(text_->size());
    // The global batch's windows (checked: world * B * T may pass 64 bits only by overflowing).
    const std::optional<std::int64_t> global = checked_mul(b * t, std::int64_t{world_});
    batches_ = options_.batches_per_epoch > 0
                   ? options_.batches_per_epoch
                   : std::max<std::int64_t>(1, global ? len / *global : 0);
    return;
  }
  share_ = distributed_share(windows_, rank_, world_, pad_);
  batches_ = (share_ + b - 1) / b;
  if (options_.eval_batches > 0) batches_ = std::min(batches_, options_.eval_batches);
}

void TextBatchLoader::set_distributed(int rank, int world_size, bool pad_to_equal) {
  check_distributed(rank, world_size);
  rank_ = rank;
  world_ = world_size;
  pad_ = pad_to_equal;
  count_batches();
  started_ = false;
}

std::int64_t TextBatchLoader::num_samples() const {
  if (options_.part == TextPart::train) return batches_ * options_.batch_size;
  return std::min(share_, batches_ * options_.batch_size);
}

std::vector<std::int64_t> TextBatchLoader::window_starts(std::int64_t epoch,
                                                         std::int64_t batch) const {
  std::vector<std::int64_t> starts;
  if (batch < 0 || batch >= batches_) return starts;
  const std::int64_t b = options_.batch_size, t = options_.context;
  if (options_.part == TextPart::train) {
    Generator g(derive_seed(
        derive_seed(derive_seed(options_.seed, kWindowStream), static_cast<std::uint64_t>(epoch)),
        static_cast<std::uint64_t>(batch)));
    const auto range = static_cast<std::uint64_t>(static_cast<std::int64_t>(text_->size()) - t);
    // The global batch's draws, this process's positions among them.
    for (std::int64_t i = 0; i < b * world_; ++i) {
      const auto start = static_cast<std::int64_t>(g.below(range));
      if (i % world_ == rank_) starts.push_back(start);
    }
  } else {
    for (std::int64_t q = batch * b; q < std::min(share_, (batch + 1) * b); ++q) {
      const std::int64_t p = q * world_ + rank_;
      starts.push_back((p < windows_ ? p : (p - windows_) % windows_) * t);
    }
  }
  return starts;
}

void TextBatchLoader::begin_epoch(std::int64_t epoch) {
  epoch_ = epoch;
  cursor_ = 0;
  started_ = true;
}

bool TextBatchLoader::next(TensorBatch& out) {
  if (!started_ || cursor_ >= batches_) return false;
  const std::vector<std::int64_t> starts = window_starts(epoch_, cursor_);
  const auto n = static_cast<std::int64_t>(starts.size());
  const std::int64_t t = options_.context;
  std::vector<std::int32_t> x(static_cast<std::size_t>(n * t)), y(x.size());
  const auto* text = reinterpret_cast<const unsigned char*>(text_->data());
  for (std::int64_t i = 0; i < n; ++i) {
    const unsigned char* w = text + starts[static_cast<std::size_t>(i)];
    for (std::int64_t j = 0; j < t; ++j) {
      x[static_cast<std::size_t>(i * t + j)] = lookup_[w[j]];
      y[static_cast<std::size_t>(i * t + j)] = lookup_[w[j + 1]];
    }
  }
  Device* device = options_.device ? options_.device : &tessera::device("cpu");
  out.tensors = {Tensor::from<std::int32_t>(x, Shape{n, t}, device),
                 Tensor::from<std::int32_t>(y, Shape{n, t}, device)};
  out.size = n;
  out.index = cursor_++;
  return true;
}

}  // namespace tessera::train
