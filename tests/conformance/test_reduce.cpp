// Conformance of the reductions, normalisation, losses and optimizer group: every op against
// float64 references on fresh random inputs, odd sizes (1, 3, 127, 1025), views and empty tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include <fmt/format.h>

#include "cases.h"
#include "reduce_util.h"
#include "tessera/tessera.h"

using namespace tessera;
using namespace tessera::conformance;
using namespace tessera::conformance::reduce;

namespace {

// Calls f(line, element indices of the line) for every line of a contiguous |s| along |axis|, in
// the order of the reduced output.
void for_lines(const Shape& s, int axis, const std::function<void(std::int64_t, const Idx&)>& f) {
  std::int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= s[i];
  for (int i = axis + 1; i < s.rank(); ++i) inner *= s[i];
  const std::int64_t n = s[axis];
  Idx idx(static_cast<std::size_t>(n));
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t in = 0; in < inner; ++in) {
      for (std::int64_t k = 0; k < n; ++k)
        idx[static_cast<std::size_t>(k)] = (o * n + k) * inner + in;
      f(o * inner + in, idx);
    }
}

// One value per line.
Ref line_ref(const Vec& x, const Shape& s, int axis,
             const std::function<double(const std::vector<double>&)>& f) {
  Ref r;
  for_lines(s, axis, [&](std::int64_t, const Idx& idx) {
    std::vector<double> line;
    for (auto i : idx) line.push_back(x[static_cast<std::size_t>(i)]);
    r.push_back(f(line));
  });
  return r;
}

double var_of(const std::vector<double>& l, double correction) {
  double m = 0;
  for (double v : l) m += v;
  m /= static_cast<double>(l.size());
  double s = 0;
  for (double v : l) s += (v - m) * (v - m);
  return s / std::max(static_cast<double>(l.size()) - correction, 0.0);
}

// Values spaced apart in random order: no ties for min.
Vec separated(std::int64_t n) {
  Vec v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] = static_cast<float>(i) * 0.01f;
  std::shuffle(v.begin(), v.end(), rng());
  return v;
}

struct AxisCase {
  Shape shape;
  int axis;
};
// [3,7,5] along each axis, and the odd sizes 1, 3, 127, 1025.
const AxisCase kAxisCases[] = {{{3, 7, 5}, 0}, {{3, 7, 5}, 1}, {{3, 7, 5}, 2},
                               {{1025}, 0},    {{127, 3}, 0},  {{3, 1}, 1}};

std::string case_name(const char* op, const AxisCase& a) {
  std::string s = a.shape.str();
  std::replace(s.begin(), s.end(), ',', 'x');
  return fmt::format("{}_{}_axis{}", op, s.substr(1, s.size() - 2), a.axis);
}

// Host softmax (log form when |lg|) of x along axis.
Vec host_softmax(const Vec& x, const Shape& s, int axis, bool lg) {
  Vec y(x.size());
  for_lines(s, axis, [&](std::int64_t, const Idx& idx) {
    double m = -1e300, t = 0;
    for (auto i : idx) m = std::max(m, double(x[i]));
    for (auto i : idx) t += std::exp(x[i] - m);
    for (auto i : idx)
      y[i] = static_cast<float>(lg ? x[i] - m - std::log(t) : std::exp(x[i] - m) / t);
  });
  return y;
}

