// Tensor views as torch gives them: narrow, slice, select, permute, transpose, unsqueeze, squeeze,
// flatten, view/reshape, split, chunk. Each shares the storage and only changes shape, strides and
// offset.
#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "tessera/checked.h"
#include "tessera/errors.h"
#include "tessera/ops.h"
#include "tessera/tensor.h"

namespace tessera {
namespace {

template <typename... Args>
[[noreturn]] void fail(std::string_view call, const Shape& shape, fmt::format_string<Args...> f,
                       Args&&... args) {
  throw InvalidArgument(fmt::format("{}: {} (tensor {})", call,
                                    fmt::format(f, std::forward<Args>(args)...), shape.str()));
}

// |dim| in [-count, count) made non-negative; |count| is the rank (rank + 1 where a dimension is
// inserted).
int wrap_dim(std::string_view call, const Shape& shape, int dim, int count) {
  if (dim < -count || dim >= count || count == 0)
    fail(call, shape, "dim {} is out of range (expected {} to {})", dim, -count, count - 1);
  return dim < 0 ? dim + count : dim;
}

// The strides that give |target| the same elements as (shape, strides) in row-major order, or
// nullopt when no strides do (torch's computeStride): runs of dimensions laid out as one block
// may be split and merged freely.
std::optional<Strides> view_strides(const Shape& shape, const Strides& strides,
                                    const Shape& target) {
  if (shape.rank() == 0 || shape.numel() == 0) return contiguous_strides(target);
  Strides out = target;
  int view_d = target.rank() - 1;
  std::int64_t base = strides[shape.rank() - 1];
  std::int64_t tensor_numel = 1, view_numel = 1;
  for (int d = shape.rank() - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || target[view_d] == 1)) {
        out[view_d] = view_numel * base;
        view_numel *= target[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        base = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

// |shape| with a -1 extent worked out from |numel|; throws naming |call|.
Shape infer_shape(std::string_view call, const Shape& from, const Shape& shape,
                  std::int64_t numel) {
  Shape target = shape;
  int infer = -1;
  std::int64_t known = 1;
  for (int i = 0; i < target.rank(); ++i) {
    if (target[i] == -1) {
      if (infer >= 0) fail(call, from, "only one extent of {} may be -1", shape.str());
      infer = i;
    } else if (target[i] < 0) {
      fail(call, from, "invalid shape {}", shape.str());
    } else {
      known = mul_or_throw(known, target[i], fmt::format("{}: the size of {}", call, shape.str()));
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      fail(call, from, "shape {} is invalid for {} elements", shape.str(), numel);
    target[infer] = numel / known;
  }
  if (target.numel() != numel)
    fail(call, from, "shape {} is invalid for {} elements", shape.str(), numel);
  return target;
}

}  // namespace

Tensor Tensor::transpose(int dim0, int dim1) const {
  const int a = wrap_dim("transpose", shape_, dim0, rank());
  const int b = wrap_dim("transpose", shape_, dim1, rank());
  Tensor v = *this;
  std::swap(v.shape_[a], v.shape_[b]);
  std::swap(v.strides_[a], v.strides_[b]);
  return v;
}

Tensor Tensor::narrow(int dim, std::int64_t start, std::int64_t length) const {
  const int d = wrap_dim("narrow", shape_, dim, rank());
  const std::int64_t size = shape_[d];
  if (start < -size || start > size)
    fail("narrow", shape_, "start {} is out of range for dimension {} of size {}", start, d, size);
  const std::int64_t s = start < 0 ? start + size : start;
  if (length < 0 || length > size - s)
    fail("narrow", shape_, "start {} + length {} exceeds dimension {} of size {}", s, length, d,
         size);
  Tensor v = *this;
  v.shape_[d] = length;
  v.offset_ += s * strides_[d];
  return v;
}

Tensor Tensor::slice(int dim, std::int64_t start, std::int64_t end, std::int64_t step) const {
  const int d = wrap_dim("slice", shape_, dim, rank());
  if (step <= 0) fail("slice", shape_, "step must be positive, got {}", step);
  const std::int64_t size = shape_[d];
  auto clamp = [size](std::int64_t i) {
    if (i < 0) i = i < -size ? 0 : i + size;
    return std::min(i, size);
  };
  const std::int64_t s = clamp(start), e = std::max(clamp(end), s);
  Tensor v = *this;
  v.shape_[d] = (e - s + step - 1) / step;
  v.offset_ += s * strides_[d];
  v.strides_[d] = mul_or_throw(strides_[d], step, "slice: the stride");
  return v;
}

Tensor Tensor::select(int dim, std::int64_t index) const {
  const int d = wrap_dim("select", shape_, dim, rank());
  const std::int64_t size = shape_[d];
  if (index < -size || index >= size)
    fail("select", shape_, "index {} is out of range for dimension {} of size {}", index, d, size);
  const std::int64_t i = index < 0 ? index + size : index;
  Shape s;
  Strides st;
  for (int k = 0; k < rank(); ++k)
    if (k != d) {
      s.push_back(shape_[k]);
      st.push_back(strides_[k]);
    }
  return Tensor(storage_, s, st, offset_ + i * strides_[d], dtype_);
}

Tensor Tensor::permute(std::span<const int> dims) const {
  if (static_cast<int>(dims.size()) != rank())
    fail("permute", shape_, "got {} dims ({}) for rank {}", dims.size(), fmt::join(dims, ","),
         rank());
  Shape s = shape_;
  Strides st = strides_;
  std::array<bool, kMaxDims> seen{};
  for (int i = 0; i < rank(); ++i) {
    const int d = wrap_dim("permute", shape_, dims[static_cast<std::size_t>(i)], rank());
    if (seen[static_cast<std::size_t>(d)])
      fail("permute", shape_, "dims ({}) repeat dimension {}", fmt::join(dims, ","), d);
    seen[static_cast<std::size_t>(d)] = true;
    s[i] = shape_[d];
    st[i] = strides_[d];
  }
  return Tensor(storage_, s, st, offset_, dtype_);
}

Tensor Tensor::unsqueeze(int dim) const {
  const int d = wrap_dim("unsqueeze", shape_, dim, rank() + 1);
  if (rank() == kMaxDims)
    fail("unsqueeze", shape_, "a tensor may have at most {} dimensions", kMaxDims);
  Shape s;
  Strides st;
  for (int k = 0; k <= rank(); ++k) {
    if (k == d) {
      s.push_back(1);
      st.push_back(k < rank() ? shape_[k] * strides_[k] : 1);
    }
    if (k < rank()) {
      s.push_back(shape_[k]);
      st.push_back(strides_[k]);
    }
  }
  return Tensor(storage_, s, st, offset_, dtype_);
}

Tensor Tensor::squeeze() const {
  Shape s;
  Strides st;
  for (int k = 0; k < rank(); ++k)
    if (shape_[k] != 1) {
      s.push_back(shape_[k]);
      st.push_back(strides_[k]);
    }
  return Tensor(storage_, s, st, offset_, dtype_);
}

Tensor Tensor::squeeze(int dim) const {
  if (rank() == 0) return *this;  // torch accepts dim 0 or -1 on a scalar
  const int d = wrap_dim("squeeze", shape_, dim, rank());
  return shape_[d] == 1 ? select(d, 0) : *this;
}

Tensor Tensor::flatten(int start_dim, int end_dim) const {
  if (rank() == 0) return reshape({1});
  const int s = wrap_dim("flatten", shape_, start_dim, rank());
  const int e = wrap_dim("flatten", shape_, end_dim, rank());
  if (s > e) fail("flatten", shape_, "start_dim {} comes after end_dim {}", start_dim, end_dim);
  Shape target;
  for (int k = 0; k < rank(); ++k) {
    if (k <= s || k > e)
      target.push_back(shape_[k]);
    else
      target[target.rank() - 1] *= shape_[k];
  }
  return reshape(target);
}

Tensor Tensor::view(const Shape& shape) const {
  const Shape target = infer_shape("view", shape_, shape, numel());
  const auto st = view_strides(shape_, strides_, target);
  if (!st)
    fail("view", shape_,
         "strides {} do not allow shape {} without a copy; use reshape (or contiguous() first)",
         strides_.str(), target.str());
  return Tensor(storage_, target, *st, offset_, dtype_);
}

Tensor Tensor::view(DType dtype) const {
  const auto from = static_cast<std::int64_t>(dtype_size(dtype_));
  const auto to = static_cast<std::int64_t>(dtype_size(dtype));
  if (from == to) return Tensor(storage_, shape_, strides_, offset_, dtype);
  const int last = rank() - 1;
  if (last < 0 || strides_[last] != 1)
    fail("view", shape_, "a {} tensor reads as {} only with a last dimension of stride 1",
         dtype_name(dtype_), dtype_name(dtype));
  Shape s = shape_;
  Strides st = strides_;
  if (from > to) {
    const std::int64_t r = from / to;
    for (int d = 0; d < last; ++d) st[d] *= r;
    s[last] *= r;
    return Tensor(storage_, s, st, offset_ * r, dtype);
  }
  const std::int64_t r = to / from;
  bool ok = s[last] % r == 0 && offset_ % r == 0;
  for (int d = 0; d < last; ++d) ok = ok && st[d] % r == 0;
  if (!ok)
    fail("view", shape_, "strides {} and offset {} of {} do not divide into {} elements",
         strides_.str(), offset_, dtype_name(dtype_), dtype_name(dtype));
  for (int d = 0; d < last; ++d) st[d] /= r;
  s[last] /= r;
  return Tensor(storage_, s, st, offset_ / r, dtype);
}

Tensor Tensor::reshape(const Shape& shape) const {
  const Shape target = infer_shape("reshape", shape_, shape, numel());
  if (const auto st = view_strides(shape_, strides_, target))
    return Tensor(storage_, target, *st, offset_, dtype_);
  const Tensor src = contiguous();
  return Tensor(src.storage_, target, contiguous_strides(target), src.offset_, dtype_);
}

std::vector<Tensor> Tensor::split(std::int64_t size, int dim) const {
  const int d = wrap_dim("split", shape_, dim, rank());
  const std::int64_t n = shape_[d];
  if (size < 0 || (size == 0 && n != 0))
    fail("split", shape_, "split size {} must be positive for dimension {} of size {}", size, d, n);
  std::vector<Tensor> parts;
  if (n == 0) {
    parts.push_back(*this);
    return parts;
  }
  for (std::int64_t at = 0; at < n; at += size)
    parts.push_back(narrow(d, at, std::min(size, n - at)));
  return parts;
}

std::vector<Tensor> Tensor::chunk(std::int64_t chunks, int dim) const {
  const int d = wrap_dim("chunk", shape_, dim, rank());
  if (chunks <= 0) fail("chunk", shape_, "chunks must be positive, got {}", chunks);
  const std::int64_t n = shape_[d];
  const std::int64_t size = (n + chunks - 1) / chunks;
  return split(n == 0 ? 0 : size, d);
}

}  // namespace tessera
