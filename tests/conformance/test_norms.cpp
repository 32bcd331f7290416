// Conformance of layer_norm, batch_norm, the losses, sum_squares/total_norm and adamw_update
// against float64 references on fresh random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "cases.h"
#include "reduce_util.h"
#include "tessera/tessera.h"

using namespace tessera;
using namespace tessera::conformance;
using namespace tessera::conformance::reduce;

namespace {

struct LnCase {
  Shape shape;
  int norm_dims;
};
// [40, 2052]: more columns than a work-group has invocations; [601, 20]: rows of 4-float loads,
// a last work-group of the GPU kernels' 8 rows partly past the end, and 10 blocks of their column
// partials (64 rows each), summed by 8 invocations a column.
const LnCase kLnCases[] = {{{5, 127}, 1}, {{3, 4, 6}, 2},  {{1, 1025}, 1}, {{7, 3}, 1},
                           {{0, 8}, 1},   {{40, 2052}, 1}, {{601, 20}, 1}};

std::string shape_name(const Shape& s) {
  std::string r = s.str();
  std::replace(r.begin(), r.end(), ',', 'x');
  return r.substr(1, r.size() - 2);
}

// Reference layer norm over rows of |cols|: y, mean, rstd.
struct LnRef {
  Ref y, mean, rstd;
};
LnRef ln_ref(const Vec& x, const Vec& w, const Vec& b, std::int64_t rows, std::int64_t cols,
             double eps) {
  LnRef r{Ref(x.size()), Ref(static_cast<std::size_t>(rows)), Ref(static_cast<std::size_t>(rows))};
  for (std::int64_t i = 0; i < rows; ++i) {
    double m = 0, v = 0;
    for (std::int64_t j = 0; j < cols; ++j) m += x[i * cols + j];
    m /= double(cols);
    for (std::int64_t j = 0; j < cols; ++j) v += (x[i * cols + j] - m) * (x[i * cols + j] - m);
    const double rs = 1 / std::sqrt(v / double(cols) + eps);
    r.mean[i] = m;
    r.rstd[i] = rs;
    for (std::int64_t j = 0; j < cols; ++j)
      r.y[i * cols + j] = (x[i * cols + j] - m) * rs * w[j] + b[j];
  }
  return r;
}

// Sums against their float64 values: ||out - ref|| over the larger of ||ref|| and ||terms|| (the
// norm of each sum's terms' magnitudes), under 1e-5.
void expect_close_to_terms(const Vec& out, const Ref& ref, const Ref& terms) {
  ASSERT_EQ(out.size(), ref.size());
  double num = 0, den = 0, mag = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
    mag += terms[i] * terms[i];
  }
  const double err = std::sqrt(num / std::max({den, mag, 1e-30}));
  EXPECT_LT(err, 1e-5) << "normalised error " << err;
}

Shape trailing(const Shape& s, int k) {
  Shape r;
  for (int i = s.rank() - k; i < s.rank(); ++i) r.push_back(s[i]);
  return r;
}

