// Overflow-checked size arithmetic: the one place where a size computed from outside input (a
// shape, a file header, an environment variable) is multiplied or added. Every function returns
// nullopt instead of a wrapped value, so the caller decides which error names the input; the
// throwing forms name what was being computed.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace tessera {

// a * b, or nullopt when it does not fit in T.
template <std::integral T>
constexpr std::optional<T> checked_mul(T a, T b) {
  T r{};
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// a + b, or nullopt when it does not fit in T.
template <std::integral T>
constexpr std::optional<T> checked_add(T a, T b) {
  T r{};
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// The product of |extents| (1 for none), or nullopt when an extent is negative or the product
// does not fit in int64.
constexpr std::optional<std::int64_t> checked_numel(std::span<const std::int64_t> extents) {
  std::int64_t n = 1;
  for (std::int64_t e : extents) {
    if (e < 0) return std::nullopt;
    auto next = checked_mul(n, e);
    if (!next) return std::nullopt;
    n = *next;
  }
  return n;
}

// |count| elements of |element_size| bytes, or nullopt when count is negative or the byte count
// does not fit in size_t.
constexpr std::optional<std::size_t> checked_bytes(std::int64_t count, std::size_t element_size) {
  if (count < 0) return std::nullopt;
  return checked_mul(static_cast<std::size_t>(count), element_size);
}

// The throwing forms: InvalidArgument "WHAT overflows (A * B)".
std::int64_t mul_or_throw(std::int64_t a, std::int64_t b, std::string_view what);
std::size_t bytes_or_throw(std::int64_t count, std::size_t element_size, std::string_view what);

}  // namespace tessera
