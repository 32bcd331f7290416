// Conformance of scaled dot-product attention: the fused op, its backward and the composed (math)
// form against a float64 reference of the math form (scores, mask, softmax, dropout, matmul) on
// fresh random inputs, and the gradients against finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "cases.h"
#include "gradcheck.h"
#include "tessera/half.h"
#include "tessera/tessera.h"
#include "tessera/train/autograd.h"

using namespace tessera;
using namespace tessera::conformance;
namespace tt = tessera::train;

namespace {

// ||out - ref|| / ||ref||, with ||ref|| floored at |floor| per element: a gradient that is zero
// in exact arithmetic (dK with one key per row: every dS is P (dP - D) = 0) leaves f32 rounding.
void expect_close_floored(const Vec& out, const Ref& ref, double tol, const char* what,
                          double floor = 0) {
  ASSERT_EQ(out.size(), ref.size()) << what;
  double num = 0, den = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  const double err = std::sqrt(num / std::max({den, double(ref.size()) * floor * floor, 1e-30}));
  EXPECT_LT(err, tol) << what << ": normalised error " << err;
  EXPECT_TRUE(std::isfinite(err)) << what;
}

// The root mean square of |v| (0 when empty).
double rms(const Ref& v) {
  double s = 0;
  for (const double x : v) s += x * x;
  return v.empty() ? 0.0 : std::sqrt(s / static_cast<double>(v.size()));
}

// One problem: q [batch..., L, E], k [batch..., S, E], v [batch..., S, Ev].
struct Problem {
  Problem(Shape b, std::int64_t l_, std::int64_t s_, std::int64_t e_, std::int64_t ev_,
          bool causal_ = false, float dropout_p_ = 0)
      : batch(std::move(b)), l(l_), s(s_), e(e_), ev(ev_), causal(causal_), dropout_p(dropout_p_) {}
  Shape batch;
  std::int64_t l, s, e, ev;
  bool causal = false;
  std::optional<double> scale;
  float dropout_p = 0;
  std::uint64_t seed = 0;

  std::int64_t bh() const { return batch.numel(); }
  Shape shape(std::int64_t rows, std::int64_t cols) const {
    Shape r = batch;
    r.push_back(rows);
    r.push_back(cols);
    return r;
  }
  Shape q_shape() const { return shape(l, e); }
  Shape k_shape() const { return shape(s, e); }
  Shape v_shape() const { return shape(s, ev); }
  Shape o_shape() const { return shape(l, ev); }
  AttentionAttrs attrs() const {
    AttentionAttrs a;
    a.is_causal = causal;
    if (scale) a.scale = static_cast<float>(*scale);
    a.dropout_p = dropout_p;
    a.seed = seed;
    return a;
  }
  std::string name() const {
    return fmt::format("{}_L{}_S{}_E{}_Ev{}{}{}{}", batch.str(), l, s, e, ev,
                       causal ? "_causal" : "", scale ? "_scaled" : "",
                       dropout_p > 0 ? "_dropout" : "");
  }
};

// The math form in float64: P = softmax(q k^T * scale + mask), Pd = P * dropout mask, out = Pd v;
// with |grad_out|, the gradients by the textbook softmax backward.
struct Reference {
  Ref out, lse, dq, dk, dv;
};

Reference reference(const Problem& pb, const Vec& q, const Vec& k, const Vec& v,
                    const Vec* grad_out) {
  const std::int64_t L = pb.l, S = pb.s, E = pb.e, Ev = pb.ev;
  const double scale = pb.scale ? *pb.scale : 1.0 / std::sqrt(double(E));
  Reference r;
  r.out.assign(static_cast<std::size_t>(pb.bh() * L * Ev), 0.0);
  r.lse.assign(static_cast<std::size_t>(pb.bh() * L), 0.0);
  if (grad_out) {
    r.dq.assign(q.size(), 0.0);
    r.dk.assign(k.size(), 0.0);
    r.dv.assign(v.size(), 0.0);
  }
  std::vector<double> p(static_cast<std::size_t>(S)), z(p.size()), dp(p.size());
  for (std::int64_t b = 0; b < pb.bh(); ++b)
    for (std::int64_t i = 0; i < L; ++i) {
      const float* qi = &q[static_cast<std::size_t>((b * L + i) * E)];
      double mx = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j < S; ++j) {
        double s = 0;
        for (std::int64_t c = 0; c < E; ++c) s += double(qi[c]) * k[(b * S + j) * E + c];
        p[j] = (pb.causal && j > i) ? -std::numeric_limits<double>::infinity() : s * scale;
        mx = std::max(mx, p[j]);
      }
      double sum = 0;
      for (std::int64_t j = 0; j < S; ++j) sum += p[j] = std::exp(p[j] - mx);
      r.lse[b * L + i] = mx + std::log(sum);
      for (std::int64_t j = 0; j < S; ++j) {
        p[j] /= sum;
        const auto n = static_cast<std::uint32_t>((b * L + i) * S + j);
        z[j] = pb.dropout_p == 0                             ? 1.0
               : dropout_uniform(pb.seed, n) >= pb.dropout_p ? 1.0 / (1.0 - double(pb.dropout_p))
                                                             : 0.0;
        for (std::int64_t c = 0; c < Ev; ++c)
          r.out[(b * L + i) * Ev + c] += p[j] * z[j] * v[(b * S + j) * Ev + c];
      }
      if (!grad_out) continue;
      const float* gi = &(*grad_out)[static_cast<std::size_t>((b * L + i) * Ev)];
      double dot = 0;
      for (std::int64_t j = 0; j < S; ++j) {
        double s = 0;
        for (std::int64_t c = 0; c < Ev; ++c) {
          s += double(gi[c]) * v[(b * S + j) * Ev + c];
          r.dv[(b * S + j) * Ev + c] += p[j] * z[j] * gi[c];
        }
        dp[j] = s * z[j];
        dot += p[j] * dp[j];
      }
      for (std::int64_t j = 0; j < S; ++j) {
        const double ds = p[j] * (dp[j] - dot) * scale;
        for (std::int64_t c = 0; c < E; ++c) {
          r.dq[(b * L + i) * E + c] += ds * k[(b * S + j) * E + c];
          r.dk[(b * S + j) * E + c] += ds * qi[c];
        }
      }
    }
  return r;
}

