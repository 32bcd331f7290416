// The dispatcher and the fallback chain, with mock devices and kernels.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "mock_device.h"
#include "tessera/dispatch.h"
#include "tessera/errors.h"
#include "tessera/half.h"
#include "tessera/host.h"
#include "tessera/profiler.h"

using namespace tessera;
using tessera::testing::MockDevice;
using ::testing::_;
using ::testing::HasSubstr;
using ::testing::Invoke;
using ::testing::Return;

namespace {

// A relu call on |dev| with a fresh input [2,3] and an allocated output.
OpCall relu_call(Device& dev, std::vector<float> values = {-1, 2, -3, 4, -5, 6}) {
  OpCall call = make_call(OpId::relu, {Tensor::from(values, {2, 3}, &dev)});
  call.outputs[0] = Tensor::empty({2, 3}, DType::f32, &dev);
  return call;
}

// A relu that really computes, on host memory.
void host_relu(const OpCall& call, Queue&) {
  const float* x = call.in(0).host_data<float>();
  float* y = call.out(0).host_data<float>();
  for (std::int64_t i = 0; i < call.out(0).numel(); ++i) y[i] = x[i] > 0 ? x[i] : 0;
}

}  // namespace

TEST(Dispatch, RunsNativelyWhenTheDeviceSupportsTheCall) {
  MockDevice gpu("gpu", 0), cpu("cpu", 0);
  auto& k = gpu.add(OpId::relu);
  auto& fallback = cpu.add(OpId::relu);
  EXPECT_CALL(k, launch(_, _)).WillOnce(Invoke(host_relu));
  EXPECT_CALL(fallback, launch(_, _)).Times(0);
  Dispatcher d;
  d.set_chain({&cpu});
  OpCall call = relu_call(gpu);
  d.run(gpu, call);
  EXPECT_EQ(call.out(0).to_vector<float>(), (std::vector<float>{0, 2, 0, 4, 0, 6}));
  EXPECT_TRUE(d.routes().empty());
}

TEST(Dispatch, WithoutFallbackAMissingKernelIsTheDocumentedError) {
  MockDevice gpu("vulkan", 0);
  Dispatcher d;
  OpCall call = relu_call(gpu);
  try {
    d.run(gpu, call);
    FAIL() << "no exception";
  } catch (const UnsupportedOperation& e) {
    EXPECT_STREQ(e.what(),
                 "The operator 'relu' (f32, [2,3]) is not implemented for vulkan:0 (Mock vulkan).\n"
                 "Set TESSERA_FALLBACK=1 to run it on the CPU instead; this is slower than running "
                 "natively on vulkan.");
  }
}

TEST(Dispatch, ARefusedCallNamesTheKernelsReason) {
  MockDevice gpu("vulkan", 0);
  EXPECT_CALL(gpu.add(OpId::relu), supports(_)).WillRepeatedly(Return(Support::no("f16 only")));
  Dispatcher d;
  OpCall call = relu_call(gpu);
  EXPECT_THROW(
      {
        try {
          d.run(gpu, call);
        } catch (const UnsupportedOperation& e) {
          EXPECT_THAT(e.what(), HasSubstr("is not supported on vulkan:0 (Mock vulkan): f16 only."));
          throw;
        }
      },
      UnsupportedOperation);
}

TEST(Dispatch, FallbackRunsOnTheChainCopiesBackCountsAndWarnsOnce) {
  MockDevice gpu("vulkan", 0), cpu("cpu", 0);
  EXPECT_CALL(cpu.add(OpId::relu), launch(_, _)).Times(3).WillRepeatedly(Invoke(host_relu));
  Dispatcher d;
  d.set_chain({&cpu});
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) {
    OpCall call = relu_call(gpu, {1, -1, 2, -2, 3, -3});
    d.run(gpu, call);
    EXPECT_EQ(&call.out(0).device(), &gpu);  // the result stays on the original device
    EXPECT_EQ(call.out(0).to_vector<float>(), (std::vector<float>{1, 0, 2, 0, 3, 0}));
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_THAT(err, HasSubstr("The operator 'relu' (f32, [2,3]) is not implemented on vulkan:0"));
  EXPECT_THAT(err, HasSubstr("running it on cpu:0"));
  const auto routes = d.routes();
  ASSERT_EQ(routes.size(), 1u);
  EXPECT_EQ(routes[0].from, "vulkan:0");
  EXPECT_EQ(routes[0].to, "cpu:0");
  EXPECT_EQ(routes[0].ops, 3u);
  EXPECT_EQ(routes[0].bytes, 3u * (24 + 24));  // input there, output back
}

