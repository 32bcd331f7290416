// Conformance of the nn group (batched matmul, embedding, average pooling, grouped and dilated
// convolution): every op against float64 references on fresh random inputs, and every gradient
// against finite differences, on every device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "cases.h"
#include "gradcheck.h"
#include "tessera/tessera.h"
#include "tessera/train/autograd.h"

using namespace tessera;
using namespace tessera::conformance;
namespace tt = tessera::train;

namespace {

// ----- batched matmul -----

// op(a) @ op(b) with torch.matmul's batch broadcasting, for a and b of rank >= 2.
Ref ref_bmm(const Vec& a, const Shape& as, const Vec& b, const Shape& bs, bool ta, bool tb,
            Shape& ys) {
  const int ra = as.rank(), rb = bs.rank(), batch = std::max(ra, rb) - 2;
  const std::int64_t m = ta ? as[ra - 1] : as[ra - 2], k = ta ? as[ra - 2] : as[ra - 1];
  const std::int64_t n = tb ? bs[rb - 2] : bs[rb - 1];
  ys = Shape{};
  for (int d = 0; d < batch; ++d) {
    const int ia = ra - 2 - batch + d, ib = rb - 2 - batch + d;
    ys.push_back(std::max(ia >= 0 ? as[ia] : 1, ib >= 0 ? bs[ib] : 1));
  }
  std::int64_t count = 1;
  for (int d = 0; d < batch; ++d) count *= ys[d];
  ys.push_back(m);
  ys.push_back(n);
  Ref y(static_cast<std::size_t>(count * m * n));
  for (std::int64_t bi = 0; bi < count; ++bi) {
    // The matrix of a and of b this output matrix reads.
    std::int64_t rem = bi, ma = 0, mb = 0, step_a = 1, step_b = 1;
    for (int d = batch - 1; d >= 0; --d) {
      const std::int64_t coord = rem % ys[d];
      rem /= ys[d];
      const int ia = ra - 2 - batch + d, ib = rb - 2 - batch + d;
      const std::int64_t ea = ia >= 0 ? as[ia] : 1, eb = ib >= 0 ? bs[ib] : 1;
      ma += (ea == 1 ? 0 : coord) * step_a;
      mb += (eb == 1 ? 0 : coord) * step_b;
      step_a *= ea;
      step_b *= eb;
    }
    const float* pa = a.data() + ma * m * k;
    const float* pb = b.data() + mb * k * n;
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::int64_t p = 0; p < k; ++p)
          s += double(ta ? pa[p * m + i] : pa[i * k + p]) * (tb ? pb[j * k + p] : pb[p * n + j]);
        y[static_cast<std::size_t>((bi * m + i) * n + j)] = s;
      }
  }
  return y;
}

Case bmm_case(const std::string& name, Shape as, Shape bs, bool ta, bool tb) {
  return {name, OpId::bmm, [=](Device& d) {
            const Vec a = randn(as.numel()), b = randn(bs.numel());
            Shape ys;
            const Ref r = ref_bmm(a, as, b, bs, ta, tb, ys);
            const Tensor y = bmm(on(d, a, as), on(d, b, bs), ta, tb);
            EXPECT_EQ(y.shape(), ys);
            if (r.empty())
              EXPECT_EQ(y.numel(), 0);
            else
              expect_close(y.to_vector<float>(), r);
          }};
}

// ----- convolution -----