// The fused forward and backward, and the math form, against the reference.
void check_problem(Device& d, Problem pb) {
  DeviceGuard guard(d);
  pb.seed = (std::uint64_t{rng()()} << 32) | rng()();
  const Vec q = randn(pb.q_shape().numel()), k = randn(pb.k_shape().numel());
  const Vec v = randn(pb.v_shape().numel()), g = randn(pb.o_shape().numel());
  const Reference ref = reference(pb, q, k, v, &g);
  const Tensor tq = on(d, q, pb.q_shape()), tk = on(d, k, pb.k_shape()),
               tv = on(d, v, pb.v_shape());
  const auto [out, lse] = scaled_dot_product_attention_forward(tq, tk, tv, pb.attrs());
  ASSERT_EQ(out.shape(), pb.o_shape());
  expect_close_floored(out.to_vector<float>(), ref.out, 2e-5, "out");
  expect_close_floored(lse.to_vector<float>(), ref.lse, 2e-5, "lse");
  const AttentionGrads grads = scaled_dot_product_attention_backward(on(d, g, pb.o_shape()), tq, tk,
                                                                     tv, out, lse, pb.attrs());
  // dq and dk are sums of dS over S and L terms of the size of dv's (P^T grad_out): where they are
  // zero in exact arithmetic (one key), their f32 rounding grows with those sums, so the floor is
  // a hundredth of dv's root mean square (a fixed 1e-2 failed a CI run at L = 70, S = 1: 1.16e-4).
  const double floor = 1e-2 * std::max(rms(ref.dv), 1.0);
  expect_close_floored(grads.query.to_vector<float>(), ref.dq, 1e-4, "grad_q", floor);
  expect_close_floored(grads.key.to_vector<float>(), ref.dk, 1e-4, "grad_k", floor);
  expect_close_floored(grads.value.to_vector<float>(), ref.dv, 1e-4, "grad_v", 1e-2);
  const Tensor math =
      scaled_dot_product_attention_math(tq, tk, tv, pb.dropout_p, pb.causal, pb.scale, pb.seed);
  expect_close_floored(math.to_vector<float>(), ref.out, 2e-5, "math form");
}

