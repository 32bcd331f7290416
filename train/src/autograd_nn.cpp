// Gradient rules of the nn group: batched matmul, embedding, average pooling.
#include <fmt/format.h>

#include "autograd_nn.h"
#include "tessera/errors.h"
#include "tessera/ops.h"

namespace tessera::train {
namespace {

using Grads = std::vector<Tensor>;

bool wants(const Variable& v) {
  return v.defined() && v.requires_grad();
}

}  // namespace

Variable bmm(const Variable& a, const Variable& b, bool ta, bool tb) {
  // Autocast (autocast.h) where the batch dimensions match: a broadcast one's gradient is summed
  // over it, which the low dtypes do not do yet.
  if (const auto lo = autocast_for(a, b)) {
    const Shape &as = a.shape(), &bs = b.shape();
    bool same = as.rank() == bs.rank();
    for (int d = 0; same && d + 2 < as.rank(); ++d) same = as[d] == bs[d];
    if (same) return autocast_product(a, b, Variable(), ta, tb, *lo);
  }
  return make_result(
      tessera::bmm(a.value(), b.value(), ta, tb), {a, b}, [a, b, ta, tb](const Tensor& g) -> Grads {
        // The 2-D rules batched, then summed over the batch dimensions that
        // broadcast.
        Tensor ga, gb;
        if (wants(a))
          ga = sum_to(
              ta ? tessera::bmm(b.value(), g, tb, true) : tessera::bmm(g, b.value(), false, !tb),
              a.shape());
        if (wants(b))
          gb = sum_to(
              tb ? tessera::bmm(g, a.value(), true, ta) : tessera::bmm(a.value(), g, !ta, false),
              b.shape());
        return {ga, gb};
      });
}

Variable matmul_nd(const Variable& a, const Variable& b, bool ta, bool tb) {
  const int ra = a.shape().rank(), rb = b.shape().rank();
  if (ra == 0 || rb == 0)
    throw InvalidArgument(
        fmt::format("matmul: both arguments need at least one dimension, got {} and {}",
                    a.shape().str(), b.shape().str()));
  if (ra == 1 || rb == 1) {
    const Variable a2 = ra == 1 ? reshape(a, {1, a.shape()[0]}) : a;
    const Variable b2 = rb == 1 ? reshape(b, {b.shape()[0], 1}) : b;
    const Variable y = matmul(a2, b2, ra == 1 ? false : ta, rb == 1 ? false : tb);
    Shape s;
    const int r = y.shape().rank();
    for (int d = 0; d < r; ++d)
      if (!(ra == 1 && d == r - 2) && !(rb == 1 && d == r - 1)) s.push_back(y.shape()[d]);
    return reshape(y, s);
  }
  return bmm(a, b, ta, tb);
}

Variable embedding(const Variable& weight, const Tensor& indices,
                   std::optional<std::int64_t> padding_idx) {
  const std::int64_t v = weight.shape().rank() == 2 ? weight.shape()[0] : 0;
  std::int64_t pad = -1;
  if (padding_idx) {
    if (*padding_idx < -v || *padding_idx >= v)
      throw InvalidArgument(fmt::format(
          "embedding: padding_idx {} is out of range for a weight of {} rows (-{} to {})",
          *padding_idx, v, v, v - 1));
    pad = *padding_idx < 0 ? *padding_idx + v : *padding_idx;
  }
  return make_result(tessera::embedding(weight.value(), indices), {weight},
                     [indices, v, pad](const Tensor& g) -> Grads {
                       return {tessera::embedding_backward(g, indices, v, pad)};
                     });
}

Variable avg_pool2d(const Variable& x, AvgPool2dAttrs attrs) {
  return make_result(tessera::avg_pool2d(x.value(), attrs), {x},
                     [s = x.shape(), attrs](const Tensor& g) -> Grads {
                       return {tessera::avg_pool2d_backward(g, s, attrs)};
                     });
}

Variable adaptive_avg_pool2d(const Variable& x, std::int64_t out_h, std::int64_t out_w) {
  return make_result(tessera::adaptive_avg_pool2d(x.value(), out_h, out_w), {x},
                     [s = x.shape()](const Tensor& g) -> Grads {
                       return {tessera::adaptive_avg_pool2d_backward(g, s)};
                     });
}

}  // namespace tessera::train
