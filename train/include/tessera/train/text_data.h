// Character-level text for language models (nanoGPT's shakespeare_char, on bytes): a corpus read
// from a file or a directory, a byte vocabulary that a checkpoint can carry as a string, a
// train/validation split fixed by the seed, and a DataLoader of random context windows.
//
// The default corpus is Debian's `fortunes` package (/usr/share/games/fortunes, installed by
// scripts/setup.sh): about 2.6 MB of plain English text (quotations, jokes, definitions) in 43
// files (Debian 12). It was chosen because it is plain text, free (DFSG: it ships in Debian main),
// larger than 1 MB (enough for a small GPT to learn words and punctuation), and installs from the
// distribution's registry in one package (apt-get install fortunes). Any other text works
// through --text FILE (or a directory).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/train/data_loader.h"

namespace tessera {
class Device;
}

namespace tessera::train {

// Where Debian's fortunes package installs its text.
inline constexpr const char* kDefaultTextCorpus = "/usr/share/games/fortunes";
// The most text load_text reads by default (all files together).
inline constexpr std::uint64_t kMaxTextBytes = std::uint64_t{1} << 30;

// A vocabulary is a string of distinct bytes in increasing order (as unsigned char): token i is
// the byte vocab[i]. It is what a model stores with its weights to encode prompts and decode
// samples.

// The vocabulary of |text|: its distinct bytes, sorted. Empty for an empty text.
std::string make_vocab(std::string_view text);

// Checks that |vocab| is a vocabulary: not empty, bytes strictly increasing. Throws
// InvalidArgument saying which (for a vocabulary read from a checkpoint that is corrupt).
void check_vocab(std::string_view vocab);

// The token ids of |text| under |vocab|. Throws InvalidArgument when |vocab| is not one
// (check_vocab) or when |text| holds bytes that are not in it; the message lists every such
// character (printable ones quoted, the others as hex) and the characters the vocabulary holds.
std::vector<std::int32_t> encode_text(std::string_view vocab, std::string_view text);

// The text of token |ids| under |vocab|. Throws InvalidArgument for an id outside
// [0, vocab.size()), naming it and its position, or a |vocab| that is not one.
std::string decode_text(std::string_view vocab, std::span<const std::int32_t> ids);

// A text and its vocabulary.
struct TextCorpus {
  std::string name;                // where it came from (the path given to load_text)
  std::vector<std::string> files;  // the files read, in order (one for a file)
  std::string text;                // the bytes
  std::string vocab;               // make_vocab(text)