void add_layer_norm_cases(std::vector<Case>& c) {
  for (const LnCase& lc : kLnCases)
    for (bool affine : {true, false}) {
      c.push_back({fmt::format("layer_norm_{}{}", shape_name(lc.shape), affine ? "" : "_plain"),
                   OpId::layer_norm, [lc, affine](Device& d) {
                     const Shape ns = trailing(lc.shape, lc.norm_dims);
                     const std::int64_t cols = ns.numel(), rows = lc.shape.numel() / cols;
                     // Offset inputs: the one-pass statistics must not lose the variance.
                     const Vec x = add_offset(randn(lc.shape.numel(), 2.0f), 3.0f);
                     const Vec w = affine ? randn(cols) : Vec(cols, 1.0f);
                     const Vec b = affine ? randn(cols) : Vec(cols, 0.0f);
                     const LayerNormResult r =
                         layer_norm(on(d, x, lc.shape), ns, affine ? on(d, w, ns) : Tensor(),
                                    affine ? on(d, b, ns) : Tensor(), 1e-5);
                     const LnRef ref = ln_ref(x, w, b, rows, cols, 1e-5);
                     Shape stats = lc.shape;
                     for (int i = lc.shape.rank() - lc.norm_dims; i < lc.shape.rank(); ++i)
                       stats[i] = 1;
                     EXPECT_EQ(r.mean.shape(), stats);
                     EXPECT_EQ(r.rstd.shape(), stats);
                     if (rows == 0) {
                       EXPECT_EQ(r.y.numel(), 0);
                       return;
                     }
                     expect_close(values(r.y), ref.y);
                     expect_close(values(r.mean), ref.mean);
                     expect_close(values(r.rstd), ref.rstd);
                   }});
    }
  for (const LnCase& lc : kLnCases) {
    if (lc.shape.numel() == 0) continue;
    c.push_back({fmt::format("layer_norm_backward_{}", shape_name(lc.shape)),
                 OpId::layer_norm_backward, [lc](Device& d) {
                   const Shape ns = trailing(lc.shape, lc.norm_dims);
                   const std::int64_t cols = ns.numel(), rows = lc.shape.numel() / cols;
                   const Vec x = randn(lc.shape.numel()), w = randn(cols), b = randn(cols),
                             g = randn(lc.shape.numel());
                   const LnRef s = ln_ref(x, w, b, rows, cols, 1e-5);
                   Vec mean(s.mean.begin(), s.mean.end()), rstd(s.rstd.begin(), s.rstd.end());
                   Ref gx(x.size()), gw(cols, 0.0), gb(cols, 0.0);
                   for (std::int64_t i = 0; i < rows; ++i) {
                     double a = 0, cc = 0;
                     auto xh = [&](std::int64_t j) {
                       return (x[i * cols + j] - double(mean[i])) * double(rstd[i]);
                     };
                     for (std::int64_t j = 0; j < cols; ++j) {
                       a += double(g[i * cols + j]) * w[j];
                       cc += double(g[i * cols + j]) * w[j] * xh(j);
                       gw[j] += g[i * cols + j] * xh(j);
                       gb[j] += g[i * cols + j];
                     }
                     for (std::int64_t j = 0; j < cols; ++j)
                       gx[i * cols + j] = rstd[i] * (double(g[i * cols + j]) * w[j] -
                                                     a / double(cols) - xh(j) * cc / double(cols));
                   }
                   Shape stats = lc.shape;
                   for (int i = lc.shape.rank() - lc.norm_dims; i < lc.shape.rank(); ++i)
                     stats[i] = 1;
                   const NormGrads r =
                       layer_norm_backward(on(d, g, lc.shape), on(d, x, lc.shape), ns,
                                           on(d, mean, stats), on(d, rstd, stats), on(d, w, ns));
                   expect_close(values(r.x), gx, 1e-4);
                   expect_close(values(r.weight), gw);
                   expect_close(values(r.bias), gb);
                 }});
  }
}

// x [N, C, S]: calls f(c, element indices of channel c).
void for_channels(const Shape& s, const std::function<void(std::int64_t, const Idx&)>& f) {
  std::int64_t sp = 1;
  for (int i = 2; i < s.rank(); ++i) sp *= s[i];
  for (std::int64_t ch = 0; ch < s[1]; ++ch) {
    Idx idx;
    for (std::int64_t n = 0; n < s[0]; ++n)
      for (std::int64_t k = 0; k < sp; ++k) idx.push_back((n * s[1] + ch) * sp + k);
    f(ch, idx);
  }
}

// {8, 3, 32, 32}: channels of 8192 elements, which the GPU plugins split in parts (ops_reduce.cpp).
const Shape kBnShapes[] = {{4, 3, 5, 5}, {7, 5}, {2, 3, 127}, {3, 1, 1}, {8, 3, 32, 32}};

