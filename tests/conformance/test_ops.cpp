// Conformance: every op on every device against float64 references, on fresh random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "cases.h"
#include "tessera/tessera.h"

using namespace tessera;
using namespace tessera::conformance;

namespace {

// ----- references -----
Ref ref_matmul(const Vec& a, const Vec& b, std::int64_t m, std::int64_t n, std::int64_t k, bool ta,
               bool tb) {
  // Both operands first as rows along K in double (a as [m, k], b as [n, k]), so that every sum
  // walks two contiguous rows (the wide cases' products under ASan: seconds, not tens of them).
  const auto at = [](std::int64_t i) { return static_cast<std::size_t>(i); };
  std::vector<double> ar(at(m * k)), br(at(n * k));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t p = 0; p < k; ++p)
      ar[at(i * k + p)] = ta ? a[at(p * m + i)] : a[at(i * k + p)];
  for (std::int64_t j = 0; j < n; ++j)
    for (std::int64_t p = 0; p < k; ++p)
      br[at(j * k + p)] = tb ? b[at(j * k + p)] : b[at(p * n + j)];
  Ref c(at(m * n), 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      const double *x = ar.data() + i * k, *y = br.data() + j * k;
      double s = 0;
      for (std::int64_t p = 0; p < k; ++p) s += x[p] * y[p];
      c[at(i * n + j)] = s;
    }
  return c;
}

struct ConvGeom {
  std::int64_t n = 2, c = 3, h = 9, w = 8, o = 4, kh = 3, kw = 2;
  int sh = 2, sw = 1, ph = 1, pw = 0;
  std::int64_t ho() const { return (h + 2 * ph - kh) / sh + 1; }
  std::int64_t wo() const { return (w + 2 * pw - kw) / sw + 1; }
  Conv2dAttrs attrs() const { return {sh, sw, ph, pw}; }
  // Calls f(n, o, oh, ow, c, i, j, x_index or -1 when padding, w_index, y_index).
  template <typename F>
  void each(F f) const {
    for (std::int64_t b = 0; b < n; ++b)
      for (std::int64_t oc = 0; oc < o; ++oc)
        for (std::int64_t y = 0; y < ho(); ++y)
          for (std::int64_t x = 0; x < wo(); ++x)
            for (std::int64_t ic = 0; ic < c; ++ic)
              for (std::int64_t i = 0; i < kh; ++i)
                for (std::int64_t j = 0; j < kw; ++j) {
                  const std::int64_t ih = y * sh - ph + i, iw = x * sw - pw + j;
                  if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
                  f(((b * c + ic) * h + ih) * w + iw, ((oc * c + ic) * kh + i) * kw + j,
                    ((b * o + oc) * ho() + y) * wo() + x);
                }
  }
};

// ----- the cases -----
template <typename F>
Case unary_case(const std::string& name, OpId op, Tensor (*fn)(const Tensor&), F ref, float lo,
                float hi) {
  return {name, op, [=](Device& d) {
            const Vec x = uniform(3 * 17 * 5, lo, hi);
            const Vec y = fn(on(d, x, {3, 17, 5})).to_vector<float>();
            Ref r(x.size());
            for (std::size_t i = 0; i < x.size(); ++i) r[i] = ref(double(x[i]));
            expect_close(y, r);
          }};
}

template <typename F>
Case binary_case(const std::string& name, OpId op, Tensor (*fn)(const Tensor&, const Tensor&),
                 F ref) {
  return {name, op, [=](Device& d) {
            // [4,1,5] (op) [3,1] -> [4,3,5], and same-shape contiguous operands
            const Vec a = randn(20), b = uniform(3, 0.5f, 2.0f);
            const Vec y = fn(on(d, a, {4, 1, 5}), on(d, b, {3, 1})).to_vector<float>();
            Ref r(60);
            for (int i = 0; i < 4; ++i)
              for (int j = 0; j < 3; ++j)
                for (int k = 0; k < 5; ++k)
                  r[(i * 3 + j) * 5 + k] = ref(double(a[i * 5 + k]), double(b[j]));
            expect_close(y, r);
            const Vec c = randn(1000), e = uniform(1000, 0.5f, 2.0f);
            const Vec z = fn(on(d, c, {10, 100}), on(d, e, {10, 100})).to_vector<float>();
            Ref rz(1000);
            for (std::size_t i = 0; i < 1000; ++i) rz[i] = ref(double(c[i]), double(e[i]));
            expect_close(z, rz);
          }};
}