struct ConvGeom {
  std::int64_t n, c, h, w, o, kh, kw;
  int sh, sw, ph, pw, dh, dw, groups;
  std::int64_t ho() const { return (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1; }
  std::int64_t wo() const { return (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1; }
  std::int64_t cg() const { return c / groups; }
  Shape xs() const { return {n, c, h, w}; }
  Shape ws() const { return {o, cg(), kh, kw}; }
  Shape ys() const { return {n, o, ho(), wo()}; }
  Conv2dAttrs attrs() const { return {sh, sw, ph, pw, dh, dw, groups}; }
  // Calls f(x_index, w_index, y_index) for every product of the convolution.
  template <typename F>
  void each(F f) const {
    const std::int64_t og = o / groups;
    for (std::int64_t b = 0; b < n; ++b)
      for (std::int64_t oc = 0; oc < o; ++oc)
        for (std::int64_t y = 0; y < ho(); ++y)
          for (std::int64_t x = 0; x < wo(); ++x)
            for (std::int64_t ic = 0; ic < cg(); ++ic)
              for (std::int64_t i = 0; i < kh; ++i)
                for (std::int64_t j = 0; j < kw; ++j) {
                  const std::int64_t ih = y * sh - ph + i * dh, iw = x * sw - pw + j * dw;
                  if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
                  const std::int64_t xc = (oc / og) * cg() + ic;
                  f(((b * c + xc) * h + ih) * w + iw, ((oc * cg() + ic) * kh + i) * kw + j,
                    ((b * o + oc) * ho() + y) * wo() + x);
                }
  }
};

const ConvGeom kConvs[] = {
    {2, 4, 9, 8, 6, 3, 2, 2, 1, 1, 0, 2, 1, 2},  // 2 groups, dilation 2x1
    {2, 3, 7, 7, 3, 3, 3, 1, 1, 1, 1, 1, 1, 3},  // depthwise 3x3
    {1, 6, 6, 5, 4, 2, 2, 1, 2, 2, 1, 2, 2, 2},  // 2 groups, dilation 2x2, padding
    // Channels enough for the GPU plugins' implicit GEMM (ops_gemm.cpp): planes not a multiple
    // of 4; stride 2 with planes that are; groups with dilation; a weight gradient whose long
    // side (batch x pixels, 1024) is split in parts; a strided 1x1 (a ResNet shortcut).
    {3, 12, 11, 10, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {2, 16, 12, 12, 24, 3, 3, 2, 2, 1, 1, 1, 1, 1},
    {2, 16, 9, 9, 16, 3, 3, 1, 1, 2, 2, 2, 2, 2},
    {4, 8, 16, 16, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {2, 8, 8, 8, 16, 1, 1, 2, 2, 0, 0, 1, 1, 1},
};

std::string conv_name(const char* op, int i) {
  return fmt::format("{}_groups_dilation_{}", op, i);
}

// ----- average pooling -----

// The window of output cell |i| along one axis (PyTorch's rules), and its padded extent.
struct Win {
  std::int64_t b, e, padded;
};
Win fixed_window(std::int64_t i, std::int64_t in, int k, int s, int p) {
  const std::int64_t b = i * s - p, e = std::min<std::int64_t>(b + k, in + p);
  return {std::max<std::int64_t>(b, 0), std::min(e, in), e - b};
}
Win adaptive_window(std::int64_t i, std::int64_t in, std::int64_t out) {
  const auto b = static_cast<std::int64_t>(std::floor(double(i) * in / out));
  const auto e = static_cast<std::int64_t>(std::ceil(double(i + 1) * in / out));
  return {b, e, e - b};
}

// Average pooling of |planes| planes h x w to ho x wo through |win|(axis, index) -> Win, with
// the divisor |div|(rows, cols); returns y and, for gy, dx.
template <typename W, typename D>
std::pair<Ref, Ref> ref_pool(const Vec& x, const Vec& gy, std::int64_t planes, std::int64_t h,
                             std::int64_t w, std::int64_t ho, std::int64_t wo, W win, D div) {
  Ref y(static_cast<std::size_t>(planes * ho * wo)), dx(x.size(), 0.0);
  for (std::int64_t p = 0; p < planes; ++p)
    for (std::int64_t i = 0; i < ho; ++i)
      for (std::int64_t j = 0; j < wo; ++j) {
        const Win r = win(0, i), c = win(1, j);
        const double dv = div(r, c);
        const std::int64_t at = (p * ho + i) * wo + j;
        double s = 0;
        for (std::int64_t a = r.b; a < r.e; ++a)
          for (std::int64_t b = c.b; b < c.e; ++b) {
            s += x[static_cast<std::size_t>((p * h + a) * w + b)];
            dx[static_cast<std::size_t>((p * h + a) * w + b)] +=
                gy[static_cast<std::size_t>(at)] / dv;
          }
        y[static_cast<std::size_t>(at)] = s / dv;
      }
  return {y, dx};
}

// ----- gradient checks (as test_grad.cpp) -----

using Input = GradInput;
using Fn = GradFn;

Tensor index_tensor(Device& d, const std::vector<std::int32_t>& v, const Shape& s, bool wide) {
  if (!wide) return Tensor::from<std::int32_t>(v, s, &d);
  std::vector<std::int64_t> w(v.begin(), v.end());
  return Tensor::from<std::int64_t>(w, s, &d);
}

}  // namespace

std::vector<Case> tessera::conformance::nn_op_cases() {
  std::vector<Case> c;
  // ----- bmm -----
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    const std::string f = fmt::format("{}{}", ta ? "T" : "N", tb ? "T" : "N");
    c.push_back(bmm_case("bmm_" + f, ta ? Shape{3, 7, 5} : Shape{3, 5, 7},
                         tb ? Shape{3, 4, 7} : Shape{3, 7, 4}, ta, tb));
    // Broadcast batch dimensions: [2,1,.] with [4,.], and a plain matrix against a batch.
    c.push_back(bmm_case("bmm_broadcast_" + f, ta ? Shape{2, 1, 6, 3} : Shape{2, 1, 3, 6},
                         tb ? Shape{4, 5, 6} : Shape{4, 6, 5}, ta, tb));
    c.push_back(bmm_case("bmm_matrix_batch_" + f, ta ? Shape{6, 3} : Shape{3, 6},
                         tb ? Shape{2, 3, 5, 6} : Shape{2, 3, 6, 5}, ta, tb));
  }
  c.push_back(bmm_case("bmm_odd_127", {2, 127, 3}, {1, 3, 1}, false, false));
  c.push_back(bmm_case("bmm_odd_1025", {1, 1, 1025}, {3, 1025, 3}, false, false));
  c.push_back(bmm_case("bmm_tiles", {2, 65, 33}, {2, 33, 70}, false, false));
  c.push_back(bmm_case("bmm_long_k", {2, 1, 9, 2050}, {3, 2050, 7}, false, false));
  c.push_back(bmm_case("bmm_empty_batch", {0, 3, 4}, {0, 4, 5}, false, false));
  c.push_back(bmm_case("bmm_empty_inner", {2, 3, 0}, {2, 0, 4}, false, false));
  c.push_back({"bmm_transposed_views", OpId::bmm, [](Device& d) {
                 // Views with the last two dimensions swapped fold into the flags; an expanded
                 // operand (stride 0 along the batch) is read as given.
                 const Vec a = randn(3 * 5 * 4), b = randn(5 * 6);
                 Shape ys;
                 const Ref r = ref_bmm(a, {3, 5, 4}, b, {5, 6}, true, false, ys);
                 const Tensor at = on(d, a, {3, 5, 4}).transpose(1, 2);
                 const Tensor bx = on(d, b, {5, 6}).expand({3, 5, 6});
                 const Tensor y = matmul(at, bx);
                 EXPECT_EQ(y.shape(), (Shape{3, 4, 6}));
                 expect_close(y.to_vector<float>(), r);
               }});
  c.push_back(
      {"matmul_vectors_and_batches", OpId::bmm, [](Device& d) {
         // torch.matmul's rules: vector @ batch, batch @ vector, batch @ matrix.
         const Vec a = randn(2 * 3 * 4), v = randn(4), u = randn(3), m = randn(4 * 5);
         Shape ys;
         const Ref av = ref_bmm(a, {2, 3, 4}, v, {4, 1}, false, false, ys);
         const Tensor y1 = matmul(on(d, a, {2, 3, 4}), on(d, v, {4}));
         EXPECT_EQ(y1.shape(), (Shape{2, 3}));
         expect_close(y1.to_vector<float>(), av);
         const Ref ua = ref_bmm(u, {1, 3}, a, {2, 3, 4}, false, false, ys);
         const Tensor y2 = matmul(on(d, u, {3}), on(d, a, {2, 3, 4}));
         EXPECT_EQ(y2.shape(), (Shape{2, 4}));
         expect_close(y2.to_vector<float>(), ua);
         const Ref am = ref_bmm(a, {2, 3, 4}, m, {4, 5}, false, false, ys);
         const Tensor y3 = matmul(on(d, a, {2, 3, 4}), on(d, m, {4, 5}));
         EXPECT_EQ(y3.shape(), (Shape{2, 3, 5}));
         expect_close(y3.to_vector<float>(), am);
         EXPECT_THROW(bmm(on(d, a, {2, 3, 4}), on(d, m, {5, 4})), InvalidArgument);
         EXPECT_THROW(bmm(on(d, a, {2, 3, 4}), on(d, randn(3 * 20), {3, 4, 5})), InvalidArgument);
       }});
  // ----- embedding -----
  for (bool wide : {false, true})
    for (std::int64_t dim : {1, 7, 127}) {
      c.push_back(
          {fmt::format("embedding_{}_d{}", wide ? "i64" : "i32", dim), OpId::embedding,
           [=](Device& d) {
             const std::int64_t v = 11;
             const Vec w = randn(v * dim);
             const auto idx = labels(3 * 5, static_cast<int>(v));
             const Tensor y = embedding(on(d, w, {v, dim}), index_tensor(d, idx, {3, 5}, wide));
             EXPECT_EQ(y.shape(), (Shape{3, 5, dim}));
             Ref r;
             for (std::int32_t i : idx)
               for (std::int64_t k = 0; k < dim; ++k) r.push_back(w[i * dim + k]);
             expect_close(y.to_vector<float>(), r);
           }});
    }
  c.push_back(
      {"embedding_empty_and_out_of_range", OpId::embedding, [](Device& d) {
         const Vec w = randn(4 * 3);
         const Tensor e = embedding(on(d, w, {4, 3}), index_tensor(d, {}, {0}, false));
         EXPECT_EQ(e.shape(), (Shape{0, 3}));
         const Vec y =
             embedding(on(d, w, {4, 3}), index_tensor(d, {2, 4, -1}, {3}, true)).to_vector<float>();
         for (int k = 0; k < 3; ++k) {
           EXPECT_EQ(y[k], w[2 * 3 + k]);
           EXPECT_TRUE(std::isnan(y[3 + k]) && std::isnan(y[6 + k]));
         }
         EXPECT_THROW(embedding(on(d, w, {4, 3}), on(d, randn(2), {2})), InvalidArgument);
       }});
  for (bool wide : {false, true})
    for (std::int64_t dim : {1, 5, 130}) {
      c.push_back({fmt::format("embedding_backward_{}_d{}", wide ? "i64" : "i32", dim),
                   OpId::embedding_backward, [=](Device& d) {
                     // 300 positions over 4 of 6 rows: many repeats, rows 4 and 5 untouched,
                     // row 1 the padding row; a few indices out of range are ignored.
                     const std::int64_t v = 6, n = 300, pad = 1;
                     auto idx = labels(n, 4);
                     idx[7] = 6;
                     idx[100] = -3;
                     const Vec g = randn(n * dim);
                     Ref r(static_cast<std::size_t>(v * dim), 0.0);
                     for (std::int64_t p = 0; p < n; ++p)
                       if (idx[p] >= 0 && idx[p] < v && idx[p] != pad)
                         for (std::int64_t k = 0; k < dim; ++k)
                           r[idx[p] * dim + k] += g[p * dim + k];
                     const Tensor gt = on(d, g, {3, 100, dim});
                     const Tensor it = index_tensor(d, idx, {3, 100}, wide);
                     const Vec y1 = embedding_backward(gt, it, v, pad).to_vector<float>();
                     const Vec y2 = embedding_backward(gt, it, v, pad).to_vector<float>();
                     expect_close(y1, r);
                     // The same bits on every run.
                     ASSERT_EQ(y1.size(), y2.size());
                     EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)), 0);
                   }});
    }
  c.push_back({"embedding_backward_one_run", OpId::embedding_backward, [](Device& d) {
                 // Every position picks row 3: one run across every chunk a GPU sums in parts.
                 const std::int64_t v = 5, n = 200, dim = 4;
                 const Vec g = randn(n * dim);
                 Ref r(static_cast<std::size_t>(v * dim), 0.0);
                 for (std::int64_t p = 0; p < n; ++p)
                   for (std::int64_t k = 0; k < dim; ++k) r[3 * dim + k] += g[p * dim + k];
                 const Tensor it = index_tensor(
                     d, std::vector<std::int32_t>(static_cast<std::size_t>(n), 3), {n}, true);
                 expect_close(embedding_backward(on(d, g, {n, dim}), it, v).to_vector<float>(), r);
               }});
  c.push_back({"embedding_backward_long_sort", OpId::embedding_backward, [](Device& d) {
                 // 5000 positions: a GPU's sort runs stages of several global steps beyond one
                 // block.
                 const std::int64_t v = 37, n = 5000, dim = 2;
                 const auto idx = labels(n, static_cast<int>(v));
                 const Vec g = randn(n * dim);
                 Ref r(static_cast<std::size_t>(v * dim), 0.0);
                 for (std::int64_t p = 0; p < n; ++p)
                   for (std::int64_t k = 0; k < dim; ++k) r[idx[p] * dim + k] += g[p * dim + k];
                 const Tensor gt = on(d, g, {n, dim});
                 const Tensor it = index_tensor(d, idx, {n}, false);
                 const Vec y1 = embedding_backward(gt, it, v).to_vector<float>();
                 const Vec y2 = embedding_backward(gt, it, v).to_vector<float>();
                 expect_close(y1, r);
                 EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)), 0);
               }});
  // ----- average pooling -----
  struct PoolCfg {
    int k, s, p;
    bool cip;
  };
  for (const PoolCfg& pc : {PoolCfg{2, 2, 0, true}, PoolCfg{3, 2, 1, true}, PoolCfg{3, 2, 1, false},
                            PoolCfg{3, 1, 1, false}, PoolCfg{1, 1, 0, true}}) {
    const std::string name =
        fmt::format("k{}s{}p{}{}", pc.k, pc.s, pc.p, pc.cip ? "" : "_exclude_pad");
    const std::int64_t n = 2, ch = 3, h = 9, w = 7;
    const std::int64_t ho = (h + 2 * pc.p - pc.k) / pc.s + 1, wo = (w + 2 * pc.p - pc.k) / pc.s + 1;
    const AvgPool2dAttrs a{pc.k, pc.k, pc.s, pc.s, pc.p, pc.p, pc.cip};
    auto refs = [=](const Vec& x, const Vec& gy) {
      return ref_pool(
          x, gy, n * ch, h, w, ho, wo,
          [=](int axis, std::int64_t i) {
            return fixed_window(i, axis == 0 ? h : w, pc.k, pc.s, pc.p);
          },
          [=](const Win& r, const Win& cc) {
            return pc.cip ? double(r.padded * cc.padded) : double((r.e - r.b) * (cc.e - cc.b));
          });
    };
    c.push_back({"avg_pool2d_" + name, OpId::avg_pool2d, [=](Device& d) {
                   const Vec x = randn(n * ch * h * w), gy = randn(n * ch * ho * wo);
                   const Tensor y = avg_pool2d(on(d, x, {n, ch, h, w}), a);
                   EXPECT_EQ(y.shape(), (Shape{n, ch, ho, wo}));
                   expect_close(y.to_vector<float>(), refs(x, gy).first);
                 }});
    c.push_back(
        {"avg_pool2d_backward_" + name, OpId::avg_pool2d_backward, [=](Device& d) {
           const Vec x = randn(n * ch * h * w), gy = randn(n * ch * ho * wo);
           expect_close(
               avg_pool2d_backward(on(d, gy, {n, ch, ho, wo}), {n, ch, h, w}, a).to_vector<float>(),
               refs(x, gy).second);
         }});
  }
  for (const auto& [oh, ow] :
       {std::pair<std::int64_t, std::int64_t>{4, 3}, {1, 1}, {9, 7}, {3, 10}}) {
    const std::int64_t n = 2, ch = 3, h = 9, w = 7;
    auto refs = [=, oh = oh, ow = ow](const Vec& x, const Vec& gy) {
      return ref_pool(
          x, gy, n * ch, h, w, oh, ow,
          [=](int axis, std::int64_t i) {
            return axis == 0 ? adaptive_window(i, h, oh) : adaptive_window(i, w, ow);
          },
          [](const Win& r, const Win& cc) { return double(r.padded * cc.padded); });
    };
    const std::string name = fmt::format("{}x{}", oh, ow);
    c.push_back({"adaptive_avg_pool2d_" + name, OpId::adaptive_avg_pool2d,
                 [=, oh = oh, ow = ow](Device& d) {
                   const Vec x = randn(n * ch * h * w), gy = randn(n * ch * oh * ow);
                   const Tensor y = adaptive_avg_pool2d(on(d, x, {n, ch, h, w}), oh, ow);
                   EXPECT_EQ(y.shape(), (Shape{n, ch, oh, ow}));
                   expect_close(y.to_vector<float>(), refs(x, gy).first);
                 }});
    c.push_back({"adaptive_avg_pool2d_backward_" + name, OpId::adaptive_avg_pool2d_backward,
                 [=, oh = oh, ow = ow](Device& d) {
                   const Vec x = randn(n * ch * h * w), gy = randn(n * ch * oh * ow);
                   expect_close(
                       adaptive_avg_pool2d_backward(on(d, gy, {n, ch, oh, ow}), {n, ch, h, w})
                           .to_vector<float>(),
                       refs(x, gy).second);
                 }});
  }
  c.push_back(
      {"avg_pool2d_errors", OpId::avg_pool2d, [](Device& d) {
         const Tensor x = on(d, randn(2 * 3 * 5 * 5), {2, 3, 5, 5});
         EXPECT_THROW(avg_pool2d(x, {3, 3, 1, 1, 2, 2, true}), InvalidArgument);  // pad > k/2
         EXPECT_THROW(avg_pool2d(x, {7, 7, 1, 1, 0, 0, true}), InvalidArgument);  // k > input
         EXPECT_THROW(avg_pool2d(x, {2, 2, 0, 1, 0, 0, true}), InvalidArgument);  // stride 0
         EXPECT_THROW(avg_pool2d(on(d, randn(5), {5}), {}), InvalidArgument);
         EXPECT_THROW(adaptive_avg_pool2d(x, 0, 2), InvalidArgument);
         EXPECT_THROW(adaptive_avg_pool2d_backward(on(d, randn(6), {2, 3, 1, 1}), {2, 4, 5, 5}),
                      InvalidArgument);
       }});
  c.push_back({"embedding_backward_errors", OpId::embedding_backward, [](Device& d) {
                 const Tensor g = on(d, randn(4 * 3), {4, 3});
                 const Tensor idx = index_tensor(d, {0, 1, 2, 3}, {4}, false);
                 EXPECT_THROW(embedding_backward(g, idx, 5, 5), InvalidArgument);  // padding_idx
                 EXPECT_THROW(embedding_backward(g, index_tensor(d, {0, 1}, {2}, false), 5),
                              InvalidArgument);  // grad not [...indices, D]
                 EXPECT_THROW(embedding_backward(g, on(d, randn(4), {4}), 5), InvalidArgument);
               }});
  // ----- convolution with groups and dilation -----
  for (int i = 0; i < static_cast<int>(std::size(kConvs)); ++i) {
    const ConvGeom g = kConvs[i];
    c.push_back({conv_name("conv2d", i), OpId::conv2d, [=](Device& d) {
                   const Vec x = randn(g.xs().numel()), w = randn(g.ws().numel());
                   Ref r(static_cast<std::size_t>(g.ys().numel()), 0.0);
                   g.each([&](auto xi, auto wi, auto yi) { r[yi] += double(x[xi]) * w[wi]; });
                   const Tensor y = conv2d(on(d, x, g.xs()), on(d, w, g.ws()), g.attrs());
                   EXPECT_EQ(y.shape(), g.ys());
                   expect_close(y.to_vector<float>(), r);
                 }});
    c.push_back(
        {conv_name("conv2d_backward_input", i), OpId::conv2d_backward_input, [=](Device& d) {
           const Vec gy = randn(g.ys().numel()), w = randn(g.ws().numel());
           Ref r(static_cast<std::size_t>(g.xs().numel()), 0.0);
           g.each([&](auto xi, auto wi, auto yi) { r[xi] += double(gy[yi]) * w[wi]; });
           expect_close(
               conv2d_backward_input(on(d, gy, g.ys()), on(d, w, g.ws()), g.xs(), g.attrs())
                   .to_vector<float>(),
               r);
         }});
    c.push_back(
        {conv_name("conv2d_backward_weight", i), OpId::conv2d_backward_weight, [=](Device& d) {
           const Vec gy = randn(g.ys().numel()), x = randn(g.xs().numel());
           Ref r(static_cast<std::size_t>(g.ws().numel()), 0.0);
           g.each([&](auto xi, auto wi, auto yi) { r[wi] += double(gy[yi]) * x[xi]; });
           expect_close(
               conv2d_backward_weight(on(d, gy, g.ys()), on(d, x, g.xs()), g.ws(), g.attrs())
                   .to_vector<float>(),
               r);
         }});
  }
  // The GPU plugins split long reductions in parts and add the parts in a fixed order
  // (ops_gemm.cpp, ops_base.cpp, ops_reduce.cpp): every split path gives the same bits twice.
  c.push_back({"split_reductions_same_bits", OpId::conv2d_backward_weight, [](Device& d) {
                 auto same = [](const Tensor& a, const Tensor& b) {
                   const Vec x = a.to_vector<float>(), y = b.to_vector<float>();
                   ASSERT_EQ(x.size(), y.size());
                   EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0);
                 };
                 const ConvGeom g = kConvs[6];  // a weight gradient split in parts
                 const Tensor gy = on(d, randn(g.ys().numel()), g.ys());
                 const Tensor x = on(d, randn(g.xs().numel()), g.xs());
                 same(conv2d_backward_weight(gy, x, g.ws(), g.attrs()),
                      conv2d_backward_weight(gy, x, g.ws(), g.attrs()));
                 const Tensor a = on(d, randn(37 * 4099), {37, 4099});  // K split in parts
                 const Tensor b = on(d, randn(4099 * 21), {4099, 21});
                 same(matmul(a, b), matmul(a, b));
                 const Tensor col = on(d, randn(3000 * 7), {3000, 7});  // a long axis in parts
                 same(sum(col, 0), sum(col, 0));
                 const Shape bs{8, 3, 32, 32};  // channels in parts
                 const Tensor bx = on(d, randn(bs.numel()), bs), bg = on(d, randn(bs.numel()), bs);
                 const Tensor w = on(d, randn(3), {3}), mean = on(d, randn(3), {3});
                 const Tensor invstd = on(d, uniform(3, 0.5f, 2.0f), {3});
                 const NormGrads r1 = batch_norm_backward(bg, bx, w, mean, invstd, true);
                 const NormGrads r2 = batch_norm_backward(bg, bx, w, mean, invstd, true);
                 same(r1.x, r2.x);
                 same(r1.weight, r2.weight);
                 same(r1.bias, r2.bias);
               }});
  c.push_back(
      {"conv2d_groups_errors", OpId::conv2d, [](Device& d) {
         const Tensor x = on(d, randn(2 * 4 * 5 * 5), {2, 4, 5, 5});
         Conv2dAttrs a;
         a.groups = 3;  // 4 channels do not split into 3 groups
         EXPECT_THROW(conv2d(x, on(d, randn(3 * 1 * 3 * 3), {3, 1, 3, 3}), a), InvalidArgument);
         a.groups = 2;  // 3 output channels do not split into 2 groups
         EXPECT_THROW(conv2d(x, on(d, randn(3 * 2 * 3 * 3), {3, 2, 3, 3}), a), InvalidArgument);
         a.dilation_h = 3;  // effective kernel 7 > 5
         EXPECT_THROW(conv2d(x, on(d, randn(4 * 2 * 3 * 3), {4, 2, 3, 3}), a), InvalidArgument);
       }});
  return c;
}

