// Element types of tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tessera {

// f32/f16/bf16/f64 floating point; i32 and i64 integers (indices, labels); u8 bytes; boolean masks
// (one byte per element holding 0 or 1, as torch.bool), made by the comparisons.
enum class DType : std::uint8_t { f32, f64, f16, bf16, i32, u8, i64, boolean };

inline constexpr int kNumDTypes = 8;

// Size of one element in bytes.
constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64:
    case DType::i64:
      return 8;
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::f16:
    case DType::bf16:
      return 2;
    case DType::u8:
    case DType::boolean:
      return 1;
  }
  return 0;
}

// Whether |t| is one of the 16-bit floats, f16 or bf16.
constexpr bool is_16bit_float(DType t) {
  return t == DType::f16 || t == DType::bf16;
}

// Whether |t| is a floating-point dtype, f32, f64, f16 or bf16 (torch's dtype.is_floating_point).
constexpr bool is_floating_point(DType t) {
  return t == DType::f32 || t == DType::f64 || is_16bit_float(t);
}

// Lower-case name as printed in messages and JSON: "f32", "i32", ...
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::u8:
      return "u8";
    case DType::i64:
      return "i64";
    case DType::boolean:
      return "bool";
  }
  return "?";
}

// The DType of a C++ element type, for typed host copies.
template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct dtype_of<std::uint8_t> {
  static constexpr DType value = DType::u8;
};
template <>
struct dtype_of<std::int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::boolean;
};
template <typename T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;

}  // namespace tessera
