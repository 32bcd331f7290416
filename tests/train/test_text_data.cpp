// Character-level text: loading a file or a directory (sorted, symlinks, hidden and *.dat files
// skipped), limits and errors, the byte vocabulary, the seeded train/val split, and the loader of
// windows (deterministic per seed/epoch/batch, y = x shifted, never past the end).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "input_files.h"
#include "tessera/errors.h"
#include "tessera/train/random.h"
#include "tessera/train/text_data.h"

using namespace tessera;
using namespace tessera::train;
using tessera::testing::file_error;
using tessera::testing::TempDir;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

// |n| bytes of pseudo-random lower-case text with spaces and newlines.
std::string random_text(std::size_t n, std::uint64_t seed = 1) {
  const std::string alphabet = "abcdefghijklmnopqrstuvwxyz \n.,";
  Generator g(seed);
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += alphabet[g.below(alphabet.size())];
  return s;
}

template <typename F>
std::string invalid_argument(F f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InvalidArgument";
  return {};
}

bool has(const std::string& msg, const std::string& part) {
  return msg.find(part) != std::string::npos;
}

std::vector<TensorBatch> epoch(TextBatchLoader& loader, std::int64_t e) {
  loader.begin_epoch(e);
  std::vector<TensorBatch> out;
  TensorBatch b;
  while (loader.next(b)) out.push_back(b);
  return out;
}

}  // namespace

TEST(TextLoad, ReadsAFile) {
  TempDir dir("text");
  write(dir.path() / "a.txt", "hello, world\n");
  const TextCorpus c = load_text(dir.path() / "a.txt");
  EXPECT_EQ(c.text, "hello, world\n");
  EXPECT_EQ(c.vocab, "\n ,dehlorw");
  EXPECT_EQ(c.vocab_size(), 10);
  EXPECT_EQ(c.files, std::vector<std::string>{(dir.path() / "a.txt").string()});
}

TEST(TextLoad, ADirectoryIsItsRegularFilesInNameOrder) {
  TempDir dir("text");
  write(dir.path() / "b", "second\n");
  write(dir.path() / "a", "first\n");
  write(dir.path() / "c", "third\n");
  write(dir.path() / "a.dat", std::string("\x00\x01\x02\xff", 4));  // fortune's index
  write(dir.path() / ".hidden", "hidden\n");
  fs::create_symlink(dir.path() / "a", dir.path() / "a.u8");  // fortune's links
  fs::create_directory(dir.path() / "sub");
  write(dir.path() / "sub" / "d", "nested\n");
  ASSERT_EQ(::mkfifo((dir.path() / "fifo").c_str(), 0600), 0);
  const TextCorpus c = load_text(dir.path());
  EXPECT_EQ(c.text, "first\nsecond\nthird\n");
  ASSERT_EQ(c.files.size(), 3u);
  EXPECT_EQ(fs::path(c.files[0]).filename(), "a");
  EXPECT_EQ(fs::path(c.files[2]).filename(), "c");
  EXPECT_EQ(c.name, dir.path().string());
}

TEST(TextLoad, ErrorsNameThePathAndSayWhatToDo) {
  TempDir dir("text");
  std::string msg = file_error([&] { load_text(dir.path() / "missing"); });
  EXPECT_TRUE(has(msg, (dir.path() / "missing").string())) << msg;
  EXPECT_TRUE(has(msg, "no such file or directory")) << msg;
  EXPECT_TRUE(has(msg, "apt-get install fortunes")) << msg;
  EXPECT_TRUE(has(msg, "--text FILE")) << msg;

  write(dir.path() / "empty", "");
  msg = file_error([&] { load_text(dir.path() / "empty"); });
  EXPECT_TRUE(has(msg, "empty")) << msg;
  EXPECT_TRUE(has(msg, "apt-get install fortunes")) << msg;

  write(dir.path() / "one", "aaaa");
  msg = file_error([&] { load_text(dir.path() / "one"); });
  EXPECT_TRUE(has(msg, "only one distinct character ('a')")) << msg;

  fs::create_directory(dir.path() / "no-text");
  write(dir.path() / "no-text" / "x.dat", "binary");
  fs::create_symlink(dir.path() / "one", dir.path() / "no-text" / "link");
  msg = file_error([&] { load_text(dir.path() / "no-text"); });
  EXPECT_TRUE(has(msg, (dir.path() / "no-text").string() + ": the directory holds no text files"))
      << msg;
  EXPECT_TRUE(has(msg, "--text FILE")) << msg;

  fs::create_directory(dir.path() / "empties");
  write(dir.path() / "empties" / "a", "");
  write(dir.path() / "empties" / "b", "");
  msg = file_error([&] { load_text(dir.path() / "empties"); });
  EXPECT_TRUE(has(msg, "the text is empty (in 2 files)")) << msg;

  ASSERT_EQ(::mkfifo((dir.path() / "fifo").c_str(), 0600), 0);
  msg = tessera::testing::fifo_error([&] { load_text(dir.path() / "fifo"); }, dir.path() / "fifo");
  EXPECT_TRUE(has(msg, "not a regular file")) << msg;

  if (::geteuid() != 0) {  // root reads anything
    write(dir.path() / "locked", "secret text");
    fs::permissions(dir.path() / "locked", fs::perms::none);
    msg = file_error([&] { load_text(dir.path() / "locked"); });
    EXPECT_TRUE(has(msg, "can not open")) << msg;
  }
}

