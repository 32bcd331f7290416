// A minimal Tessera plugin: one device on host memory that implements only add, relu and fill.
// Every other op reaches it through the fallback chain (TESSERA_FALLBACK=1) or fails with
// UnsupportedOperation. Copy this file to start a new backend.
#include <array>
#include <memory>

#include "tessera/host.h"
#include "tessera/plugin.h"

namespace example {

using namespace tessera;

// relu on contiguous f32 tensors.
class Relu final : public Kernel {
 public:
  void launch(const OpCall& call, Queue&) const override {
    const float* x = call.in(0).host_data<float>();
    float* y = call.out(0).host_data<float>();
    for (std::int64_t i = 0; i < call.out(0).numel(); ++i) y[i] = x[i] > 0 ? x[i] : 0.0f;
  }
};

// add of two same-shape contiguous f32 tensors; says no to broadcasting, so the fallback chain
// takes those calls.
class Add final : public Kernel {
 public:
  Support supports(const OpCall& call) const override {
    if (call.in(0).dtype() != DType::f32) return Support::no("f32 only");
    if (!call.in(0).is_contiguous() || !call.in(1).is_contiguous())
      return Support::no("broadcasting is not implemented");
    return Support::yes();
  }
  void launch(const OpCall& call, Queue&) const override {
    const float* a = call.in(0).host_data<float>();
    const float* b = call.in(1).host_data<float>();
    float* y = call.out(0).host_data<float>();
    for (std::int64_t i = 0; i < call.out(0).numel(); ++i) y[i] = a[i] + b[i];
  }
};

class Fill final : public Kernel {
 public:
  Support supports(const OpCall& call) const override {
    return call.out(0).dtype() == DType::f32 ? Support::yes() : Support::no("f32 only");
  }
  void launch(const OpCall& call, Queue&) const override {
    float* y = call.out(0).host_data<float>();
    for (std::int64_t i = 0; i < call.out(0).numel(); ++i)
      y[i] = static_cast<float>(call.attr<ScalarAttrs>().value);
  }
};

class ExampleDevice final : public Device {
 public:
  ExampleDevice() {
    info_.name = "Example device (host memory)";
    info_.type = DeviceType::other;
    info_.vendor = "Tessera examples";
    info_.driver = "example 1.0";
    info_.compute_units = 1;
    kernels_[static_cast<std::size_t>(OpId::relu)] = std::make_unique<Relu>();
    kernels_[static_cast<std::size_t>(OpId::add)] = std::make_unique<Add>();
    kernels_[static_cast<std::size_t>(OpId::fill)] = std::make_unique<Fill>();
  }
  const DeviceInfo& info() const override { return info_; }
  Allocator& allocator() override { return allocator_; }
  Queue& queue() override { return queue_; }
  const Kernel* kernel(OpId op) const override {
    return kernels_[static_cast<std::size_t>(op)].get();
  }

 private:
  DeviceInfo info_;
  HostAllocator allocator_{"example:0"};
  HostQueue queue_;
  std::array<std::unique_ptr<Kernel>, kNumOps> kernels_{};
};

class ExampleBackend final : public Backend {
 public:
  std::vector<Device*> devices() override { return {&device_}; }

 private:
  ExampleDevice device_;
};

std::unique_ptr<Backend> create_backend() {
  return std::make_unique<ExampleBackend>();
}

}  // namespace example

TESSERA_DEFINE_PLUGIN("example", "1.0.0", example::create_backend)
