// Shape and strides: small fixed-capacity vectors of extents, so that building an op call never
// touches the heap.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

namespace tessera {

// The most dimensions a tensor may have. Enough for NCHW with batch and group dimensions.
inline constexpr int kMaxDims = 6;

// A list of up to kMaxDims signed 64-bit extents (a shape) or element strides.
class Dims {
 public:
  constexpr Dims() = default;
  // Throws InvalidArgument when more than kMaxDims values are given.
  Dims(std::initializer_list<std::int64_t> values);
  explicit Dims(std::span<const std::int64_t> values);

  int rank() const { return rank_; }
  bool empty() const { return rank_ == 0; }
  std::int64_t operator[](int i) const { return v_[static_cast<std::size_t>(i)]; }
  std::int64_t& operator[](int i) { return v_[static_cast<std::size_t>(i)]; }
  // Python-style index: -1 is the last dimension. Throws InvalidArgument when out of range.
  int normalize_axis(int axis) const;
  const std::int64_t* begin() const { return v_.data(); }
  const std::int64_t* end() const { return v_.data() + rank_; }
  std::int64_t back() const { return v_[static_cast<std::size_t>(rank_ - 1)]; }

  // Product of the extents (1 for rank 0). Throws InvalidArgument when it overflows int64.
  std::int64_t numel() const;
  // Appends one value. Throws InvalidArgument past kMaxDims.
  void push_back(std::int64_t value);

  bool operator==(const Dims& o) const {
    return rank_ == o.rank_ && std::equal(begin(), end(), o.begin());
  }
  // "[64,32,26,26]"
  std::string str() const;

 private:
  std::array<std::int64_t, kMaxDims> v_{};
  int rank_ = 0;
};

using Shape = Dims;
using Strides = Dims;

// Row-major (C-contiguous) strides of a shape, in elements.
Strides contiguous_strides(const Shape& shape);

// The shape two shapes broadcast to under NumPy rules, or InvalidArgument naming both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace tessera