std::vector<Case> tessera::conformance::nn_grad_cases() {
  std::vector<Case> c;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    c.push_back({fmt::format("grad_bmm_broadcast_{}{}", ta ? "T" : "N", tb ? "T" : "N"), OpId::bmm,
                 [=](Device& d) {
                   const Shape as = ta ? Shape{2, 1, 4, 3} : Shape{2, 1, 3, 4};
                   const Shape bs = tb ? Shape{5, 4} : Shape{4, 5};
                   gradcheck(d, {{as, randn(as.numel())}, {bs, randn(bs.numel())}},
                             [=](auto& v) { return tt::bmm(v[0], v[1], ta, tb); });
                 }});
  }
  c.push_back({"grad_bmm_batch_broadcast_both", OpId::bmm, [](Device& d) {
                 gradcheck(d, {{{3, 1, 2, 4}, randn(24)}, {{1, 2, 4, 3}, randn(24)}},
                           [](auto& v) { return tt::matmul(v[0], v[1]); });
               }});
  c.push_back({"grad_matmul_vector", OpId::bmm, [](Device& d) {
                 gradcheck(d, {{{4}, randn(4)}, {{2, 4, 3}, randn(24)}},
                           [](auto& v) { return tt::matmul(v[0], v[1]); });
               }});
  c.push_back({"grad_embedding_padding_idx", OpId::embedding, [](Device& d) {
                 // Rows 0..3 picked, row 4 (padding_idx -1) never: its gradient is zero either
                 // way (embedding_backward's cases check that a used padding row gets none).
                 const Tensor idx = Tensor::from<std::int32_t>(labels(20, 4), {4, 5}, &d);
                 gradcheck(d, {{{5, 3}, randn(15)}},
                           [idx](auto& v) { return tt::embedding(v[0], idx, -1); });
               }});
  c.push_back({"grad_avg_pool2d", OpId::avg_pool2d, [](Device& d) {
                 gradcheck(d, {{{2, 3, 7, 6}, randn(252)}}, [](auto& v) {
                   return tt::avg_pool2d(v[0], AvgPool2dAttrs{3, 3, 2, 2, 1, 1, false});
                 });
               }});
  c.push_back({"grad_adaptive_avg_pool2d", OpId::adaptive_avg_pool2d, [](Device& d) {
                 gradcheck(d, {{{2, 3, 7, 6}, randn(252)}},
                           [](auto& v) { return tt::adaptive_avg_pool2d(v[0], 3, 4); });
               }});
  c.push_back({"grad_conv2d_groups_dilation", OpId::conv2d, [](Device& d) {
                 const ConvGeom g = kConvs[0];
                 gradcheck(d, {{g.xs(), randn(g.xs().numel())}, {g.ws(), randn(g.ws().numel())}},
                           [g](auto& v) { return tt::conv2d(v[0], v[1], g.attrs()); });
               }});
  c.push_back({"grad_conv2d_depthwise", OpId::conv2d, [](Device& d) {
                 const ConvGeom g = kConvs[1];
                 gradcheck(d, {{g.xs(), randn(g.xs().numel())}, {g.ws(), randn(g.ws().numel())}},
                           [g](auto& v) { return tt::conv2d(v[0], v[1], g.attrs()); });
               }});
  return c;
}
