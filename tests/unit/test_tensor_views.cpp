// Tensor views as torch gives them, on a hand-made host device: shapes, strides, offsets, shared
// storage and the errors that name the call; bool and i64 host round trips; printing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

#include "mock_device.h"
#include "tessera/dispatch.h"
#include "tessera/errors.h"
#include "tessera/tensor.h"

using namespace tessera;
using tessera::testing::MockDevice;

namespace {

Tensor iota(MockDevice& dev, const Shape& s) {
  std::vector<float> v(static_cast<std::size_t>(s.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return Tensor::from(v, s, &dev);
}

// The message of the InvalidArgument that |f| throws.
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(TensorViews, NarrowSliceSelectShareStorage) {
  MockDevice dev("cpu", 0);
  const Tensor x = iota(dev, {4, 6});
  const Tensor n = x.narrow(1, -4, 3);
  EXPECT_EQ(n.shape(), (Shape{4, 3}));
  EXPECT_EQ(n.strides(), (Strides{6, 1}));
  EXPECT_EQ(n.offset(), 2);
  EXPECT_TRUE(n.shares_storage(x));
  const Tensor s = x.slice(1, 1, 100, 2);  // columns 1, 3, 5
  EXPECT_EQ(s.shape(), (Shape{4, 3}));
  EXPECT_EQ(s.strides(), (Strides{6, 2}));
  EXPECT_EQ(s.offset(), 1);
  EXPECT_EQ(x.slice(0, -2, 4).shape(), (Shape{2, 6}));
  EXPECT_EQ(x.slice(0, 3, 1).shape(), (Shape{0, 6}));  // empty, as Python slicing
  const Tensor r = x.select(0, -1);
  EXPECT_EQ(r.shape(), (Shape{6}));
  EXPECT_EQ(r.offset(), 18);
  EXPECT_THAT(error_of([&] { (void)x.narrow(1, 4, 3); }), ::testing::HasSubstr("narrow:"));
  EXPECT_THAT(error_of([&] { (void)x.narrow(1, 4, 3); }), ::testing::HasSubstr("[4,6]"));
  EXPECT_THAT(error_of([&] { (void)x.slice(0, 0, 4, 0); }), ::testing::HasSubstr("step"));
  EXPECT_THAT(error_of([&] { (void)x.select(2, 0); }), ::testing::HasSubstr("select: dim 2"));
  EXPECT_THAT(error_of([&] { (void)x.select(0, 4); }), ::testing::HasSubstr("index 4"));
}

TEST(TensorViews, PermuteTransposeUnsqueezeSqueeze) {
  MockDevice dev("cpu", 0);
  const Tensor x = iota(dev, {2, 3, 4});
  const Tensor p = x.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Strides{1, 12, 4}));
  EXPECT_EQ(x.transpose(0, -1).shape(), (Shape{4, 3, 2}));
  EXPECT_THAT(error_of([&] { (void)x.permute({0, 0, 1}); }), ::testing::HasSubstr("repeat"));
  EXPECT_THAT(error_of([&] { (void)x.permute({0, 1}); }), ::testing::HasSubstr("permute:"));
  const Tensor u = x.unsqueeze(-1);
  EXPECT_EQ(u.shape(), (Shape{2, 3, 4, 1}));
  EXPECT_EQ(x.unsqueeze(1).shape(), (Shape{2, 1, 3, 4}));
  EXPECT_EQ(x.unsqueeze(1).strides(), (Strides{12, 12, 4, 1}));
  EXPECT_EQ(u.squeeze().shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(u.squeeze(0).shape(), (Shape{2, 3, 4, 1}));  // size 2: unchanged, as torch
  EXPECT_EQ(u.squeeze(-1).shape(), (Shape{2, 3, 4}));
  EXPECT_THAT(error_of([&] { (void)x.unsqueeze(4); }), ::testing::HasSubstr("unsqueeze: dim 4"));
  EXPECT_EQ(x.expand({5, -1, 3, 4}).shape(), (Shape{5, 2, 3, 4}));
}

TEST(TensorViews, ViewReshapeFlattenFollowStrides) {
  MockDevice dev("cpu", 0);
  const Tensor x = iota(dev, {2, 3, 4});
  // A permuted tensor whose merged dimensions are still one block is viewed without a copy.
  const Tensor p = x.permute({1, 0, 2});  // [3, 2, 4], strides [4, 12, 1]
  EXPECT_TRUE(p.view({3, 2, 2, 2}).shares_storage(x));
  EXPECT_THAT(error_of([&] { (void)p.view({6, 4}); }), ::testing::HasSubstr("use reshape"));
  EXPECT_TRUE(x.flatten(1).shares_storage(x));
  EXPECT_EQ(x.flatten(1).shape(), (Shape{2, 12}));
  EXPECT_EQ(x.view({-1, 4}).shape(), (Shape{6, 4}));
  EXPECT_EQ(x.slice(2, 0, 4, 2).view({2, 3, 2, 1}).strides(), (Strides{12, 4, 2, 2}));
  EXPECT_THAT(error_of([&] { (void)x.view({5, -1}); }), ::testing::HasSubstr("view:"));
  // An 8-byte tensor read as pairs of words, and back.
  const Tensor w = Tensor::empty({3, 2}, DType::i64, &dev).view(DType::i32);
  EXPECT_EQ(w.shape(), (Shape{3, 4}));
  EXPECT_EQ(w.view(DType::i64).shape(), (Shape{3, 2}));
}

TEST(TensorViews, SplitAndChunkAreViews) {
  MockDevice dev("cpu", 0);
  const Tensor x = iota(dev, {7, 2});
  const auto parts = x.split(3);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].shape(), (Shape{1, 2}));
  EXPECT_EQ(parts[2].offset(), 12);
  EXPECT_TRUE(parts[1].shares_storage(x));
  const auto chunks = x.chunk(3, 0);  // ceil(7 / 3) = 3 rows each: 3, 3, 1
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(x.chunk(4, 0).size(), 4u);  // 2, 2, 2, 1
  EXPECT_EQ(x.chunk(2, 1)[1].shape(), (Shape{7, 1}));
  EXPECT_THAT(error_of([&] { (void)x.split(0); }), ::testing::HasSubstr("split:"));
}