// An output that is one slice of a larger tensor (as the packed attention's backward writes dq,
// dk and dv into the slices of one gradient) comes back from the fallback device into that
// slice alone.
TEST(Dispatch, FallbackWritesAnOutputSliceAndLeavesTheRestOfItsTensor) {
  MockDevice gpu("vulkan", 0), cpu("cpu", 0);
  EXPECT_CALL(cpu.add(OpId::relu), launch(_, _)).WillOnce(Invoke(host_relu));
  Dispatcher d;
  d.set_chain({&cpu});
  const Tensor whole = Tensor::from(std::vector<float>(18, 7.0f), {3, 2, 3}, &gpu);
  OpCall call = relu_call(gpu, {1, -1, 2, -2, 3, -3});
  call.outputs[0] = whole.select(0, 1);
  ::testing::internal::CaptureStderr();
  d.run(gpu, call);
  (void)::testing::internal::GetCapturedStderr();
  std::vector<float> want(18, 7.0f);
  const std::vector<float> relu = {1, 0, 2, 0, 3, 0};
  std::copy(relu.begin(), relu.end(), want.begin() + 6);
  EXPECT_EQ(whole.to_vector<float>(), want);
}

namespace {

// Element (i, j) of a rank-2 view over host memory, through its strides.
template <typename T>
T at2(const Tensor& t, std::int64_t i, std::int64_t j) {
  return t.host_data<T>()[i * t.strides()[0] + j * t.strides()[1]];
}

// An f32 add of two [2, 3] views (either may broadcast: stride 0).
void host_add(const OpCall& call, Queue&) {
  float* y = call.out(0).host_data<float>();
  for (std::int64_t i = 0; i < 2; ++i)
    for (std::int64_t j = 0; j < 3; ++j)
      y[i * 3 + j] = at2<float>(call.in(0), i, j) + at2<float>(call.in(1), i, j);
}

// A cast between f16 and f32 of a contiguous tensor.
void host_cast(const OpCall& call, Queue&) {
  const Tensor &x = call.in(0), &y = call.out(0);
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    if (x.dtype() == DType::f16)
      y.host_data<float>()[i] = f16_to_f32(x.host_data<std::uint16_t>()[i]);
    else
      y.host_data<std::uint16_t>()[i] = f32_to_f16(x.host_data<float>()[i]);
  }
}

Tensor f16_tensor(const std::vector<float>& values, const Shape& shape, Device& dev) {
  std::vector<std::uint16_t> h;
  for (const float v : values) h.push_back(f32_to_f16(v));
  return Tensor::from_bytes(h.data(), h.size() * 2, shape, DType::f16, &dev);
}

}  // namespace

// An op that computes in f32 (op_computes_in_f32), called in f16 where the device's kernel takes
// f32 only, runs in f32 on that device (inputs cast, a broadcast one before its expansion; the
// result cast back) before the fallback chain is tried.
TEST(Dispatch, A16BitCallThatTheKernelTakesInF32RunsOnItsDeviceBeforeTheChain) {
  MockDevice gpu("vulkan", 0), cpu("cpu", 0);
  auto& add = gpu.add(OpId::add);
  ON_CALL(add, supports(_)).WillByDefault(Invoke([](const OpCall& c) {
    const bool f32 = c.in(0).dtype() == DType::f32 && c.in(1).dtype() == DType::f32 &&
                     c.out(0).dtype() == DType::f32;
    return f32 ? Support::yes() : Support::no("f32 only");
  }));
  EXPECT_CALL(add, launch(_, _)).WillOnce(Invoke(host_add));
  std::vector<std::int64_t> cast_sizes;
  EXPECT_CALL(gpu.add(OpId::cast), launch(_, _))
      .WillRepeatedly(Invoke([&](const OpCall& c, Queue& q) {
        cast_sizes.push_back(c.in(0).numel());
        host_cast(c, q);
      }));
  EXPECT_CALL(cpu.add(OpId::add), launch(_, _)).Times(0);
  Dispatcher d;
  d.set_chain({&cpu});

  OpCall call =
      make_call(OpId::add, {f16_tensor({0.5f, -1.25f, 2, 3.5f, -4, 1024}, {2, 3}, gpu),
                            f16_tensor({0.25f, 1, 1.5f}, {1, 3}, gpu).expand(Shape{2, 3})});
  call.outputs[0] = Tensor::empty({2, 3}, DType::f16, &gpu);
  d.run(gpu, call);

  std::vector<std::uint16_t> got(6);
  call.out(0).copy_to_host(got.data(), got.size() * 2, DType::f16);
  const std::vector<float> want = {0.75f, -0.25f, 3.5f, 3.75f, -3, 1025.5f};
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(got[i], f32_to_f16(want[i])) << "element " << i;
  // a (6 values), b before its expansion (3), the f32 sum into the f16 output (6).
  EXPECT_EQ(cast_sizes, (std::vector<std::int64_t>{6, 3, 6}));
  EXPECT_TRUE(d.routes().empty());
}