void add_batch_norm_cases(std::vector<Case>& c) {
  for (const Shape& s : kBnShapes)
    for (bool training : {true, false}) {
      c.push_back({fmt::format("batch_norm_{}_{}", training ? "train" : "eval", shape_name(s)),
                   OpId::batch_norm, [s, training](Device& d) {
                     const std::int64_t ch = s[1];
                     // Inputs offset by 5 and running means positive: the f32 kernels' channel
                     // mean is good to a few ulp of its values and the running mean's update to
                     // a few ulp of its terms, so a mean near 0 (3 values of [3, 1, 1]) failed
                     // the relative check of save_mean on lavapipe (1.6e-5) with an offset of 1,
                     // and a running mean whose two terms cancel could fail likewise.
                     const Vec x = add_offset(randn(s.numel(), 2.0f), 5.0f), w = randn(ch),
                               b = randn(ch), rm = uniform(ch, 0.5f, 1.5f),
                               rv = uniform(ch, 0.5f, 2.0f);
                     // The op keeps momentum and eps as floats: the reference takes the same
                     // values (with 0.3 in double, a running mean whose two terms nearly
                     // cancelled was off by 1.2e-4 relative on cpu:0).
                     const double mom = 0.3f, eps = 1e-5f;
                     Tensor trm = on(d, rm, {ch}), trv = on(d, rv, {ch});
                     const BatchNormResult r = batch_norm(
                         on(d, x, s), on(d, w, {ch}), on(d, b, {ch}), trm, trv, training, mom, eps);
                     Ref y(x.size()), sm(ch), si(ch), nrm(ch), nrv(ch);
                     for_channels(s, [&](std::int64_t k, const Idx& idx) {
                       double m = rm[k], v = rv[k];
                       if (training) {
                         m = 0;
                         for (auto i : idx) m += x[i];
                         m /= double(idx.size());
                         v = 0;
                         for (auto i : idx) v += (x[i] - m) * (x[i] - m);
                         nrm[k] = (1 - mom) * rm[k] + mom * m;
                         nrv[k] = (1 - mom) * rv[k] + mom * v / double(idx.size() - 1);
                         v /= double(idx.size());
                       } else {
                         nrm[k] = rm[k];
                         nrv[k] = rv[k];
                       }
                       sm[k] = m;
                       si[k] = 1 / std::sqrt(v + eps);
                       for (auto i : idx) y[i] = (x[i] - m) * si[k] * w[k] + b[k];
                     });
                     // One-pass f32 statistics (the GPU kernels'): a few ulp of the variance,
                     // amplified by 1/sqrt(var) when a channel of 3 values happens to be tight.
                     expect_close(values(r.y), y, 1e-4);
                     expect_close(values(r.save_mean), sm);
                     expect_close(values(r.save_invstd), si, 1e-4);
                     expect_close(values(trm), nrm);
                     expect_close(values(trv), nrv);
                   }});
      c.push_back(
          {fmt::format("batch_norm_backward_{}_{}", training ? "train" : "eval", shape_name(s)),
           OpId::batch_norm_backward, [s, training](Device& d) {
             const std::int64_t ch = s[1];
             const Vec x = randn(s.numel()), w = randn(ch), g = randn(s.numel()),
                       mean = randn(ch, 0.3f), invstd = uniform(ch, 0.5f, 2.0f);
             Ref gx(x.size()), gw(ch), gb(ch), gw_abs(ch), gb_abs(ch);
             for_channels(s, [&](std::int64_t k, const Idx& idx) {
               double sg = 0, sgx = 0;
               for (auto i : idx) {
                 const double t = g[i] * (x[i] - double(mean[k])) * invstd[k];
                 sg += g[i];
                 sgx += t;
                 gb_abs[k] += std::abs(g[i]);
                 gw_abs[k] += std::abs(t);
               }
               gw[k] = sgx;
               gb[k] = sg;
               const double n = double(idx.size());
               for (auto i : idx)
                 gx[i] = training
                             ? w[k] * double(invstd[k]) *
                                   (g[i] - sg / n - (x[i] - double(mean[k])) * invstd[k] * sgx / n)
                             : double(g[i]) * w[k] * invstd[k];
             });
             const NormGrads r =
                 batch_norm_backward(on(d, g, s), on(d, x, s), on(d, w, {ch}), on(d, mean, {ch}),
                                     on(d, invstd, {ch}), training);
             expect_close(values(r.x), gx, training ? 1e-4 : 1e-5);
             // The channel sums of a few terms may cancel: f32 rounds each term, so their error
             // is measured against the terms' magnitudes (a [3, 1, 1] eval case once gave
             // 1.4e-5 against the cancelled sums).
             expect_close_to_terms(values(r.weight), gw, gw_abs);
             expect_close_to_terms(values(r.bias), gb, gb_abs);
           }});
    }
}