  std::int64_t vocab_size() const { return static_cast<std::int64_t>(vocab.size()); }
  std::vector<std::int32_t> encode(std::string_view s) const { return encode_text(vocab, s); }
  std::string decode(std::span<const std::int32_t> ids) const { return decode_text(vocab, ids); }
};

// A corpus of the text in memory (for tests and for text that is not in a file). Throws
// InvalidArgument when the text has fewer than 2 distinct bytes (nothing to learn).
TextCorpus text_corpus(std::string text, std::string name = "text");

// Reads a corpus. |path| is a regular file (a symlink to one is followed), or a directory whose
// regular files are concatenated in sorted name order (byte order of the names), skipping hidden
// files (a leading '.'), binary *.dat files (fortune's indexes), symlinks (fortune's *.u8 links
// to the files themselves) and everything that is not a regular file (subdirectories are not
// entered). Files are read through RegularFile against their real size. Throws FileError naming
// the path and what to do: missing; not a file or directory; a directory without text files;
// more than |max_bytes| in all; a file that can not be read (the OS error) or shrank while being
// read; an empty text, or one with fewer than 2 distinct bytes. The messages about missing or
// empty text say to install the default (apt-get install fortunes) or to pass --text FILE.
TextCorpus load_text(const std::filesystem::path& path = kDefaultTextCorpus,
                     std::uint64_t max_bytes = kMaxTextBytes);

// The split of a corpus into train and validation text. The text is cut into blocks of
// |block_size| bytes (the last one may be shorter); round(val_fraction * blocks) of them, at least
// one when val_fraction > 0, are chosen for validation by permutation(blocks, derive_seed(seed,
// "split")); train and val are the concatenations of their blocks in text order. Windows are
// later taken within each concatenation, so a window may join two blocks of its own split, but
// no validation byte is ever in a training window.
struct TextSplitOptions {
  std::int64_t block_size = 4096;  // 4 KiB: 630 blocks of fortunes, ~110 lines each
  double val_fraction = 0.1;
  std::uint64_t seed = 0;
};

struct TextSplit {
  std::string vocab;                         // the corpus's vocabulary
  std::shared_ptr<const std::string> train;  // never null
  std::shared_ptr<const std::string> val;    // never null; empty when val_fraction is 0
  std::vector<std::int64_t> val_blocks;      // the validation blocks' indices, increasing
  std::int64_t num_blocks = 0;
};

// Throws InvalidArgument for a block size that is not positive, a val_fraction outside [0, 1),
// or a corpus too small to give both parts a block (val_fraction > 0 and fewer than 2 blocks).
TextSplit split_text(const TextCorpus& corpus, const TextSplitOptions& options = {});

enum class TextPart { train, val };

struct TextLoaderOptions {
  std::int64_t batch_size = 64;
  std::int64_t context = 256;  // T, nanoGPT's block_size
  std::uint64_t seed = 0;
  TextPart part = TextPart::train;
  // train: batches in an epoch of random windows; 0: max(1, len / (batch_size * context)),
  // about one pass over the train text.
  std::int64_t batches_per_epoch = 0;
  // val: at most this many batches of the fixed windows; 0: all of them.
  std::int64_t eval_batches = 0;
  Device* device = nullptr;  // where the tensors are made; null: the CPU device (the host)
};

// Batches of windows of one part of a split: tensors {x, y}, both i32 [B, T] token ids, with
// y[b, t] = x[b, t + 1] in the text (the next character), as nanoGPT's get_batch.
// - train: batch k of epoch e takes batch_size window starts drawn uniformly from
//   [0, len - T - 1] by Generator(derive_seed(derive_seed(derive_seed(seed, "windows"), e), k))
//   (torch.randint(len(data) - block_size, (batch_size,))), so a resumed run repeats them. Every
//   batch is full.
// - val: the non-overlapping windows starting at 0, T, 2T, ... (every start with start + T + 1 <=
//   len), in order, batch_size per batch (the last batch may be smaller), the same every epoch;
//   eval_batches keeps the first ones.
// Batches are made on the calling thread in next() (a copy of B * (T + 1) bytes). The loader
// shares the split's text (it stays valid after the TextSplit is gone). One consumer thread.
class TextBatchLoader : public DataLoader {
 public:
  // Throws InvalidArgument for a batch size or context that is not positive, a negative
  // batches_per_epoch or eval_batches, a context whose B * (T + 1) overflows, or a part whose text
  // is shorter than context + 1 bytes (the message names the part, its length, the context and
  // what to do: a smaller --context or a larger text).
  TextBatchLoader(const TextSplit& split, TextLoaderOptions options);

  std::int64_t num_batches() const override { return batches_; }
  std::int64_t num_samples() const override;
  std::int64_t batch_size() const override { return options_.batch_size; }
  // DataLoader::set_distributed (data_loader.h). train: batch k of every process draws the
  // world_size * batch_size starts of the global batch k (the same generator) and keeps those at
  // positions rank, rank + world_size, ...; batches_per_epoch 0 counts an epoch with the global
  // batch, max(1, len / (world_size * batch_size * context)). val: this process takes the
  // windows at positions rank, rank + world_size, ... (padded with the first windows to a
  // multiple of world_size when |pad_to_equal|), batch_size per batch; eval_batches limits this
  // process's batches. Throws InvalidArgument for a rank outside [0, world_size) or world_size
  // < 1.
  void set_distributed(int rank, int world_size, bool pad_to_equal) override;
  void begin_epoch(std::int64_t epoch) override;
  // The next batch of the epoch, or false at its end (or before the first begin_epoch).
  bool next(TensorBatch& out) override;

  // The window starts of batch |batch| of epoch |epoch| (offsets into the part's text), of this
  // process's share.
  std::vector<std::int64_t> window_starts(std::int64_t epoch, std::int64_t batch) const;
  const std::string& text() const { return *text_; }
  const std::string& vocab() const { return vocab_; }
  const TextLoaderOptions& options() const { return options_; }

 private:
  std::shared_ptr<const std::string> text_;
  std::string vocab_;
  std::int32_t lookup_[256] = {};
  TextLoaderOptions options_;
  void count_batches();

  std::int64_t batches_ = 0, windows_ = 0;  // windows_: the val part's fixed windows
  std::int64_t share_ = 0;                  // val: the windows of this process's share
  int rank_ = 0, world_ = 1;                // set_distributed
  bool pad_ = true;
  std::int64_t epoch_ = 0, cursor_ = 0;
  bool started_ = false;
};

}  // namespace tessera::train
