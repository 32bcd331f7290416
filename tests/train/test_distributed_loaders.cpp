// The loaders' shares for data-parallel training (DataLoader::set_distributed, as PyTorch's
// DistributedSampler): for N processes, process r's batch i holds the samples at positions
// j * N + r of the one-process batch i with the global batch size, padded or not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "tessera/tessera.h"
#include "tessera/train/train.h"

using namespace tessera;
using namespace tessera::train;

namespace {

// |n| images of 1x1 pixel whose byte is the sample's index: with mean 0 and std 1/255 a batch's
// x is the indices.
Dataset indexed_images(std::int64_t n) {
  Dataset d;
  d.name = "indexed";
  d.size = n;
  d.rows = d.cols = 1;
  for (std::int64_t i = 0; i < n; ++i) {
    d.images.push_back(static_cast<std::uint8_t>(i));
    d.labels.push_back(static_cast<std::uint8_t>(i % 10));
  }
  return d;
}

LoaderOptions identity_options(std::int64_t batch) {
  LoaderOptions o;
  o.batch_size = batch;
  o.seed = 11;
  o.mean = 0;
  o.std = 1.0f / 255.0f;
  return o;
}

// Every batch's sample indices of epoch |epoch|.
std::vector<std::vector<int>> image_batches(BatchLoader& l, std::int64_t epoch) {
  std::vector<std::vector<int>> out;
  l.begin_epoch(epoch);
  Batch b;
  while (l.next(b)) {
    std::vector<int> ids;
    for (float v : b.x) ids.push_back(static_cast<int>(std::lround(v)));
    out.push_back(ids);
  }
  return out;
}

}  // namespace

TEST(DistributedLoader, ImagesRankSharesMakeTheGlobalBatch) {
  const Dataset data = indexed_images(23);
  for (const int n : {2, 3})
    for (const bool pad : {true, false}) {
      SCOPED_TRACE(fmt::format("world {} pad {}", n, pad));
      const std::int64_t b = 2;
      BatchLoader one(data, identity_options(b * n));
      const std::vector<std::vector<int>> global = image_batches(one, 3);
      std::vector<int> order;  // the epoch's order, padded as DistributedSampler pads it
      for (const auto& g : global) order.insert(order.end(), g.begin(), g.end());
      const std::size_t total = pad ? (order.size() + n - 1) / n * n : order.size();
      for (std::size_t p = order.size(); p < total; ++p) order.push_back(order[p - 23]);
      std::int64_t samples = 0;
      for (int r = 0; r < n; ++r) {
        BatchLoader mine(data, identity_options(b));
        mine.set_distributed(r, n, pad);
        EXPECT_EQ(mine.batch_size(), b);
        const auto batches = image_batches(mine, 3);
        EXPECT_EQ(static_cast<std::int64_t>(batches.size()), mine.num_batches());
        samples += mine.num_samples();
        std::size_t q = 0;
        for (std::size_t i = 0; i < batches.size(); ++i)
          for (std::size_t j = 0; j < batches[i].size(); ++j, ++q) {
            // Position q of this rank is position q * n + r of the epoch, in batch i of one
            // process.
            const std::size_t p = q * static_cast<std::size_t>(n) + static_cast<std::size_t>(r);
            ASSERT_LT(p, order.size());
            EXPECT_EQ(batches[i][j], order[p]);
            EXPECT_EQ(p / static_cast<std::size_t>(b * n), i);
          }
        EXPECT_EQ(static_cast<std::int64_t>(q), mine.num_samples());
        if (pad) {
          EXPECT_EQ(mine.num_batches(), (((23 + n - 1) / n) + b - 1) / b);
        }
      }
      EXPECT_EQ(samples, static_cast<std::int64_t>(total));
    }
}

TEST(DistributedLoader, ImagesBackToOneProcessAndErrors) {
  const Dataset data = indexed_images(10);
  ImageDataLoader l(data, identity_options(4));
  EXPECT_EQ(l.batch_size(), 4);
  l.set_distributed(1, 3, false);
  EXPECT_EQ(l.num_samples(), 3);  // positions 1, 4, 7
  EXPECT_EQ(l.num_batches(), 1);
  l.set_distributed(0, 1, true);
  EXPECT_EQ(l.num_samples(), 10);
  EXPECT_EQ(l.num_batches(), 3);
  EXPECT_THROW(l.set_distributed(3, 3, true), InvalidArgument);
  EXPECT_THROW(l.set_distributed(0, 0, true), InvalidArgument);
  EXPECT_THROW(l.set_distributed(-1, 2, true), InvalidArgument);
}