TEST(Dispatch, ADifferentReasonWarnsAgain) {
  MockDevice gpu("vulkan", 0), cpu("cpu", 0);
  auto& k = gpu.add(OpId::relu);
  EXPECT_CALL(k, supports(_))
      .WillOnce(Return(Support::no("too large")))
      .WillOnce(Return(Support::no("too large")))
      .WillOnce(Return(Support::no("strided")));
  EXPECT_CALL(cpu.add(OpId::relu), launch(_, _)).WillRepeatedly(Invoke(host_relu));
  Dispatcher d;
  d.set_chain({&cpu});
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) {
    OpCall call = relu_call(gpu);
    d.run(gpu, call);
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 2) << err;
}

TEST(Dispatch, AChainOfTwoSkipsADeviceThatCanNotRunTheCall) {
  MockDevice gpu("vulkan", 0), ocl("opencl", 0), cpu("cpu", 0);
  EXPECT_CALL(ocl.add(OpId::relu), supports(_))
      .WillRepeatedly(Return(Support::no("no fp32 atomics")));
  EXPECT_CALL(cpu.add(OpId::relu), launch(_, _)).WillOnce(Invoke(host_relu));
  Dispatcher d;
  d.set_chain({&ocl, &cpu});
  OpCall call = relu_call(gpu);
  ::testing::internal::CaptureStderr();
  d.run(gpu, call);
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(call.out(0).to_vector<float>(), (std::vector<float>{0, 2, 0, 4, 0, 6}));
  ASSERT_EQ(d.routes().size(), 1u);
  EXPECT_EQ(d.routes()[0].to, "cpu:0");
}

TEST(Dispatch, WhenNoDeviceOfTheChainCanRunItTheErrorListsEach) {
  MockDevice gpu("vulkan", 0), ocl("opencl", 0), cpu("cpu", 0);
  EXPECT_CALL(ocl.add(OpId::relu), supports(_)).WillRepeatedly(Return(Support::no("too large")));
  Dispatcher d;
  d.set_chain({&ocl, &cpu});
  OpCall call = relu_call(gpu);
  try {
    d.run(gpu, call);
    FAIL();
  } catch (const UnsupportedOperation& e) {
    EXPECT_THAT(e.what(), HasSubstr("No device of the fallback chain can run it either: "
                                    "opencl:0 (too large); cpu:0 (not implemented)."));
  }
}

TEST(Dispatch, InPlaceOpsCarryTheirStateToTheFallbackDeviceAndBack) {
  MockDevice gpu("vulkan", 0), cpu("cpu", 0);
  EXPECT_CALL(cpu.add(OpId::sgd_update), launch(_, _)).WillOnce(Invoke([](const OpCall& c, Queue&) {
    float* p = c.out(0).host_data<float>();
    const float* g = c.in(0).host_data<float>();
    for (int i = 0; i < 2; ++i) p[i] -= c.attr<SgdAttrs>().lr * g[i];
  }));
  Dispatcher d;
  d.set_chain({&cpu});
  SgdAttrs a;
  a.lr = 0.5f;
  OpCall call = make_call(OpId::sgd_update, {Tensor::from(std::vector<float>{1, 2}, {2}, &gpu)}, a);
  call.outputs[0] = Tensor::from(std::vector<float>{10, 20}, {2}, &gpu);
  call.outputs[1] = Tensor::from(std::vector<float>{0, 0}, {2}, &gpu);
  ::testing::internal::CaptureStderr();
  d.run(gpu, call);
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(call.out(0).to_vector<float>(), (std::vector<float>{9.5f, 19.0f}));
}

// Profiling a device whose queue can not time kernels is UnsupportedOperation naming the device;
// a HostQueue made to time them records what its kernels report while it profiles, and only then.
TEST(Profiler, RefusesAQueueThatCanNotTimeKernelsAndSumsWhatIsRecorded) {
  MockDevice dev("mock", 0);
  try {
    Profiler prof(dev);
    ADD_FAILURE() << "a queue without kernel timing profiled";
  } catch (const UnsupportedOperation& e) {
    EXPECT_THAT(e.what(), HasSubstr("mock:0"));
  }
  HostQueue q(true);
  q.record("before", 1.0);
  ASSERT_TRUE(q.start_profiling());
  q.record("relu", 0.25);
  q.record("matmul", 1.5);
  q.record("relu", 0.5);
  const std::vector<KernelTime> t = q.stop_profiling();
  q.record("after", 1.0);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].name, "matmul");
  EXPECT_EQ(t[0].calls, 1);
  EXPECT_DOUBLE_EQ(t[0].seconds, 1.5);
  EXPECT_EQ(t[1].name, "relu");
  EXPECT_EQ(t[1].calls, 2);
  EXPECT_DOUBLE_EQ(t[1].seconds, 0.75);
  EXPECT_TRUE(q.stop_profiling().empty());
  const std::string table = format_kernel_times(t);
  EXPECT_THAT(table, HasSubstr("matmul"));
  EXPECT_THAT(table, HasSubstr("66.7%"));
}