// |x| rounded to |dtype| (f16 or bf16) and back, as a 16-bit tensor of it holds it.
Vec rounded(const Vec& x, DType dtype) {
  Vec r(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    r[i] = dtype == DType::f16 ? f16_to_f32(f32_to_f16(x[i])) : bf16_to_f32(f32_to_bf16(x[i]));
  return r;
}

// The fused op on f16 or bf16 q, k, v: out and the gradients in that dtype, or in f32 with
// |wide| (out_dtype f32, autocast's form, grad_out then f32 too), lse f32; against the reference
// on the rounded inputs. Kernels on matrix units round the probabilities and dS to the dtype
// before their products (op.h): the tolerances are the dtype's, a few of its roundings.
void check_problem_16(Device& d, Problem pb, DType dtype, bool wide) {
  DeviceGuard guard(d);
  pb.seed = (std::uint64_t{rng()()} << 32) | rng()();
  const Vec q = rounded(randn(pb.q_shape().numel()), dtype);
  const Vec k = rounded(randn(pb.k_shape().numel()), dtype);
  const Vec v = rounded(randn(pb.v_shape().numel()), dtype);
  const Vec g = wide ? randn(pb.o_shape().numel()) : rounded(randn(pb.o_shape().numel()), dtype);
  const Reference ref = reference(pb, q, k, v, &g);
  const Tensor tq = on(d, q, pb.q_shape()).to(dtype), tk = on(d, k, pb.k_shape()).to(dtype),
               tv = on(d, v, pb.v_shape()).to(dtype);
  AttentionAttrs attrs = pb.attrs();
  if (wide) attrs.out_dtype = DType::f32;
  const DType od = wide ? DType::f32 : dtype;
  const auto [out, lse] = scaled_dot_product_attention_forward(tq, tk, tv, attrs);
  ASSERT_EQ(out.dtype(), od);
  ASSERT_EQ(lse.dtype(), DType::f32);
  const double tol = dtype == DType::bf16 ? 2e-2 : 4e-3;
  expect_close_floored(out.to(DType::f32).to_vector<float>(), ref.out, tol, "out");
  expect_close_floored(lse.to_vector<float>(), ref.lse, 1e-4, "lse");
  const AttentionGrads grads = scaled_dot_product_attention_backward(on(d, g, pb.o_shape()).to(od),
                                                                     tq, tk, tv, out, lse, attrs);
  ASSERT_EQ(grads.query.dtype(), od);
  ASSERT_EQ(grads.key.dtype(), od);
  ASSERT_EQ(grads.value.dtype(), od);
  const double floor = 1e-2 * std::max(rms(ref.dv), 1.0);
  expect_close_floored(grads.query.to(DType::f32).to_vector<float>(), ref.dq, 2 * tol, "grad_q",
                       floor);
  expect_close_floored(grads.key.to(DType::f32).to_vector<float>(), ref.dk, 2 * tol, "grad_k",
                       floor);
  expect_close_floored(grads.value.to(DType::f32).to_vector<float>(), ref.dv, tol, "grad_v", 1e-2);
}

std::vector<Problem> problems() {
  // Batch dims of rank 0, 1 and 2; L = 1, 3, 127; S != L both ways; E = 64 and an odd 24.
  std::vector<Problem> base = {
      {{2, 3}, 5, 7, 24, 24}, {{2}, 3, 3, 64, 64},        {{1, 2}, 1, 1, 8, 8},
      {{2, 1}, 1, 9, 24, 16}, {{1, 1}, 127, 127, 24, 24}, {{1, 2}, 127, 50, 64, 64},
      {{}, 40, 130, 16, 33},  {{3}, 70, 1, 5, 7},
  };
  std::vector<Problem> all;
  for (const Problem& p : base)
    for (bool causal : {false, true}) {
      Problem c = p;
      c.causal = causal;
      all.push_back(c);
    }
  Problem scaled{{2, 2}, 17, 33, 24, 24};
  scaled.scale = 0.3;
  scaled.causal = true;
  all.push_back(scaled);
  for (bool causal : {false, true}) {
    Problem drop{{2, 3}, 67, 65, 24, 16};
    drop.causal = causal;
    drop.dropout_p = 0.3f;
    all.push_back(drop);
  }
  // Five heads of 5 x 5 tiles of 64 (400 KiB of dS tiles each on the GPUs): the test
  // conformance_attention_scratch runs it with 1 MiB for the tiles, so in groups of 2, 2 and 1.
  all.push_back(Problem{{5}, 300, 300, 64, 64, true});
  return all;
}

// ----- finite differences (as test_grad.cpp) -----

using Fn = GradFn;

}  // namespace

