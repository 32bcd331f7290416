// Image augmentation in BatchLoader: off by default (batches exactly as before), and when on a
// pure function of (seed, epoch, sample): crops are shifted copies with zero (pre-normalisation)
// borders, flips mirror, the same seed repeats and another epoch draws again.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "tessera/errors.h"
#include "tessera/train/data.h"
#include "tessera/train/random.h"

using namespace tessera;
using namespace tessera::train;

namespace {

// |n| images of rows x cols with pixels in 1..255 (never 0, so a zero is a padded pixel).
Dataset images(std::int64_t n, std::int64_t rows, std::int64_t cols, std::uint64_t seed = 7) {
  Dataset d;
  d.name = "augment";
  d.size = n;
  d.rows = rows;
  d.cols = cols;
  Generator g(seed);
  for (std::int64_t i = 0; i < n * rows * cols; ++i)
    d.images.push_back(static_cast<std::uint8_t>(1 + g.below(255)));
  for (std::int64_t i = 0; i < n; ++i) d.labels.push_back(static_cast<std::uint8_t>(i % 10));
  return d;
}

std::vector<Batch> epoch_batches(BatchLoader& loader, std::int64_t epoch) {
  loader.begin_epoch(epoch);
  std::vector<Batch> out;
  Batch b;
  while (loader.next(b)) out.push_back(b);
  return out;
}

// The x values of an epoch, concatenated.
std::vector<float> epoch_x(BatchLoader& loader, std::int64_t epoch) {
  std::vector<float> x;
  for (const Batch& b : epoch_batches(loader, epoch)) x.insert(x.end(), b.x.begin(), b.x.end());
  return x;
}

// torchvision's RandomCrop(padding=p) then RandomHorizontalFlip done the plain way: pad the raw
// image with zeros, cut the window at (p + dy, p + dx), mirror it, then normalise.
std::vector<float> reference(const Dataset& d, std::int64_t s, std::int64_t p, const AugmentDraw& a,
                             float mean, float std) {
  const std::int64_t pr = d.rows + 2 * p, pc = d.cols + 2 * p;
  std::vector<std::uint8_t> padded(static_cast<std::size_t>(pr * pc), 0);
  for (std::int64_t r = 0; r < d.rows; ++r)
    for (std::int64_t c = 0; c < d.cols; ++c)
      padded[static_cast<std::size_t>((r + p) * pc + c + p)] =
          d.images[static_cast<std::size_t>((s * d.rows + r) * d.cols + c)];
  std::vector<float> out;
  for (std::int64_t r = 0; r < d.rows; ++r)
    for (std::int64_t c = 0; c < d.cols; ++c) {
      const std::int64_t cc = a.flip ? d.cols - 1 - c : c;
      const std::uint8_t v = padded[static_cast<std::size_t>((r + p + a.dy) * pc + cc + p + a.dx)];
      out.push_back(static_cast<float>(v) * (1.0f / (255.0f * std)) - mean / std);
    }
  return out;
}

}  // namespace

TEST(Augment, OffByDefaultBatchesAreThePlainNormalisedImages) {
  const Dataset d = images(10, 5, 6);
  LoaderOptions o;
  o.batch_size = 4;
  o.seed = 3;
  EXPECT_EQ(o.random_crop_padding, 0);
  EXPECT_FALSE(o.random_horizontal_flip);
  BatchLoader loader(d, o);
  const float scale = 1.0f / (255.0f * o.std), shift = o.mean / o.std;
  for (std::int64_t epoch : {1, 2}) {
    const std::vector<std::int64_t> order = permutation(d.size, derive_seed(o.seed, epoch));
    std::vector<float> want;
    for (std::int64_t s : order)
      for (std::int64_t p = 0; p < 30; ++p)
        want.push_back(static_cast<float>(d.images[static_cast<std::size_t>(s * 30 + p)]) * scale -
                       shift);
    EXPECT_EQ(epoch_x(loader, epoch), want);  // bit for bit
    for (std::int64_t s = 0; s < d.size; ++s) {
      const AugmentDraw a = augment_draw(o, epoch, s);
      EXPECT_EQ(a.dy, 0);
      EXPECT_EQ(a.dx, 0);
      EXPECT_FALSE(a.flip);
    }
  }
}

