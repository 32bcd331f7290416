// The 16-bit float formats as stored: f16 (IEEE binary16) and bf16 (the top half of an f32), and
// their conversions to and from f32. Narrowing rounds to nearest, ties to even (as torch.half()
// and torch.bfloat16() do); NaN stays NaN (quiet), values past f16's range become infinities,
// below it subnormals then signed zeros. The GPU kernels convert with the same integer steps
// (plugins/common/kernels/common.tk), so every device stores the same bits for the same f32.
#pragma once

#include <bit>
#include <cstdint>

namespace tessera {

// f32 -> f16 bits.
constexpr std::uint16_t f32_to_f16(float f) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t x = bits & 0x7fffffffu;
  if (x > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);   // NaN
  if (x >= 0x47800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65536: inf
  if (x < 0x38800000u) {                                                    // below 2^-14
    const std::uint32_t e = x >> 23;
    if (e < 102) return sign;  // below 2^-25: zero
    const std::uint32_t m = (x & 0x7fffffu) | 0x800000u, shift = 126 - e;
    std::uint32_t r = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t h = (x >> 13) - (112u << 10);
  const std::uint32_t rem = x & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry into 0x7c00 is inf
  return static_cast<std::uint16_t>(sign | h);
}

// f16 bits -> f32 (exact).
constexpr float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16, exp = (h >> 10) & 0x1fu,
                      man = h & 0x3ffu;
  if (exp == 0) {
    const float v = static_cast<float>(man) * 5.9604644775390625e-8f;  // man * 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}

// f32 -> bf16 bits.
constexpr std::uint16_t f32_to_bf16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// bf16 bits -> f32 (exact).
constexpr float bf16_to_f32(std::uint16_t b) {
  return std::bit_cast<float>(std::uint32_t{b} << 16);
}

}  // namespace tessera