std::vector<Case> tessera::conformance::attention_op_cases() {
  constexpr OpId kOp = OpId::scaled_dot_product_attention;
  std::vector<Case> c;
  for (const Problem& p : problems())
    c.push_back({"attention_" + p.name(), kOp, [p](Device& d) { check_problem(d, p); }});
  // 16-bit: shapes the matrix units take (head dims multiples of 8 up to 64; edges of L and S;
  // dropout; several tiles of keys and queries) and one they do not (Ev 33: widened to f32).
  {
    std::vector<Problem> half = {{{2, 3}, 5, 7, 24, 24, true},
                                 {{1, 2}, 127, 50, 64, 64},
                                 {{2, 3}, 67, 65, 24, 16, true, 0.3f},
                                 {{2}, 130, 130, 64, 64, true},
                                 {{}, 40, 130, 16, 33, true}};
    for (const DType dt : {DType::f16, DType::bf16})
      for (std::size_t i = 0; i < half.size(); ++i) {
        const bool wide = i % 2 == 0;
        c.push_back({fmt::format("attention_{}{}_{}", dtype_name(dt), wide ? "_out_f32" : "",
                                 half[i].name()),
                     kOp,
                     [p = half[i], dt, wide](Device& d) { check_problem_16(d, p, dt, wide); }});
      }
  }
  c.push_back({"attention_transposed_views", kOp, [](Device& d) {
                 // q, k, v as [B, T, H, E] tensors transposed to [B, H, T, E] (strided views,
                 // as a model splits heads); grad_out likewise.
                 DeviceGuard guard(d);
                 const Problem p{{2, 3}, 11, 13, 24, 24, true};
                 const Vec q = randn(2 * 11 * 3 * 24), k = randn(2 * 13 * 3 * 24);
                 const Vec v = randn(2 * 13 * 3 * 24);
                 auto heads_first = [](const Vec& x, std::int64_t t) {
                   Vec r(x.size());
                   for (std::int64_t b = 0; b < 2; ++b)
                     for (std::int64_t i = 0; i < t; ++i)
                       for (std::int64_t h = 0; h < 3; ++h)
                         for (std::int64_t e = 0; e < 24; ++e)
                           r[((b * 3 + h) * t + i) * 24 + e] = x[((b * t + i) * 3 + h) * 24 + e];
                   return r;
                 };
                 const Reference ref = reference(p, heads_first(q, 11), heads_first(k, 13),
                                                 heads_first(v, 13), nullptr);
                 const Tensor out = scaled_dot_product_attention(
                     on(d, q, {2, 11, 3, 24}).transpose(1, 2),
                     on(d, k, {2, 13, 3, 24}).transpose(1, 2),
                     on(d, v, {2, 13, 3, 24}).transpose(1, 2), 0.0, true);
                 expect_close_floored(out.to_vector<float>(), ref.out, 2e-5, "out");
               }});
  c.push_back({"attention_empty_batch", kOp, [](Device& d) {
                 DeviceGuard guard(d);
                 const Tensor q = Tensor::empty({0, 2, 5, 8}, DType::f32, &d);
                 const Tensor k = Tensor::empty({0, 2, 6, 8}, DType::f32, &d);
                 const auto [out, lse] = scaled_dot_product_attention_forward(q, k, k, {});
                 EXPECT_EQ(out.shape(), (Shape{0, 2, 5, 8}));
                 EXPECT_EQ(lse.shape(), (Shape{0, 2, 5}));
               }});
  c.push_back(
      {"attention_errors", kOp, [](Device& d) {
         DeviceGuard guard(d);
         const Tensor q = on(d, randn(2 * 3 * 8), {2, 3, 8});
         const Tensor k = on(d, randn(2 * 4 * 6), {2, 4, 6});
         EXPECT_THROW((void)scaled_dot_product_attention(q, k, k), InvalidArgument);
         const Tensor k1 = on(d, randn(3 * 4 * 8), {3, 4, 8});
         EXPECT_THROW((void)scaled_dot_product_attention(q, k1, k1), InvalidArgument);
         EXPECT_THROW((void)scaled_dot_product_attention(q, q, q, 1.0), InvalidArgument);
         // out_dtype: f32 for 16-bit inputs only, never a 16-bit dtype other than theirs.
         AttentionAttrs wide;
         wide.out_dtype = DType::bf16;
         EXPECT_THROW((void)scaled_dot_product_attention_forward(q, q, q, wide), InvalidArgument);
         wide.out_dtype = DType::f16;
         EXPECT_THROW((void)scaled_dot_product_attention_forward(
                          q.to(DType::bf16), q.to(DType::bf16), q.to(DType::bf16), wide),
                      InvalidArgument);
         try {
           (void)scaled_dot_product_attention(q, k, k);
         } catch (const InvalidArgument& e) {
           EXPECT_NE(std::string(e.what()).find("scaled_dot_product_attention"), std::string::npos)
               << e.what();
         }
       }});
  return c;
}

