// Mixed precision: the autocast scope (matmul, linear, bmm and attention in f16/bf16 with
// gradients through the casts), the differentiable cast, GradScaler's scaling, skipping and growth,
// and the Trainer's precision option, on every device.
#include <gtest/gtest.h>

#include <cmath>

#include "tessera/tessera.h"
#include "tessera/train/train.h"

using namespace tessera;
using namespace tessera::train;

namespace {

std::vector<float> normal(std::int64_t n, std::uint64_t seed) {
  Generator g(seed);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = g.normal();
  return v;
}

// ||a - b|| / ||b||.
double rel_err(const Tensor& a, const Tensor& b) {
  const auto x = a.to(DType::f32).to_vector<float>(), y = b.to(DType::f32).to_vector<float>();
  double num = 0, den = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += double(y[i]) * y[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

std::vector<Device*> all_devices() {
  std::vector<Device*> out;
  for (Device* d : devices()) out.push_back(d);
  return out;
}

}  // namespace

TEST(Autocast, ScopeNestsAndRestores) {
  EXPECT_FALSE(autocast_dtype().has_value());
  {
    const AutocastGuard outer(DType::bf16);
    EXPECT_EQ(autocast_dtype(), DType::bf16);
    {
      const AutocastGuard off(DType::f32);
      EXPECT_FALSE(autocast_dtype().has_value());
      const AutocastGuard inner(DType::f16);
      EXPECT_EQ(autocast_dtype(), DType::f16);
    }
    EXPECT_EQ(autocast_dtype(), DType::bf16);
  }
  EXPECT_FALSE(autocast_dtype().has_value());
  EXPECT_THROW(AutocastGuard(DType::i32), InvalidArgument);
}

TEST(Autocast, CastIsDifferentiable) {
  const Variable x(Tensor::from(normal(6, 1), {2, 3}), true);
  const Variable y = sum(to(to(x, DType::bf16), DType::f32), 1);
  EXPECT_EQ(to(x, DType::bf16).value().dtype(), DType::bf16);
  sum(y, 0).backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().dtype(), DType::f32);
  for (float g : x.grad().to_vector<float>()) EXPECT_EQ(g, 1.0f);
  EXPECT_THROW((void)to(x, DType::i32), InvalidArgument);
}

// linear, matmul and bmm under autocast: f32 results and gradients close to f32's within the
// low dtype's rounding, and not equal to them (the product really ran in the low dtype).
TEST(Autocast, GemmsRunInTheLowDtypeWithGradients) {
  for (Device* d : all_devices()) {
    for (DType lo : {DType::f16, DType::bf16}) {
      SCOPED_TRACE(d->id() + " " + std::string(dtype_name(lo)));
      const double tol = lo == DType::f16 ? 3e-3 : 2e-2;
      const Tensor xv = Tensor::from(normal(24 * 40, 2), {24, 40}, d);
      const Tensor wv = Tensor::from(normal(16 * 40, 3), {16, 40}, d);
      const Tensor bv = Tensor::from(normal(16, 4), {16}, d);
      const Tensor gv = Tensor::from(normal(24 * 16, 5), {24, 16}, d);
      auto run = [&](bool mixed) {
        Variable x(xv, true), w(wv, true), b(bv, true);
        std::optional<AutocastGuard> guard;
        if (mixed) guard.emplace(lo);
        const Variable y = linear(x, w, b);
        guard.reset();
        y.backward(gv);
        return std::vector<Tensor>{y.value(), x.grad(), w.grad(), b.grad()};
      };
      const auto ref = run(false), got = run(true);
      for (std::size_t i = 0; i < ref.size(); ++i) {
        EXPECT_EQ(got[i].dtype(), DType::f32) << i;
        const double e = rel_err(got[i], ref[i]);
        EXPECT_LT(e, tol) << "output/gradient " << i;
        if (i < 3) {
          EXPECT_GT(e, 1e-7) << "output/gradient " << i << " equals f32's";
        }
      }
      // bmm (and matmul of rank 3, through it) with matching batch dimensions.
      const Tensor av = Tensor::from(normal(3 * 8 * 24, 6), {3, 8, 24}, d);
      const Tensor cv = Tensor::from(normal(3 * 24 * 16, 7), {3, 24, 16}, d);
      Variable a(av, true), c(cv, true);
      Variable y;
      {
        const AutocastGuard guard(lo);
        y = bmm(a, c);
      }
      sum(sum(sum(y, 0), 0), 0).backward();
      EXPECT_EQ(y.value().dtype(), DType::f32);
      EXPECT_LT(rel_err(y.value(), tessera::bmm(av, cv)), tol);
      EXPECT_EQ(a.grad().dtype(), DType::f32);
    }
  }
}

// Autocast's products keep their f32 sums (out_dtype f32), as do their gradients: linear's
// output and gradients equal f32's on the same inputs rounded to the low dtype (the gradient
// rounded too, as the backward casts it) to f32's precision, not to the low dtype's.
TEST(Autocast, ProductsAndGradientsKeepTheirF32Sums) {
  for (Device* d : all_devices()) {
    for (DType lo : {DType::f16, DType::bf16}) {
      SCOPED_TRACE(d->id() + " " + std::string(dtype_name(lo)));
      auto round = [lo](const Tensor& t) { return t.to(lo).to(DType::f32); };
      const Tensor xv = Tensor::from(normal(40 * 64, 12), {40, 64}, d);
      const Tensor wv = Tensor::from(normal(24 * 64, 13), {24, 64}, d);
      const Tensor bv = Tensor::from(normal(24, 14), {24}, d);
      const Tensor gv = Tensor::from(normal(40 * 24, 15), {40, 24}, d);
      Variable x(xv, true), w(wv, true), b(bv, true);
      Variable y;
      {
        const AutocastGuard guard(lo);
        y = linear(x, w, b);
      }
      y.backward(gv);
      const Tensor xr = round(xv), wr = round(wv), gr = round(gv);
      const std::vector<std::pair<Tensor, Tensor>> pairs{
          {y.value(), tessera::addmm(xr, wr, bv, false, true)},
          {x.grad(), tessera::matmul(gr, wr)},
          {w.grad(), tessera::matmul(gr, xr, true, false)},
          {b.grad(), tessera::sum(gv, 0)}};
      for (std::size_t i = 0; i < pairs.size(); ++i) {
        EXPECT_EQ(pairs[i].first.dtype(), DType::f32) << i;
        EXPECT_LT(rel_err(pairs[i].first, pairs[i].second), 1e-5) << "output/gradient " << i;
      }
    }
  }
}

// Attention under autocast: q, k and v cast to the low dtype (packed, from a permuted view of
// one projection, as the GPT's), the result and the gradient f32: against the f32 op on the
// rounded inputs (matrix units round the probabilities and dS too: the dtype's tolerance), and
// not the f32 op on the inputs as they are (bf16's rounding shows).
TEST(Autocast, AttentionRunsInTheLowDtypeWithF32ResultAndGradients) {
  for (Device* d : all_devices()) {
    for (DType lo : {DType::f16, DType::bf16}) {
      SCOPED_TRACE(d->id() + " " + std::string(dtype_name(lo)));
      // [B, T, 3, H, E] as a projection's output, viewed [3, B, H, T, E].
      const Tensor proj = Tensor::from(normal(2 * 70 * 3 * 2 * 32, 21), {2, 70, 3, 2, 32}, d);
      const Tensor gv = Tensor::from(normal(2 * 2 * 70 * 32, 22), {2, 2, 70, 32}, d);
      Variable qkv(proj, true);
      Variable y;
      {
        const AutocastGuard guard(lo);
        y = scaled_dot_product_attention_packed(permute(qkv, {2, 0, 3, 1, 4}), 0.0, true);
      }
      y.backward(gv);
      ASSERT_EQ(y.value().dtype(), DType::f32);
      ASSERT_EQ(qkv.grad().dtype(), DType::f32);
      // The reference: f32 on the rounded inputs, the gradient back into [B, T, 3, H, E].
      const Tensor heads = proj.permute({2, 0, 3, 1, 4}).to(lo).to(DType::f32);
      AttentionAttrs attrs;
      attrs.is_causal = true;
      const auto [out, lse] = scaled_dot_product_attention_forward(
          heads.select(0, 0), heads.select(0, 1), heads.select(0, 2), attrs);
      const AttentionGrads g = scaled_dot_product_attention_backward(
          gv, heads.select(0, 0), heads.select(0, 1), heads.select(0, 2), out, lse, attrs);
      const double tol = lo == DType::bf16 ? 2e-2 : 4e-3;
      EXPECT_LT(rel_err(y.value(), out), tol);
      const Tensor grad = qkv.grad().permute({2, 0, 3, 1, 4});
      EXPECT_LT(rel_err(grad.select(0, 0), g.query), 2 * tol);
      EXPECT_LT(rel_err(grad.select(0, 1), g.key), 2 * tol);
      EXPECT_LT(rel_err(grad.select(0, 2), g.value), tol);
      if (lo == DType::bf16) {
        const Tensor exact = tessera::scaled_dot_product_attention(
            proj.permute({2, 0, 3, 1, 4}).select(0, 0), proj.permute({2, 0, 3, 1, 4}).select(0, 1),
            proj.permute({2, 0, 3, 1, 4}).select(0, 2), 0.0, true);
        EXPECT_GT(rel_err(y.value(), exact), 2e-4);
      }
    }
  }
}

TEST(GradScaler, ScalesSkipsAndGrows) {
  Variable p(Tensor::from(std::vector<float>{1, 2, 3}, {3}), true);
  SGD opt({{"p", &p}}, SgdOptions{.lr = 0.5, .momentum = 0});
  GradScaler scaler(
      {.init_scale = 8, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 2});
  EXPECT_EQ(scaler.scale(Variable(Tensor::from(std::vector<float>{3}, {1})))
                .value()
                .to_vector<float>()[0],
            24.0f);
  // A finite step: gradients unscaled (8 -> 1 each), the step taken.
  p.set_grad(Tensor::from(std::vector<float>{8, 8, 8}, {3}));
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(p.value().to_vector<float>(), (std::vector<float>{0.5f, 1.5f, 2.5f}));
  EXPECT_EQ(scaler.get_scale(), 8.0);
  // A second good step in a row doubles the scale.
  p.set_grad(Tensor::from(std::vector<float>{16, 16, 16}, {3}));
  scaler.unscale_(opt);
  EXPECT_THROW(scaler.unscale_(opt), InvalidArgument);
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(p.value().to_vector<float>(), (std::vector<float>{-0.5f, 0.5f, 1.5f}));
  EXPECT_EQ(scaler.get_scale(), 16.0);
  // An infinite gradient: no step, the scale halved, the skip counted.
  p.set_grad(Tensor::from(std::vector<float>{1, INFINITY, 1}, {3}));
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(p.value().to_vector<float>(), (std::vector<float>{-0.5f, 0.5f, 1.5f}));
  EXPECT_EQ(scaler.get_scale(), 8.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  p.set_grad(Tensor::from(std::vector<float>{NAN, 0, 0}, {3}));
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.skipped_steps(), 2);
  EXPECT_THROW(GradScaler({.init_scale = 0}), InvalidArgument);
  EXPECT_THROW(GradScaler({.growth_factor = 1}), InvalidArgument);
  EXPECT_THROW(GradScaler({.backoff_factor = 1}), InvalidArgument);
  EXPECT_THROW(GradScaler({.growth_interval = 0}), InvalidArgument);
}

// state_dict() and load_state_dict(): a scaler restored mid-run continues as the original does
// (the scale, the good steps towards growth, the skips); malformed state is refused whole.
TEST(GradScaler, StateRoundTripsAndContinuesTheRun) {
  Variable p(Tensor::from(std::vector<float>{1, 2, 3}, {3}), true);
  SGD opt({{"p", &p}}, SgdOptions{.lr = 0.5, .momentum = 0});
  GradScaler a(
      {.init_scale = 1024, .growth_factor = 4, .backoff_factor = 0.25, .growth_interval = 3});
  auto step = [&](GradScaler& s, float g) {
    p.set_grad(Tensor::from(std::vector<float>{g, g, g}, {3}));
    (void)s.step(opt);
    s.update();
  };
  step(a, INFINITY);  // skipped: 1024 -> 256
  step(a, 1.0f);      // one good step towards growth
  step(a, 1.0f);      // two
  const auto state = a.state_dict();
  EXPECT_EQ(state.at("scale"), "256");
  EXPECT_EQ(state.at("growth_tracker"), "2");
  EXPECT_EQ(state.at("skipped_steps"), "1");
  EXPECT_EQ(GradScaler::check_state(state), "");
  GradScaler b;  // other options: the state's replace them
  b.load_state_dict(state);
  EXPECT_EQ(b.state_dict(), state);
  step(a, 1.0f);  // the third good step: 256 -> 1024 in both
  step(b, 1.0f);
  EXPECT_EQ(a.get_scale(), 1024.0);
  EXPECT_EQ(b.get_scale(), 1024.0);
  EXPECT_EQ(b.skipped_steps(), 1);
  // Each malformed state names its key; the scaler keeps its own.
  const std::vector<std::pair<std::pair<std::string, std::string>, std::string>> bad = {
      {{"scale", "0"}, "scale is 0"},
      {{"scale", "inf"}, "'scale' is 'inf', not a number"},
      {{"growth_factor", "1"}, "growth_factor is 1"},
      {{"backoff_factor", "2"}, "backoff_factor is 2"},
      {{"growth_interval", "0"}, "'growth_interval' is '0', expected an integer of 1 or more"},
      {{"growth_tracker", "-1"}, "'growth_tracker' is '-1'"},
      {{"skipped_steps", "1.5"}, "'skipped_steps' is '1.5'"},
      {{"loss_scale", "2"}, "'loss_scale' is not part of a GradScaler's state"},
  };
  for (const auto& [kv, says] : bad) {
    auto s = state;
    s[kv.first] = kv.second;
    EXPECT_NE(GradScaler::check_state(s).find(says), std::string::npos)
        << kv.first << ": " << GradScaler::check_state(s);
    try {
      b.load_state_dict(s);
      ADD_FAILURE() << kv.first << " was taken";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
    EXPECT_EQ(b.get_scale(), 1024.0);
  }
  auto missing = state;
  missing.erase("growth_tracker");
  EXPECT_NE(GradScaler::check_state(missing).find("'growth_tracker' is missing"),
            std::string::npos);
}

TEST(Autocast, TrainerRefusesAnUnknownPrecision) {
  TrainerOptions o;
  o.enable_progress_bar = false;
  o.precision = "8-mixed";
  try {
    Trainer t(o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("precision='8-mixed'"), std::string::npos) << e.what();
  }
}
