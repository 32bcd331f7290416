// A well-formed plugin with one host-memory device and no kernels; TEST_PLUGIN_NAME names it.
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
#ifdef TEST_CREATE_THROWS
  throw std::runtime_error("boom: the device driver refused to initialise");
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