TEST(TextLoad, TheSizeLimitCountsEveryFile) {
  TempDir dir("text");
  write(dir.path() / "a", "abcdefghij");
  write(dir.path() / "b", "klmnopqrst");
  EXPECT_EQ(load_text(dir.path(), 20).text.size(), 20u);
  std::string msg = file_error([&] { load_text(dir.path(), 19); });
  EXPECT_TRUE(has(msg, dir.path().string())) << msg;
  EXPECT_TRUE(has(msg, "larger than the 19 B")) << msg;
  EXPECT_TRUE(has(msg, (dir.path() / "b").string())) << msg;
  msg = file_error([&] { load_text(dir.path() / "a", 9); });
  EXPECT_TRUE(has(msg, "larger than")) << msg;
}

TEST(TextLoad, TheDefaultCorpusWhenInstalled) {
  if (!fs::is_directory(kDefaultTextCorpus))
    GTEST_SKIP() << kDefaultTextCorpus << " is not installed (apt-get install fortunes)";
  const TextCorpus c = load_text();
  EXPECT_GT(c.text.size(), 1'000'000u);
  EXPECT_GT(c.files.size(), 10u);
  EXPECT_LT(c.vocab_size(), 256);
  EXPECT_GT(c.vocab_size(), 60);
  for (const std::string& f : c.files) {
    EXPECT_NE(fs::path(f).extension(), ".dat") << f;
    EXPECT_FALSE(fs::is_symlink(f)) << f;
  }
  const TextSplit s = split_text(c);
  EXPECT_EQ(s.val_blocks.size(), static_cast<std::size_t>(std::llround(s.num_blocks * 0.1)));
  TextBatchLoader train(s, {.batch_size = 4, .context = 64});
  EXPECT_EQ(train.num_batches(), static_cast<std::int64_t>(s.train->size()) / (4 * 64));
  train.begin_epoch(1);
  TensorBatch b;
  ASSERT_TRUE(train.next(b));
  EXPECT_EQ(b[0].shape(), (Shape{4, 64}));
  EXPECT_EQ(c.decode(b[0].to_vector<std::int32_t>()).size(), 256u);
}

TEST(Vocab, EncodeDecodeRoundTrip) {
  const std::string text = random_text(500) + "\xc3\xa9\x01";
  const std::string vocab = make_vocab(text);
  check_vocab(vocab);
  const std::vector<std::int32_t> ids = encode_text(vocab, text);
  ASSERT_EQ(ids.size(), text.size());
  for (std::size_t i = 0; i < ids.size(); ++i)
    EXPECT_EQ(vocab[static_cast<std::size_t>(ids[i])], text[i]);
  EXPECT_EQ(decode_text(vocab, ids), text);
  const TextCorpus c = text_corpus(text, "mem");
  EXPECT_EQ(c.vocab, vocab);
  EXPECT_EQ(c.decode(c.encode("abc")), "abc");
}