// x of shape |dims| ([3,7,5] unless given) reduced along |axis|.
template <typename F>
Ref reduce_ref(const Vec& x, int axis, F f, const Shape& dims = {3, 7, 5}) {
  std::int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= dims[i];
  for (int i = axis + 1; i < dims.rank(); ++i) inner *= dims[i];
  Ref r;
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t in = 0; in < inner; ++in) {
      std::vector<double> line;
      for (std::int64_t k = 0; k < dims[axis]; ++k)
        line.push_back(x[(o * dims[axis] + k) * inner + in]);
      r.push_back(f(line));
    }
  return r;
}

// float32_matmul_precision set for a scope, "highest" again after it.
struct PrecisionScope {
  explicit PrecisionScope(MatmulPrecision p) { set_float32_matmul_precision(p); }
  ~PrecisionScope() { set_float32_matmul_precision(MatmulPrecision::highest); }
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;
};

}  // namespace

std::vector<Case> tessera::conformance::op_cases() {
  std::vector<Case> c;
  // Odd extents, and extents that are multiples of 4 (the GPU plugins' vectorised GEMM paths).
  struct Size {
    const char* prefix;
    std::int64_t m, n, k;
  };
  // Sizes: odd extents; multiples of 4 (vector paths); taller than wide and large enough that the
  // CPU plugin cuts it into row blocks (the aligned case is cut into column blocks).
  // A long K under a small output: the GPU plugins split K in parts (ops_gemm.cpp): from 2048
  // whatever the grid, from 1024 where the largest tiles leave half the compute units idle (on
  // GPUs; the CPU drivers of CI take the plain loop there). Wide: on NVIDIA GPUs each layout runs
  // nvidia/gemm_ffma.cl's kernel, the operands stored along K first copied transposed.
  for (const Size sz :
       {Size{"matmul_", 37, 53, 29}, Size{"matmul_aligned_", 68, 132, 36},
        Size{"matmul_tall_", 150, 40, 51}, Size{"matmul_long_k_", 37, 21, 4099},
        Size{"matmul_long_k_aligned_", 40, 36, 4096}, Size{"matmul_mid_k_", 45, 29, 1531},
        Size{"matmul_mid_k_aligned_", 132, 64, 1536}, Size{"matmul_wide_", 2052, 2060, 32}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        c.push_back({fmt::format("{}{}{}", sz.prefix, ta ? "T" : "N", tb ? "T" : "N"), OpId::matmul,
                     [=](Device& d) {
                       const auto [prefix, m, n, k] = sz;
                       const Vec a = randn(m * k), b = randn(k * n);
                       const Tensor ta_ = on(d, a, ta ? Shape{k, m} : Shape{m, k});
                       const Tensor tb_ = on(d, b, tb ? Shape{n, k} : Shape{k, n});
                       expect_close(matmul(ta_, tb_, ta, tb).to_vector<float>(),
                                    ref_matmul(a, b, m, n, k, ta, tb));
                     }});
  // A batch of products that each span several of the GPU plugins' largest tiles (128 x 128), with
  // ragged edges and a K of a few slices: enough work-groups that the plan takes those tiles
  // without splitting K (on NVIDIA GPUs, TN runs nvidia/gemm_ffma.cl's kernel).
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      c.push_back({fmt::format("matmul_batched_tiles_{}{}", ta ? "T" : "N", tb ? "T" : "N"),
                   OpId::matmul, [=](Device& d) {
                     constexpr std::int64_t batch = 9, m = 260, n = 516, k = 36;
                     const Vec a = randn(batch * m * k), b = randn(batch * k * n);
                     const Tensor ta_ = on(d, a, ta ? Shape{batch, k, m} : Shape{batch, m, k});
                     const Tensor tb_ = on(d, b, tb ? Shape{batch, n, k} : Shape{batch, k, n});
                     Ref r;
                     for (std::int64_t i = 0; i < batch; ++i) {
                       const Vec ai(a.begin() + i * m * k, a.begin() + (i + 1) * m * k);
                       const Vec bi(b.begin() + i * k * n, b.begin() + (i + 1) * k * n);
                       const Ref ri = ref_matmul(ai, bi, m, n, k, ta, tb);
                       r.insert(r.end(), ri.begin(), ri.end());
                     }
                     expect_close(matmul(ta_, tb_, ta, tb).to_vector<float>(), r);
                   }});
  // addmm, as a Linear layer calls it (b transposed) and plain, at a size the CPU plugin splits;
  // wide: on NVIDIA GPUs NN copies a transposed for nvidia/gemm_ffma.cl's kernel, K split.
  for (const Size sz : {Size{"addmm_", 37, 53, 29}, Size{"addmm_aligned_", 68, 132, 36},
                        Size{"addmm_long_k_", 37, 21, 4099}, Size{"addmm_mid_k_", 40, 36, 1100},
                        Size{"addmm_wide_", 132, 1028, 2052}})
    for (bool tb : {false, true})
      c.push_back(
          {fmt::format("{}N{}", sz.prefix, tb ? "T" : "N"), OpId::addmm, [=](Device& d) {
             const auto [prefix, m, n, k] = sz;
             const Vec a = randn(m * k), b = randn(k * n), bias = randn(n);
             Ref r = ref_matmul(a, b, m, n, k, false, tb);
             for (std::int64_t i = 0; i < m; ++i)
               for (std::int64_t j = 0; j < n; ++j) r[i * n + j] += bias[j];
             const Tensor ta_ = on(d, a, {m, k});
             const Tensor tb_ = on(d, b, tb ? Shape{n, k} : Shape{k, n});
             expect_close(addmm(ta_, tb_, on(d, bias, {n}), false, tb).to_vector<float>(), r);
             // A bias that is not one value per output column is refused, naming addmm.
             try {
               (void)addmm(ta_, tb_, on(d, randn(n + 1), {n + 1}), false, tb);
               ADD_FAILURE() << "a bias of " << n + 1 << " values was accepted";
             } catch (const InvalidArgument& e) {
               EXPECT_NE(std::string(e.what()).find("addmm"), std::string::npos) << e.what();
             }
           }});
  // float32_matmul_precision high and medium (TF32 products on NVIDIA's tensor cores through
  // OpenCL; f32 elsewhere): within about 18 and 11 significant bits' error. Sizes with partial
  // tiles, and a long K that the GPU plugins split.
  for (const MatmulPrecision p : {MatmulPrecision::high, MatmulPrecision::medium}) {
    const double tol = p == MatmulPrecision::high ? 2e-5 : 2e-3;
    const std::string level(matmul_precision_name(p));
    for (const Size sz : {Size{"", 260, 200, 136}, Size{"long_k_", 132, 68, 4096}})
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          c.push_back({fmt::format("matmul_precision_{}_{}{}{}", level, sz.prefix, ta ? "T" : "N",
                                   tb ? "T" : "N"),
                       OpId::matmul, [=](Device& d) {
                         const auto [prefix, m, n, k] = sz;
                         const Vec a = randn(m * k), b = randn(k * n);
                         const Tensor ta_ = on(d, a, ta ? Shape{k, m} : Shape{m, k});
                         const Tensor tb_ = on(d, b, tb ? Shape{n, k} : Shape{k, n});
                         const PrecisionScope scope(p);
                         expect_close(matmul(ta_, tb_, ta, tb).to_vector<float>(),
                                      ref_matmul(a, b, m, n, k, ta, tb), tol);
                       }});
    c.push_back({fmt::format("addmm_precision_{}_NT", level), OpId::addmm, [=](Device& d) {
                   const std::int64_t m = 136, n = 196, k = 260;
                   const Vec a = randn(m * k), b = randn(k * n), bias = randn(n);
                   Ref r = ref_matmul(a, b, m, n, k, false, true);
                   for (std::int64_t i = 0; i < m; ++i)
                     for (std::int64_t j = 0; j < n; ++j) r[i * n + j] += bias[j];
                   const PrecisionScope scope(p);
                   expect_close(
                       addmm(on(d, a, {m, k}), on(d, b, {n, k}), on(d, bias, {n}), false, true)
                           .to_vector<float>(),
                       r, tol);
                 }});
  }
  c.push_back({"matmul_transposed_view", OpId::matmul, [](Device& d) {
                 const Vec a = randn(8 * 5), b = randn(8 * 6);
                 const Tensor y = matmul(on(d, a, {8, 5}).t(), on(d, b, {8, 6}));
                 expect_close(y.to_vector<float>(), ref_matmul(a, b, 5, 6, 8, true, false));
               }});
  c.push_back(
      binary_case("add", OpId::add, &tessera::add, [](double a, double b) { return a + b; }));
  c.push_back(
      binary_case("sub", OpId::sub, &tessera::sub, [](double a, double b) { return a - b; }));
  c.push_back(
      binary_case("mul", OpId::mul, &tessera::mul, [](double a, double b) { return a * b; }));
  c.push_back(
      binary_case("div", OpId::div, &tessera::div, [](double a, double b) { return a / b; }));
  c.push_back({"add_scalar", OpId::add_scalar, [](Device& d) {
                 const Vec x = randn(300);
                 Ref r(x.begin(), x.end());
                 for (double& v : r) v += 0.75;
                 expect_close(add_scalar(on(d, x, {300}), 0.75).to_vector<float>(), r);
               }});
  c.push_back({"mul_scalar", OpId::mul_scalar, [](Device& d) {
                 const Vec x = randn(300);
                 Ref r(x.begin(), x.end());
                 for (double& v : r) v *= -1.5;
                 expect_close(mul_scalar(on(d, x, {300}), -1.5).to_vector<float>(), r);
               }});
  c.push_back(unary_case(
      "relu", OpId::relu, &tessera::relu, [](double v) { return v > 0 ? v : 0; }, -2, 2));
  c.push_back(unary_case(
      "exp", OpId::exp, &tessera::exp, [](double v) { return std::exp(v); }, -4, 4));
  c.push_back(unary_case(
      "log", OpId::log, &tessera::log, [](double v) { return std::log(v); }, 0.01f, 10));
  c.push_back(unary_case(
      "tanh", OpId::tanh, &tessera::tanh, [](double v) { return std::tanh(v); }, -4, 4));
  c.push_back(unary_case(
      "sigmoid", OpId::sigmoid, &tessera::sigmoid, [](double v) { return 1 / (1 + std::exp(-v)); },
      -6, 6));
  c.push_back(
      {"relu_backward", OpId::relu_backward, [](Device& d) {
         const Vec g = randn(400), x = randn(400);
         Ref r(400);
         for (int i = 0; i < 400; ++i) r[i] = x[i] > 0 ? g[i] : 0;
         expect_close(relu_backward(on(d, g, {20, 20}), on(d, x, {20, 20})).to_vector<float>(), r);
       }});
  // Few, long lines: the GPU plugins sum each in parts, then the parts (ops_base.cpp's sum_lines).
  for (const Shape& x_shape : {Shape{3000, 7}, Shape{3, 2000, 5}})
    for (const bool is_mean : {false, true}) {
      const int axis = x_shape.rank() - 2;
      c.push_back({fmt::format("{}_long_axis_{}", is_mean ? "mean" : "sum", x_shape.rank()),
                   is_mean ? OpId::mean : OpId::sum, [=](Device& d) {
                     const Vec x = randn(x_shape.numel());
                     const Tensor t = on(d, x, x_shape);
                     expect_close((is_mean ? mean(t, axis) : sum(t, axis)).to_vector<float>(),
                                  reduce_ref(
                                      x, axis,
                                      [&](auto& l) {
                                        double s = 0;
                                        for (double v : l) s += v;
                                        return is_mean ? s / double(l.size()) : s;
                                      },
                                      x_shape));
                   }});
    }
  for (int axis : {0, 1, 2}) {
    auto x_shape = Shape{3, 7, 5};
    c.push_back({fmt::format("sum_axis{}", axis), OpId::sum, [=](Device& d) {
                   const Vec x = randn(105);
                   const Tensor y = sum(on(d, x, x_shape), axis, axis == 1);
                   expect_close(y.to_vector<float>(), reduce_ref(x, axis, [](auto& l) {
                                  double s = 0;
                                  for (double v : l) s += v;
                                  return s;
                                }));
                   EXPECT_EQ(y.rank(), axis == 1 ? 3 : 2);
                 }});
    c.push_back({fmt::format("mean_axis{}", axis), OpId::mean, [=](Device& d) {
                   const Vec x = randn(105);
                   expect_close(mean(on(d, x, x_shape), axis).to_vector<float>(),
                                reduce_ref(x, axis, [](auto& l) {
                                  double s = 0;
                                  for (double v : l) s += v;
                                  return s / double(l.size());
                                }));
                 }});
    c.push_back({fmt::format("max_axis{}", axis), OpId::max, [=](Device& d) {
                   const Vec x = randn(105);
                   expect_close(max(on(d, x, x_shape), axis).to_vector<float>(),
                                reduce_ref(x, axis, [](auto& l) {
                                  return *std::max_element(l.begin(), l.end());
                                }));
                 }});
    c.push_back({fmt::format("argmax_axis{}", axis), OpId::argmax, [=](Device& d) {
                   const Vec x = randn(105);
                   const auto got = argmax(on(d, x, x_shape), axis).to_vector<std::int32_t>();
                   const Ref want = reduce_ref(x, axis, [](auto& l) {
                     return double(std::max_element(l.begin(), l.end()) - l.begin());
                   });
                   ASSERT_EQ(got.size(), want.size());
                   for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << i;
                 }});
    c.push_back(
        {fmt::format("max_backward_axis{}", axis), OpId::max_backward, [=](Device& d) {
           const Vec x = randn(105);
           const Tensor tx = on(d, x, x_shape);
           const Shape reduced = max(tx, axis).shape();
           const Vec g = randn(reduced.numel());
           const Vec y = max_backward(on(d, g, reduced), tx, axis).to_vector<float>();
           // Reference: the gradient of line l at its first maximum (argmax's reference).
           const Ref best = reduce_ref(x, axis, [](auto& l) {
             return double(std::max_element(l.begin(), l.end()) - l.begin());
           });
           const std::int64_t n = x_shape[axis];
           const std::int64_t inner = contiguous_strides(x_shape)[axis];
           Ref r(x.size(), 0.0);
           for (std::int64_t l = 0; l < reduced.numel(); ++l)
             r[(l / inner) * n * inner + l % inner + static_cast<std::int64_t>(best[l]) * inner] =
                 g[l];
           expect_close(y, r);
         }});
    for (bool lg : {false, true})
      c.push_back({fmt::format("{}_axis{}", lg ? "log_softmax" : "softmax", axis),
                   lg ? OpId::log_softmax : OpId::softmax, [=](Device& d) {
                     const Vec x = randn(105, 3.0f);
                     const Tensor t = on(d, x, x_shape);
                     const Vec y =
                         (lg ? log_softmax(t, axis) : softmax(t, axis)).to_vector<float>();
                     // Reference: per line, then scattered back into [3,7,5] order.
                     const std::int64_t dims[3] = {3, 7, 5};
                     std::int64_t inner = 1;
                     for (int i = axis + 1; i < 3; ++i) inner *= dims[i];
                     Ref r(105);
                     for (std::int64_t base = 0; base < 105; ++base) {
                       const std::int64_t k = (base / inner) % dims[axis];
                       const std::int64_t start = base - k * inner;
                       double m = -1e300, s = 0;
                       for (std::int64_t q = 0; q < dims[axis]; ++q)
                         m = std::max(m, double(x[start + q * inner]));
                       for (std::int64_t q = 0; q < dims[axis]; ++q)
                         s += std::exp(x[start + q * inner] - m);
                       r[base] = lg ? x[base] - m - std::log(s) : std::exp(x[base] - m) / s;
                     }
                     expect_close(y, r);
                   }});
  }
  c.push_back({"cross_entropy", OpId::cross_entropy, [](Device& d) {
                 const Vec x = randn(16 * 10, 2.0f);
                 const auto l = labels(16, 10);
                 double loss = 0;
                 for (int i = 0; i < 16; ++i) {
                   double m = -1e300, s = 0;
                   for (int k = 0; k < 10; ++k) m = std::max(m, double(x[i * 10 + k]));
                   for (int k = 0; k < 10; ++k) s += std::exp(x[i * 10 + k] - m);
                   loss += m + std::log(s) - x[i * 10 + l[i]];
                 }
                 const Tensor y =
                     cross_entropy(on(d, x, {16, 10}), Tensor::from<std::int32_t>(l, {16}, &d));
                 EXPECT_EQ(y.rank(), 0);
                 expect_close({y.item()}, {loss / 16});
               }});
  c.push_back({"cross_entropy_backward", OpId::cross_entropy_backward, [](Device& d) {
                 const Vec x = randn(16 * 10, 2.0f), g = randn(1);
                 const auto l = labels(16, 10);
                 Ref r(160);
                 for (int i = 0; i < 16; ++i) {
                   double m = -1e300, s = 0;
                   for (int k = 0; k < 10; ++k) m = std::max(m, double(x[i * 10 + k]));
                   for (int k = 0; k < 10; ++k) s += std::exp(x[i * 10 + k] - m);
                   for (int k = 0; k < 10; ++k)
                     r[i * 10 + k] = (std::exp(x[i * 10 + k] - m) / s - (k == l[i])) * g[0] / 16;
                 }
                 expect_close(
                     cross_entropy_backward(on(d, x, {16, 10}),
                                            Tensor::from<std::int32_t>(l, {16}, &d), on(d, g, {}))
                         .to_vector<float>(),
                     r);
               }});
  const ConvGeom cg;
  c.push_back({"conv2d", OpId::conv2d, [=](Device& d) {
                 const Vec x = randn(cg.n * cg.c * cg.h * cg.w),
                           w = randn(cg.o * cg.c * cg.kh * cg.kw);
                 Ref r(static_cast<std::size_t>(cg.n * cg.o * cg.ho() * cg.wo()), 0.0);
                 cg.each([&](auto xi, auto wi, auto yi) { r[yi] += double(x[xi]) * w[wi]; });
                 const Tensor y = conv2d(on(d, x, {cg.n, cg.c, cg.h, cg.w}),
                                         on(d, w, {cg.o, cg.c, cg.kh, cg.kw}), cg.attrs());
                 EXPECT_EQ(y.shape(), (Shape{cg.n, cg.o, cg.ho(), cg.wo()}));
                 expect_close(y.to_vector<float>(), r);
               }});
  c.push_back({"conv2d_backward_input", OpId::conv2d_backward_input, [=](Device& d) {
                 const Vec gy = randn(cg.n * cg.o * cg.ho() * cg.wo()),
                           w = randn(cg.o * cg.c * cg.kh * cg.kw);
                 Ref r(static_cast<std::size_t>(cg.n * cg.c * cg.h * cg.w), 0.0);
                 cg.each([&](auto xi, auto wi, auto yi) { r[xi] += double(gy[yi]) * w[wi]; });
                 expect_close(conv2d_backward_input(on(d, gy, {cg.n, cg.o, cg.ho(), cg.wo()}),
                                                    on(d, w, {cg.o, cg.c, cg.kh, cg.kw}),
                                                    {cg.n, cg.c, cg.h, cg.w}, cg.attrs())
                                  .to_vector<float>(),
                              r);
               }});
  c.push_back({"conv2d_backward_weight", OpId::conv2d_backward_weight, [=](Device& d) {
                 const Vec gy = randn(cg.n * cg.o * cg.ho() * cg.wo()),
                           x = randn(cg.n * cg.c * cg.h * cg.w);
                 Ref r(static_cast<std::size_t>(cg.o * cg.c * cg.kh * cg.kw), 0.0);
                 cg.each([&](auto xi, auto wi, auto yi) { r[wi] += double(gy[yi]) * x[xi]; });
                 expect_close(conv2d_backward_weight(on(d, gy, {cg.n, cg.o, cg.ho(), cg.wo()}),
                                                     on(d, x, {cg.n, cg.c, cg.h, cg.w}),
                                                     {cg.o, cg.c, cg.kh, cg.kw}, cg.attrs())
                                  .to_vector<float>(),
                              r);
               }});
  for (int k : {2, 3})
    c.push_back({fmt::format("max_pool2d_k{}s2", k), OpId::max_pool2d, [=](Device& d) {
                   const std::int64_t n = 2, ch = 3, h = 9, w = 8, ho = (h - k) / 2 + 1,
                                      wo = (w - k) / 2 + 1;
                   const Vec x = randn(n * ch * h * w), g = randn(n * ch * ho * wo);
                   const Pool2dAttrs a{k, k, 2, 2};
                   auto [y, idx] = max_pool2d(on(d, x, {n, ch, h, w}), a);
                   Ref ry, rdx(x.size(), 0.0);
                   for (std::int64_t p = 0; p < n * ch; ++p)
                     for (std::int64_t oh = 0; oh < ho; ++oh)
                       for (std::int64_t ow = 0; ow < wo; ++ow) {
                         std::int64_t best = -1;
                         for (int i = 0; i < k; ++i)
                           for (int j = 0; j < k; ++j) {
                             const std::int64_t at = (oh * 2 + i) * w + ow * 2 + j;
                             if (best < 0 || x[p * h * w + at] > x[p * h * w + best]) best = at;
                           }
                         ry.push_back(x[p * h * w + best]);
                         rdx[p * h * w + best] += g[(p * ho + oh) * wo + ow];
                       }
                   expect_close(y.to_vector<float>(), ry);
                   // The backward pass, through the indices this device produced.
                   if (d.kernel(OpId::max_pool2d_backward))
                     expect_close(
                         max_pool2d_backward(on(d, g, {n, ch, ho, wo}), idx, {n, ch, h, w}, a)
                             .to_vector<float>(),
                         rdx);
                 }});
  c.push_back({"copy_strided", OpId::copy, [](Device& d) {
                 const Vec x = randn(5 * 7);
                 const Vec y = on(d, x, {5, 7}).t().contiguous().to_vector<float>();
                 Ref r;
                 for (int j = 0; j < 7; ++j)
                   for (int i = 0; i < 5; ++i) r.push_back(x[i * 7 + j]);
                 expect_close(y, r);
                 const Vec row = randn(4);
                 const Vec e = copy(on(d, row, {4}).expand({3, 4})).to_vector<float>();
                 Ref re;
                 for (int i = 0; i < 3; ++i) re.insert(re.end(), row.begin(), row.end());
                 expect_close(e, re);
               }});
  c.push_back({"fill", OpId::fill, [](Device& d) {
                 const float v = randn(1)[0];
                 expect_close(Tensor::full({33}, v, DType::f32, &d).to_vector<float>(),
                              Ref(33, double(v)));
                 const auto i = Tensor::full({5}, -7, DType::i32, &d).to_vector<std::int32_t>();
                 EXPECT_EQ(i, std::vector<std::int32_t>(5, -7));
               }});
  c.push_back({"dropout_mask", OpId::dropout_mask, [](Device& d) {
                 // Every device gives the same mask: the reference is dropout_uniform itself.
                 DropoutAttrs a;
                 a.p = uniform(1, 0.2f, 0.7f)[0];
                 a.seed = (std::uint64_t{rng()()} << 32) | rng()();
                 Tensor t = Tensor::empty({3, 1000}, DType::f32, &d);
                 dropout_mask_(t, a);
                 const Vec y = t.to_vector<float>();
                 Ref r(y.size());
                 std::size_t kept = 0;
                 for (std::size_t i = 0; i < r.size(); ++i) {
                   const bool keep = dropout_uniform(a.seed, static_cast<std::uint32_t>(i)) >= a.p;
                   r[i] = keep ? 1.0 / (1.0 - double(a.p)) : 0.0;
                   kept += keep;
                 }
                 expect_close(y, r);
                 // The kept fraction is 1-p within five standard deviations.
                 const double frac = double(kept) / double(r.size());
                 const double sd = std::sqrt(double(a.p) * (1 - a.p) / double(r.size()));
                 EXPECT_NEAR(frac, 1 - a.p, 5 * sd);
               }});
  c.push_back({"dropout", OpId::dropout, [](Device& d) {
                 // x times dropout_mask's mask for x's shape: the same elements kept on every
                 // device, NaN kept as NaN where dropped (torch's x * mask does the same). Rows
                 // of 1531 and of 1532 (the GPUs' four-a-invocation path).
                 for (const std::int64_t cols : {1531, 1532}) {
                   DropoutAttrs a;
                   a.p = uniform(1, 0.2f, 0.7f)[0];
                   a.seed = (std::uint64_t{rng()()} << 32) | rng()();
                   Vec x = randn(2 * cols);
                   x[7] = std::numeric_limits<float>::quiet_NaN();
                   const Vec y = dropout(Tensor::from(x, Shape{2, cols}, &d), a).to_vector<float>();
                   ASSERT_EQ(y.size(), x.size());
                   EXPECT_TRUE(std::isnan(y[7]));
                   Ref r(x.size());
                   for (std::size_t i = 0; i < r.size(); ++i) {
                     const bool keep =
                         dropout_uniform(a.seed, static_cast<std::uint32_t>(i)) >= a.p;
                     r[i] = i == 7 ? 0.0 : double(x[i] * (keep ? 1.0f / (1.0f - a.p) : 0.0f));
                   }
                   Vec finite = y;
                   finite[7] = 0.0f;
                   expect_close(finite, r);
                 }
               }});
  for (int variant = 0; variant < 4; ++variant)
    c.push_back({fmt::format("sgd_update_{}", variant), OpId::sgd_update, [=](Device& d) {
                   SgdAttrs a;
                   a.lr = 0.1f;
                   a.momentum = variant == 0 ? 0.0f : 0.9f;
                   a.weight_decay = variant >= 2 ? 0.01f : 0.0f;
                   a.dampening = variant == 2 ? 0.1f : 0.0f;
                   a.nesterov = variant == 3;
                   a.first_step = variant == 1;
                   const Vec p = randn(257), g = randn(257), v = randn(257);
                   Tensor tp = on(d, p, {257}), tv = on(d, v, {257});
                   sgd_update_(tp, on(d, g, {257}), tv, a);
                   Ref rp(257), rv(257);
                   for (int i = 0; i < 257; ++i) {
                     double dd = g[i] + double(a.weight_decay) * p[i], vv = v[i];
                     if (a.momentum != 0) {
                       vv = a.first_step ? dd : a.momentum * vv + (1 - a.dampening) * dd;
                       dd = a.nesterov ? dd + a.momentum * vv : vv;
                     }
                     rp[i] = p[i] - a.lr * dd;
                     rv[i] = vv;
                   }
                   expect_close(tp.to_vector<float>(), rp);
                   expect_close(tv.to_vector<float>(), rv);
                 }});
  c.push_back({"adam_update", OpId::adam_update, [](Device& d) {
                 AdamAttrs a;
                 a.lr = 0.01f;
                 a.weight_decay = 0.01f;
                 a.step = 3;
                 const Vec p = randn(257), g = randn(257), m = randn(257, 0.1f),
                           v = uniform(257, 0.0f, 0.1f);
                 Tensor tp = on(d, p, {257}), tm = on(d, m, {257}), tv = on(d, v, {257});
                 adam_update_(tp, on(d, g, {257}), tm, tv, a);
                 Ref rp(257), rm(257), rv(257);
                 for (int i = 0; i < 257; ++i) {
                   const double dd = g[i] + double(a.weight_decay) * p[i];
                   rm[i] = a.beta1 * double(m[i]) + (1 - double(a.beta1)) * dd;
                   rv[i] = a.beta2 * double(v[i]) + (1 - double(a.beta2)) * dd * dd;
                   const double mh = rm[i] / (1 - std::pow(double(a.beta1), 3.0));
                   const double vh = rv[i] / (1 - std::pow(double(a.beta2), 3.0));
                   rp[i] = p[i] - a.lr * mh / (std::sqrt(vh) + a.eps);
                 }
                 expect_close(tm.to_vector<float>(), rm);
                 expect_close(tv.to_vector<float>(), rv);
                 expect_close(tp.to_vector<float>(), rp, 1e-5);
               }});
  return c;
}
