// GoogleMock doubles of a device and a kernel, over host memory.
#pragma once

#include <gmock/gmock.h>

#include <array>
#include <memory>

#include "tessera/device.h"
#include "tessera/host.h"

namespace tessera::testing {

class MockKernel : public Kernel {
 public:
  MOCK_METHOD(Support, supports, (const OpCall& call), (const, override));
  MOCK_METHOD(void, launch, (const OpCall& call, Queue& queue), (const, override));
};

// A device whose kernels are MockKernels installed per op; memory is host memory.
class MockDevice : public Device {
 public:
  MockDevice(std::string plugin, int index, DeviceType type = DeviceType::cpu, int score = 0)
      : allocator_(plugin + ":" + std::to_string(index)) {
    info_.name = "Mock " + plugin;
    info_.type = type;
    info_.score = score;
    bind(std::move(plugin), index);
  }
  const DeviceInfo& info() const override { return info_; }
  Allocator& allocator() override { return allocator_; }
  Queue& queue() override { return queue_; }
  const Kernel* kernel(OpId op) const override {
    return kernels_[static_cast<std::size_t>(op)].get();
  }

  // Installs a mock kernel for |op| that accepts every call and returns it for expectations.
  MockKernel& add(OpId op) {
    auto k = std::make_unique<::testing::NiceMock<MockKernel>>();
    ON_CALL(*k, supports).WillByDefault(::testing::Return(Support::yes()));
    auto& ref = *k;
    kernels_[static_cast<std::size_t>(op)] = std::move(k);
    return ref;
  }
  // Takes the kernel for |op| away again.
  void remove(OpId op) { kernels_[static_cast<std::size_t>(op)].reset(); }

 private:
  DeviceInfo info_;
  HostAllocator allocator_;
  HostQueue queue_;
  std::array<std::unique_ptr<MockKernel>, kNumOps> kernels_{};
};

}  // namespace tessera::testing