TEST(Vocab, UnknownCharactersAreListed) {
  const std::string vocab = make_vocab("abc \n");
  const std::string msg = invalid_argument([&] { encode_text(vocab, "abcXdé cY\tX"); });
  EXPECT_TRUE(has(msg, "6 character(s) that are not in the model's vocabulary")) << msg;
  for (const char* c : {"'X'", "'Y'", "'d'", "'\\t'", "0xc3", "0xa9"})
    EXPECT_TRUE(has(msg, c)) << c;
  EXPECT_TRUE(has(msg, "vocabulary of 5 characters is \"\\n abc\"")) << msg;
}

TEST(Vocab, BadVocabulariesAndIdsAreRefused) {
  EXPECT_TRUE(has(invalid_argument([] { check_vocab(""); }), "empty"));
  EXPECT_TRUE(has(invalid_argument([] { check_vocab("ba"); }), "distinct and increasing"));
  EXPECT_TRUE(has(invalid_argument([] { check_vocab("aa"); }), "distinct and increasing"));
  EXPECT_TRUE(has(invalid_argument([] { encode_text("ba", "a"); }), "increasing"));
  const std::vector<std::int32_t> ids{0, 1, 2};
  const std::string msg = invalid_argument([&] { decode_text("ab", ids); });
  EXPECT_TRUE(has(msg, "token id 2 at position 2 is outside the vocabulary of 2")) << msg;
  const std::vector<std::int32_t> negative{-1};
  EXPECT_TRUE(has(invalid_argument([&] { decode_text("ab", negative); }), "token id -1"));
  EXPECT_TRUE(has(invalid_argument([] { text_corpus("zzz", "mem"); }), "'mem'"));
  EXPECT_TRUE(has(invalid_argument([] { text_corpus("", "mem"); }), "empty"));
}

TEST(TextSplit, TenPercentOfTheBlocksFixedBySeedAndDisjoint) {
  // Every block is distinct, so a block's bytes tell where they came from.
  const TextCorpus c = text_corpus(random_text(100 * 64 + 17), "mem");
  const TextSplitOptions o{.block_size = 64, .val_fraction = 0.1, .seed = 5};
  const TextSplit a = split_text(c, o), b = split_text(c, o);
  EXPECT_EQ(a.num_blocks, 101);
  EXPECT_EQ(a.val_blocks.size(), 10u);
  EXPECT_EQ(a.val_blocks, b.val_blocks);
  EXPECT_EQ(*a.train, *b.train);
  EXPECT_EQ(*a.val, *b.val);
  EXPECT_TRUE(std::is_sorted(a.val_blocks.begin(), a.val_blocks.end()));
  EXPECT_EQ(std::set<std::int64_t>(a.val_blocks.begin(), a.val_blocks.end()).size(), 10u);
  // Train and val are exactly their blocks, in text order, and together the whole text.
  std::string train, val;
  for (std::int64_t k = 0; k < a.num_blocks; ++k) {
    const std::string block = c.text.substr(static_cast<std::size_t>(k * 64), 64);
    const bool is_val = std::count(a.val_blocks.begin(), a.val_blocks.end(), k) > 0;
    (is_val ? val : train) += block;
  }
  EXPECT_EQ(*a.train, train);
  EXPECT_EQ(*a.val, val);
  EXPECT_EQ(a.train->size() + a.val->size(), c.text.size());
  EXPECT_EQ(a.vocab, c.vocab);
  // Another seed picks other blocks.
  const TextSplit other = split_text(c, {.block_size = 64, .val_fraction = 0.1, .seed = 6});
  EXPECT_NE(other.val_blocks, a.val_blocks);
  // No validation: everything trains.
  const TextSplit none = split_text(c, {.block_size = 64, .val_fraction = 0, .seed = 5});
  EXPECT_EQ(*none.train, c.text);
  EXPECT_TRUE(none.val->empty());
  // A tiny text still gives one block to each side.
  const TextSplit two = split_text(text_corpus("ab", "mem"), {.block_size = 1});
  EXPECT_EQ(two.val_blocks.size(), 1u);
  EXPECT_EQ(two.train->size(), 1u);
}

