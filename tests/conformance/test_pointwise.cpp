// Conformance of the element-wise math, comparison and selection ops on every device: float64
// references on fresh random inputs, odd sizes (1, 3, 127, 1025), empty tensors, transposed
// (non-contiguous) and broadcast operands; exact equality for masks and for the ops that are
// exact in f32 (neg, abs, sign, clamp, minimum, maximum, where, masked_fill).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <fmt/format.h>

#include "cases.h"
#include "tessera/tessera.h"

using namespace tessera;
using namespace tessera::conformance;

namespace {

using Mask = std::vector<std::uint8_t>;

const std::int64_t kSizes[] = {0, 1, 3, 127, 1025};
// The unary ops' sizes: kSizes and a multiple of 4 (the GPUs' four-a-invocation f32 path).
const std::int64_t kUnarySizes[] = {0, 1, 3, 127, 1024, 1025};

void expect_close(const Vec& out, const Ref& ref, const std::string& what, double tol = 1e-5) {
  ASSERT_EQ(out.size(), ref.size()) << what;
  const double err = normalised_error(out, ref);
  EXPECT_LT(err, tol) << what << ": normalised error " << err;
  EXPECT_TRUE(std::isfinite(err)) << what;
}

template <typename T, typename R>
void expect_equal(const std::vector<T>& out, const std::vector<R>& ref, const std::string& what) {
  ASSERT_EQ(out.size(), ref.size()) << what;
  for (std::size_t i = 0; i < out.size(); ++i)
    if (out[i] != static_cast<T>(ref[i])) {
      ADD_FAILURE() << what << ": element " << i << " is " << +out[i] << ", expected "
                    << +static_cast<T>(ref[i]);
      return;
    }
}

Tensor mask_on(Device& d, const Mask& m, const Shape& s) {
  return Tensor::from_bytes(m.data(), m.size(), s, DType::boolean, &d);
}

Mask read_mask(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::boolean);
  Mask m(static_cast<std::size_t>(t.numel()));
  t.copy_to_host(m.data(), m.size(), DType::boolean);
  return m;
}

Mask random_mask(std::int64_t n) {
  std::bernoulli_distribution coin(0.5);
  Mask m(static_cast<std::size_t>(n));
  for (auto& b : m) b = coin(rng()) ? 1 : 0;
  return m;
}

// Values on a coarse grid (multiples of 0.5 in [-2, 2]): comparisons see many ties.
Vec grid(std::int64_t n) {
  Vec v = uniform(n, -2.25f, 2.25f);
  for (float& x : v) x = std::round(x * 2) / 2;
  return v;
}

// [r, c] values laid out as the transpose of a contiguous [c, r] tensor: the non-contiguous view
// and its values in row-major order.
struct Transposed {
  Tensor view;
  Vec values;
};
Transposed transposed(Device& d, const Vec& stored, std::int64_t r, std::int64_t c) {
  Vec rowmajor(static_cast<std::size_t>(r * c));
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t j = 0; j < c; ++j) rowmajor[i * c + j] = stored[j * r + i];
  return {on(d, stored, {c, r}).t(), rowmajor};
}

// Index of an element of a broadcast operand of shape |s| (right-aligned) for output index |i| of
// shape |out|.
std::int64_t source_index(const Shape& out, const Shape& s, std::int64_t i) {
  std::int64_t idx = 0, mul = 1;
  for (int d = out.rank() - 1; d >= 0; --d) {
    const std::int64_t coord = i % out[d];
    i /= out[d];
    const int sd = s.rank() - out.rank() + d;
    if (sd < 0) continue;
    if (s[sd] != 1) idx += coord * mul;
    mul *= s[sd];
  }
  return idx;
}

// ----- unary ops -----

struct Unary {
  std::string name;
  OpId op;
  std::function<Tensor(const Tensor&)> fn;
  std::function<double(double)> ref;
  float lo, hi;
  bool exact = false;
  double tol = 1e-5;
  // Inputs closer to 0 than this move out by it (x -> sign(x) (|x| + min_abs)): for negative
  // exponents, whose x = 0 gives inf on both sides and a NaN error.
  float min_abs = 0;
};

