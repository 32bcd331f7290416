// Kernel: one op on one device.
#pragma once

#include <string>
#include <utility>

#include "tessera/op.h"
#include "tessera/queue.h"

namespace tessera {

// The answer of a capability query: yes, or no with a reason a user can act on
// ("f16 is not supported", "kernel size 11 exceeds the 7 this shader handles").
struct Support {
  bool ok = true;
  std::string reason;
  static Support yes() { return {}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
  explicit operator bool() const { return ok; }
};

// A kernel is stateless from the caller's view; one instance serves every call on its device and
// may be called from several threads at once.
class Kernel {
 public:
  virtual ~Kernel() = default;

  // Whether this kernel runs |call| (op, dtypes, shapes, attributes, device limits). Called by the
  // dispatcher before every launch, by the conformance suite and by tessera-devices, so it must be
  // cheap, must not throw and must not touch tensor data. The default accepts f32 tensors only.
  virtual Support supports(const OpCall& call) const;

  // Enqueues |call| on |queue|. The call has passed supports() and the op's shape rule, and its
  // tensors follow OpCall's layout contract. May return before the device has finished. Throws
  // BackendError (or OutOfMemory for scratch memory) on failure; outputs are then unspecified.
  virtual void launch(const OpCall& call, Queue& queue) const = 0;
};

// A kernel made of two plain functions over a plugin's own context (thread pool, queue, device):
// the shape most plugins' kernels take. |Context| must outlive the kernel; |run| enqueues on
// the context's own queue, so the Queue argument of launch() is not passed on.
template <typename Context>
class FunctionKernel final : public Kernel {
 public:
  using LaunchFn = void (*)(const OpCall& call, Context& ctx);
  using SupportFn = Support (*)(const OpCall& call);
  FunctionKernel(Context& ctx, LaunchFn run, SupportFn rule)
      : ctx_(ctx), launch_(run), rule_(rule) {}
  Support supports(const OpCall& call) const override { return rule_(call); }
  void launch(const OpCall& call, Queue&) const override { launch_(call, ctx_); }

 private:
  Context& ctx_;
  LaunchFn launch_;
  SupportFn rule_;
};

}  // namespace tessera
