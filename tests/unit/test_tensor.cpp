// Tensors on hand-made host devices: host copies, device-to-device copies and views.
#include <gtest/gtest.h>

#include "mock_device.h"
#include "tessera/errors.h"
#include "tessera/tensor.h"

using namespace tessera;
using tessera::testing::MockDevice;

TEST(Tensor, HostRoundTrip) {
  MockDevice dev("cpu", 0);
  const std::vector<float> v{1.5f, -2, 3, 4, 5, 6};
  const Tensor t = Tensor::from(v, {2, 3}, &dev);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.strides(), (Strides{3, 1}));
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.nbytes(), 24u);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.to_vector<float>(), v);
  EXPECT_THROW(t.to_vector<std::int32_t>(), InvalidArgument);
  EXPECT_THROW(Tensor::from(v, {4, 2}, &dev), InvalidArgument);
  EXPECT_THROW(Tensor::empty({2, -1}, DType::f32, &dev), InvalidArgument);
}

// Sizes that overflow are errors, never a tensor with a wrapped size: {2^62, 4} has 2^64 elements
// (it returned a tensor of 0 bytes, and sum on it wrote out of bounds).
TEST(Tensor, ShapesWhoseSizeOverflowsAreRefused) {
  MockDevice dev("cpu", 0);
  for (const Shape& shape :
       {Shape{std::int64_t{1} << 62, 4}, Shape{std::int64_t{1} << 32, std::int64_t{1} << 32},
        Shape{3, std::int64_t{1} << 62, 2, 2}}) {
    try {
      (void)Tensor::empty(shape, DType::f32, &dev);
      ADD_FAILURE() << shape.str() << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(shape.str()), std::string::npos) << e.what();
    }
    EXPECT_THROW((void)shape.numel(), InvalidArgument) << shape.str();
  }
  // The element count fits, the bytes do not (2^62 floats are 2^64 bytes).
  EXPECT_THROW((void)Tensor::empty({std::int64_t{1} << 62}, DType::f32, &dev), InvalidArgument);
  // Large but representable: the device says it has no room, naming itself.
  EXPECT_THROW((void)Tensor::empty({std::int64_t{1} << 60}, DType::u8, &dev), OutOfMemory);
}

TEST(Tensor, CopiesBetweenDevicesKeepValuesAndAreIndependent) {
  MockDevice a("cpu", 0), b("gpu", 0);
  std::vector<std::int32_t> v(1000);
  for (int i = 0; i < 1000; ++i) v[static_cast<std::size_t>(i)] = i * 7 - 300;
  const Tensor ta = Tensor::from<std::int32_t>(v, {10, 100}, &a);
  Tensor tb = ta.to(b);
  EXPECT_EQ(&tb.device(), &b);
  EXPECT_FALSE(tb.shares_storage(ta));
  EXPECT_EQ(tb.to_vector<std::int32_t>(), v);
  const std::vector<std::int32_t> zeros(1000, 0);
  tb.copy_from_host(zeros.data(), zeros.size() * 4);
  EXPECT_EQ(ta.to_vector<std::int32_t>(), v);
  EXPECT_TRUE(ta.to(a).shares_storage(ta));
}

TEST(Tensor, ViewsShareStorage) {
  MockDevice dev("cpu", 0);
  const Tensor t = Tensor::from(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}, &dev);
  const Tensor tt = t.t();
  EXPECT_EQ(tt.shape(), (Shape{3, 2}));
  EXPECT_EQ(tt.strides(), (Strides{1, 3}));
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_TRUE(tt.shares_storage(t));
  const Tensor r = t.reshape({3, -1});
  EXPECT_EQ(r.shape(), (Shape{3, 2}));
  EXPECT_TRUE(r.shares_storage(t));
  EXPECT_THROW(t.reshape({4, -1}), InvalidArgument);
  EXPECT_THROW(t.reshape({-1, -1}), InvalidArgument);
  const Tensor row = Tensor::from(std::vector<float>{1, 2, 3}, {3}, &dev);
  const Tensor e = row.expand({4, 3});
  EXPECT_EQ(e.strides(), (Strides{0, 1}));
  EXPECT_THROW(row.expand({4, 2}), InvalidArgument);
}

TEST(Shape, BroadcastRules) {
  EXPECT_EQ(broadcast_shapes({4, 1, 3}, {5, 1}), (Shape{4, 5, 3}));
  EXPECT_EQ(broadcast_shapes({}, {2, 2}), (Shape{2, 2}));
  EXPECT_THROW(broadcast_shapes({3}, {4}), InvalidArgument);
  EXPECT_THROW((Shape{1, 2, 3, 4, 5, 6, 7}), InvalidArgument);
  EXPECT_EQ((Shape{2, 3}).normalize_axis(-1), 1);
  EXPECT_THROW((Shape{2, 3}).normalize_axis(2), InvalidArgument);
}

TEST(DType, FloatingPointAndSixteenBitPredicates) {
  // Every dtype, so that one added later is classified on purpose.
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto t = static_cast<DType>(i);
    const bool sixteen = t == DType::f16 || t == DType::bf16;
    EXPECT_EQ(is_16bit_float(t), sixteen) << dtype_name(t);
    EXPECT_EQ(is_floating_point(t), sixteen || t == DType::f32 || t == DType::f64)
        << dtype_name(t);
  }
}
