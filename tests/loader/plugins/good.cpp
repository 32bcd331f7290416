// A well-formed plugin with one host-memory device and no kernels; TEST_PLUGIN_NAME names it.
// TEST_CREATE_THROWS, TEST_CREATE_CONFIG_ERROR and TEST_CREATE_ABORTS break its create.
#include <cstdlib>

#include "tessera/errors.h"
#include "tessera/host.h"
#include "tessera/plugin.h"

namespace {

class TestDevice final : public tessera::Device {
 public:
  TestDevice() {
    info_.name = "Test device";
    info_.type = tessera::DeviceType::other;
  }
  const tessera::DeviceInfo& info() const override { return info_; }
  tessera::Allocator& allocator() override { return allocator_; }
  tessera::Queue& queue() override { return queue_; }
  const tessera::Kernel* kernel(tessera::OpId) const override { return nullptr; }

 private:
  tessera::DeviceInfo info_;
  tessera::HostAllocator allocator_{"test"};
  tessera::HostQueue queue_;
};

class TestBackend final : public tessera::Backend {
 public:
  std::vector<tessera::Device*> devices() override {
#ifdef TEST_NO_DEVICES
    return {};
#else
    return {&device_};
#endif
  }
  std::string status() const override {
#ifdef TEST_NO_DEVICES
    return "no test device found";
#else
    return {};
#endif
  }

 private:
  TestDevice device_;
};

std::unique_ptr<tessera::Backend> create() {
#if defined(TEST_CREATE_THROWS)
  throw std::runtime_error("boom: the device driver refused to initialise");
#elif defined(TEST_CREATE_CONFIG_ERROR)
  throw tessera::ConfigError(
      "TESSERA_TEST_LEVEL='eleven' is not valid: give a whole number from 1 to 10");
#elif defined(TEST_CREATE_ABORTS)
  std::abort();  // as a driver that kills the process in its constructor does
#else
  return std::make_unique<TestBackend>();
#endif
}

}  // namespace

#ifdef TEST_MISSING_DEPENDENCY
extern "C" int tessera_test_dependency();
[[maybe_unused]] static int use_dependency = tessera_test_dependency();
#endif

TESSERA_DEFINE_PLUGIN(TEST_PLUGIN_NAME, "9.9.9", create)
