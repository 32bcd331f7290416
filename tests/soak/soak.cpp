// Soak: a long stream of mixed ops with random shapes, host reads, synchronisations and frees on
// every device the runtime finds, each result compared with the same op on cpu:0. A watchdog
// thread turns a hang (a device or driver that stops making progress) into a failure that names
// the device, the step and the op in flight, instead of a test run that never ends.
//
//   TESSERA_SOAK_STEPS          steps per device (default 5000)
//   TESSERA_SOAK_STALL_SECONDS  no progress for this long is a hang (default 120)
//   TESSERA_TEST_SEED           repeats a run (printed at the start)
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "tessera/device.h"
#include "tessera/errors.h"
#include "tessera/ops.h"
#include "tessera/runtime.h"
#include "tessera/tensor.h"

namespace tessera {
namespace {

unsigned g_seed = 0;

long env_long(const char* name, long fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n <= 0) {
    std::fprintf(stderr, "%s='%s' is not a positive whole number\n", name, v);
    std::exit(2);
  }
  return n;
}

// Ends the process with a message when the step counter has not moved for |stall|. The test
// thread describes what it is about to do before each call that may wait for the device.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds stall) : stall_(stall), thread_([this] { watch(); }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void step(std::string what) {
    std::lock_guard lock(mu_);
    what_ = std::move(what);
    ++steps_;
  }

 private:
  void watch() {
    std::unique_lock lock(mu_);
    std::uint64_t seen = steps_;
    while (!done_) {
      if (cv_.wait_for(lock, stall_, [&] { return done_ || steps_ != seen; })) {
        seen = steps_;
        continue;
      }
      std::fprintf(stderr,
                   "\nsoak: HANG: no progress for %lld s, stuck in: %s (TESSERA_TEST_SEED=%u). "
                   "The device or its driver stopped completing work.\n",
                   static_cast<long long>(stall_.count()), what_.c_str(), g_seed);
      std::fflush(stderr);
      std::_Exit(3);
    }
  }

  std::chrono::seconds stall_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string what_ = "start";
  std::uint64_t steps_ = 0;
  bool done_ = false;
  std::thread thread_;
};

