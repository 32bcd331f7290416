// Registers every conformance case for every device the runtime finds: Ops/<device>.<case> and
// Grad/<device>.<case>.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "cases.h"
#include "tessera/errors.h"
#include "tessera/op.h"
#include "tessera/ops.h"
#include "tessera/profiler.h"
#include "tessera/runtime.h"
#include "tessera/tensor.h"

namespace tessera::conformance {

namespace {
unsigned g_seed = 0;
}

std::mt19937& rng() {
  static std::mt19937 r(g_seed);
  return r;
}

namespace {

class CaseTest : public ::testing::Test {
 public:
  CaseTest(Device& d, Case c) : device_(d), case_(std::move(c)) {}
  void TestBody() override {
    if (!device_.kernel(case_.op))
      GTEST_SKIP() << op_name(case_.op) << " is not implemented on " << device_.id();
    try {
      case_.run(device_);
    } catch (const UnsupportedOperation& e) {
      GTEST_SKIP() << e.what();
    }
  }

 private:
  Device& device_;
  Case case_;
};

void register_cases(const char* group, Device* d, const std::vector<Case>& cases) {
  const std::string suite = std::string(group) + "/" + d->id();
  for (const Case& c : cases)
    ::testing::RegisterTest(suite.c_str(), c.name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                            [d, c]() -> ::testing::Test* { return new CaseTest(*d, c); });
}

// A request beyond the device's memory raises OutOfMemory naming the device; the device goes on.
void register_out_of_memory(Device* d) {
  const std::string suite = "Device/" + d->id();
  ::testing::RegisterTest(
      suite.c_str(), "OutOfMemoryNamesTheDeviceAndItGoesOn", nullptr, nullptr, __FILE__, __LINE__,
      [d]() -> ::testing::Test* {
        struct T : ::testing::Test {
          Device* dev;
          explicit T(Device* x) : dev(x) {}
          void TestBody() override {
            if (dev->info().type == DeviceType::cpu && dev->plugin_name() == "cpu")
              GTEST_SKIP() << "host memory overcommits; the CPU plugin's limit is the OS's";
            const std::int64_t elements =
                static_cast<std::int64_t>(dev->allocator().memory().total / 4) + (1ll << 28);
            try {
              (void)Tensor::empty({elements}, DType::f32, dev);
              ADD_FAILURE() << "allocating " << elements << " floats succeeded";
            } catch (const OutOfMemory& e) {
              EXPECT_NE(std::string(e.what()).find(dev->id()), std::string::npos) << e.what();
              EXPECT_EQ(e.device(), dev->id());
            }
            const Tensor t = Tensor::full({1000}, 2.0, DType::f32, dev);
            EXPECT_EQ(t.to_vector<float>()[999], 2.0f);
          }
        };
        return new T(d);
      });
}

// The built-in plugins (cpu, vulkan, opencl) implement every op natively: a missing kernel fails
// here on every device that CI runs, naming the ops (an out-of-tree plugin may implement a few).
void register_every_op(Device* d) {
  const std::string suite = "Device/" + d->id();
  ::testing::RegisterTest(
      suite.c_str(), "ImplementsEveryOp", nullptr, nullptr, __FILE__, __LINE__,
      [d]() -> ::testing::Test* {
        struct T : ::testing::Test {
          Device* dev;
          explicit T(Device* x) : dev(x) {}
          void TestBody() override {
            const std::string plugin = dev->plugin_name();
            if (plugin != "cpu" && plugin != "vulkan" && plugin != "opencl")
              GTEST_SKIP() << "plugin " << plugin << " is not built in";
            std::string missing;
            for (const OpDef& op : op_defs())
              if (!dev->kernel(op.id))
                missing += std::string(missing.empty() ? "" : ", ") + std::string(op.name);
            EXPECT_TRUE(missing.empty()) << dev->id() << " has no kernel for: " << missing;
          }
        };
        return new T(d);
      });
}

// The kernel profiler (tessera/profiler.h): every device times each kernel launched while it
// runs, and only those (the GPU plugins name their kernels: gemm, binary; the cpu plugin its
// ops: matmul, add).
void register_profiler(Device* d) {
  const std::string suite = "Device/" + d->id();
  ::testing::RegisterTest(suite.c_str(), "ProfilerTimesEveryKernel", nullptr, nullptr, __FILE__,
                          __LINE__, [d]() -> ::testing::Test* {
                            struct T : ::testing::Test {
                              Device* dev;
                              explicit T(Device* x) : dev(x) {}
                              void TestBody() override {
                                const Tensor a = Tensor::full({64, 64}, 0.5, DType::f32, dev);
                                const Tensor b = Tensor::full({64, 64}, 2.0, DType::f32, dev);
                                (void)matmul(a, b);  // before the profiler: not counted
                                Profiler prof(*dev);
                                Tensor c;
                                for (int i = 0; i < 3; ++i) c = matmul(a, b);
                                for (int i = 0; i < 2; ++i) c = add(c, a);
                                const std::vector<KernelTime> times = prof.stop();
                                EXPECT_THROW((void)prof.stop(), Error);
                                std::int64_t kernels = 0;
                                bool gemm = false;
                                for (std::size_t i = 0; i < times.size(); ++i) {
                                  EXPECT_GT(times[i].calls, 0) << times[i].name;
                                  EXPECT_GE(times[i].seconds, 0.0) << times[i].name;
                                  if (i > 0) {
                                    EXPECT_LE(times[i].seconds, times[i - 1].seconds)
                                        << "not sorted";
                                  }
                                  if (times[i].name.front() != '(') kernels += times[i].calls;
                                  if (times[i].name == "gemm" || times[i].name == "matmul")
                                    gemm = times[i].calls == 3;
                                }
                                EXPECT_EQ(kernels, 5) << format_kernel_times(times);
                                EXPECT_TRUE(gemm) << format_kernel_times(times);
                                double total = 0;
                                for (const KernelTime& t : times) total += t.seconds;
                                EXPECT_GT(total, 0.0) << format_kernel_times(times);
                                // Work after stop() is not timed, and the results are the same as
                                // unprofiled.
                                EXPECT_EQ(c.to_vector<float>()[4095], 65.0f);
                                Profiler again(*dev);
                                EXPECT_TRUE(again.stop().empty()) << "a new profiler starts empty";
                              }
                            };
                            return new T(d);
                          });
}

}  // namespace
}  // namespace tessera::conformance

