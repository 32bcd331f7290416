// Conformance of the 16-bit floats (f16, bf16) on every device: casts to and from every dtype
// (the bits of tessera/half.h's rounding, exactly, including ties, subnormals, overflow and NaN),
// copies through strided views, fills, the GEMMs (matmul, addmm, bmm) against float64 sums
// of the rounded inputs, within the output's rounding, and every op that computes in f32
// (op_computes_in_f32: element-wise math, comparisons, selection, reductions, softmax and their
// backwards) against the same op in f32 on cpu:0 from the rounded inputs, rounded once, and the
// gradients of the differentiable ones through autograd in each dtype against f32's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>

#include <fmt/format.h>

#include "cases.h"
#include "tessera/tessera.h"
#include "tessera/train/autograd.h"

using namespace tessera;
using namespace tessera::conformance;

namespace {

constexpr DType kHalves[] = {DType::f16, DType::bf16};

std::uint16_t narrow(DType t, float v) {
  return t == DType::f16 ? f32_to_f16(v) : f32_to_bf16(v);
}

float widen(DType t, std::uint16_t b) {
  return t == DType::f16 ? f16_to_f32(b) : bf16_to_f32(b);
}

// The stored bits of a 16-bit tensor (contiguous order).
std::vector<std::uint16_t> bits(const Tensor& t) {
  std::vector<std::uint16_t> v(static_cast<std::size_t>(t.numel()));
  t.contiguous().copy_to_host(v.data(), v.size() * 2, t.dtype());
  return v;
}

// f32 values that exercise the rounding: random normals at several scales, ties at f16's and
// bf16's last bit, f16's subnormals and its overflow edge, signed zeros, infinities, NaN.
Vec edge_values(std::int64_t n) {
  Vec v = randn(n);
  const float scales[] = {1e-6f, 1e-3f, 1.0f, 300.0f, 6e4f, 1e20f};
  for (std::size_t i = 0; i < v.size(); ++i) v[i] *= scales[i % 6];
  const Vec fixed = {0.0f,
                     -0.0f,
                     INFINITY,
                     -INFINITY,
                     NAN,
                     65504.0f,
                     65519.99f,
                     65520.0f,
                     -65536.0f,
                     1.0f + 1.0f / 2048.0f,  // f16 tie, rounds down to even
                     1.0f + 3.0f / 2048.0f,  // f16 tie, rounds up to even
                     1.0f + 1.0f / 256.0f,   // bf16 tie, down
                     1.0f + 3.0f / 256.0f,   // bf16 tie, up
                     5.9604645e-8f,          // f16's smallest subnormal
                     2.9802322e-8f,          // half of it: a tie to zero
                     3.0e-8f,                // just above: the smallest subnormal
                     6.0975552e-5f,          // f16's largest subnormal
                     6.1035156e-5f,          // f16's smallest normal
                     1e-40f,                 // an f32 subnormal
                     std::numeric_limits<float>::max()};
  for (std::size_t i = 0; i < fixed.size() && i < v.size(); ++i) v[i] = fixed[i];
  return v;
}

Case cast_from_f32(DType t) {
  return {
      fmt::format("cast_f32_to_{}_bits", dtype_name(t)), OpId::cast, [t](Device& d) {
        // Odd sizes, and contiguous multiples of 4 (the GPUs' 4-an-invocation path), whole and
        // from offsets of 4 (that path) and 2 (the general one); each back to f32 exactly.
        for (const Shape& s :
             {Shape{1}, Shape{3}, Shape{127}, Shape{1025}, Shape{0, 4}, Shape{4}, Shape{1024}})
          for (const std::int64_t from : {0, 2, 4}) {
            if (from > 0 && s.numel() < 1024) continue;
            const Vec all = edge_values(s.numel());
            const Vec v(all.begin() + from, all.end());
            const Tensor x = Tensor::from(all, s, &d);
            const Tensor h = from > 0 ? x.narrow(0, from, s[0] - from).to(t) : x.to(t);
            const std::vector<std::uint16_t> got = bits(h);
            ASSERT_EQ(got.size(), v.size());
            for (std::size_t i = 0; i < v.size(); ++i) {
              const std::uint16_t want = narrow(t, v[i]);
              if (std::isnan(v[i]))  // any quiet NaN
                EXPECT_TRUE(std::isnan(widen(t, got[i]))) << "element " << i;
              else
                ASSERT_EQ(got[i], want) << "element " << i << ": " << v[i];
            }
            const Vec back =
                (from == 2 ? h.narrow(0, 2, h.numel() - 2) : h).to(DType::f32).to_vector<float>();
            for (std::size_t i = 0; i < back.size(); ++i) {
              const float w = widen(t, got[i + (from == 2 ? 2 : 0)]);
              if (std::isnan(w))
                EXPECT_TRUE(std::isnan(back[i])) << "element " << i;
              else
                ASSERT_EQ(back[i], w) << "element " << i;
            }
          }
        // A permuted view whose last dimension stays contiguous (autocast's attention heads,
        // [B, T, 3, H, E] as [3, B, H, T, E]; the GPUs' 4-an-invocation strided path), whole and
        // from an offset of 4, and one whose last dimension is 6 (the general path).
        for (const std::int64_t e : {8, 6})
          for (const std::int64_t from : {0, 4}) {
            const Shape s{2, 5, 3, 2, e};
            const Vec all = edge_values(s.numel() + from);
            const Tensor x = Tensor::from(all, {s.numel() + from}, &d)
                                 .narrow(0, from, s.numel())
                                 .reshape(s)
                                 .permute({2, 0, 3, 1, 4});
            const std::vector<std::uint16_t> got = bits(x.to(t));
            ASSERT_EQ(got.size(), static_cast<std::size_t>(s.numel()));
            std::size_t at = 0;
            for (std::int64_t k = 0; k < 3; ++k)
              for (std::int64_t b = 0; b < 2; ++b)
                for (std::int64_t h = 0; h < 2; ++h)
                  for (std::int64_t i = 0; i < 5; ++i)
                    for (std::int64_t c = 0; c < e; ++c, ++at) {
                      const float v = all[static_cast<std::size_t>(
                          from + (((b * 5 + i) * 3 + k) * 2 + h) * e + c)];
                      if (std::isnan(v))
                        EXPECT_TRUE(std::isnan(widen(t, got[at]))) << "element " << at;
                      else
                        ASSERT_EQ(got[at], narrow(t, v)) << "element " << at << ": " << v;
                    }
          }
      }};
}

Case cast_round_trip(DType t) {
  return {fmt::format("cast_{}_round_trip", dtype_name(t)), OpId::cast, [t](Device& d) {
            // Through a transposed view: 16-bit to f32 exactly, f32 back to the same bits, to the
            // other 16-bit type (through f32), to i32 (truncating) and to bool.
            const Vec v = edge_values(15);
            Vec finite = v;
            for (float& x : finite)
              if (!std::isfinite(x) || std::abs(x) > 1e9f) x = 1.5f;
            const Tensor h = Tensor::from(finite, {3, 5}, &d).to(t).t();  // [5, 3]
            const std::vector<std::uint16_t> hb = bits(Tensor::from(finite, {3, 5}, &d).to(t));
            const Vec back = h.to(DType::f32).to_vector<float>();
            const DType other = t == DType::f16 ? DType::bf16 : DType::f16;
            const std::vector<std::uint16_t> ob = bits(h.to(other));
            const auto ints = h.to(DType::i32).to_vector<std::int32_t>();
            const auto mask = h.to(DType::boolean).to_vector<std::uint8_t>();
            for (int i = 0; i < 5; ++i)
              for (int j = 0; j < 3; ++j) {
                const std::size_t at = static_cast<std::size_t>(i * 3 + j),
                                  src = static_cast<std::size_t>(j * 5 + i);
                const float w = widen(t, hb[src]);
                EXPECT_EQ(back[at], w) << "element " << at;
                EXPECT_EQ(ob[at], narrow(other, w)) << "element " << at;
                const std::int32_t want =
                    std::isinf(w) ? (w > 0 ? std::numeric_limits<std::int32_t>::max()
                                           : std::numeric_limits<std::int32_t>::min())
                                  : static_cast<std::int32_t>(std::trunc(w));  // saturating
                EXPECT_EQ(ints[at], want) << "element " << at;
                EXPECT_EQ(mask[at], w != 0.0f ? 1 : 0) << "element " << at;
              }
            EXPECT_EQ(bits(h.to(DType::f32).to(t).t().contiguous()), hb);
            // Integers and masks to 16 bits.
            const std::vector<std::int32_t> iv = {-70000, -2049, -7, 0, 3, 2051, 65519, 70000};
            const std::vector<std::uint16_t> ib =
                bits(Tensor::from<std::int32_t>(iv, {8}, &d).to(t));
            for (std::size_t i = 0; i < iv.size(); ++i)
              EXPECT_EQ(ib[i], narrow(t, static_cast<float>(iv[i]))) << iv[i];
            const std::vector<std::uint8_t> m = {1, 0, 1};
            const std::vector<std::uint16_t> mb = bits(Tensor::from_mask(m, {3}, &d).to(t));
            EXPECT_EQ(mb, (std::vector<std::uint16_t>{narrow(t, 1.0f), 0, narrow(t, 1.0f)}));
          }};
}

Case copies(DType t) {
  return {fmt::format("copy_fill_{}", dtype_name(t)), OpId::copy, [t](Device& d) {
            // contiguous() of a transposed view (copy), cat (copy_into), a strided copy_ and fills.
            const Vec v = randn(7 * 9);
            const Tensor x = Tensor::from(v, {7, 9}, &d).to(t);
            const std::vector<std::uint16_t> xb = bits(x);
            const std::vector<std::uint16_t> tb = bits(x.t().contiguous());
            for (int i = 0; i < 9; ++i)
              for (int j = 0; j < 7; ++j) ASSERT_EQ(tb[i * 7 + j], xb[j * 9 + i]);
            const std::vector<std::uint16_t> cb = bits(cat({x, x.narrow(0, 2, 3)}, 0));
            ASSERT_EQ(cb.size(), 10u * 9);
            for (std::size_t i = 0; i < 63; ++i) ASSERT_EQ(cb[i], xb[i]);
            for (std::size_t i = 0; i < 27; ++i) ASSERT_EQ(cb[63 + i], xb[18 + i]);
            // Columns 3..6 of z from a [4, 4] window of x: strided destination and source.
            Tensor z = zeros({4, 9}, t, &d);
            copy_(z.narrow(1, 3, 4), x.narrow(0, 1, 4).narrow(1, 2, 4));
            const std::vector<std::uint16_t> zb = bits(z);
            for (std::size_t r = 0; r < 4; ++r)
              for (std::size_t c = 0; c < 9; ++c)
                ASSERT_EQ(zb[r * 9 + c], c >= 3 && c < 7 ? xb[(1 + r) * 9 + 2 + (c - 3)] : 0)
                    << "row " << r << " column " << c;
            for (const double value : {3.3, -1e-6, 7e4}) {
              const std::vector<std::uint16_t> fb = bits(Tensor::full({5, 3}, value, t, &d));
              for (std::uint16_t b : fb) ASSERT_EQ(b, narrow(t, static_cast<float>(value)));
            }
          }};
}

// The GEMM's normalised error bound in |t|: the output's rounding (half an ulp, relative) and f32
// sums, with room for the error's spread.
double gemm_tolerance(DType t) {
  return t == DType::f16 ? 1e-3 : 8e-3;
}

// Host values of |v| rounded to |t|, as the device holds them after Tensor::to(t).
Vec rounded(DType t, Vec v) {
  for (float& x : v) x = widen(t, narrow(t, x));
  return v;
}

void expect_gemm(DType t, const Tensor& y, const std::vector<double>& ref) {
  ASSERT_EQ(y.dtype(), t);
  const Vec got = y.to(DType::f32).to_vector<float>();
  expect_close(got, ref, gemm_tolerance(t));
  ASSERT_EQ(got.size(), ref.size());
  // Not better than exact either: the output is rounded to |t| (a wrong dtype path would show).
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i], widen(t, narrow(t, got[i])))
        << "element " << i << " is not a " << dtype_name(t);
}