struct CeCase {
  const char* name;
  Shape logits;
  bool i64;
  std::int64_t ignore_index;
  float smoothing;
};
const CeCase kCeCases[] = {{"NxC", {16, 10}, false, -100, 0.0f},
                           {"NxC_smooth", {9, 7}, true, -100, 0.1f},
                           {"NxTxC_i64_ignore2", {3, 5, 6}, true, 2, 0.2f},
                           {"1x1025", {1, 1025}, false, -100, 0.0f},
                           {"3x127x3_ignore", {3, 127, 3}, false, -100, 0.05f}};

// Labels with about one in four set to ignore_index (when that is outside [0, C)).
std::vector<std::int64_t> ce_labels(const CeCase& k) {
  const std::int64_t c = k.logits.back(), rows = k.logits.numel() / c;
  std::vector<std::int64_t> l(static_cast<std::size_t>(rows));
  std::uniform_int_distribution<std::int64_t> d(0, c - 1), q(0, 3);
  for (auto& v : l) v = q(rng()) == 0 ? k.ignore_index : d(rng());
  l[0] = 0;  // at least one target counts
  return l;
}

Tensor label_tensor(Device& d, const CeCase& k, const std::vector<std::int64_t>& l) {
  Shape s;
  for (int i = 0; i + 1 < k.logits.rank(); ++i) s.push_back(k.logits[i]);
  if (k.i64) return Tensor::from<std::int64_t>(l, s, &d);
  std::vector<std::int32_t> l32(l.begin(), l.end());
  return Tensor::from<std::int32_t>(l32, s, &d);
}