double normalised_error(const std::vector<float>& out, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(out[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(num) / (std::sqrt(den) + 1e-30);
}

// One step's inputs live on both devices: |dev| (under test) and |ref| (cpu:0).
struct Pair {
  Tensor dev, ref;
};

class Soak {
 public:
  Soak(Device& dev, Device& ref, std::uint64_t seed, Watchdog& dog)
      : dev_(dev), ref_(ref), rng_(seed), dog_(dog) {}

  void run(long steps) {
    for (long s = 0; s < steps; ++s) {
      step_ = s;
      const int kind = pick(0, 9);
      Pair out;
      switch (kind) {
        case 0:
        case 1:
          out = matmul_step();
          break;
        case 2:
          out = binary_step();
          break;
        case 3:
          out = unary_step();
          break;
        case 4:
          out = reduce_step();
          break;
        case 5:
          out = softmax_step();
          break;
        case 6:
          out = conv_step();
          break;
        case 7:
          out = pool_step();
          break;
        case 8:
          out = view_copy_step();
          break;
        default:
          out = chain_step();
          break;
      }
      // Keep a window of results alive and free the oldest: exercises deferred frees of memory
      // that queued work may still use.
      live_.push_back(out);
      if (live_.size() > 24) live_.pop_front();
      const int check = pick(0, 7);
      if (check <= 1) compare(out);  // a host read
      if (check == 2) {
        dog_.step(fmt::format("{} step {}: synchronize()", dev_.id(), s));
        dev_.queue().synchronize();
      }
      if (HasFailure()) return;
    }
    dog_.step(fmt::format("{}: final synchronize()", dev_.id()));
    dev_.queue().synchronize();
    for (const Pair& p : live_) compare(p);
  }

 private:
  static bool HasFailure() { return ::testing::Test::HasFailure(); }

  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  std::int64_t extent() {
    static constexpr std::int64_t kOdd[] = {1, 3, 7, 17, 33, 64, 127};
    return pick(0, 3) == 0 ? kOdd[pick(0, 6)] : pick(1, 96);
  }

  Pair upload(const Shape& shape, float lo = -1.0f, float hi = 1.0f) {
    std::vector<float> v(static_cast<std::size_t>(shape.numel()));
    std::uniform_real_distribution<float> d(lo, hi);
    for (float& x : v) x = d(rng_);
    dog_.step(fmt::format("{} step {}: upload {}", dev_.id(), step_, shape.str()));
    return {Tensor::from(v, shape, &dev_), Tensor::from(v, shape, &ref_)};
  }

  template <typename F>
  Pair apply(const std::string& what, F f) {
    dog_.step(fmt::format("{} step {}: {}", dev_.id(), step_, what));
    Pair p{f(true), f(false)};
    what_ = what;
    return p;
  }

  void compare(const Pair& p) {
    dog_.step(fmt::format("{} step {}: reading back {} {}", dev_.id(), step_, what_,
                          p.dev.shape().str()));
    const auto out = p.dev.to_vector<float>();
    const auto ref = p.ref.to_vector<float>();
    ASSERT_EQ(out.size(), ref.size());
    const double err = normalised_error(out, ref);
    EXPECT_LT(err, 1e-4) << dev_.id() << " step " << step_ << ": " << what_ << " "
                         << p.dev.shape().str()
                         << " differs from cpu:0 (TESSERA_TEST_SEED=" << g_seed << ")";
  }

  Pair matmul_step() {
    const std::int64_t m = extent(), k = extent(), n = extent();
    const bool ta = pick(0, 1), tb = pick(0, 1);
    Pair a = upload(ta ? Shape{k, m} : Shape{m, k}), b = upload(tb ? Shape{n, k} : Shape{k, n});
    return apply(fmt::format("matmul [{},{}]x[{},{}] ta={} tb={}", m, k, k, n, ta, tb),
                 [&](bool d) { return matmul(d ? a.dev : a.ref, d ? b.dev : b.ref, ta, tb); });
  }

  Pair binary_step() {
    const std::int64_t r = extent(), c = extent();
    Pair a = upload({r, c}), b = upload(pick(0, 1) ? Shape{r, c} : Shape{1, c}, 0.5f, 2.0f);
    const int op = pick(0, 3);
    static constexpr const char* kNames[] = {"add", "sub", "mul", "div"};
    return apply(fmt::format("{} [{},{}]", kNames[op], r, c), [&](bool d) {
      const Tensor& x = d ? a.dev : a.ref;
      const Tensor& y = d ? b.dev : b.ref;
      switch (op) {
        case 0:
          return add(x, y);
        case 1:
          return sub(x, y);
        case 2:
          return mul(x, y);
        default:
          return div(x, y);
      }
    });
  }

  Pair unary_step() {
    Pair a = upload({extent(), extent()});
    const int op = pick(0, 4);
    static constexpr const char* kNames[] = {"relu", "exp", "tanh", "sigmoid", "mul_scalar"};
    return apply(fmt::format("{} {}", kNames[op], a.dev.shape().str()), [&](bool d) {
      const Tensor& x = d ? a.dev : a.ref;
      switch (op) {
        case 0:
          return relu(x);
        case 1:
          return exp(x);
        case 2:
          return tanh(x);
        case 3:
          return sigmoid(x);
        default:
          return mul_scalar(x, 0.37);
      }
    });
  }

  Pair reduce_step() {
    Pair a = upload({extent(), extent(), pick(1, 9)});
    const int axis = pick(0, 2), op = pick(0, 2);
    static constexpr const char* kNames[] = {"sum", "mean", "max"};
    return apply(fmt::format("{} axis {} of {}", kNames[op], axis, a.dev.shape().str()),
                 [&](bool d) {
                   const Tensor& x = d ? a.dev : a.ref;
                   return op == 0 ? sum(x, axis) : op == 1 ? mean(x, axis) : max(x, axis);
                 });
  }

  Pair softmax_step() {
    Pair a = upload({extent(), extent()}, -4.0f, 4.0f);
    const bool log_form = pick(0, 1);
    return apply(fmt::format("{} {}", log_form ? "log_softmax" : "softmax", a.dev.shape().str()),
                 [&](bool d) {
                   const Tensor& x = d ? a.dev : a.ref;
                   return log_form ? log_softmax(x) : softmax(x);
                 });
  }

  Pair conv_step() {
    const std::int64_t n = pick(1, 4), c = pick(1, 6), o = pick(1, 8), h = pick(3, 20),
                       w = pick(3, 20), kh = pick(1, 3), kw = pick(1, 3);
    Conv2dAttrs at;
    at.stride_h = pick(1, 2);
    at.stride_w = pick(1, 2);
    at.pad_h = pick(0, 1);
    at.pad_w = pick(0, 1);
    Pair x = upload({n, c, h, w}), k = upload({o, c, kh, kw});
    return apply(fmt::format("conv2d x{} w{} stride {} pad {}", x.dev.shape().str(),
                             k.dev.shape().str(), at.stride_h, at.pad_h),
                 [&](bool d) { return conv2d(d ? x.dev : x.ref, d ? k.dev : k.ref, at); });
  }

  Pair pool_step() {
    Pair x = upload({pick(1, 4), pick(1, 8), pick(2, 30), pick(2, 30)});
    return apply(fmt::format("max_pool2d {}", x.dev.shape().str()),
                 [&](bool d) { return max_pool2d(d ? x.dev : x.ref).first; });
  }

  Pair view_copy_step() {
    Pair a = upload({extent(), extent()});
    return apply(fmt::format("copy of the transpose of {}", a.dev.shape().str()),
                 [&](bool d) { return (d ? a.dev : a.ref).t().contiguous(); });
  }

  // A few dependent ops on earlier results, so that work queues up behind work. relu comes
  // first: relu(x * 0.5 + 1) on a log_softmax's outputs (about -2) left one element of 1.3e-4 made
  // by cancellation, whose last-bit difference from cpu:0 was a normalised error of 1.8e-3
  // (TESSERA_TEST_SEED=2708200234); relu(x) * 0.5 + 1 is at least 1, so the check stays 1e-4.
  Pair chain_step() {
    if (live_.empty()) return unary_step();
    const Pair& base = live_[static_cast<std::size_t>(pick(0, static_cast<int>(live_.size()) - 1))];
    return apply(fmt::format("relu(x) * 0.5 + 1 chain on {}", base.dev.shape().str()), [&](bool d) {
      const Tensor& x = d ? base.dev : base.ref;
      return add_scalar(mul_scalar(relu(x), 0.5), 1.0);
    });
  }

  Device& dev_;
  Device& ref_;
  std::mt19937_64 rng_;
  Watchdog& dog_;
  long step_ = 0;
  std::string what_;
  std::deque<Pair> live_;
};

class SoakTest : public ::testing::Test {
 public:
  explicit SoakTest(Device& d) : device_(d) {}
  void TestBody() override {
    Device& ref = device("cpu:0");
    const long steps = env_long("TESSERA_SOAK_STEPS", 5000);
    Watchdog dog(std::chrono::seconds(env_long("TESSERA_SOAK_STALL_SECONDS", 120)));
    Soak soak(device_, ref, g_seed ^ std::hash<std::string>{}(device_.id()), dog);
    soak.run(steps);
  }

 private:
  Device& device_;
};

// The watchdog itself: a run that stops stepping ends with the HANG message and exit status 3.
TEST(SoakWatchdog, EndsAStalledRunWithTheStepInFlight) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        Watchdog dog(std::chrono::seconds(1));
        dog.step("opencl:0 step 7: matmul [3,4]x[4,5]");
        std::this_thread::sleep_for(std::chrono::seconds(30));
      },
      ::testing::ExitedWithCode(3), "HANG: no progress for 1 s, stuck in: opencl:0 step 7: matmul");
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  using namespace tessera;
  ::testing::InitGoogleTest(&argc, argv);
  const char* seed = std::getenv("TESSERA_TEST_SEED");
  g_seed = seed ? static_cast<unsigned>(std::strtoul(seed, nullptr, 10)) : std::random_device{}();
  std::printf("soak inputs: TESSERA_TEST_SEED=%u\n", g_seed);
  for (Device* d : devices()) {
    const std::string suite = "Soak/" + d->id();
    ::testing::RegisterTest(suite.c_str(), "MixedOpsReadsAndSyncsNeverHang", nullptr, nullptr,
                            __FILE__, __LINE__,
                            [d]() -> ::testing::Test* { return new SoakTest(*d); });
  }
  return RUN_ALL_TESTS();
}