TEST(TensorViews, BoolAndI64RoundTrip) {
  MockDevice dev("cpu", 0);
  const std::vector<std::uint8_t> mask{1, 0, 0, 1, 1};
  const Tensor m = Tensor::from_mask(mask, {5}, &dev);
  EXPECT_EQ(m.dtype(), DType::boolean);
  EXPECT_EQ(m.to_vector<std::uint8_t>(), mask);
  EXPECT_THROW((void)m.to_vector<std::int32_t>(), InvalidArgument);
  const bool flags[3] = {true, false, true};
  EXPECT_EQ(Tensor::from<bool>(flags, {3}, &dev).to_vector<std::uint8_t>(),
            (std::vector<std::uint8_t>{1, 0, 1}));
  const std::vector<std::int64_t> big{-(std::int64_t{1} << 40), 7};
  EXPECT_EQ(Tensor::from<std::int64_t>(big, {2}, &dev).to_vector<std::int64_t>(), big);
}

TEST(TensorViews, PrintsAsTorchDoes) {
  MockDevice dev("cpu", 0);
  std::ostringstream s;
  s << Tensor::from(std::vector<float>{1, 2, -3}, {3}, &dev) << '\n'
    << Tensor::from(std::vector<float>{1.5f}, {}, &dev) << '\n'
    << Tensor::from(std::vector<float>{1e-5f, 1}, {2}, &dev) << '\n'
    << Tensor::empty({0, 3}, DType::f32, &dev) << '\n'
    << Tensor::from<std::int32_t>(std::vector<std::int32_t>{5, -12}, {1, 2}, &dev);
  EXPECT_EQ(s.str(),
            "tensor([ 1.,  2., -3.])\n"
            "tensor(1.5000)\n"
            "tensor([1.0000e-05, 1.0000e+00])\n"
            "tensor([], size=(0, 3))\n"
            "tensor([[  5, -12]], dtype=i32)");
}

// copy_into's output is a strided view (OpDef::strided_outputs): on the fallback path the range
// the view spans goes to the fallback device with its values and comes back whole, so the
// elements between the view's keep their values.
TEST(TensorViews, AStridedOutputSurvivesTheFallbackRoundTrip) {
  MockDevice gpu("vulkan", 0), cpu("cpu", 0);
  EXPECT_CALL(cpu.add(OpId::copy_into), launch(::testing::_, ::testing::_))
      .WillOnce(::testing::Invoke([](const OpCall& call, Queue&) {
        const Tensor& dst = call.out(0);
        const float* s = call.in(0).host_data<float>();
        float* d = dst.host_data<float>();
        for (std::int64_t i = 0; i < dst.dim(0); ++i)
          for (std::int64_t j = 0; j < dst.dim(1); ++j)
            d[i * dst.strides()[0] + j * dst.strides()[1]] =
                s[i * call.in(0).strides()[0] + j * call.in(0).strides()[1]];
      }));
  Dispatcher d;
  d.set_chain({&cpu});
  const Tensor base = iota(gpu, {3, 5});
  OpCall call =
      make_call(OpId::copy_into, {Tensor::from(std::vector<float>{-1, -2, -3, -4}, {2, 2}, &gpu)});
  call.outputs[0] = base.narrow(0, 1, 2).slice(1, 1, 5, 2);  // rows 1-2, columns 1 and 3
  ::testing::internal::CaptureStderr();
  d.run(gpu, call);
  (void)::testing::internal::GetCapturedStderr();
  EXPECT_EQ(base.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4,    //
                                                         5, -1, 7, -2, 9,  //
                                                         10, -3, 12, -4, 14}));
}