TEST(TextSplit, BadOptionsAreRefused) {
  const TextCorpus c = text_corpus(random_text(100), "mem");
  EXPECT_TRUE(has(invalid_argument([&] { split_text(c, {.block_size = 0}); }), "block_size"));
  EXPECT_TRUE(has(invalid_argument([&] { split_text(c, {.val_fraction = 1.0}); }), "[0, 1)"));
  EXPECT_TRUE(has(invalid_argument([&] { split_text(c, {.val_fraction = -0.1}); }), "[0, 1)"));
  const std::string msg = invalid_argument([&] { split_text(c, {.block_size = 4096}); });
  EXPECT_TRUE(has(msg, "100 bytes is 1 block(s)")) << msg;
}

TEST(TextBatchLoader, TrainWindowsArePureInSeedEpochAndBatch) {
  const TextSplit s = split_text(text_corpus(random_text(5000), "mem"), {.block_size = 100});
  const TextLoaderOptions o{.batch_size = 3, .context = 8, .seed = 2};
  TextBatchLoader a(s, o), b(s, o);
  const auto len = static_cast<std::int64_t>(s.train->size());
  EXPECT_EQ(len, 4500);
  EXPECT_EQ(a.num_batches(), 4500 / 24);
  EXPECT_EQ(a.num_samples(), a.num_batches() * 3);
  const std::vector<TensorBatch> a1 = epoch(a, 1), b1 = epoch(b, 1), a2 = epoch(a, 2);
  ASSERT_EQ(a1.size(), static_cast<std::size_t>(a.num_batches()));
  int differ = 0;
  for (std::size_t k = 0; k < a1.size(); ++k) {
    EXPECT_EQ(a1[k].index, static_cast<std::int64_t>(k));
    EXPECT_EQ(a1[k].size, 3);
    const auto x = a1[k][0].to_vector<std::int32_t>(), y = a1[k][1].to_vector<std::int32_t>();
    EXPECT_EQ(x, b1[k][0].to_vector<std::int32_t>());
    EXPECT_EQ(y, b1[k][1].to_vector<std::int32_t>());
    differ += x != a2[k][0].to_vector<std::int32_t>();
    EXPECT_EQ(a1[k][0].dtype(), DType::i32);
    EXPECT_EQ(a1[k][0].shape(), (Shape{3, 8}));
    EXPECT_EQ(a1[k][1].shape(), (Shape{3, 8}));
    // Each row is the text at its start, and y is x shifted by one.
    const std::vector<std::int64_t> starts = a.window_starts(1, static_cast<std::int64_t>(k));
    ASSERT_EQ(starts.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_GE(starts[i], 0);
      EXPECT_LE(starts[i] + 8 + 1, len);  // never past the end
      const std::vector<std::int32_t> row(x.begin() + i * 8, x.begin() + (i + 1) * 8),
          next(y.begin() + i * 8, y.begin() + (i + 1) * 8);
      EXPECT_EQ(decode_text(s.vocab, row), s.train->substr(static_cast<std::size_t>(starts[i]), 8));
      EXPECT_EQ(decode_text(s.vocab, next),
                s.train->substr(static_cast<std::size_t>(starts[i]) + 1, 8));
    }
  }
  EXPECT_GT(differ, static_cast<int>(a1.size()) / 2);
  // Running an epoch again (a resume) repeats it; another seed draws otherwise.
  EXPECT_EQ(epoch(a, 1)[5][0].to_vector<std::int32_t>(), a1[5][0].to_vector<std::int32_t>());
  TextBatchLoader c(s, {.batch_size = 3, .context = 8, .seed = 3});
  EXPECT_NE(epoch(c, 1)[0][0].to_vector<std::int32_t>(), a1[0][0].to_vector<std::int32_t>());
  // batches_per_epoch sets the length of an epoch.
  TextBatchLoader d(s, {.batch_size = 3, .context = 8, .seed = 2, .batches_per_epoch = 7});
  EXPECT_EQ(epoch(d, 1).size(), 7u);
  EXPECT_EQ(d.num_samples(), 21);
}

