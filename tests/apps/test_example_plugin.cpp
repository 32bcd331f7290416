// The out-of-tree example plugin, loaded through TESSERA_PLUGIN_PATH: its own ops run on it, a
// missing op is an error with fallback off and runs on the CPU with fallback on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "run_app.h"
#include "tessera/tessera.h"

using namespace tessera;
using ::testing::HasSubstr;

TEST(ExamplePlugin, IsLoadedAndRunsItsOwnOps) {
  ASSERT_TRUE(is_built("example"));
  ASSERT_TRUE(is_available("example"));
  Device& ex = device("example");
  EXPECT_EQ(ex.id(), "example:0");
  EXPECT_EQ(&default_device(), &device("cpu"));  // auto prefers the CPU plugin over "other"
  const Tensor y = relu(Tensor::from(std::vector<float>{-1, 2, -3}, {3}, &ex));
  EXPECT_EQ(&y.device(), &ex);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0, 2, 0}));
  EXPECT_TRUE(fallback_stats().empty());
}

TEST(ExamplePlugin, AMissingOpIsAnErrorWithFallbackOffAndRunsOnTheCpuWithFallbackOn) {
  Device& ex = device("example");
  const Tensor a = Tensor::from(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}, &ex);
  const Tensor b = Tensor::from(std::vector<float>{1, 0, 0, 1, 1, 1}, {3, 2}, &ex);
  set_fallback_chain({});
  try {
    (void)matmul(a, b);
    FAIL() << "no UnsupportedOperation";
  } catch (const UnsupportedOperation& e) {
    EXPECT_STREQ(
        e.what(),
        "The operator 'matmul' (f32, [2,3]) is not implemented for example:0 (Example "
        "device (host memory)).\nSet TESSERA_FALLBACK=1 to run it on the CPU instead; this "
        "is slower than running natively on example.");
  }
  set_fallback_chain({&device("cpu")});
  ::testing::internal::CaptureStderr();
  const Tensor y = matmul(a, b);
  const Tensor y2 = matmul(a, b);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(&y.device(), &ex);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{4, 5, 10, 11}));
  EXPECT_THAT(err, HasSubstr("The operator 'matmul' (f32, [2,3]) is not implemented on example:0"));
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;  // warned once for two calls
  const auto routes = fallback_stats();
  ASSERT_EQ(routes.size(), 1u);
  EXPECT_EQ(routes[0].from, "example:0");
  EXPECT_EQ(routes[0].to, "cpu:0");
  EXPECT_EQ(routes[0].ops, 2u);
  EXPECT_EQ(routes[0].bytes, 2u * (24 + 24 + 16));
  // A broadcast add is refused by the example's kernel (with a reason) and falls back too.
  const Tensor s = add(a, Tensor::from(std::vector<float>{10, 20, 30}, {3}, &ex));
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  set_fallback_chain({});
}

TEST(ExamplePlugin, TrainingOnAPartialPluginFallsBackAndSaysSo) {
  // tessera-train on the example plugin (add, relu, fill only): with fallback on, everything else
  // runs on cpu:0 and the summary counts it; with fallback off, the first missing op is an error.
  const std::string cmd = std::string(TRAIN_BIN) +
                          " --accelerator example --epochs 1 -q --limit-train-batches 3 "
                          "--limit-test-batches 1";
  const tessera::testing::Result on = tessera::testing::run("TESSERA_FALLBACK=1", cmd);
  EXPECT_EQ(on.code, 0) << on.out << on.err;
  EXPECT_THAT(on.out, HasSubstr("on example:0"));
  EXPECT_THAT(on.out, HasSubstr("op(s) ran on cpu:0 instead of example:0"));
  const tessera::testing::Result off = tessera::testing::run("TESSERA_FALLBACK=0", cmd);
  EXPECT_NE(off.code, 0);
  EXPECT_THAT(off.err, HasSubstr("is not implemented for example:0"));
  EXPECT_THAT(off.err, HasSubstr("Set TESSERA_FALLBACK=1"));
}