void add_reduction_cases(std::vector<Case>& c) {
  for (const AxisCase& a : kAxisCases) {
    c.push_back({case_name("min", a), OpId::min, [a](Device& d) {
                   const Vec x = randn(a.shape.numel());
                   const Tensor y = min(on(d, x, a.shape), a.axis, true);
                   EXPECT_EQ(y.shape()[a.axis], 1);
                   expect_close(values(y), line_ref(x, a.shape, a.axis, [](auto& l) {
                                  return *std::min_element(l.begin(), l.end());
                                }));
                 }});
    c.push_back({case_name("min_backward", a), OpId::min_backward, [a](Device& d) {
                   const Vec x = separated(a.shape.numel());
                   const Shape rs = min(on(d, x, a.shape), a.axis).shape();
                   const Vec g = randn(rs.numel());
                   Ref r(x.size(), 0.0);
                   for_lines(a.shape, a.axis, [&](std::int64_t l, const Idx& idx) {
                     auto best = idx[0];
                     for (auto i : idx)
                       if (x[i] < x[best]) best = i;
                     r[best] = g[l];
                   });
                   expect_close(values(min_backward(on(d, g, rs), on(d, x, a.shape), a.axis)), r);
                 }});
    for (double corr : {1.0, 0.0, 2.5}) {
      if (corr > 0 && a.shape[a.axis] == 1) continue;  // NaN/inf: checked below
      c.push_back({case_name(fmt::format("var_c{}", corr * 10).c_str(), a), OpId::var,
                   [a, corr](Device& d) {
                     const Vec x = randn(a.shape.numel(), 3.0f);
                     expect_close(
                         values(var(on(d, x, a.shape), a.axis, corr)),
                         line_ref(x, a.shape, a.axis, [corr](auto& l) { return var_of(l, corr); }));
                   }});
      c.push_back({case_name(fmt::format("std_c{}", corr * 10).c_str(), a), OpId::std,
                   [a, corr](Device& d) {
                     const Vec x = add_offset(randn(a.shape.numel()), 10.0f);
                     expect_close(values(tessera::std(on(d, x, a.shape), a.axis, corr, true)),
                                  line_ref(x, a.shape, a.axis,
                                           [corr](auto& l) { return std::sqrt(var_of(l, corr)); }));
                   }});
    }
    c.push_back({case_name("prod", a), OpId::prod, [a](Device& d) {
                   const Vec x = uniform(a.shape.numel(), 0.8f, 1.25f);
                   expect_close(values(prod(on(d, x, a.shape), a.axis)),
                                line_ref(x, a.shape, a.axis,
                                         [](auto& l) {
                                           double p = 1;
                                           for (double v : l) p *= v;
                                           return p;
                                         }),
                                1e-5 * std::sqrt(double(a.shape[a.axis])));
                 }});
    c.push_back({case_name("prod_backward", a), OpId::prod_backward, [a](Device& d) {
                   Vec x = uniform(a.shape.numel(), 0.8f, 1.25f);
                   // Zeros: the gradient is then the product of the others, exactly.
                   std::uniform_int_distribution<std::size_t> pick(0, x.size() - 1);
                   for (int z = 0; z < 3; ++z) x[pick(rng())] = 0.0f;
                   const Shape rs = prod(on(d, x, a.shape), a.axis).shape();
                   const Vec g = randn(rs.numel());
                   Ref r(x.size());
                   for_lines(a.shape, a.axis, [&](std::int64_t l, const Idx& idx) {
                     for (auto i : idx) {
                       double p = g[l];
                       for (auto j : idx)
                         if (j != i) p *= x[j];
                       r[i] = p;
                     }
                   });
                   expect_close(values(prod_backward(on(d, g, rs), on(d, x, a.shape), a.axis)), r,
                                1e-5 * std::sqrt(double(a.shape[a.axis])));
                 }});
    for (bool lg : {false, true}) {
      c.push_back({case_name(lg ? "log_softmax_backward" : "softmax_backward", a),
                   lg ? OpId::log_softmax_backward : OpId::softmax_backward, [a, lg](Device& d) {
                     const Vec y = host_softmax(randn(a.shape.numel(), 2.0f), a.shape, a.axis, lg);
                     const Vec g = randn(a.shape.numel());
                     Ref r(y.size());
                     for_lines(a.shape, a.axis, [&](std::int64_t, const Idx& idx) {
                       double s = 0;
                       for (auto i : idx) s += lg ? double(g[i]) : double(g[i]) * y[i];
                       for (auto i : idx)
                         r[i] = lg ? g[i] - std::exp(double(y[i])) * s : y[i] * (g[i] - s);
                     });
                     const Tensor tg = on(d, g, a.shape), ty = on(d, y, a.shape);
                     expect_close(values(lg ? log_softmax_backward(tg, ty, a.axis)
                                            : softmax_backward(tg, ty, a.axis)),
                                  r);
                   }});
    }
  }
  c.push_back({"var_one_element_is_nan", OpId::var, [](Device& d) {
                 const Vec v = values(var(on(d, randn(3), {3, 1}), 1));
                 for (float f : v) EXPECT_TRUE(std::isnan(f)) << f;
               }});
  c.push_back({"min_transposed_view", OpId::min, [](Device& d) {
                 const Vec x = randn(35);
                 const Vec y = values(min(on(d, x, {5, 7}).t(), 1));  // min over rows of x
                 expect_close(y, line_ref(x, {5, 7}, 0, [](auto& l) {
                                return *std::min_element(l.begin(), l.end());
                              }));
               }});
  c.push_back({"prod_empty_axis_is_one", OpId::prod, [](Device& d) {
                 const Tensor y = prod(Tensor::empty({2, 0, 3}, DType::f32, &d), 1);
                 EXPECT_EQ(y.shape(), (Shape{2, 3}));
                 expect_close(values(y), Ref(6, 1.0));
               }});
}