Case unary_case(const Unary& u) {
  return {u.name, u.op, [u](Device& d) {
            auto check = [&](const Vec& x, const Tensor& t, const std::string& what) {
              const Vec y = u.fn(t).to_vector<float>();
              Ref r(x.size());
              for (std::size_t i = 0; i < x.size(); ++i) r[i] = u.ref(double(x[i]));
              if (u.exact)
                expect_equal(y, r, what);
              else
                expect_close(y, r, what, u.tol);
            };
            auto draw = [&](std::int64_t n) {
              Vec x = uniform(n, u.lo, u.hi);
              for (float& v : x)
                if (std::fabs(v) < u.min_abs) v = std::copysign(std::fabs(v) + u.min_abs, v);
              return x;
            };
            for (const std::int64_t n : kUnarySizes) {
              const Vec x = draw(n);
              check(x, on(d, x, {n}), fmt::format("[{}]", n));
            }
            const Transposed t = transposed(d, draw(13 * 11), 13, 11);
            check(t.values, t.view, "transposed [13,11]");
          }};
}

// In float64, through erfc and the logistic form of (1 + tanh u) / 2, so that the reference keeps
// its relative accuracy at negative x (a case of one element compares one such value).
double gelu_ref(double x, bool tanh_form) {
  if (tanh_form) return x / (1 + std::exp(-2 * std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
}

double gelu_grad_ref(double x, bool tanh_form) {
  if (tanh_form) {
    const double k = std::sqrt(2 / M_PI);
    const double t = std::tanh(k * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
  }
  return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}

double silu_grad_ref(double x) {
  const double s = 1 / (1 + std::exp(-x));
  return s * (1 + x * (1 - s));
}

// The sums of the magnitudes of the two terms the derivatives above add (gelu: the cdf and x times
// the density; silu: s and x s (1 - s)): the scale an f32 evaluation's rounding error is relative
// to. Each derivative crosses zero once at negative x (gelu near -0.752, silu near -1.278), where
// the terms cancel: there PyTorch's formulas, which the kernels use, keep an absolute error of a
// few f32 ulps of the terms, not a relative one of the result (silu's exceeds 1e-5 relative within
// ~0.05 of its zero), and a case of one element drawn there once failed a plain normalised error.
double gelu_grad_scale(double x, bool tanh_form) {
  if (tanh_form) {
    const double k = std::sqrt(2 / M_PI);
    const double t = std::tanh(k * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * std::fabs(x) * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
  }
  return 0.5 * std::erfc(-x / std::sqrt(2.0)) +
         std::fabs(x) * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}

double silu_grad_scale(double x) {
  const double s = 1 / (1 + std::exp(-x));
  return s * (1 + std::fabs(x) * (1 - s));
}

// ||out - ref|| / ||scale|| (scale[i] >= |ref[i]|, the magnitude of the terms ref[i] sums): the
// normalised error where the reference may cancel to nearly zero.
void expect_close_to_scale(const Vec& out, const Ref& ref, const Ref& scale,
                           const std::string& what, double tol = 1e-5) {
  ASSERT_EQ(out.size(), ref.size()) << what;
  double num = 0, den = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    EXPECT_GE(scale[i], std::fabs(ref[i]) * (1 - 1e-12)) << what << ": element " << i;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += scale[i] * scale[i];
  }
  const double err = std::sqrt(num / std::max(den, 1e-30));
  EXPECT_LT(err, tol) << what << ": error " << err << " of the terms' scale";
  EXPECT_TRUE(std::isfinite(err)) << what;
}

// The derivatives' zeros (to f32), where a case of one element tests the cancellation: gelu's
// erf and tanh forms and silu's.
constexpr float kGeluGradZero = -0.75179154f;
constexpr float kGeluTanhGradZero = -0.75246143f;
constexpr float kSiluGradZero = -1.27846456f;

void add_unary_cases(std::vector<Case>& c) {
  const Unary list[] = {
      {"neg", OpId::neg, [](const Tensor& x) { return neg(x); }, [](double v) { return -v; }, -3, 3,
       true},
      {"abs", OpId::abs, [](const Tensor& x) { return tessera::abs(x); },
       [](double v) { return std::fabs(v); }, -3, 3, true},
      {"sqrt", OpId::sqrt, [](const Tensor& x) { return tessera::sqrt(x); },
       [](double v) { return std::sqrt(v); }, 0.01f, 9},
      {"rsqrt", OpId::rsqrt, [](const Tensor& x) { return rsqrt(x); },
       [](double v) { return 1 / std::sqrt(v); }, 0.05f, 9},
      {"clamp", OpId::clamp, [](const Tensor& x) { return clamp(x, -0.5, 1.25); },
       [](double v) { return std::min(std::max(v, -0.5), 1.25); }, -3, 3, true},
      {"clamp_min", OpId::clamp, [](const Tensor& x) { return clamp_min(x, 0.3); },
       [](double v) { return std::max(v, 0.3); }, -3, 3, true},
      {"clamp_max", OpId::clamp, [](const Tensor& x) { return clamp_max(x, -0.7); },
       [](double v) { return std::min(v, -0.7); }, -3, 3, true},
      {"clamp_min_above_max", OpId::clamp, [](const Tensor& x) { return clamp(x, 1.0, -1.0); },
       [](double) { return -1.0; }, -3, 3, true},
      {"gelu", OpId::gelu, [](const Tensor& x) { return gelu(x); },
       [](double v) { return gelu_ref(v, false); }, -6, 6},
      {"gelu_tanh", OpId::gelu, [](const Tensor& x) { return gelu(x, "tanh"); },
       [](double v) { return gelu_ref(v, true); }, -6, 6},
      {"silu", OpId::silu, [](const Tensor& x) { return silu(x); },
       [](double v) { return v / (1 + std::exp(-v)); }, -8, 8},
      {"erf", OpId::erf, [](const Tensor& x) { return tessera::erf(x); },
       [](double v) { return std::erf(v); }, -4, 4},
  };
  for (const Unary& u : list) c.push_back(unary_case(u));

  // Exponents torch special-cases, integer exponents of negative bases, and general ones.
  for (const double p : {2.0, 3.0, 1.0, 0.0, 0.5, -0.5, -1.0, -2.0, 1.7, -2.3, 4.0, -3.0}) {
    const bool integer = p == std::floor(p);
    std::string name = fmt::format("pow_{}", p);  // test names without '-' and '.'
    std::replace(name.begin(), name.end(), '-', 'm');
    std::replace(name.begin(), name.end(), '.', 'p');
    Unary u{name,
            OpId::pow,
            [p](const Tensor& x) { return tessera::pow(x, p); },
            [p](double v) { return std::pow(v, p); },
            integer ? -2.0f : 0.2f,
            integer ? 2.0f : 3.0f};
    // An input of exactly 0 (a uniform draw in [-2, 2) gives one about once in 2^24) made
    // pow_m2 compare inf with inf (Ops/vulkan:0, TESSERA_TEST_SEED=160148844).
    if (p < 0) u.min_abs = 0.25f;
    c.push_back(unary_case(u));
  }
  c.push_back({"pow_special_values", OpId::pow, [](Device& d) {
                 // A negative base with a fractional exponent is NaN; 0^-1 is inf; x^0 is 1.
                 const Vec x = {-2.0f, 0.0f, -0.5f, 4.0f};
                 const Vec half = tessera::pow(on(d, x, {4}), 2.5).to_vector<float>();
                 EXPECT_TRUE(std::isnan(half[0]) && std::isnan(half[2]))
                     << half[0] << " " << half[2];
                 EXPECT_EQ(half[1], 0.0f);
                 EXPECT_NEAR(half[3], 32.0f, 1e-4f);
                 const Vec inv = tessera::pow(on(d, x, {4}), -1.0).to_vector<float>();
                 EXPECT_TRUE(std::isinf(inv[1]) && inv[1] > 0) << inv[1];
                 const Vec zero = tessera::pow(on(d, x, {4}), 0.0).to_vector<float>();
                 for (const float v : zero) EXPECT_EQ(v, 1.0f);
               }});
  c.push_back({"sign", OpId::sign, [](Device& d) {
                 for (const std::int64_t n : kUnarySizes) {
                   Vec x = randn(n);
                   for (std::size_t i = 0; i < x.size(); i += 3) x[i] = 0;  // sign(0) = 0
                   const Vec y = sign(on(d, x, {n})).to_vector<float>();
                   Ref r(x.size());
                   for (std::size_t i = 0; i < x.size(); ++i) r[i] = (x[i] > 0) - (x[i] < 0);
                   expect_equal(y, r, fmt::format("[{}]", n));
                 }
               }});
  c.push_back({"erf_accuracy", OpId::erf, [](Device& d) {
                 // A dense grid over [-4, 4] against float64 std::erf: the GPU plugins' ERF.
                 const std::int64_t n = 8001;
                 Vec x(static_cast<std::size_t>(n));
                 Ref r(x.size());
                 double worst = 0;
                 for (std::int64_t i = 0; i < n; ++i) x[i] = -4.0f + 8.0f * float(i) / float(n - 1);
                 const Vec y = tessera::erf(on(d, x, {n})).to_vector<float>();
                 for (std::size_t i = 0; i < x.size(); ++i) {
                   r[i] = std::erf(double(x[i]));
                   worst = std::max(worst, std::abs(y[i] - r[i]));
                 }
                 expect_close(y, r, fmt::format("erf on [-4, 4] (max abs error {})", worst));
                 EXPECT_LT(worst, 1e-5);
               }});

  for (const bool tanh_form : {false, true}) {
    c.push_back({tanh_form ? "gelu_tanh_backward" : "gelu_backward", OpId::gelu_backward,
                 [tanh_form](Device& d) {
                   auto check = [&](const Vec& x, const std::string& what) {
                     const auto n = static_cast<std::int64_t>(x.size());
                     const Vec g = randn(n);
                     const Vec y =
                         gelu_backward(on(d, g, {n}), on(d, x, {n}), tanh_form ? "tanh" : "none")
                             .to_vector<float>();
                     Ref r(x.size()), scale(x.size());
                     for (std::size_t i = 0; i < x.size(); ++i) {
                       r[i] = g[i] * gelu_grad_ref(x[i], tanh_form);
                       scale[i] = std::fabs(g[i]) * gelu_grad_scale(x[i], tanh_form);
                     }
                     expect_close_to_scale(y, r, scale, what);
                   };
                   for (const std::int64_t n : kUnarySizes)
                     check(uniform(n, -6, 6), fmt::format("[{}]", n));
                   check({tanh_form ? kGeluTanhGradZero : kGeluGradZero}, "at the zero");
                 }});
  }
  c.push_back({"silu_backward", OpId::silu_backward, [](Device& d) {
                 auto check = [&](const Vec& x, const std::string& what) {
                   const auto n = static_cast<std::int64_t>(x.size());
                   const Vec g = randn(n);
                   const Vec y = silu_backward(on(d, g, {n}), on(d, x, {n})).to_vector<float>();
                   Ref r(x.size()), scale(x.size());
                   for (std::size_t i = 0; i < x.size(); ++i) {
                     r[i] = g[i] * silu_grad_ref(x[i]);
                     scale[i] = std::fabs(g[i]) * silu_grad_scale(x[i]);
                   }
                   expect_close_to_scale(y, r, scale, what);
                 };
                 for (const std::int64_t n : kUnarySizes)
                   check(uniform(n, -8, 8), fmt::format("[{}]", n));
                 check({kSiluGradZero}, "at the zero");
               }});
}

// ----- binary ops: minimum, maximum and the comparisons -----

// Runs |fn| on operands of the shapes below (broadcast, same shape at odd sizes, empty, a
// transposed view, a scalar operand) and checks every output against ref(a, b) exactly.
template <typename Out>
void check_binary(Device& d, const std::function<Tensor(const Tensor&, const Tensor&)>& fn,
                  const std::function<double(double, double)>& ref) {
  auto run = [&](const Shape& sa, const Shape& sb, const std::string& what, bool transpose_a) {
    const Shape out = broadcast_shapes(sa, sb);
    Vec a = grid(sa.numel());
    const Vec b = grid(sb.numel());
    Tensor ta;
    if (transpose_a) {
      const Transposed t = transposed(d, a, sa[0], sa[1]);
      ta = t.view;
      a = t.values;
    } else {
      ta = on(d, a, sa);
    }
    const Tensor y = fn(ta, on(d, b, sb));
    ASSERT_EQ(y.shape(), out) << what;
    std::vector<Out> got;
    if constexpr (std::is_same_v<Out, std::uint8_t>)
      got = read_mask(y);
    else
      got = y.to_vector<float>();
    Ref r(static_cast<std::size_t>(out.numel()));
    for (std::int64_t i = 0; i < out.numel(); ++i)
      r[i] = ref(a[source_index(out, sa, i)], b[source_index(out, sb, i)]);
    expect_equal(got, r, what);
  };
  run({4, 1, 5}, {3, 1}, "[4,1,5] with [3,1]", false);
  run({2, 3, 4}, {4}, "[2,3,4] with [4]", false);
  run({7}, {}, "[7] with a scalar []", false);
  for (const std::int64_t n : kSizes) run({n}, {n}, fmt::format("[{}] with [{}]", n, n), false);
  run({0, 3}, {3}, "[0,3] with [3]", false);
  run({9, 6}, {9, 6}, "transposed [9,6] with [9,6]", true);
  run({9, 6}, {6}, "transposed [9,6] with [6]", true);
}

void add_binary_cases(std::vector<Case>& c) {
  using F = Tensor (*)(const Tensor&, const Tensor&);
  c.push_back({"minimum", OpId::minimum, [](Device& d) {
                 check_binary<float>(d, static_cast<F>(minimum),
                                     [](double a, double b) { return std::min(a, b); });
               }});
  c.push_back({"maximum", OpId::maximum, [](Device& d) {
                 check_binary<float>(d, static_cast<F>(maximum),
                                     [](double a, double b) { return std::max(a, b); });
               }});
  c.push_back({"minimum_maximum_nan", OpId::minimum, [](Device& d) {
                 const float nan = std::nanf("");
                 const Tensor a = on(d, {nan, 1.0f, 2.0f}, {3}), b = on(d, {0.0f, nan, 3.0f}, {3});
                 for (const Tensor& y : {minimum(a, b), maximum(a, b)}) {
                   const Vec v = y.to_vector<float>();
                   EXPECT_TRUE(std::isnan(v[0]) && std::isnan(v[1])) << v[0] << " " << v[1];
                 }
                 EXPECT_EQ(minimum(a, b).to_vector<float>()[2], 2.0f);
               }});
  const std::pair<const char*, std::pair<OpId, std::function<bool(double, double)>>> cmps[] = {
      {"eq", {OpId::eq, [](double a, double b) { return a == b; }}},
      {"ne", {OpId::ne, [](double a, double b) { return a != b; }}},
      {"lt", {OpId::lt, [](double a, double b) { return a < b; }}},
      {"le", {OpId::le, [](double a, double b) { return a <= b; }}},
      {"gt", {OpId::gt, [](double a, double b) { return a > b; }}},
      {"ge", {OpId::ge, [](double a, double b) { return a >= b; }}}};
  for (const auto& [name, op_ref] : cmps) {
    const auto& [op, ref] = op_ref;
    c.push_back({name, op, [op = op, ref = ref](Device& d) {
                   auto fn = [op](const Tensor& a, const Tensor& b) {
                     switch (op) {
                       case OpId::eq:
                         return eq(a, b);
                       case OpId::ne:
                         return ne(a, b);
                       case OpId::lt:
                         return lt(a, b);
                       case OpId::le:
                         return le(a, b);
                       case OpId::gt:
                         return gt(a, b);
                       default:
                         return ge(a, b);
                     }
                   };
                   check_binary<std::uint8_t>(d, fn, [&](double a, double b) { return ref(a, b); });
                 }});
    c.push_back({fmt::format("{}_scalar", name), op, [op = op, ref = ref](Device& d) {
                   const Vec x = grid(127);
                   const Tensor t = on(d, x, {127});
                   Tensor y;
                   switch (op) {
                     case OpId::eq:
                       y = eq(t, 0.5);
                       break;
                     case OpId::ne:
                       y = ne(t, 0.5);
                       break;
                     case OpId::lt:
                       y = lt(t, 0.5);
                       break;
                     case OpId::le:
                       y = le(t, 0.5);
                       break;
                     case OpId::gt:
                       y = gt(t, 0.5);
                       break;
                     default:
                       y = ge(t, 0.5);
                       break;
                   }
                   Mask r(x.size());
                   for (std::size_t i = 0; i < x.size(); ++i) r[i] = ref(x[i], 0.5);
                   expect_equal(read_mask(y), r, "[127] with 0.5");
                 }});
  }
  c.push_back({"compare_nan", OpId::eq, [](Device& d) {
                 const Tensor a = on(d, {std::nanf(""), 1.0f}, {2}), b = on(d, {1.0f, 1.0f}, {2});
                 expect_equal(read_mask(eq(a, b)), Mask{0, 1}, "eq");
                 expect_equal(read_mask(ne(a, b)), Mask{1, 0}, "ne");
                 expect_equal(read_mask(lt(a, b)), Mask{0, 0}, "lt");
                 expect_equal(read_mask(ge(a, b)), Mask{0, 1}, "ge");
               }});
}

// ----- selection -----

void add_selection_cases(std::vector<Case>& c) {
  c.push_back(
      {"where", OpId::where, [](Device& d) {
         auto run = [&](const Shape& sc, const Shape& sa, const Shape& sb, const std::string& what,
                        bool transpose_cond) {
           const Shape out = broadcast_shapes(broadcast_shapes(sc, sa), sb);
           Mask m = random_mask(sc.numel());
           const Vec a = randn(sa.numel()), b = randn(sb.numel());
           Tensor tc = mask_on(d, m, sc);
           if (transpose_cond) {  // cond stored [c, r], read through its transpose
             tc = mask_on(d, m, {sc[1], sc[0]}).t();
             Mask rowmajor(m.size());
             for (std::int64_t i = 0; i < sc[0]; ++i)
               for (std::int64_t j = 0; j < sc[1]; ++j) rowmajor[i * sc[1] + j] = m[j * sc[0] + i];
             m = rowmajor;
           }
           const Tensor y = where(tc, on(d, a, sa), on(d, b, sb));
           ASSERT_EQ(y.shape(), out) << what;
           Ref r(static_cast<std::size_t>(out.numel()));
           for (std::int64_t i = 0; i < out.numel(); ++i)
             r[i] = m[source_index(out, sc, i)] ? a[source_index(out, sa, i)]
                                                : b[source_index(out, sb, i)];
           expect_equal(y.to_vector<float>(), r, what);
         };
         run({2, 1, 5}, {1, 3, 1}, {5}, "[2,1,5], [1,3,1], [5]", false);
         run({3, 1}, {4, 3, 2}, {}, "[3,1], [4,3,2], []", false);
         for (const std::int64_t n : kSizes)
           run({n}, {n}, {n}, fmt::format("[{}] three times", n), false);
         run({0, 4}, {4}, {1}, "[0,4], [4], [1]", false);
         // Six dimensions that no two inputs walk alike: none merge.
         run({2, 1, 2, 1, 2, 1}, {1, 3, 1, 3, 1, 3}, {2, 3, 2, 3, 2, 3}, "six dimensions", false);
         run({7, 5}, {7, 5}, {5}, "transposed cond [7,5], [7,5], [5]", true);
       }});
  c.push_back({"where_scalar", OpId::where, [](Device& d) {
                 const Mask m = random_mask(127);
                 const Vec a = randn(127);
                 const Tensor tc = mask_on(d, m, {127}), ta = on(d, a, {127});
                 const Vec y = where(tc, ta, -2.5).to_vector<float>();
                 const Vec z = where(tc, 1.5, ta).to_vector<float>();
                 for (std::size_t i = 0; i < a.size(); ++i) {
                   EXPECT_EQ(y[i], m[i] ? a[i] : -2.5f) << i;
                   EXPECT_EQ(z[i], m[i] ? 1.5f : a[i]) << i;
                 }
               }});
  c.push_back({"masked_fill", OpId::masked_fill, [](Device& d) {
                 auto run = [&](const Shape& sx, const Shape& sm, const std::string& what,
                                bool transpose_x) {
                   const Shape out = broadcast_shapes(sx, sm);
                   Vec x = randn(sx.numel());
                   const Mask m = random_mask(sm.numel());
                   Tensor tx;
                   if (transpose_x) {
                     const Transposed t = transposed(d, x, sx[0], sx[1]);
                     tx = t.view;
                     x = t.values;
                   } else {
                     tx = on(d, x, sx);
                   }
                   const Tensor y = masked_fill(tx, mask_on(d, m, sm), -0.75);
                   ASSERT_EQ(y.shape(), out) << what;
                   Ref r(static_cast<std::size_t>(out.numel()));
                   for (std::int64_t i = 0; i < out.numel(); ++i)
                     r[i] = m[source_index(out, sm, i)] ? -0.75 : x[source_index(out, sx, i)];
                   expect_equal(y.to_vector<float>(), r, what);
                 };
                 run({4, 3, 5}, {3, 1}, "[4,3,5] with mask [3,1]", false);
                 run({5}, {4, 1}, "[5] with mask [4,1]", false);
                 for (const std::int64_t n : kSizes) run({n}, {n}, fmt::format("[{}]", n), false);
                 run({0, 2}, {2}, "[0,2] with mask [2]", false);
                 run({6, 9}, {9}, "transposed [6,9] with mask [9]", true);
               }});
}

// ----- errors -----

template <typename F>
void expect_invalid(F f, const std::string& op, const std::string& detail) {
  try {
    f();
    ADD_FAILURE() << op << ": no InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(op), std::string::npos) << msg;
    EXPECT_NE(msg.find(detail), std::string::npos) << msg;
  }
}

void add_error_cases(std::vector<Case>& c) {
  c.push_back({"pointwise_errors", OpId::where, [](Device& d) {
                 const Tensor x = on(d, randn(6), {2, 3}), y = on(d, randn(4), {4});
                 const Tensor m = mask_on(d, random_mask(6), {2, 3});
                 expect_invalid([&] { (void)minimum(x, y); }, "minimum", "[2,3]");
                 expect_invalid([&] { (void)lt(x, y); }, "lt", "[4]");
                 expect_invalid([&] { (void)where(x, x, x); }, "where", "cond must be a bool");
                 expect_invalid([&] { (void)where(m, x, y); }, "where", "broadcast");
                 expect_invalid([&] { (void)masked_fill(x, x, 1.0); }, "masked_fill", "bool");
                 expect_invalid([&] { (void)tessera::sqrt(m); }, "sqrt", "floating-point");
                 expect_invalid([&] { (void)neg(m); }, "neg", "bool");
                 expect_invalid([&] { (void)clamp(x, std::nullopt, std::nullopt); }, "clamp",
                                "min and max");
                 expect_invalid([&] { (void)gelu(x, "fast"); }, "gelu", "'fast'");
                 expect_invalid([&] { (void)silu_backward(x, y); }, "silu_backward", "[4]");
               }});
}

}  // namespace

std::vector<Case> tessera::conformance::pointwise_cases() {
  std::vector<Case> c;
  add_unary_cases(c);
  add_binary_cases(c);
  add_selection_cases(c);
  add_error_cases(c);
  return c;
}
