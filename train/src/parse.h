// Strict parsing of the integers and numbers read from files (checkpoint metadata, file names):
// the whole string, decimal digits only (a '-' only for signed types), in range. std::stoi and
// friends accept "12abc", " 12" and wrap "-1" into an unsigned type; these do not.
// Private to tessera_train.
#pragma once

#include <charconv>
#include <cmath>
#include <optional>
#include <string_view>
#include <type_traits>

namespace tessera::train::detail {

// |s| as a T, or nullopt when it is empty, has anything but digits (and a leading '-' for a
// signed T), or does not fit T.
template <typename T>
std::optional<T> parse_integer(std::string_view s) {
  static_assert(std::is_integral_v<T>);
  if (s.empty() || s.front() == '+') return std::nullopt;
  if (s.front() == '-' && !std::is_signed_v<T>) return std::nullopt;
  T v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// |s| as a finite double written in decimal ("0.001", "1e-3"), or nullopt.
inline std::optional<double> parse_number(std::string_view s) {
  if (s.empty() || s.front() == '+') return std::nullopt;
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace tessera::train::detail