std::vector<Case> tessera::conformance::attention_grad_cases() {
  constexpr OpId kOp = OpId::scaled_dot_product_attention_backward;
  std::vector<Case> c;
  struct G {
    const char* name;
    Problem p;
  };
  std::vector<G> gs = {
      {"grad_attention", {{2, 2}, 5, 5, 8, 8}},
      {"grad_attention_causal", {{2, 2}, 5, 5, 8, 8, true}},
      {"grad_attention_causal_L_gt_S", {{3}, 7, 4, 6, 5, true}},
      {"grad_attention_dropout", {{2, 2}, 6, 7, 8, 8, true, 0.25f}},
  };
  for (const G& g : gs)
    c.push_back({g.name, kOp, [p = g.p](Device& d) {
                   const std::uint64_t seed = (std::uint64_t{rng()()} << 32) | rng()();
                   gradcheck(d,
                             {{p.q_shape(), randn(p.q_shape().numel())},
                              {p.k_shape(), randn(p.k_shape().numel())},
                              {p.v_shape(), randn(p.v_shape().numel())}},
                             [p, seed](auto& v) {
                               return tt::scaled_dot_product_attention(
                                   v[0], v[1], v[2], p.dropout_p, p.causal, p.scale, seed);
                             });
                 }});
  // Packed q, k and v ([3, B, H, T, E]; heads of 8 and 24 take the GPUs' register-tiled kernels,
  // 6 the general ones): finite differences, and the output and gradient of the unpacked
  // function on the same device from the same values.
  for (const std::int64_t e : {std::int64_t{8}, std::int64_t{24}, std::int64_t{6}})
    c.push_back({fmt::format("grad_attention_packed_e{}", e), kOp, [e](Device& d) {
                   const std::uint64_t seed = (std::uint64_t{rng()()} << 32) | rng()();
                   const Shape s{3, 2, 2, 9, e};
                   auto packed = [seed](const std::vector<tt::Variable>& v) {
                     return tt::scaled_dot_product_attention_packed(v[0], 0.25, true, std::nullopt,
                                                                    seed);
                   };
                   gradcheck(d, {{s, randn(s.numel())}}, packed);

                   DeviceGuard guard(d);
                   const Vec x = randn(s.numel()), w = randn(s.numel() / 3);
                   const tt::Variable qkv(on(d, x, s), true);
                   const tt::Variable y = packed({qkv});
                   y.backward(on(d, w, y.shape()));
                   std::vector<tt::Variable> parts;
                   for (std::int64_t i = 0; i < 3; ++i)
                     parts.emplace_back(on(d, x, s).select(0, i).contiguous(), true);
                   const tt::Variable ref = tt::scaled_dot_product_attention(
                       parts[0], parts[1], parts[2], 0.25, true, std::nullopt, seed);
                   ref.backward(on(d, w, y.shape()));
                   const Vec out = ref.value().to_vector<float>();
                   expect_close(y.value().to_vector<float>(), Ref(out.begin(), out.end()), 1e-6);
                   Ref grad;
                   for (const tt::Variable& p : parts) {
                     const Vec g = p.grad().to_vector<float>();
                     grad.insert(grad.end(), g.begin(), g.end());
                   }
                   expect_close(qkv.grad().to_vector<float>(), grad, 1e-6);
                 }});
  c.push_back({"grad_attention_packed_errors", kOp, [](Device& d) {
                 DeviceGuard guard(d);
                 const tt::Variable two(on(d, randn(2 * 4 * 8), {2, 4, 8}), true);
                 EXPECT_THROW((void)tt::scaled_dot_product_attention_packed(two), InvalidArgument);
                 const tt::Variable flat(on(d, randn(3 * 8), {3, 8}), true);
                 EXPECT_THROW((void)tt::scaled_dot_product_attention_packed(flat), InvalidArgument);
                 // The backward's destinations must match the inputs.
                 const Tensor q = on(d, randn(4 * 8), {4, 8});
                 const auto [out, lse] = scaled_dot_product_attention_forward(q, q, q, {});
                 const Tensor wrong = Tensor::empty({4, 7}, DType::f32, &d);
                 const Tensor right = Tensor::empty({4, 8}, DType::f32, &d);
                 EXPECT_THROW((void)scaled_dot_product_attention_backward(
                                  out, q, q, q, out, lse, {}, AttentionGrads{right, wrong, right}),
                              InvalidArgument);
               }});
  return c;
}