// out_dtype f32 on |t| inputs: the f32 sums (normalised error of f32 sums), not rounded to |t|
// (most of them are not |t| values: a path that rounds would show).
void expect_gemm_f32(DType t, const Tensor& y, const std::vector<double>& ref) {
  ASSERT_EQ(y.dtype(), DType::f32);
  const Vec got = y.to_vector<float>();
  expect_close(got, ref, 1e-5);
  std::size_t rounded_ones = 0;
  for (const float v : got) rounded_ones += v == widen(t, narrow(t, v));
  EXPECT_LT(rounded_ones, got.size() / 4 + 1) << "the sums were rounded to " << dtype_name(t);
}

struct GemmSize {
  const char* name;
  std::int64_t m, n, k;
};

// matmul (addmm with |bias|) of |t| inputs, in |t| or with out_dtype f32 (|wide|: an f32 bias).
Case matmul_case(DType t, GemmSize s, bool ta, bool tb, bool bias, bool wide = false) {
  return {
      fmt::format("{}_{}{}_{}{}{}", bias ? "addmm" : "matmul", dtype_name(t),
                  wide ? "_out_f32" : "", s.name, ta ? "T" : "N", tb ? "T" : "N"),
      bias ? OpId::addmm : OpId::matmul, [=](Device& d) {
        const std::int64_t m = s.m, n = s.n, k = s.k;
        const Vec a = rounded(t, randn(m * k)), b = rounded(t, randn(k * n)),
                  c = wide ? randn(n) : rounded(t, randn(n));
        std::vector<double> ref(static_cast<std::size_t>(m * n));
        for (std::int64_t i = 0; i < m; ++i)
          for (std::int64_t j = 0; j < n; ++j) {
            double sum = bias ? c[j] : 0.0;
            for (std::int64_t p = 0; p < k; ++p)
              sum += double(ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
            ref[i * n + j] = sum;
          }
        const Tensor at = Tensor::from(a, ta ? Shape{k, m} : Shape{m, k}, &d).to(t);
        const Tensor bt = Tensor::from(b, tb ? Shape{n, k} : Shape{k, n}, &d).to(t);
        if (wide) {
          const Tensor y = bias ? addmm(at, bt, Tensor::from(c, {n}, &d), ta, tb, DType::f32)
                                : matmul(at, bt, ta, tb, DType::f32);
          expect_gemm_f32(t, y, ref);
          // Refused before any kernel runs, saying what was wrong: a bias in the inputs'
          // dtype with an f32 result, an out_dtype other than f32 or the inputs' own, and a
          // 16-bit out_dtype for f32 inputs.
          auto refused = [](auto f, const char* words) {
            try {
              (void)f();
              ADD_FAILURE() << "accepted; expected an InvalidArgument saying " << words;
            } catch (const InvalidArgument& e) {
              EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
            }
          };
          const DType other = t == DType::f16 ? DType::bf16 : DType::f16;
          if (bias)
            refused(
                [&] { return addmm(at, bt, Tensor::from(c, {n}, &d).to(t), ta, tb, DType::f32); },
                "bias must have the result's dtype (f32)");
          refused([&] { return matmul(at, bt, ta, tb, other); }, "out_dtype");
          refused([&] { return matmul(at.to(DType::f32), bt.to(DType::f32), ta, tb, t); },
                  "out_dtype");
          return;
        }
        const Tensor y =
            bias ? addmm(at, bt, Tensor::from(c, {n}, &d).to(t), ta, tb) : matmul(at, bt, ta, tb);
        expect_gemm(t, y, ref);
      }};
}

Case bmm_case(DType t, bool wide) {
  return {fmt::format("bmm_{}{}", dtype_name(t), wide ? "_out_f32" : ""), OpId::bmm,
          [t, wide](Device& d) {
            // Broadcast batch dimensions, b transposed; then a long K on few matrices.
            for (const auto& [bs, m, n, k] :
                 {std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>{3, 17, 9, 33},
                  {2, 5, 6, 2100},
                  {3, 136, 24, 40}}) {
              const Vec a = rounded(t, randn(bs * m * k)), b = rounded(t, randn(n * k));
              std::vector<double> ref(static_cast<std::size_t>(bs * m * n));
              for (std::int64_t q = 0; q < bs; ++q)
                for (std::int64_t i = 0; i < m; ++i)
                  for (std::int64_t j = 0; j < n; ++j) {
                    double sum = 0;
                    for (std::int64_t p = 0; p < k; ++p)
                      sum += double(a[(q * m + i) * k + p]) * b[j * k + p];
                    ref[(q * m + i) * n + j] = sum;
                  }
              const Tensor y =
                  bmm(Tensor::from(a, {bs, m, k}, &d).to(t), Tensor::from(b, {1, n, k}, &d).to(t),
                      false, true, wide ? std::optional(DType::f32) : std::nullopt);
              EXPECT_EQ(y.shape(), (Shape{bs, m, n}));
              if (wide)
                expect_gemm_f32(t, y, ref);
              else
                expect_gemm(t, y, ref);
            }
          }};
}

}  // namespace