void add_loss_cases_impl(std::vector<Case>& c) {
  for (const CeCase& k : kCeCases) {
    c.push_back({fmt::format("cross_entropy_{}", k.name), OpId::cross_entropy, [k](Device& d) {
                   const std::int64_t nc = k.logits.back(), rows = k.logits.numel() / nc;
                   const Vec x = randn(k.logits.numel(), 2.0f);
                   const auto l = ce_labels(k);
                   const CrossEntropyAttrs at{k.ignore_index, k.smoothing};
                   double loss = 0, count = 0;
                   Ref grad(x.size(), 0.0);
                   const double g = 0.7;
                   for (std::int64_t r = 0; r < rows; ++r) {
                     if (l[r] == k.ignore_index) continue;
                     count += 1;
                     double m = -1e300, s = 0, all = 0;
                     for (std::int64_t j = 0; j < nc; ++j) m = std::max(m, double(x[r * nc + j]));
                     for (std::int64_t j = 0; j < nc; ++j) s += std::exp(x[r * nc + j] - m);
                     const double lse = m + std::log(s);
                     for (std::int64_t j = 0; j < nc; ++j) all += lse - x[r * nc + j];
                     loss += (1 - double(k.smoothing)) * (lse - x[r * nc + l[r]]) +
                             double(k.smoothing) / double(nc) * all;
                     for (std::int64_t j = 0; j < nc; ++j)
                       grad[r * nc + j] = std::exp(x[r * nc + j] - lse) -
                                          (j == l[r] ? 1 - double(k.smoothing) : 0.0) -
                                          double(k.smoothing) / double(nc);
                   }
                   for (double& v : grad) v *= g / count;
                   const Tensor tx = on(d, x, k.logits), tl = label_tensor(d, k, l);
                   const Tensor y = cross_entropy(tx, tl, at);
                   EXPECT_EQ(y.rank(), 0);
                   expect_close({y.item()}, {loss / count});
                   if (!d.kernel(OpId::cross_entropy_backward)) return;
                   expect_close(values(cross_entropy_backward(tx, tl, on(d, {float(g)}, {}), at)),
                                grad);
                 }});
  }
  c.push_back({"cross_entropy_all_ignored_is_nan", OpId::cross_entropy, [](Device& d) {
                 const std::vector<std::int32_t> l(4, -100);
                 const Tensor y = cross_entropy(on(d, randn(12), {4, 3}),
                                                Tensor::from<std::int32_t>(l, {4}, &d));
                 EXPECT_TRUE(std::isnan(y.item()));
               }});
  for (Reduction red : {Reduction::none, Reduction::mean, Reduction::sum})
    for (const Shape& s : {Shape{3, 5, 7}, Shape{127}, Shape{1}}) {
      c.push_back({fmt::format("mse_loss_{}_{}", static_cast<int>(red), shape_name(s)),
                   OpId::mse_loss, [red, s](Device& d) {
                     const Vec a = randn(s.numel()), b = randn(s.numel());
                     Ref r;
                     double t = 0;
                     for (std::size_t i = 0; i < a.size(); ++i) {
                       const double e = (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
                       r.push_back(e);
                       t += e;
                     }
                     if (red != Reduction::none)
                       r = {red == Reduction::mean ? t / double(a.size()) : t};
                     expect_close(values(mse_loss(on(d, a, s), on(d, b, s), red)), r);
                   }});
    }
  for (const Shape& s : {Shape{1025}, Shape{3, 127}, Shape{0}, Shape{1}, Shape{70000}}) {
    c.push_back({fmt::format("sum_squares_{}", shape_name(s)), OpId::sum_squares, [s](Device& d) {
                   const Vec x = randn(s.numel());
                   double t = 0;
                   for (float v : x) t += double(v) * v;
                   const Tensor y = sum_squares(on(d, x, s));
                   EXPECT_EQ(y.rank(), 0);
                   if (s.numel() == 0)
                     EXPECT_EQ(y.item(), 0.0f);
                   else
                     expect_close({y.item()}, {t});
                 }});
  }
  c.push_back({"total_norm", OpId::sum_squares, [](Device& d) {
                 // One tensor over several work-groups of the GPUs' first stage, three within one.
                 const Vec a = randn(127), b = randn(3 * 5), e = randn(1), f = randn(9001);
                 double t = 0;
                 for (const Vec* v : {&a, &b, &e, &f})
                   for (float x : *v) t += double(x) * x;
                 const std::vector<Tensor> ts = {on(d, a, {127}), on(d, b, {3, 5}), on(d, e, {1}),
                                                 on(d, f, {9001})};
                 const Tensor n = total_norm(ts);
                 EXPECT_EQ(n.rank(), 0);
                 expect_close({n.item()}, {std::sqrt(t)});
                 double tb = 0;
                 for (float x : b) tb += double(x) * x;
                 const Tensor one = total_norm(std::vector<Tensor>{on(d, b, {3, 5})});
                 EXPECT_EQ(one.rank(), 0);
                 expect_close({one.item()}, {std::sqrt(tb)});
               }});
  c.push_back({"adamw_update", OpId::adamw_update, [](Device& d) {
                 AdamAttrs a;
                 a.lr = 0.01f;
                 a.weight_decay = 0.1f;
                 a.step = 3;
                 const Vec p = randn(1025), g = randn(1025), m = randn(1025, 0.1f),
                           v = uniform(1025, 0.0f, 0.1f);
                 Tensor tp = on(d, p, {1025}), tm = on(d, m, {1025}), tv = on(d, v, {1025});
                 adamw_update_(tp, on(d, g, {1025}), tm, tv, a);
                 Ref rp(1025), rm(1025), rv(1025);
                 for (int i = 0; i < 1025; ++i) {
                   rm[i] = a.beta1 * double(m[i]) + (1 - double(a.beta1)) * g[i];
                   rv[i] = a.beta2 * double(v[i]) + (1 - double(a.beta2)) * g[i] * g[i];
                   const double mh = rm[i] / (1 - std::pow(double(a.beta1), 3.0));
                   const double vh = rv[i] / (1 - std::pow(double(a.beta2), 3.0));
                   rp[i] = p[i] * (1 - double(a.lr) * a.weight_decay) -
                           a.lr * mh / (std::sqrt(vh) + a.eps);
                 }
                 expect_close(values(tm), rm);
                 expect_close(values(tv), rv);
                 expect_close(values(tp), rp);
               }});
}

}  // namespace

namespace tessera::conformance {
void add_norm_cases(std::vector<Case>& c) {
  add_layer_norm_cases(c);
  add_batch_norm_cases(c);
}
void add_loss_cases(std::vector<Case>& c) {
  add_loss_cases_impl(c);
}
}  // namespace tessera::conformance