TEST(TextBatchLoader, EveryStartIsReachableAndNoneRunsPastTheEnd) {
  // A train text of context + 3 bytes has exactly 2 starts (0 and 1) for a window and its target.
  const TextSplit s = split_text(text_corpus("abcdefghijk", "mem"), {.val_fraction = 0});
  TextBatchLoader l(s, {.batch_size = 64, .context = 9, .batches_per_epoch = 3});
  std::set<std::int64_t> seen;
  for (std::int64_t e = 1; e <= 3; ++e)
    for (std::int64_t k = 0; k < 3; ++k)
      for (std::int64_t start : l.window_starts(e, k)) seen.insert(start);
  EXPECT_EQ(seen, (std::set<std::int64_t>{0, 1}));
  EXPECT_TRUE(l.window_starts(1, 3).empty());
  EXPECT_TRUE(l.window_starts(1, -1).empty());
}

TEST(TextBatchLoader, ValidationIsFixedNonOverlappingWindows) {
  const TextSplit s = split_text(text_corpus(random_text(2000), "mem"), {.block_size = 100});
  ASSERT_EQ(s.val->size(), 200u);
  TextBatchLoader v(s, {.batch_size = 4, .context = 10, .seed = 9, .part = TextPart::val});
  // (200 - 1) / 10 = 19 windows: 0, 10, ..., 180 (the last target is byte 190).
  EXPECT_EQ(v.num_batches(), 5);
  EXPECT_EQ(v.num_samples(), 19);
  const std::vector<TensorBatch> e1 = epoch(v, 1), e2 = epoch(v, 2);
  ASSERT_EQ(e1.size(), 5u);
  EXPECT_EQ(e1.back().size, 3);
  EXPECT_EQ(e1.back()[0].shape(), (Shape{3, 10}));
  std::string seen;
  for (std::size_t k = 0; k < e1.size(); ++k) {
    const auto x = e1[k][0].to_vector<std::int32_t>();
    EXPECT_EQ(x, e2[k][0].to_vector<std::int32_t>());  // the same every epoch
    EXPECT_EQ(e1[k][1].to_vector<std::int32_t>(), e2[k][1].to_vector<std::int32_t>());
    seen += decode_text(s.vocab, x);
    const auto y = e1[k][1].to_vector<std::int32_t>();
    for (std::size_t i = 0; i + 1 < x.size(); ++i)
      if ((i + 1) % 10 != 0) {
        EXPECT_EQ(y[i], x[i + 1]);
      }
  }
  EXPECT_EQ(seen, s.val->substr(0, 190));
  TextBatchLoader limited(
      s, {.batch_size = 4, .context = 10, .part = TextPart::val, .eval_batches = 2});
  EXPECT_EQ(limited.num_batches(), 2);
  EXPECT_EQ(limited.num_samples(), 8);
  EXPECT_EQ(epoch(limited, 1).size(), 2u);
}

TEST(TextBatchLoader, NothingBeforeTheFirstEpoch) {
  const TextSplit s = split_text(text_corpus(random_text(300), "mem"), {.block_size = 10});
  TextBatchLoader l(s, {.batch_size = 2, .context = 4});
  TensorBatch b;
  EXPECT_FALSE(l.next(b));
  l.begin_epoch(1);
  EXPECT_TRUE(l.next(b));
}

TEST(TextBatchLoader, BadOptionsAreRefused) {
  const TextSplit s = split_text(text_corpus(random_text(300), "mem"), {.block_size = 10});
  auto make = [&](TextLoaderOptions o) {
    return invalid_argument([&] { TextBatchLoader l(s, o); });
  };
  EXPECT_TRUE(has(make({.batch_size = 0}), "must be positive"));
  EXPECT_TRUE(has(make({.context = 0}), "must be positive"));
  EXPECT_TRUE(has(make({.context = 8, .batches_per_epoch = -1}), "must not be negative"));
  EXPECT_TRUE(has(make({.context = 8, .eval_batches = -1}), "must not be negative"));
  EXPECT_TRUE(has(make({.batch_size = 2, .context = std::int64_t{1} << 62}), "overflows"));
  const std::string msg = make({.context = 30, .part = TextPart::val});
  EXPECT_TRUE(has(msg, "the val text holds 30 characters, fewer than context + 1 = 31")) << msg;
  EXPECT_TRUE(has(msg, "--context")) << msg;
  // A split whose text holds characters its vocabulary lacks (a vocabulary from elsewhere).
  TextSplit foreign = s;
  foreign.vocab = "abc";
  EXPECT_TRUE(has(invalid_argument([&] { TextBatchLoader l(foreign, {.context = 8}); }),
                  "not in the model's vocabulary"));
}
