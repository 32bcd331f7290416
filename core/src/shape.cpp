#include "tessera/shape.h"

#include <fmt/format.h>

#include "tessera/checked.h"
#include "tessera/errors.h"

namespace tessera {

Dims::Dims(std::initializer_list<std::int64_t> values)
    : Dims(std::span<const std::int64_t>(values.begin(), values.size())) {}

Dims::Dims(std::span<const std::int64_t> values) {
  if (values.size() > static_cast<std::size_t>(kMaxDims))
    throw InvalidArgument(
        fmt::format("a tensor may have at most {} dimensions, got {}", kMaxDims, values.size()));
  std::copy(values.begin(), values.end(), v_.begin());
  rank_ = static_cast<int>(values.size());
}

int Dims::normalize_axis(int axis) const {
  const int a = axis < 0 ? axis + rank_ : axis;
  if (a < 0 || a >= rank_)
    throw InvalidArgument(
        fmt::format("axis {} is out of range for a tensor of rank {} ({})", axis, rank_, str()));
  return a;
}

std::int64_t Dims::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank_; ++i) {
    auto next = checked_mul(n, v_[static_cast<std::size_t>(i)]);
    if (!next)
      throw InvalidArgument(
          fmt::format("shape {} has more elements than a 64-bit count can hold", str()));
    n = *next;
  }
  return n;
}

void Dims::push_back(std::int64_t value) {
  if (rank_ == kMaxDims)
    throw InvalidArgument(fmt::format("a tensor may have at most {} dimensions", kMaxDims));
  v_[static_cast<std::size_t>(rank_++)] = value;
}

std::string Dims::str() const {
  return fmt::format("[{}]", fmt::join(begin(), end(), ","));
}

Strides contiguous_strides(const Shape& shape) {
  Strides s = shape;
  std::int64_t step = 1;
  for (int i = shape.rank() - 1; i >= 0; --i) {
    s[i] = step;
    step *= shape[i];
  }
  return s;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const int rank = std::max(a.rank(), b.rank());
  Shape out;
  for (int i = 0; i < rank; ++i) out.push_back(1);
  for (int i = 0; i < rank; ++i) {
    const int ia = a.rank() - rank + i, ib = b.rank() - rank + i;
    const std::int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1)
      throw InvalidArgument(
          fmt::format("shapes {} and {} can not be broadcast together (dimension "
                      "{}: {} vs {})",
                      a.str(), b.str(), i, da, db));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace tessera