TEST(Augment, CropsAreShiftedCopiesWithZeroBordersBeforeNormalisation) {
  const Dataset d = images(40, 6, 7);
  LoaderOptions o;
  o.batch_size = 16;
  o.shuffle = false;
  o.random_crop_padding = 2;
  BatchLoader loader(d, o);
  std::set<std::pair<std::int64_t, std::int64_t>> offsets;
  const std::vector<float> x = epoch_x(loader, 1);
  ASSERT_EQ(x.size(), 40u * 42u);
  const float padded_value = -o.mean / o.std;  // a zero pixel, normalised
  for (std::int64_t s = 0; s < d.size; ++s) {
    const AugmentDraw a = augment_draw(o, 1, s);
    EXPECT_LE(std::abs(a.dy), 2);
    EXPECT_LE(std::abs(a.dx), 2);
    EXPECT_FALSE(a.flip);
    offsets.insert({a.dy, a.dx});
    const std::vector<float> got(x.begin() + s * 42, x.begin() + (s + 1) * 42);
    EXPECT_EQ(got, reference(d, s, 2, a, o.mean, o.std)) << "sample " << s;
    // The border is exactly the pixels the shift uncovered.
    const auto zeros = std::count(got.begin(), got.end(), padded_value);
    EXPECT_EQ(zeros, 42 - (6 - std::abs(a.dy)) * (7 - std::abs(a.dx))) << "sample " << s;
  }
  EXPECT_GT(offsets.size(), 10u);  // 25 offsets exist; 40 draws hit many of them
}

TEST(Augment, FlipsMirrorAboutHalfTheImages) {
  const Dataset d = images(64, 3, 5);
  LoaderOptions o;
  o.batch_size = 64;
  o.shuffle = false;
  o.random_horizontal_flip = true;
  BatchLoader loader(d, o);
  const std::vector<float> x = epoch_x(loader, 4);
  int flipped = 0;
  for (std::int64_t s = 0; s < d.size; ++s) {
    const AugmentDraw a = augment_draw(o, 4, s);
    EXPECT_EQ(a.dy, 0);
    EXPECT_EQ(a.dx, 0);
    flipped += a.flip;
    const float scale = 1.0f / (255.0f * o.std), shift = o.mean / o.std;
    for (std::int64_t r = 0; r < 3; ++r)
      for (std::int64_t c = 0; c < 5; ++c) {
        const std::int64_t src = a.flip ? 4 - c : c;
        EXPECT_EQ(
            x[static_cast<std::size_t>(s * 15 + r * 5 + c)],
            static_cast<float>(d.images[static_cast<std::size_t>(s * 15 + r * 5 + src)]) * scale -
                shift);
      }
  }
  EXPECT_GT(flipped, 16);
  EXPECT_LT(flipped, 48);
}

TEST(Augment, DrawsArePureInSeedEpochAndSampleAndDifferAcrossEpochs) {
  const Dataset d = images(30, 8, 8);
  LoaderOptions o;
  o.batch_size = 7;
  o.seed = 11;
  o.random_crop_padding = 3;
  o.random_horizontal_flip = true;
  BatchLoader a(d, o), b(d, o);
  const std::vector<float> a1 = epoch_x(a, 1), a2 = epoch_x(a, 2);
  EXPECT_EQ(a1, epoch_x(b, 1));
  EXPECT_EQ(a2, epoch_x(b, 2));
  EXPECT_EQ(epoch_x(a, 1), a1);  // an epoch run again (a resume) repeats
  EXPECT_NE(a1, a2);
  // The draws of one sample depend on the epoch, not on where the shuffle put it.
  LoaderOptions in_order = o;
  in_order.shuffle = false;
  int changed = 0;
  for (std::int64_t s = 0; s < d.size; ++s) {
    const AugmentDraw x = augment_draw(o, 1, s), y = augment_draw(in_order, 1, s),
                      z = augment_draw(o, 2, s);
    EXPECT_EQ(x.dy, y.dy);
    EXPECT_EQ(x.dx, y.dx);
    EXPECT_EQ(x.flip, y.flip);
    changed += x.dy != z.dy || x.dx != z.dx || x.flip != z.flip;
  }
  EXPECT_GT(changed, 20);
  // Another seed draws otherwise.
  LoaderOptions other = o;
  other.seed = 12;
  BatchLoader c(d, other);
  EXPECT_NE(epoch_x(c, 1), a1);
  // Turning the crop on leaves the flips as they were.
  LoaderOptions flip_only = o;
  flip_only.random_crop_padding = 0;
  for (std::int64_t s = 0; s < d.size; ++s)
    EXPECT_EQ(augment_draw(flip_only, 1, s).flip, augment_draw(o, 1, s).flip);
}

TEST(Augment, PaddingOutsideItsRangeIsRefused) {
  const Dataset d = images(2, 2, 2);
  for (std::int64_t p : {std::int64_t{-1}, (std::int64_t{1} << 20) + 1}) {
    LoaderOptions o;
    o.random_crop_padding = p;
    try {
      BatchLoader loader(d, o);
      ADD_FAILURE() << "padding " << p << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("random_crop_padding"), std::string::npos) << e.what();
    }
  }
  // Padding larger than the image is allowed (torchvision allows it): some crops are all border.
  LoaderOptions o;
  o.random_crop_padding = 5;
  o.shuffle = false;
  BatchLoader loader(d, o);
  EXPECT_EQ(epoch_x(loader, 1).size(), 8u);
}
