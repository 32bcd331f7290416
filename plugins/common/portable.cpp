// The host half of the portable kernel layer that both GPU plugins compile (portable.h).
#include "portable.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "geometry.h"
#include "ops.h"
#include "tessera/errors.h"

namespace tessera::common {

Launch::Launch(Launcher& launcher, std::string_view kernel,
               std::initializer_list<std::int32_t> variant)
    : launcher_(launcher), kernel_(kernel) {
  if (variant.size() > variant_.size())
    throw BackendError(
        fmt::format("kernel {}: more than {} variant constants", kernel, kMaxVariants));
  std::size_t k = 0;
  for (const std::int32_t v : variant) variant_[k++] = v;
}

Launch& Launch::bind(const Tensor& t, bool write) {
  if (num_bindings_ == bindings_.size())
    throw BackendError(fmt::format("kernel {}: more than {} tensors", kernel_, kMaxBindings));
  words_[num_bindings_] = static_cast<std::int32_t>(t.offset());
  bindings_[num_bindings_++] = {&t, write};
  return *this;
}

Launch& Launch::i(std::int64_t v) {
  if (num_words_ == static_cast<std::size_t>(kMaxWords))
    throw BackendError(fmt::format("kernel {}: more than {} parameter words", kernel_, kMaxWords));
  if (v < std::numeric_limits<std::int32_t>::min() || v > std::numeric_limits<std::uint32_t>::max())
    throw BackendError(fmt::format("kernel {}: parameter {} does not fit 32 bits", kernel_, v));
  words_[kWordsOffset + num_words_++] = static_cast<std::int32_t>(static_cast<std::uint32_t>(v));
  return *this;
}

void Launch::run(std::int64_t n) {
  if (n <= 0) return;
  groups((n + group_size_ - 1) / group_size_);
}

void Launch::groups(std::int64_t count) {
  if (count <= 0) return;
  if (num_bindings_ == 0) throw BackendError(fmt::format("kernel {}: no tensors", kernel_));
  group_count_ = count;
  words_[kWordsOffset - 1] = static_cast<std::int32_t>(
      std::min<std::int64_t>(count, std::numeric_limits<std::int32_t>::max()));
  launcher_.launch(*this);
}

std::array<std::uint32_t, 2> Launch::grid() const {
  const std::int64_t x = std::min(group_count_, kMaxGroupsX);
  return {static_cast<std::uint32_t>(x), static_cast<std::uint32_t>((group_count_ + x - 1) / x)};
}

void PortableOps::add(OpId op, void (*run)(const OpCall&, Launcher&),
                      Support (*supports)(const OpCall&)) {
  for (const PortableOp& o : ops_)
    if (o.op == op) throw BackendError(fmt::format("portable op {} is added twice", op_name(op)));
  ops_.push_back({op, run, supports ? supports : gpu_supports});
}

void PortableOps::add(OpId op, void (*run)(const OpCall&, Launcher&),
                      Support (*supports_on)(const OpCall&, const GpuTraits&)) {
  add(op, run);
  ops_.back().supports_on = supports_on;
}

void throw_duplicate_kernel(OpId op) {
  throw BackendError(fmt::format(
      "{} has a kernel in the plugin and one in the portable layer; remove one", op_name(op)));
}

Support PortableKernel::supports(const OpCall& call) const {
  if (!launcher_.traits().storage16) {
    auto half = [](const Tensor& t) { return is_16bit_float(t.dtype()); };
    for (int i = 0; i < call.num_inputs; ++i)
      if (half(call.in(i)))
        return Support::no("f16 and bf16 need 16-bit storage, which this device lacks");
    for (int i = 0; i < call.num_outputs; ++i)
      if (half(call.out(i)))
        return Support::no("f16 and bf16 need 16-bit storage, which this device lacks");
  }
  return op_.supports_on ? op_.supports_on(call, launcher_.traits()) : op_.supports(call);
}

const PortableOps& portable_ops() {
  static const PortableOps table = [] {
    PortableOps t;
    add_base_ops(t);

    // --- GEMM: matmul, addmm, bmm ---
    add_gemm_ops(t);

    // --- tensor API: casts, factories, indexing ---
    add_tensor_ops(t);

    // --- element-wise math, comparisons, selection ---
    add_pointwise_ops(t);

    // --- reductions, normalisation, losses, optimizers ---
    add_reduce_ops(t);

    // --- nn: batched matmul, embedding, pooling, attention ---
    add_nn_ops(t);

    // attention
    add_attention_ops(t);

    return t;
  }();
  return table;
}

}  // namespace tessera::common
