// Dispatcher: runs an op call on its device, or along the fallback chain: when the call's device
// has no kernel for the op or its supports() says no, each device of the chain (TESSERA_FALLBACK,
// or set_fallback_chain()) is tried in order, with the inputs copied there and the outputs copied
// back, so the result stays on the original device; when none can run it, UnsupportedOperation.
#pragma once

#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "tessera/device.h"
#include "tessera/op.h"

namespace tessera {

// Counters of one fallback route, e.g. vulkan:0 -> cpu:0.
struct FallbackRoute {
  std::string from;
  std::string to;
  std::uint64_t ops = 0;
  std::uint64_t bytes = 0;  // bytes copied to the fallback device and back
};

// Thread-safe.
class Dispatcher {
 public:
  // The devices tried, in order, when a call's own device can not run it. Empty: no fallback.
  void set_chain(std::vector<Device*> chain);
  std::vector<Device*> chain() const;

  // Runs |call| (outputs allocated, on the device of its tensors) on |device| when it supports it;
  // otherwise, for an op that computes in f32 (op_computes_in_f32) called with f16 or bf16
  // tensors, on |device| in f32 where its kernel takes the call so (inputs cast, outputs computed
  // in f32 and cast into the call's: torch's result, rounded once); otherwise copies the tensors
  // to the first device of the chain that supports the call, runs it there and copies the outputs
  // back (warning once per op, device and reason, and counting); otherwise throws
  // UnsupportedOperation: "The operator 'max_pool2d' (f32, [64,32,26,26]) is not
  // implemented for vulkan:0 (NAME).\nSet TESSERA_FALLBACK=1 to run it on the CPU instead; this is
  // slower than running natively on vulkan." (with a chain: which devices were tried and why).
  void run(Device& device, const OpCall& call);

  std::vector<FallbackRoute> routes() const;
  void reset_stats();

 private:
  // The f32 route above; false (nothing run) where |device| can not cast or take the call in f32.
  bool run_widened(Device& device, const OpCall& call);
  void run_fallback(Device& device, Device& target, const OpCall& call, const std::string& why);
  [[noreturn]] void fail(Device& device, const OpCall& call, const std::string& why,
                         const std::vector<std::string>& tried, bool no_chain) const;

  mutable std::mutex mu_;
  std::vector<Device*> chain_;
  std::vector<FallbackRoute> routes_;
  std::set<std::string> warned_;
};

}  // namespace tessera
