// Shape rules of the nn group: batched matmul, embedding, average pooling.
#include <algorithm>

#include "rules.h"
#include "tessera/checked.h"

namespace tessera::rules {

void infer_bmm(const OpCall& call, std::span<TensorSpec> out) {
  const Tensor &a = call.in(0), &b = call.in(1);
  require(a.rank() >= 2 && b.rank() >= 2, call, "a {} and b {} must have rank 2 or more",
          a.shape().str(), b.shape().str());
  require(a.dtype() == b.dtype(), call, "a and b must have the same dtype, got {} and {}",
          dtype_name(a.dtype()), dtype_name(b.dtype()));
  const auto& at = call.attr<MatmulAttrs>();
  const int ra = a.rank(), rb = b.rank();
  const std::int64_t m = at.trans_a ? a.dim(ra - 1) : a.dim(ra - 2);
  const std::int64_t ka = at.trans_a ? a.dim(ra - 2) : a.dim(ra - 1);
  const std::int64_t kb = at.trans_b ? b.dim(rb - 1) : b.dim(rb - 2);
  const std::int64_t n = at.trans_b ? b.dim(rb - 2) : b.dim(rb - 1);
  require(ka == kb, call, "inner dimensions differ: {}{} @ {}{} ({} vs {})", a.shape().str(),
          at.trans_a ? "^T" : "", b.shape().str(), at.trans_b ? "^T" : "", ka, kb);
  // The batch dimensions (all but the last two) broadcast, aligned from the right.
  const int batch = std::max(ra, rb) - 2;
  Shape s;
  for (int i = 0; i < batch; ++i) {
    const int ia = ra - 2 - batch + i, ib = rb - 2 - batch + i;
    const std::int64_t da = ia >= 0 ? a.dim(ia) : 1, db = ib >= 0 ? b.dim(ib) : 1;
    require(da == db || da == 1 || db == 1, call,
            "batch dimensions of a {} and b {} can not be broadcast together ({} vs {})",
            a.shape().str(), b.shape().str(), da, db);
    s.push_back(da == 1 ? db : da);
  }
  s.push_back(m);
  s.push_back(n);
  require(checked_numel(std::span(s.begin(), s.end())).has_value(), call,
          "the result {} has more than 2^63 elements", s.str());
  out[0] = {s, matmul_out_dtype(call)};
}

DType matmul_out_dtype(const OpCall& call) {
  const DType in = call.in(0).dtype();
  const std::optional<DType> want = call.attr<MatmulAttrs>().out_dtype;
  if (!want || *want == in) return in;
  require(*want == DType::f32 && is_16bit_float(in), call,
          "out_dtype {} for {} inputs: pass f32 with f16 or bf16 inputs (their f32 sums), or "
          "leave it unset for the inputs' dtype",
          dtype_name(*want), dtype_name(in));
  return *want;
}

namespace {

void require_indices(const OpCall& call, const Tensor& indices) {
  require(indices.dtype() == DType::i32 || indices.dtype() == DType::i64, call,
          "indices must be i32 or i64, got {}", dtype_name(indices.dtype()));
  require(indices.rank() < kMaxDims, call, "indices {} must have rank below {}",
          indices.shape().str(), kMaxDims);
}

Shape rows_of(const Tensor& indices, std::int64_t d) {
  Shape s = indices.shape();
  s.push_back(d);
  return s;
}

}  // namespace

void infer_embedding(const OpCall& call, std::span<TensorSpec> out) {
  const Tensor &weight = call.in(0), &indices = call.in(1);
  require_rank(call, weight, 2, "weight");
  require_indices(call, indices);
  out[0] = {rows_of(indices, weight.dim(1)), weight.dtype()};
}

void infer_embedding_backward(const OpCall& call, std::span<TensorSpec> out) {
  const Tensor &grad = call.in(0), &indices = call.in(1);
  require_indices(call, indices);
  require(out[0].shape.rank() == 2, call, "the weight shape must be [V,D], got {}",
          out[0].shape.str());
  require_spec(call, TensorSpec{grad.shape()}, rows_of(indices, out[0].shape[1]), "grad");
  const std::int64_t pad = call.attr<EmbeddingAttrs>().padding_idx;
  require(pad >= -1 && pad < out[0].shape[0], call,
          "padding_idx {} is out of range for {} rows (-1 for none)", pad, out[0].shape[0]);
  out[0].dtype = grad.dtype();
}

namespace {

Shape avg_pool_shape(const OpCall& call, const Shape& x) {
  const auto& at = call.attr<AvgPool2dAttrs>();
  require(at.kernel_h > 0 && at.kernel_w > 0 && at.stride_h > 0 && at.stride_w > 0, call,
          "kernel and stride must be positive, got kernel {}x{}, stride {}x{}", at.kernel_h,
          at.kernel_w, at.stride_h, at.stride_w);
  require(
      at.pad_h >= 0 && at.pad_w >= 0 && 2 * at.pad_h <= at.kernel_h && 2 * at.pad_w <= at.kernel_w,
      call, "padding {}x{} must be between 0 and half the kernel {}x{}", at.pad_h, at.pad_w,
      at.kernel_h, at.kernel_w);
  require(x.rank() == 4, call, "input must be [N,C,H,W], got {}", x.str());
  const std::int64_t h = x[2] + 2 * at.pad_h, w = x[3] + 2 * at.pad_w;
  require(h >= at.kernel_h && w >= at.kernel_w, call,
          "kernel {}x{} is larger than the padded input {}x{}", at.kernel_h, at.kernel_w, h, w);
  return Shape{x[0], x[1], (h - at.kernel_h) / at.stride_h + 1,
               (w - at.kernel_w) / at.stride_w + 1};
}

}  // namespace

void infer_avg_pool2d(const OpCall& call, std::span<TensorSpec> out) {
  out[0] = {avg_pool_shape(call, call.in(0).shape()), call.in(0).dtype()};
}

void infer_avg_pool2d_backward(const OpCall& call, std::span<TensorSpec> out) {
  require(out[0].shape.rank() == 4, call, "the input shape must be [N,C,H,W], got {}",
          out[0].shape.str());
  require_spec(call, TensorSpec{call.in(0).shape()}, avg_pool_shape(call, out[0].shape), "grad");
  out[0].dtype = call.in(0).dtype();
}

namespace {

// x [N,C,H,W] pooled to y [N,C,OH,OW]: same N and C, every extent of the planes positive.
void check_adaptive(const OpCall& call, const Shape& x, const Shape& y) {
  require(x.rank() == 4 && y.rank() == 4, call,
          "input {} and output {} must be [N,C,H,W] and [N,C,OH,OW]", x.str(), y.str());
  require(x[0] == y[0] && x[1] == y[1], call, "input {} and output {} must have the same N and C",
          x.str(), y.str());
  require(x[2] > 0 && x[3] > 0 && y[2] > 0 && y[3] > 0, call,
          "input {} and output size {}x{} must have non-empty planes", x.str(), y[2], y[3]);
}

}  // namespace

void infer_adaptive_avg_pool2d(const OpCall& call, std::span<TensorSpec> out) {
  check_adaptive(call, call.in(0).shape(), out[0].shape);
  out[0].dtype = call.in(0).dtype();
}

void infer_adaptive_avg_pool2d_backward(const OpCall& call, std::span<TensorSpec> out) {
  check_adaptive(call, out[0].shape, call.in(0).shape());
  out[0].dtype = call.in(0).dtype();
}

}  // namespace tessera::rules
