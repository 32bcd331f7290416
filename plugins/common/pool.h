// Host-side geometry of the average pools (avg_pool2d, adaptive_avg_pool2d and their backwards),
// shared by the plugins: the window of each output cell and its divisor. Header-only.
#pragma once

#include <algorithm>
#include <cstdint>

#include "tessera/op.h"

namespace tessera::common {

// Input rows (or columns) [begin, end) of one output row (or column).
struct AvgWindow {
  std::int64_t begin, end, padded;  // padded: the window's extent counting padding
};

// |planes| = N*C planes of h x w pooled to ho x wo. A fixed pool (avg_pool2d) has windows of
// kernel k every stride s over the input padded by p, as torch.nn.functional.avg_pool2d with
// ceil_mode false; an adaptive one (kh == 0) has output cell i cover
// [floor(i*h/ho), ceil((i+1)*h/ho)), as torch.nn.functional.adaptive_avg_pool2d.
struct AvgPool {
  std::int64_t planes, h, w, ho, wo;
  std::int64_t kh = 0, kw = 0, sh = 1, sw = 1, ph = 0, pw = 0;
  bool count_include_pad = true;

  AvgWindow rows(std::int64_t i) const { return window(i, h, ho, kh, sh, ph); }
  AvgWindow cols(std::int64_t j) const { return window(j, w, wo, kw, sw, pw); }
  float divisor(const AvgWindow& r, const AvgWindow& c) const {
    return static_cast<float>(count_include_pad ? r.padded * c.padded
                                                : (r.end - r.begin) * (c.end - c.begin));
  }

 private:
  static AvgWindow window(std::int64_t i, std::int64_t in, std::int64_t out, std::int64_t k,
                          std::int64_t s, std::int64_t p) {
    if (k == 0) {
      const std::int64_t b = i * in / out, e = ((i + 1) * in + out - 1) / out;
      return {b, e, e - b};
    }
    const std::int64_t b = i * s - p, e = std::min(b + k, in + p);
    return {std::max<std::int64_t>(b, 0), std::min(e, in), e - b};
  }
};

// The geometry of an avg_pool2d, avg_pool2d_backward, adaptive_avg_pool2d or
// adaptive_avg_pool2d_backward call.
inline AvgPool avg_pool(const OpCall& call) {
  const bool forward = call.op == OpId::avg_pool2d || call.op == OpId::adaptive_avg_pool2d;
  const Shape& x = forward ? call.in(0).shape() : call.out(0).shape();
  const Shape& y = forward ? call.out(0).shape() : call.in(0).shape();
  AvgPool g{x[0] * x[1], x[2], x[3], y[2], y[3]};
  if (call.op == OpId::avg_pool2d || call.op == OpId::avg_pool2d_backward) {
    const auto& a = call.attr<AvgPool2dAttrs>();
    g.kh = a.kernel_h;
    g.kw = a.kernel_w;
    g.sh = a.stride_h;
    g.sw = a.stride_w;
    g.ph = a.pad_h;
    g.pw = a.pad_w;
    g.count_include_pad = a.count_include_pad;
  }
  return g;
}

}  // namespace tessera::common
