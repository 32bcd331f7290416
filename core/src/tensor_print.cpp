// operator<< for tensors, laid out as torch prints them (torch/_tensor_str.py: 4 decimals,
// columns aligned, 80 characters per line, edge items 3 and "..." past 1000 elements).
#include <cmath>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tessera/device.h"
#include "tessera/half.h"
#include "tessera/ops.h"
#include "tessera/tensor.h"

namespace tessera {
namespace {

constexpr std::int64_t kThreshold = 1000;  // more elements than this are summarised
constexpr std::int64_t kEdgeItems = 3;
constexpr std::size_t kLineWidth = 80;

// Every element of |t| (contiguous order) as a double.
std::vector<double> host_values(const Tensor& t) {
  const std::size_t n = static_cast<std::size_t>(t.numel()), size = dtype_size(t.dtype());
  std::vector<unsigned char> raw(n * size);
  t.copy_to_host(raw.data(), raw.size(), t.dtype());
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char* p = raw.data() + i * size;
    auto load = [p]<typename T>(T) {
      T x;
      std::memcpy(&x, p, sizeof x);
      return x;
    };
    switch (t.dtype()) {
      case DType::f32:
        v[i] = load(float{});
        break;
      case DType::f64:
        v[i] = load(double{});
        break;
      case DType::f16:
        v[i] = f16_to_f32(load(std::uint16_t{}));
        break;
      case DType::bf16:
        v[i] = bf16_to_f32(load(std::uint16_t{}));
        break;
      case DType::i32:
        v[i] = load(std::int32_t{});
        break;
      case DType::i64:
        v[i] = static_cast<double>(load(std::int64_t{}));
        break;
      case DType::u8:
      case DType::boolean:
        v[i] = *p;
        break;
    }
  }
  return v;
}

// How every element is written: one width for all, so that columns align.
class Formatter {
 public:
  Formatter(DType dtype, const std::vector<double>& values) : dtype_(dtype) {
    if (is_floating_point(dtype)) {
      double lo = INFINITY, hi = 0;
      bool whole = true;
      for (double v : values) {
        if (!std::isfinite(v)) continue;
        if (v != std::trunc(v)) whole = false;
        const double a = std::abs(v);
        if (a != 0) lo = std::min(lo, a);
        hi = std::max(hi, a);
      }
      if (whole)
        mode_ = hi > 1e8 ? Mode::sci : Mode::whole;
      else
        mode_ = std::isfinite(lo) && (hi / lo > 1000 || hi > 1e8 || lo < 1e-4) ? Mode::sci
                                                                               : Mode::fixed;
    }
    for (double v : values) width_ = std::max(width_, raw(v).size());
  }

  std::string operator()(double v) const {
    const std::string s = raw(v);
    return std::string(width_ - s.size(), ' ') + s;
  }
  std::size_t width() const { return width_; }

 private:
  enum class Mode { integer, whole, fixed, sci };

  std::string raw(double v) const {
    if (dtype_ == DType::boolean) return v != 0 ? "True" : "False";
    if (!is_floating_point(dtype_)) return fmt::format("{}", static_cast<std::int64_t>(v));
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    switch (mode_) {
      case Mode::whole:
        return fmt::format("{:.0f}.", v);
      case Mode::sci:
        return fmt::format("{:.4e}", v);
      default:
        return fmt::format("{:.4f}", v);
    }
  }

  DType dtype_;
  Mode mode_ = Mode::integer;
  std::size_t width_ = 0;
};

// Writes the (possibly summarised) values of shape |shape| from |v| starting at |at|; |full| is
// the original shape, so that a summarised dimension (6 shown of more) gets its "...".
class Printer {
 public:
  Printer(const std::vector<double>& v, const Shape& shown, const Shape& full, const Formatter& f)
      : v_(v), shown_(shown), full_(full), f_(f) {}

  std::string block(int d, std::size_t indent, std::size_t& at) const {
    const int rank = shown_.rank();
    const bool cut = full_[d] != shown_[d];
    std::vector<std::string> parts;
    for (std::int64_t i = 0; i < shown_[d]; ++i) {
      if (cut && i == kEdgeItems) parts.push_back(d == rank - 1 ? " ..." : "...");
      if (d == rank - 1)
        parts.push_back(f_(v_[at++]));
      else
        parts.push_back(block(d + 1, indent + 1, at));
    }
    if (d < rank - 1)
      return "[" +
             fmt::format(
                 "{}",
                 fmt::join(parts, "," + std::string(static_cast<std::size_t>(rank - d - 1), '\n') +
                                      std::string(indent + 1, ' '))) +
             "]";
    // A vector: as many elements per line as fit in the line width.
    const std::size_t per_line =
        std::max<std::size_t>(1, (kLineWidth - std::min(kLineWidth, indent)) / (f_.width() + 2));
    std::string s = "[";
    for (std::size_t i = 0; i < parts.size(); ++i) {
      if (i) s += i % per_line == 0 ? ",\n" + std::string(indent + 1, ' ') : ", ";
      s += parts[i];
    }
    return s + "]";
  }

 private:
  const std::vector<double>& v_;
  const Shape& shown_;
  const Shape& full_;
  const Formatter& f_;
};

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  std::string body;
  const std::size_t indent = 7;  // "tensor("
  if (t.numel() == 0) {
    body = "[]";
    if (t.rank() != 1) body += fmt::format(", size=({})", fmt::join(t.shape(), ", "));
  } else {
    // Summarised on the device: the first and last kEdgeItems along every long dimension.
    Tensor shown = t;
    if (t.numel() > kThreshold)
      for (int d = 0; d < t.rank(); ++d)
        if (t.dim(d) > 2 * kEdgeItems)
          shown = cat(
              {shown.narrow(d, 0, kEdgeItems), shown.narrow(d, t.dim(d) - kEdgeItems, kEdgeItems)},
              d);
    const std::vector<double> v = host_values(shown);
    const Formatter f(t.dtype(), v);
    if (t.rank() == 0) {
      body = f(v[0]);
      const auto first = body.find_first_not_of(' ');
      body = body.substr(first == std::string::npos ? 0 : first);
    } else {
      std::size_t at = 0;
      body = Printer(v, shown.shape(), t.shape(), f).block(0, indent, at);
    }
  }
  std::string suffix;
  if (t.device().id() != "cpu:0") suffix += fmt::format(", device='{}'", t.device().id());
  if (t.dtype() != DType::f32 && t.dtype() != DType::i64 && t.dtype() != DType::boolean)
    suffix += fmt::format(", dtype={}", dtype_name(t.dtype()));
  return os << "tensor(" << body << suffix << ")";
}

}  // namespace tessera
