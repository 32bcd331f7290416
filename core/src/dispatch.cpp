#include "tessera/dispatch.h"

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/log.h"
#include "tessera/ops.h"
#include "transfer.h"

namespace tessera {
namespace {

// The byte range of |t|'s storage that the view touches (strides are never negative).
std::pair<std::size_t, std::size_t> view_span(const Tensor& t) {
  if (t.numel() == 0) return {t.byte_offset(), 0};
  std::int64_t last = 0;
  for (int i = 0; i < t.rank(); ++i) last += (t.shape()[i] - 1) * t.strides()[i];
  return {t.byte_offset(), static_cast<std::size_t>(last + 1) * dtype_size(t.dtype())};
}

// A view on |target| with the same shape and strides as |t|, holding a copy of the storage range
// the view touches. Adds the bytes copied to |bytes|.
Tensor mirror(const Tensor& t, Device& target, bool copy_values, std::uint64_t& bytes) {
  const auto [start, length] = view_span(t);
  auto storage = std::make_shared<Storage>();
  storage->device = &target;
  storage->block = target.memory().allocate(length);
  if (copy_values && length) {
    transfer(t.device(), t.buffer(), start, target, *storage->block.buffer(), 0, length);
    bytes += length;
  }
  return Tensor(std::move(storage), t.shape(), t.strides(), 0, t.dtype());
}

bool is_16bit(const Tensor& t) {
  return t.defined() && is_16bit_float(t.dtype());
}

// Whether |call| is an op that computes in f32 (op_computes_in_f32) with an f16 or bf16 tensor.
bool widens(const OpCall& call) {
  if (!op_computes_in_f32(call.op)) return false;
  for (int i = 0; i < call.num_inputs; ++i)
    if (is_16bit(call.in(i))) return true;
  for (int i = 0; i < call.num_outputs; ++i)
    if (is_16bit(call.out(i))) return true;
  return false;
}

// |t| with its stride-0 dimensions (broadcast) narrowed to one element: each value it views,
// once. Expanding the result to |t|'s shape gives the same values.
Tensor unbroadcast(const Tensor& t) {
  Tensor v = t;
  for (int d = 0; d < t.rank(); ++d)
    if (t.strides()[d] == 0 && t.shape()[d] > 1) v = v.narrow(d, 0, 1);
  return v;
}

}  // namespace

void Dispatcher::set_chain(std::vector<Device*> chain) {
  std::lock_guard lock(mu_);
  chain_ = std::move(chain);
}

std::vector<Device*> Dispatcher::chain() const {
  std::lock_guard lock(mu_);
  return chain_;
}

void Dispatcher::run(Device& device, const OpCall& call) {
  const Support native = device.supports(call);
  if (native) {
    device.kernel(call.op)->launch(call, device.queue());
    return;
  }
  if (widens(call) && run_widened(device, call)) return;
  std::vector<std::string> tried;
  const std::vector<Device*> targets = chain();
  for (Device* target : targets) {
    if (target == &device) continue;
    const Support s = target->supports(call);
    if (s) {
      run_fallback(device, *target, call, native.reason);
      return;
    }
    tried.push_back(fmt::format("{} ({})", target->id(), s.reason));
  }
  fail(device, call, native.reason, tried, targets.empty());
}

bool Dispatcher::run_widened(Device& device, const OpCall& call) {
  OpCall wide = call;
  try {
    // Each 16-bit value is cast once: a broadcast input before its expansion.
    for (int i = 0; i < call.num_inputs; ++i) {
      const auto k = static_cast<std::size_t>(i);
      if (!is_16bit(call.in(i))) continue;
      const Tensor f = cast(unbroadcast(call.in(i)), DType::f32);
      wide.inputs[k] = f.shape() == call.in(i).shape() ? f : f.expand(call.in(i).shape());
    }
  } catch (const UnsupportedOperation&) {
    return false;  // the device can not cast (16-bit storage): the chain, or the error, for |call|
  }
  for (int i = 0; i < call.num_outputs; ++i) {
    const auto k = static_cast<std::size_t>(i);
    if (is_16bit(call.out(i)))
      wide.outputs[k] = Tensor::empty(call.out(i).shape(), DType::f32, &device);
  }
  if (!device.supports(wide)) return false;
  device.kernel(call.op)->launch(wide, device.queue());
  for (int i = 0; i < call.num_outputs; ++i) {
    const auto k = static_cast<std::size_t>(i);
    if (!is_16bit(call.out(i))) continue;
    OpCall c = make_call(OpId::cast, {wide.outputs[k]});
    c.outputs[0] = call.outputs[k];
    run_op(c);
  }
  return true;
}

void Dispatcher::run_fallback(Device& device, Device& target, const OpCall& call,
                              const std::string& why) {
  const std::string_view name = op_name(call.op);
  {
    std::lock_guard lock(mu_);
    if (warned_.insert(fmt::format("{}|{}|{}", name, device.id(), why)).second)
      log().warn(
          "The operator '{}' ({}) is {} on {} ({}); running it on {} instead (TESSERA_FALLBACK). "
          "This is slower than running natively; later calls are counted, not logged.",
          name, call.describe(), why == "not implemented" ? "not implemented" : "not supported",
          device.id(), why == "not implemented" ? device.info().name : why, target.id());
  }
  std::uint64_t bytes = 0;
  OpCall moved = call;
  for (int i = 0; i < call.num_inputs; ++i)
    moved.inputs[static_cast<std::size_t>(i)] = mirror(call.in(i), target, true, bytes);
  // A strided output keeps the values between its elements: they are mirrored too.
  const bool keep = op_def(call.op).inplace || op_def(call.op).strided_outputs;
  for (int i = 0; i < call.num_outputs; ++i)
    moved.outputs[static_cast<std::size_t>(i)] = mirror(call.out(i), target, keep, bytes);

  target.kernel(call.op)->launch(moved, target.queue());

  // The whole range each output spans goes back: for a strided output (strided_outputs) the
  // elements between its own were mirrored with their values and come back unchanged.
  for (int i = 0; i < call.num_outputs; ++i) {
    const Tensor& src = moved.out(i);
    const Tensor& dst = call.out(i);
    const auto [start, length] = view_span(dst);
    if (length) transfer(target, src.buffer(), 0, device, dst.buffer(), start, length);
    bytes += length;
  }

  std::lock_guard lock(mu_);
  for (FallbackRoute& r : routes_)
    if (r.from == device.id() && r.to == target.id()) {
      ++r.ops;
      r.bytes += bytes;
      return;
    }
  routes_.push_back({device.id(), target.id(), 1, bytes});
}

void Dispatcher::fail(Device& device, const OpCall& call, const std::string& why,
                      const std::vector<std::string>& tried, bool no_chain) const {
  const std::string head =
      why == "not implemented"
          ? fmt::format("The operator '{}' ({}) is not implemented for {} ({}).", op_name(call.op),
                        call.describe(), device.id(), device.info().name)
          : fmt::format("The operator '{}' ({}) is not supported on {} ({}): {}.", op_name(call.op),
                        call.describe(), device.id(), device.info().name, why);
  if (no_chain)
    throw UnsupportedOperation(fmt::format(
        "{}\nSet TESSERA_FALLBACK=1 to run it on the CPU instead; this is slower than running "
        "natively on {}.",
        head, device.plugin_name()));
  if (tried.empty())
    throw UnsupportedOperation(fmt::format(
        "{}\nThe fallback chain has no other device; add one to TESSERA_FALLBACK.", head));
  throw UnsupportedOperation(fmt::format(
      "{}\nNo device of the fallback chain can run it either: {}.", head, fmt::join(tried, "; ")));
}

std::vector<FallbackRoute> Dispatcher::routes() const {
  std::lock_guard lock(mu_);
  return routes_;
}

void Dispatcher::reset_stats() {
  std::lock_guard lock(mu_);
  routes_.clear();
  warned_.clear();
}

}  // namespace tessera
