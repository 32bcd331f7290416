// Gradients of the tensor API's views and copies (autograd.h).
#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/ops.h"
#include "tessera/train/autograd.h"

namespace tessera::train {
namespace {

using Grads = std::vector<Tensor>;

// The gradient of x for the view |view_of|(x): |g| written into that view of zeros shaped as x.
template <typename F>
Tensor into_view(const Shape& shape, const Tensor& g, F view_of) {
  Tensor gx = zeros(shape, g.dtype(), &g.device());
  copy_(view_of(gx), g);
  return gx;
}

// A differentiable view |f| of x: its gradient writes g into the same view of zeros.
template <typename F>
Variable view_op(const Variable& x, F f) {
  return make_result(f(x.value()), {x},
                     [s = x.shape(), f](const Tensor& g) -> Grads { return {into_view(s, g, f)}; });
}

// Gradients that only change the shape back (unsqueeze, squeeze, flatten).
Variable reshaped(const Variable& x, Tensor y) {
  return make_result(std::move(y), {x},
                     [s = x.shape()](const Tensor& g) -> Grads { return {g.reshape(s)}; });
}

}  // namespace

Variable narrow(const Variable& x, int dim, std::int64_t start, std::int64_t length) {
  return view_op(x, [=](const Tensor& t) { return t.narrow(dim, start, length); });
}

Variable slice(const Variable& x, int dim, std::int64_t start, std::int64_t end,
               std::int64_t step) {
  return view_op(x, [=](const Tensor& t) { return t.slice(dim, start, end, step); });
}

Variable select(const Variable& x, int dim, std::int64_t index) {
  return view_op(x, [=](const Tensor& t) { return t.select(dim, index); });
}

Variable permute(const Variable& x, const std::vector<int>& dims) {
  const Tensor y = x.value().permute(dims);
  // The inverse permutation: dimension dims[i] of x is dimension i of y.
  std::vector<int> inverse(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const int d = dims[i] < 0 ? dims[i] + x.value().rank() : dims[i];
    inverse[static_cast<std::size_t>(d)] = static_cast<int>(i);
  }
  return make_result(y, {x}, [inverse](const Tensor& g) -> Grads { return {g.permute(inverse)}; });
}

Variable unsqueeze(const Variable& x, int dim) {
  return reshaped(x, x.value().unsqueeze(dim));
}

Variable squeeze(const Variable& x) {
  return reshaped(x, x.value().squeeze());
}

Variable squeeze(const Variable& x, int dim) {
  return reshaped(x, x.value().squeeze(dim));
}

Variable flatten(const Variable& x, int start_dim, int end_dim) {
  return reshaped(x, x.value().flatten(start_dim, end_dim));
}

Variable expand(const Variable& x, const Shape& shape) {
  return make_result(x.value().expand(shape), {x},
                     [s = x.shape()](const Tensor& g) -> Grads { return {sum_to(g, s)}; });
}

Variable cat(const std::vector<Variable>& xs, int dim) {
  std::vector<Tensor> values;
  for (const Variable& v : xs) values.push_back(v.value());
  Tensor y = tessera::cat(values, dim);
  const int d = dim < 0 ? dim + y.rank() : dim;
  return make_result(y, xs, [values, d](const Tensor& g) -> Grads {
    Grads grads;
    std::int64_t at = 0;
    for (const Tensor& v : values) {
      if (v.rank() == 1 && v.numel() == 0 && g.rank() != 1) {  // skipped by cat, as torch does
        grads.push_back(zeros(v.shape(), g.dtype(), &g.device()));
        continue;
      }
      grads.push_back(g.narrow(d, at, v.dim(d)));
      at += v.dim(d);
    }
    return grads;
  });
}

Variable stack(const std::vector<Variable>& xs, int dim) {
  if (xs.empty()) throw InvalidArgument("stack: expects a non-empty list of Variables");
  const int rank = xs.front().value().rank();
  const int d = dim < 0 ? dim + rank + 1 : dim;
  std::vector<Variable> parts;
  for (const Variable& v : xs) parts.push_back(unsqueeze(v, d));
  return cat(parts, d);
}

std::vector<Variable> split(const Variable& x, std::int64_t size, int dim) {
  const std::vector<Tensor> pieces = x.value().split(size, dim);
  const int d = dim < 0 ? dim + x.value().rank() : dim;
  std::vector<Variable> out;
  std::int64_t at = 0;
  for (const Tensor& p : pieces) {
    out.push_back(narrow(x, d, at, p.dim(d)));
    at += p.dim(d);
  }
  return out;
}

std::vector<Variable> chunk(const Variable& x, std::int64_t chunks, int dim) {
  const std::vector<Tensor> pieces = x.value().chunk(chunks, dim);
  const int d = dim < 0 ? dim + x.value().rank() : dim;
  return split(x, pieces.front().dim(d), d);
}

Variable index_select(const Variable& x, int dim, const Tensor& index) {
  const int d = x.value().shape().normalize_axis(dim);
  return make_result(tessera::index_select(x.value(), d, index), {x},
                     [index, d, n = x.value().dim(d)](const Tensor& g) -> Grads {
                       return {tessera::index_select_backward(g, d, index, n)};
                     });
}

}  // namespace tessera::train