// sum/mean over several axes of [3,4,5,6]: merged blocks, scattered axes, all axes, a view.
void add_multi_axis_cases(std::vector<Case>& c) {
  const Shape s{3, 4, 5, 6};
  const std::vector<std::vector<int>> dim_sets = {{0, 2}, {1, 2}, {0, 3}, {}, {-1, 0}, {3}};
  for (std::size_t k = 0; k < dim_sets.size(); ++k)
    for (bool is_mean : {false, true}) {
      const auto dims = dim_sets[k];
      c.push_back({fmt::format("{}_dims{}", is_mean ? "mean" : "sum", k),
                   is_mean ? OpId::mean : OpId::sum, [s, dims, is_mean](Device& d) {
                     // Offset by 1: the sum over all axes is one number, and of zero-mean
                     // inputs it can lie near 0, where f32 rounding alone exceeds the relative
                     // tolerance (mean_dims3 failed once on PoCL).
                     const Vec x = add_offset(randn(s.numel()), 1.0f);
                     bool red[4] = {dims.empty(), dims.empty(), dims.empty(), dims.empty()};
                     for (int a : dims) red[(a + 4) % 4] = true;
                     Shape keep;
                     for (int i = 0; i < 4; ++i) keep.push_back(red[i] ? 1 : s[i]);
                     Ref r(static_cast<std::size_t>(keep.numel()), 0.0);
                     std::int64_t n = s.numel() / keep.numel();
                     for (std::int64_t i = 0; i < s.numel(); ++i) {
                       std::int64_t rem = i, o = 0, stride = 1;
                       std::int64_t coord[4];
                       for (int a = 3; a >= 0; --a) {
                         coord[a] = rem % s[a];
                         rem /= s[a];
                       }
                       for (int a = 3; a >= 0; --a) {
                         o += (red[a] ? 0 : coord[a]) * stride;
                         stride *= keep[a];
                       }
                       r[o] += x[i] / (is_mean ? double(n) : 1.0);
                     }
                     const Tensor tx = on(d, x, s);
                     const Tensor y = is_mean ? mean(tx, dims, true) : sum(tx, dims, true);
                     EXPECT_EQ(y.shape(), keep);
                     expect_close(values(y), r);
                     const Tensor y2 = is_mean ? mean(tx, dims) : sum(tx, dims);
                     EXPECT_EQ(y2.numel(), keep.numel());
                   }});
    }
  c.push_back({"sum_dims_transposed_view", OpId::sum, [](Device& d) {
                 const Vec x = randn(3 * 127);
                 // x [3,127] viewed as [127,3]; summing dims {0} of the view sums x's rows.
                 const Vec y = values(sum(on(d, x, {3, 127}).t(), std::vector<int>{0}));
                 expect_close(y, line_ref(x, {3, 127}, 1, [](auto& l) {
                                double t = 0;
                                for (double v : l) t += v;
                                return t;
                              }));
               }});
  c.push_back({"sum_long_columns", OpId::sum, [](Device& d) {
                 // Three columns of 70000: the GPUs split them in parts and sum the parts in
                 // parts again (a bias gradient's shape, narrowed).
                 const Vec x = add_offset(randn(70000 * 3), 0.5f);
                 Ref r(3, 0.0);
                 for (std::size_t i = 0; i < x.size(); ++i) r[i % 3] += x[i];
                 expect_close(values(sum(on(d, x, {70000, 3}), 0)), r);
               }});
  c.push_back({"sum_dims_empty", OpId::sum, [](Device& d) {
                 const Tensor y = sum(Tensor::empty({0, 3, 2}, DType::f32, &d), {0, 2});
                 EXPECT_EQ(y.shape(), (Shape{3}));
                 expect_close(values(y), Ref(3, 0.0));
               }});
}

}  // namespace

namespace tessera::conformance {
void add_norm_cases(std::vector<Case>& c);
void add_loss_cases(std::vector<Case>& c);
}  // namespace tessera::conformance

std::vector<Case> tessera::conformance::reduce_op_cases() {
  std::vector<Case> c;
  add_reduction_cases(c);
  add_multi_axis_cases(c);
  add_norm_cases(c);
  add_loss_cases(c);
  return c;
}