TEST(DistributedLoader, TextRankSharesMakeTheGlobalBatch) {
  std::string text;
  for (int i = 0; i < 600; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  const TextCorpus corpus = text_corpus(text);
  TextSplitOptions so;
  so.block_size = 64;
  so.val_fraction = 0.2;
  const TextSplit split = split_text(corpus, so);
  for (const int n : {2, 3})
    for (const bool pad : {true, false}) {
      SCOPED_TRACE(fmt::format("world {} pad {}", n, pad));
      TextLoaderOptions o;
      o.batch_size = 2;
      o.context = 8;
      o.seed = 5;
      TextLoaderOptions og = o;
      og.batch_size = o.batch_size * n;
      // train: the global batch's window starts, dealt out by position
      TextBatchLoader one(split, og);
      std::vector<TextBatchLoader> ranks;
      for (int r = 0; r < n; ++r) {
        ranks.emplace_back(split, o);
        ranks.back().set_distributed(r, n, pad);
        EXPECT_EQ(ranks.back().num_batches(), one.num_batches());
        EXPECT_EQ(ranks.back().batch_size(), 2);
      }
      for (std::int64_t k = 0; k < one.num_batches(); ++k) {
        const auto global = one.window_starts(2, k);
        for (int r = 0; r < n; ++r) {
          const auto mine = ranks[static_cast<std::size_t>(r)].window_starts(2, k);
          ASSERT_EQ(mine.size(), 2u);
          for (std::size_t j = 0; j < mine.size(); ++j)
            EXPECT_EQ(mine[j],
                      global[j * static_cast<std::size_t>(n) + static_cast<std::size_t>(r)]);
        }
      }
      // val: the fixed windows, dealt out by position (padding repeats the first ones)
      o.part = og.part = TextPart::val;
      TextBatchLoader val_one(split, og);
      std::vector<std::int64_t> order;
      for (std::int64_t k = 0; k < val_one.num_batches(); ++k)
        for (std::int64_t s : val_one.window_starts(1, k)) order.push_back(s);
      const std::size_t windows = order.size();
      const std::size_t total = pad ? (windows + n - 1) / n * n : windows;
      for (std::size_t p = windows; p < total; ++p) order.push_back(order[p - windows]);
      std::int64_t samples = 0;
      for (int r = 0; r < n; ++r) {
        TextBatchLoader mine(split, o);
        mine.set_distributed(r, n, pad);
        samples += mine.num_samples();
        std::size_t q = 0;
        for (std::int64_t k = 0; k < mine.num_batches(); ++k)
          for (std::int64_t s : mine.window_starts(1, k)) {
            const std::size_t p = q++ * static_cast<std::size_t>(n) + static_cast<std::size_t>(r);
            ASSERT_LT(p, order.size());
            EXPECT_EQ(s, order[p]);
            EXPECT_EQ(p / static_cast<std::size_t>(2 * n), static_cast<std::size_t>(k));
          }
        // next() yields the same windows.
        mine.begin_epoch(1);
        TensorBatch tb;
        std::int64_t got = 0;
        while (mine.next(tb)) got += tb.size;
        EXPECT_EQ(got, mine.num_samples());
      }
      EXPECT_EQ(samples, static_cast<std::int64_t>(total));
    }
  TextBatchLoader l(split, TextLoaderOptions{.batch_size = 2, .context = 8});
  EXPECT_THROW(l.set_distributed(2, 2, true), InvalidArgument);
}

namespace {
class Unsharded final : public DataLoader {
 public:
  std::int64_t num_batches() const override { return 1; }
  std::int64_t num_samples() const override { return 1; }
  void begin_epoch(std::int64_t) override {}
  bool next(TensorBatch&) override { return false; }
};
}  // namespace

TEST(DistributedLoader, DefaultLoaderRefusesToShard) {
  Unsharded u;
  EXPECT_EQ(u.batch_size(), 0);
  EXPECT_NO_THROW(u.set_distributed(0, 1, true));
  try {
    u.set_distributed(1, 2, true);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("set_distributed"), std::string::npos) << e.what();
  }
  EXPECT_THROW(u.set_distributed(2, 2, true), InvalidArgument);
}