namespace tessera::conformance {

// One op computing in f32 (op.h's op_computes_in_f32), called with 16-bit inputs: |inputs| makes
// f32 values for each input shape, |fn| calls the op. On |d| the inputs are rounded to |t|; the
// reference is |fn| on cpu:0 of the same rounded values in f32 (what the conformance suite checks
// against float64), rounded to |t|. Float results within one rounding of |t| (normalised error;
// the f32 results of two devices differ in their last bits, which can move a rounding), in |t|;
// masks and indices equal, in their own dtype.
struct Widened {
  std::string name;
  OpId op;
  std::vector<Shape> shapes;
  std::function<Vec(std::int64_t)> values;
  std::function<Tensor(const std::vector<Tensor>&)> fn;
};

Case widened_case(DType t, Widened w) {
  return {fmt::format("{}_{}", w.name, dtype_name(t)), w.op, [t, w](Device& d) {
            std::vector<Tensor> mine, ref;
            for (const Shape& s : w.shapes) {
              const Tensor x = on(d, w.values(s.numel()), s).to(t);
              mine.push_back(x);
              ref.push_back(x.to(DType::f32).to(device("cpu:0")));
            }
            const Tensor y = w.fn(mine);
            const Tensor r = w.fn(ref);
            ASSERT_EQ(y.shape(), r.shape());
            if (r.dtype() == DType::f32) {
              EXPECT_EQ(y.dtype(), t);
              const Vec want = r.to(t).to(DType::f32).to_vector<float>();
              expect_close(y.to(DType::f32).to_vector<float>(), Ref(want.begin(), want.end()),
                           t == DType::f16 ? 1e-3 : 8e-3);
            } else {
              EXPECT_EQ(y.dtype(), r.dtype());
              EXPECT_EQ(y.to(DType::f32).to_vector<float>(), r.to(DType::f32).to_vector<float>());
            }
          }};
}

std::vector<Widened> widened_ops() {
  const Shape m{3, 37}, row{37}, even{4, 38};
  auto normal = [](std::int64_t n) { return randn(n); };
  auto positive = [](std::int64_t n) { return uniform(n, 0.1f, 3.0f); };
  using V = const std::vector<Tensor>&;
  std::vector<Widened> w = {
      {"add_broadcast", OpId::add, {m, row}, normal, [](V x) { return add(x[0], x[1]); }},
      {"sub", OpId::sub, {m, m}, normal, [](V x) { return sub(x[0], x[1]); }},
      {"mul_broadcast", OpId::mul, {m, row}, normal, [](V x) { return mul(x[0], x[1]); }},
      {"div", OpId::div, {m, m}, positive, [](V x) { return div(x[0], x[1]); }},
      {"add_scalar", OpId::add_scalar, {m}, normal, [](V x) { return add_scalar(x[0], 0.3); }},
      {"mul_scalar", OpId::mul_scalar, {m}, normal, [](V x) { return mul_scalar(x[0], -1.7); }},
      {"relu", OpId::relu, {m}, normal, [](V x) { return relu(x[0]); }},
      {"relu_backward",
       OpId::relu_backward,
       {m, m},
       normal,
       [](V x) { return relu_backward(x[0], x[1]); }},
      {"exp", OpId::exp, {m}, normal, [](V x) { return exp(x[0]); }},
      {"log", OpId::log, {m}, positive, [](V x) { return log(x[0]); }},
      {"tanh", OpId::tanh, {m}, normal, [](V x) { return tanh(x[0]); }},
      {"sigmoid", OpId::sigmoid, {m}, normal, [](V x) { return sigmoid(x[0]); }},
      {"neg", OpId::neg, {m}, normal, [](V x) { return neg(x[0]); }},
      {"abs", OpId::abs, {m}, normal, [](V x) { return abs(x[0]); }},
      {"sign", OpId::sign, {m}, normal, [](V x) { return sign(x[0]); }},
      {"sqrt", OpId::sqrt, {m}, positive, [](V x) { return sqrt(x[0]); }},
      {"rsqrt", OpId::rsqrt, {m}, positive, [](V x) { return rsqrt(x[0]); }},
      {"pow", OpId::pow, {m}, normal, [](V x) { return pow(x[0], 3.0); }},
      {"clamp", OpId::clamp, {m}, normal, [](V x) { return clamp(x[0], -0.5, 0.7); }},
      {"gelu", OpId::gelu, {m}, normal, [](V x) { return gelu(x[0]); }},
      {"gelu_tanh_backward",
       OpId::gelu_backward,
       {m, m},
       normal,
       [](V x) { return gelu_backward(x[0], x[1], "tanh"); }},
      {"silu", OpId::silu, {m}, normal, [](V x) { return silu(x[0]); }},
      {"silu_backward",
       OpId::silu_backward,
       {m, m},
       normal,
       [](V x) { return silu_backward(x[0], x[1]); }},
      {"erf", OpId::erf, {m}, normal, [](V x) { return erf(x[0]); }},
      // An odd count (one element an invocation on the GPUs) and an even one (two a word).
      {"dropout",
       OpId::dropout,
       {m},
       normal,
       [](V x) {
         return dropout(x[0], {0.3f, 77});
       }},
      {"dropout_pairs",
       OpId::dropout,
       {even},
       normal,
       [](V x) {
         return dropout(x[0], {0.6f, 5});
       }},
      {"minimum", OpId::minimum, {m, row}, normal, [](V x) { return minimum(x[0], x[1]); }},
      {"maximum", OpId::maximum, {m, m}, normal, [](V x) { return maximum(x[0], x[1]); }},
      {"lt", OpId::lt, {m, row}, normal, [](V x) { return lt(x[0], x[1]); }},
      {"ge_scalar", OpId::ge, {m}, normal, [](V x) { return ge(x[0], 0.25); }},
      {"eq_self", OpId::eq, {m}, normal, [](V x) { return eq(x[0], x[0].contiguous()); }},
      {"where",
       OpId::where,
       {m, m, row},
       normal,
       [](V x) { return where(gt(x[0], 0.0), x[1], x[2]); }},
      {"masked_fill",
       OpId::masked_fill,
       {m, row},
       normal,
       [](V x) { return masked_fill(x[0], lt(x[1], 0.0), -2.5); }},
      {"sum_axis0", OpId::sum, {m}, normal, [](V x) { return sum(x[0], 0); }},
      {"mean_axis1", OpId::mean, {m}, normal, [](V x) { return mean(x[0], 1); }},
      {"max", OpId::max, {m}, normal, [](V x) { return max(x[0], 1); }},
      {"min", OpId::min, {m}, normal, [](V x) { return min(x[0], 0, true); }},
      {"argmax", OpId::argmax, {m}, normal, [](V x) { return argmax(x[0], 1); }},
      {"var", OpId::var, {m}, normal, [](V x) { return var(x[0], 1); }},
      {"std", OpId::std, {m}, normal, [](V x) { return std(x[0], 0, 0.0); }},
      {"prod", OpId::prod, {m}, positive, [](V x) { return prod(x[0], 0); }},
      {"softmax", OpId::softmax, {m}, normal, [](V x) { return softmax(x[0], -1); }},
      {"log_softmax", OpId::log_softmax, {m}, normal, [](V x) { return log_softmax(x[0], 0); }},
      {"softmax_backward",
       OpId::softmax_backward,
       {m, m},
       normal,
       [](V x) { return softmax_backward(x[0], softmax(x[1], 1), 1); }},
      {"log_softmax_backward",
       OpId::log_softmax_backward,
       {m, m},
       normal,
       [](V x) { return log_softmax_backward(x[0], log_softmax(x[1], 1), 1); }},
      {"max_backward",
       OpId::max_backward,
       {Shape{3}, m},
       normal,
       [](V x) { return max_backward(x[0], x[1], 1); }},
      {"prod_backward",
       OpId::prod_backward,
       {row, m},
       positive,
       [](V x) { return prod_backward(x[0], x[1], 0); }},
      // An even count: the GPU kernels' two-elements-a-word path (the cases above are odd).
      {"add_pairs", OpId::add, {even, even}, normal, [](V x) { return add(x[0], x[1]); }},
      {"div_pairs", OpId::div, {even, even}, positive, [](V x) { return div(x[0], x[1]); }},
      {"mul_scalar_pairs",
       OpId::mul_scalar,
       {even},
       normal,
       [](V x) { return mul_scalar(x[0], 0.75); }},
      {"sigmoid_pairs", OpId::sigmoid, {even}, normal, [](V x) { return sigmoid(x[0]); }},
      {"relu_backward_pairs",
       OpId::relu_backward,
       {even, even},
       normal,
       [](V x) { return relu_backward(x[0], x[1]); }},
      {"pow_pairs", OpId::pow, {even}, positive, [](V x) { return pow(x[0], -2.0); }},
      {"clamp_pairs", OpId::clamp, {even}, normal, [](V x) { return clamp(x[0], -0.25, 0.5); }},
      {"gelu_pairs", OpId::gelu, {even}, normal, [](V x) { return gelu(x[0], "tanh"); }},
      {"gelu_backward_pairs",
       OpId::gelu_backward,
       {even, even},
       normal,
       [](V x) { return gelu_backward(x[0], x[1]); }},
  };
  return w;
}

// The gradient of a differentiable op computing in f32, taken in 16 bits: loss = sum(op(x) * r)
// with every tensor rounded to |t| and autograd in |t| on the device, against the same in f32 on
// cpu:0 from the same rounded values. Each step of the backward rounds once more, so the
// tolerance (normalised error) is a few roundings of |t| (measured: up to 1e-3 in f16, 6e-3 in
// bf16). Scalars the ops compare with are exact in both dtypes (a scalar is rounded to the
// tensor's dtype, as torch does).
struct HalfGrad {
  std::string name;
  OpId op;
  std::vector<Shape> shapes;
  std::function<Vec(std::int64_t)> values;
  std::function<train::Variable(const std::vector<train::Variable>&)> fn;
};

Case half_grad_case(DType t, HalfGrad g) {
  return {fmt::format("grad_{}_{}", g.name, dtype_name(t)), g.op, [t, g](Device& d) {
            Device& cpu = device("cpu:0");
            std::vector<Tensor> xs;
            for (const Shape& s : g.shapes) xs.push_back(on(d, g.values(s.numel()), s).to(t));
            auto grads = [&](Device& on_dev, DType dt, Tensor* r) {
              std::vector<train::Variable> v;
              for (const Tensor& x : xs) v.emplace_back(x.to(dt).to(on_dev), true);
              const train::Variable y = g.fn(v);
              if (!r->defined())
                *r = Tensor::from(randn(y.value().numel()), y.value().shape(), &d).to(t);
              const train::Variable weighted = train::mul(y, train::Variable(r->to(dt).to(on_dev)));
              std::vector<int> all(static_cast<std::size_t>(y.value().rank()));
              for (int i = 0; i < y.value().rank(); ++i) all[static_cast<std::size_t>(i)] = i;
              (all.empty() ? weighted : train::sum(weighted, all)).backward();
              std::vector<Vec> out;
              for (const train::Variable& x : v) {
                EXPECT_EQ(x.grad().dtype(), dt);
                out.push_back(x.grad().to(DType::f32).to_vector<float>());
              }
              return out;
            };
            Tensor r;
            const std::vector<Vec> mine = grads(d, t, &r);
            const std::vector<Vec> ref = grads(cpu, DType::f32, &r);
            for (std::size_t i = 0; i < mine.size(); ++i) {
              SCOPED_TRACE(fmt::format("input {}", i));
              expect_close(mine[i], Ref(ref[i].begin(), ref[i].end()),
                           t == DType::f16 ? 5e-3 : 3e-2);
            }
          }};
}

std::vector<HalfGrad> half_grad_ops() {
  namespace tt = tessera::train;
  const Shape m{3, 37}, row{37};
  auto normal = [](std::int64_t n) { return randn(n); };
  auto positive = [](std::int64_t n) { return uniform(n, 0.5f, 2.0f); };
  using V = const std::vector<tt::Variable>&;
  return {
      {"add_broadcast", OpId::add, {m, row}, normal, [](V x) { return tt::add(x[0], x[1]); }},
      {"sub", OpId::sub, {m, m}, normal, [](V x) { return tt::sub(x[0], x[1]); }},
      {"mul_broadcast", OpId::mul, {m, row}, normal, [](V x) { return tt::mul(x[0], x[1]); }},
      {"div", OpId::div, {m, m}, positive, [](V x) { return tt::div(x[0], x[1]); }},
      {"scalars",
       OpId::mul_scalar,
       {m},
       normal,
       [](V x) { return tt::mul_scalar(tt::add_scalar(x[0], 0.5), -1.5); }},
      {"relu", OpId::relu, {m}, normal, [](V x) { return tt::relu(x[0]); }},
      {"exp", OpId::exp, {m}, normal, [](V x) { return tt::exp(x[0]); }},
      {"log", OpId::log, {m}, positive, [](V x) { return tt::log(x[0]); }},
      {"tanh", OpId::tanh, {m}, normal, [](V x) { return tt::tanh(x[0]); }},
      {"sigmoid", OpId::sigmoid, {m}, normal, [](V x) { return tt::sigmoid(x[0]); }},
      {"neg_abs", OpId::abs, {m}, normal, [](V x) { return tt::abs(tt::neg(x[0])); }},
      {"sqrt", OpId::sqrt, {m}, positive, [](V x) { return tt::sqrt(x[0]); }},
      {"rsqrt", OpId::rsqrt, {m}, positive, [](V x) { return tt::rsqrt(x[0]); }},
      {"pow", OpId::pow, {m}, normal, [](V x) { return tt::pow(x[0], 3.0); }},
      // Bounds exact in both dtypes: the backward compares x with them in its own dtype.
      {"clamp", OpId::clamp, {m}, normal, [](V x) { return tt::clamp(x[0], -0.5, 0.75); }},
      {"gelu", OpId::gelu, {m}, normal, [](V x) { return tt::gelu(x[0]); }},
      {"gelu_tanh", OpId::gelu, {m}, normal, [](V x) { return tt::gelu(x[0], "tanh"); }},
      {"silu", OpId::silu, {m}, normal, [](V x) { return tt::silu(x[0]); }},
      {"erf", OpId::erf, {m}, normal, [](V x) { return tt::erf(x[0]); }},
      {"minimum", OpId::minimum, {m, row}, normal, [](V x) { return tt::minimum(x[0], x[1]); }},
      {"maximum", OpId::maximum, {m, m}, normal, [](V x) { return tt::maximum(x[0], x[1]); }},
      {"where",
       OpId::where,
       {m, m},
       normal,
       [](V x) { return tt::where(gt(x[0].value(), 0.0), x[0], x[1]); }},
      {"masked_fill",
       OpId::masked_fill,
       {m},
       normal,
       [](V x) { return tt::masked_fill(x[0], lt(x[0].value(), -0.25), 2.0); }},
      {"sum", OpId::sum, {m}, normal, [](V x) { return tt::sum(x[0], 0); }},
      {"mean", OpId::mean, {m}, normal, [](V x) { return tt::mean(x[0], 1, true); }},
      {"max", OpId::max, {m}, normal, [](V x) { return tt::max(x[0], 1); }},
      {"min", OpId::min, {m}, normal, [](V x) { return tt::min(x[0], 0); }},
      {"var", OpId::var, {m}, normal, [](V x) { return tt::var(x[0], 1); }},
      // Over the 37 columns: the gradient of the standard deviation of 3 values divides by it,
      // which in bf16 is ill-conditioned where the 3 happen to be close.
      {"std", OpId::std, {m}, normal, [](V x) { return tt::std(x[0], 1); }},
      {"prod", OpId::prod, {m}, positive, [](V x) { return tt::prod(x[0], 0); }},
      {"softmax", OpId::softmax, {m}, normal, [](V x) { return tt::softmax(x[0], 1); }},
      {"log_softmax", OpId::log_softmax, {m}, normal, [](V x) { return tt::log_softmax(x[0], 0); }},
  };
}

std::vector<Case> half_cases() {
  std::vector<Case> c;
  for (DType t : kHalves) {
    c.push_back(cast_from_f32(t));
    c.push_back(cast_round_trip(t));
    c.push_back(copies(t));
    // Every transpose pair in f16, two in bf16 (each pair is a kernel variant to compile on the
    // GPUs; the dtype only changes the loads), save the sizes of the matrix-unit GEMM: "aligned"
    // and "aligned_long_k" (rows of multiples of 8 halves) take the Vulkan plugin's matrix-unit
    // GEMM, f16 or bf16, where the device has one, with edge tiles, every pair in both dtypes.
    for (const GemmSize s : {GemmSize{"odd", 37, 53, 29}, GemmSize{"tiles", 130, 70, 64},
                             GemmSize{"long_k", 9, 7, 2100}, GemmSize{"aligned", 136, 264, 72},
                             GemmSize{"aligned_long_k", 24, 40, 2104}})
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          if (t == DType::f16 || ta == tb || std::string_view(s.name).starts_with("aligned"))
            c.push_back(matmul_case(t, s, ta, tb, false));
    c.push_back(matmul_case(t, {"odd", 37, 53, 29}, false, true, true));
    c.push_back(matmul_case(t, {"long_k", 9, 7, 2100}, false, false, true));
    c.push_back(matmul_case(t, {"aligned", 136, 264, 72}, false, true, true));
    // Whole 128 x 128 tiles and a long K: the matrix-unit GEMM splits K (as a weight gradient).
    c.push_back(matmul_case(t, {"split_k", 128, 128, 4096}, false, false, false));
    c.push_back(matmul_case(t, {"split_k", 128, 128, 4096}, true, false, false));
    c.push_back(bmm_case(t, false));
    // out_dtype f32 (autocast's products): gemm.tk (odd sizes with an f32 bias; the others take
    // the kernels of the cases above, writing f32), the matrix-unit GEMM where there is one
    // (aligned: edge tiles, the bias added to f32 sums; split K's parts added into c), batched.
    for (const auto& [size, ta, tb, bias] :
         {std::tuple{GemmSize{"odd", 37, 53, 29}, false, true, true},
          {GemmSize{"aligned", 136, 264, 72}, false, false, false},
          {GemmSize{"aligned", 136, 264, 72}, true, true, false},
          {GemmSize{"aligned", 136, 264, 72}, false, true, true},
          {GemmSize{"split_k", 128, 128, 4096}, true, false, false}})
      c.push_back(matmul_case(t, size, ta, tb, bias, true));
    c.push_back(bmm_case(t, true));
    for (Widened& w : widened_ops()) c.push_back(widened_case(t, std::move(w)));
    for (HalfGrad& g : half_grad_ops()) c.push_back(half_grad_case(t, std::move(g)));
  }
  return c;
}

}  // namespace tessera::conformance