int main(int argc, char** argv) {
  using namespace tessera;
  ::testing::InitGoogleTest(&argc, argv);
  // TESSERA_TEST_SEED repeats a run; otherwise every run draws fresh inputs.
  const char* seed = std::getenv("TESSERA_TEST_SEED");
  conformance::g_seed =
      seed ? static_cast<unsigned>(std::strtoul(seed, nullptr, 10)) : std::random_device{}();
  std::printf("conformance inputs: TESSERA_TEST_SEED=%u\n", conformance::g_seed);
  std::vector<Device*> devs = devices();
  if (devs.empty()) {
    std::fprintf(stderr, "no Tessera device found; run tessera-devices\n");
    return 1;
  }
  for (Device* d : devs) {
    conformance::register_cases("Ops", d, conformance::op_cases());
    conformance::register_cases("Grad", d, conformance::grad_cases());

    // --- tensor API: casts, factories, indexing ---
    conformance::register_cases("Tensor", d, conformance::tensor_cases());
    conformance::register_cases("TensorGrad", d, conformance::tensor_grad_cases());
    conformance::register_cases("Half", d, conformance::half_cases());

    // --- element-wise math, comparisons, selection ---
    conformance::register_cases("Ops", d, conformance::pointwise_cases());
    conformance::register_cases("Grad", d, conformance::pointwise_grad_cases());

    // --- reductions, normalisation, losses, optimizers ---
    conformance::register_cases("Ops", d, conformance::reduce_op_cases());
    conformance::register_cases("Grad", d, conformance::reduce_grad_cases());

    // --- nn: batched matmul, embedding, pooling, attention ---
    conformance::register_cases("Ops", d, conformance::nn_op_cases());
    conformance::register_cases("Grad", d, conformance::nn_grad_cases());

    // attention
    conformance::register_cases("Ops", d, conformance::attention_op_cases());
    conformance::register_cases("Grad", d, conformance::attention_grad_cases());

    conformance::register_out_of_memory(d);
    conformance::register_every_op(d);
    conformance::register_profiler(d);
  }
  return RUN_ALL_TESTS();
}
