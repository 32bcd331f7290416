// SGD, Adam and AdamW with parameter groups against torch.optim (PyTorch 1.13) on every device,
// and the optimizers' state: round trips and every load_state error.
#include <gtest/gtest.h>

#include <cmath>

#include "tessera/tessera.h"
#include "tessera/train/train.h"
#include "torch_peer.h"

using namespace tessera;
using namespace tessera::train;
using nlohmann::json;

namespace {

// Each case: two parameters in two groups, the optimizer's options, group 1's overrides,
// gradients per step, and a momentum (SGD) or beta1 (Adam, AdamW) set after step 2 as a
// scheduler does. Prints every case's parameters after the steps.
const char* kPeer = R"PY(
import json, sys
import torch
cases = json.load(open(sys.argv[1]))
out = {}
for c in cases:
    ps = [torch.nn.Parameter(torch.tensor(v, dtype=torch.float32).reshape(s))
          for v, s in zip(c["init"], c["shapes"])]
    groups = [{"params": [ps[0]]}, dict({"params": [ps[1]]}, **c["group1"])]
    kind, o = c["kind"], c["options"]
    if kind == "sgd":
        opt = torch.optim.SGD(groups, **o)
    elif kind == "adam":
        opt = torch.optim.Adam(groups, **o)
    else:
        opt = torch.optim.AdamW(groups, **o)
    for step, grads in enumerate(c["grads"]):
        for p, g, s in zip(ps, grads, c["shapes"]):
            p.grad = torch.tensor(g, dtype=torch.float32).reshape(s)
        opt.step()
        if step == 1:
            for g in opt.param_groups:
                if kind == "sgd":
                    g["momentum"] = c["new_momentum"]
                else:
                    g["betas"] = (c["new_momentum"], g["betas"][1])
    out[c["name"]] = [p.detach().reshape(-1).tolist() for p in ps]
print(json.dumps(out))
)PY";

const std::vector<Shape> kShapes{{5, 7}, {13}};
constexpr int kSteps = 4;

std::vector<float> random_values(std::int64_t n, std::uint64_t seed) {
  Generator g(seed);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = g.normal();
  return v;
}

struct OptimCase {
  std::string name, kind;
  json options, group1;
  double new_momentum;
};

const std::vector<OptimCase>& cases() {
  static const std::vector<OptimCase> c{
      {"adamw",
       "adamw",
       {{"lr", 2e-3}, {"betas", {0.8, 0.99}}, {"weight_decay", 0.05}},
       {{"lr", 3e-3}, {"weight_decay", 0.1}},
       0.85},
      {"adamw_default", "adamw", json::object(), {{"weight_decay", 0.5}}, 0.95},
      {"adam",
       "adam",
       {{"lr", 1e-2}, {"weight_decay", 0.01}},
       {{"lr", 5e-3}, {"weight_decay", 0}},
       0.85},
      {"sgd",
       "sgd",
       {{"lr", 0.1}, {"momentum", 0.9}, {"dampening", 0.1}, {"weight_decay", 1e-3}},
       {{"lr", 0.05}, {"weight_decay", 0}},
       0.7},
      {"sgd_nesterov",
       "sgd",
       {{"lr", 0.05}, {"momentum", 0.8}, {"nesterov", true}},
       {{"weight_decay", 0.01}},
       0.6},
  };
  return c;
}

std::vector<std::int64_t> dims(const Shape& s) {
  return std::vector<std::int64_t>(s.begin(), s.end());
}

std::vector<float> init_of(std::size_t param) {
  return random_values(kShapes[param].numel(), 100 + param);
}
std::vector<float> grad_of(std::size_t param, int step) {
  return random_values(kShapes[param].numel(), 200 + 10 * step + param);
}

const json& peer() {
  static const json result = [] {
    json input = json::array();
    for (const OptimCase& c : cases()) {
      json grads = json::array();
      for (int s = 0; s < kSteps; ++s) grads.push_back({grad_of(0, s), grad_of(1, s)});
      input.push_back({{"name", c.name},
                       {"kind", c.kind},
                       {"options", c.options},
                       {"group1", c.group1},
                       {"new_momentum", c.new_momentum},
                       {"init", {init_of(0), init_of(1)}},
                       {"shapes", {dims(kShapes[0]), dims(kShapes[1])}},
                       {"grads", grads}});
    }
    return torch_peer::run_torch(kPeer, input);
  }();
  return result;
}

std::vector<ParamGroupOptions> groups_of(const OptimCase& c, Variable& a, Variable& b) {
  ParamGroupOptions g1{{{"b", &b}}, {}, {}};
  if (c.group1.contains("lr")) g1.lr = c.group1["lr"].get<double>();
  if (c.group1.contains("weight_decay")) g1.weight_decay = c.group1["weight_decay"].get<double>();
  return {ParamGroupOptions{{{"a", &a}}, {}, {}}, g1};
}

std::unique_ptr<Optimizer> make_optimizer(const OptimCase& c, Variable& a, Variable& b) {
  const json& o = c.options;
  auto num = [&](const char* key, double fallback) { return o.value(key, fallback); };
  if (c.kind == "sgd")
    return std::make_unique<SGD>(
        groups_of(c, a, b), SgdOptions{num("lr", 0.01), num("momentum", 0), num("dampening", 0),
                                       num("weight_decay", 0), o.value("nesterov", false)});
  const double beta1 = o.contains("betas") ? o["betas"][0].get<double>() : 0.9;
  const double beta2 = o.contains("betas") ? o["betas"][1].get<double>() : 0.999;
  if (c.kind == "adam")
    return std::make_unique<Adam>(
        groups_of(c, a, b),
        AdamOptions{num("lr", 1e-3), beta1, beta2, num("eps", 1e-8), num("weight_decay", 0)});
  return std::make_unique<AdamW>(
      groups_of(c, a, b),
      AdamWOptions{num("lr", 1e-3), beta1, beta2, num("eps", 1e-8), num("weight_decay", 1e-2)});
}

double normalised_error(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

std::vector<std::string> device_ids() {
  std::vector<std::string> ids;
  for (Device* d : tessera::devices()) ids.push_back(d->id());
  return ids;
}

}  // namespace

TEST(Optim, StepsEqualTorchOptimWithGroupsOnEveryDevice) {
  TESSERA_REQUIRE_TORCH();
  for (const std::string& id : device_ids()) {
    Device& dev = tessera::device(id);
    for (const OptimCase& c : cases()) {
      SCOPED_TRACE(id + " " + c.name);
      Variable a(Tensor::from(init_of(0), kShapes[0], &dev), true);
      Variable b(Tensor::from(init_of(1), kShapes[1], &dev), true);
      auto opt = make_optimizer(c, a, b);
      for (int s = 0; s < kSteps; ++s) {
        a.set_grad(Tensor::from(grad_of(0, s), kShapes[0], &dev));
        b.set_grad(Tensor::from(grad_of(1, s), kShapes[1], &dev));
        opt->step();
        if (s == 1) opt->set_momentum(c.new_momentum);
      }
      const json& want = peer().at(c.name);
      EXPECT_LT(normalised_error(a.value().to_vector<float>(), want[0]), 1e-5);
      EXPECT_LT(normalised_error(b.value().to_vector<float>(), want[1]), 1e-5);
    }
  }
}

TEST(Optim, AdamWDefaultsAreTorchs) {
  const AdamWOptions w;
  EXPECT_EQ(w.lr, 1e-3);
  EXPECT_EQ(w.beta1, 0.9);
  EXPECT_EQ(w.beta2, 0.999);
  EXPECT_EQ(w.eps, 1e-8);
  EXPECT_EQ(w.weight_decay, 1e-2);
  EXPECT_EQ(AdamOptions{}.weight_decay, 0);
}

namespace {

Device& cpu() {
  return tessera::device("cpu");
}

struct Two {
  Variable a{Tensor::from(random_values(6, 1), {2, 3}, &cpu()), true};
  Variable b{Tensor::from(random_values(4, 2), {4}, &cpu()), true};
  std::vector<ParamGroupOptions> groups() {
    return {{{{"a", &a}}, {}, {}}, {{{"b", &b}}, 0.5, 0.25}};
  }
  void grads(std::uint64_t seed) {
    a.set_grad(Tensor::from(random_values(6, seed), {2, 3}, &cpu()));
    b.set_grad(Tensor::from(random_values(4, seed + 1), {4}, &cpu()));
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(Optim, GroupsTakeTheOptimizersOptionsWhereUnsetAndLrSettersCheck) {
  Two t;
  SGD sgd(t.groups(), SgdOptions{0.1, 0.9, 0, 0.01});
  ASSERT_EQ(sgd.param_groups().size(), 2u);
  EXPECT_EQ(sgd.param_groups()[0].lr, 0.1);
  EXPECT_EQ(sgd.param_groups()[0].weight_decay, 0.01);
  EXPECT_EQ(sgd.param_groups()[1].lr, 0.5);
  EXPECT_EQ(sgd.param_groups()[1].weight_decay, 0.25);
  EXPECT_FALSE(sgd.param_groups()[0].initial_lr);
  EXPECT_EQ(sgd.parameters().size(), 2u);
  EXPECT_EQ(sgd.parameters()[1].name, "b");
  EXPECT_EQ(sgd.lr(), 0.1);
  sgd.set_lr(0.3);
  EXPECT_EQ(sgd.param_groups()[1].lr, 0.3);
  sgd.set_lr(1, 0.2);
  EXPECT_EQ(sgd.lr(), 0.3);
  EXPECT_EQ(sgd.param_groups()[1].lr, 0.2);
  sgd.set_weight_decay(0, 0.5);
  EXPECT_EQ(sgd.param_groups()[0].weight_decay, 0.5);
  EXPECT_NE(error_of([&] { sgd.set_lr(2, 0.1); }).find("parameter group 2 does not exist"),
            std::string::npos);
  EXPECT_NE(error_of([&] { sgd.set_lr(-1); }).find("lr is -1"), std::string::npos);
  EXPECT_NE(error_of([&] { sgd.set_lr(0, NAN); }).find("lr is nan"), std::string::npos);
  EXPECT_NE(error_of([&] { sgd.set_weight_decay(1, -0.1); }).find("weight_decay is -0.1"),
            std::string::npos);
  EXPECT_EQ(sgd.lr(), 0.3);
  EXPECT_EQ(*sgd.momentum(), 0.9);
  sgd.set_momentum(0.5);
  EXPECT_EQ(*sgd.momentum(), 0.5);
  EXPECT_THROW(sgd.set_momentum(-0.5), InvalidArgument);
  EXPECT_EQ(*sgd.momentum(), 0.5);
  SGD nesterov(t.groups(), SgdOptions{0.1, 0.9, 0, 0, true});
  EXPECT_THROW(nesterov.set_momentum(0), InvalidArgument);
  Adam adam(t.groups(), AdamOptions{});
  EXPECT_THROW(adam.set_momentum(1.0), InvalidArgument);
  EXPECT_EQ(*adam.momentum(), 0.9);
}

TEST(Optim, ConstructorsRefuseBadGroups) {
  Two t;
  Variable frozen(Tensor::full({2}, 1.0, DType::f32, &cpu()), false);
  Variable computed = add_scalar(t.a, 1.0);
  EXPECT_NE(error_of([&] { SGD(std::vector<NamedParameter>{}); }).find("at least one parameter"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              SGD(std::vector<ParamGroupOptions>{{{{"a", &t.a}}, {}, {}}, {{}, {}, {}}});
            }).find("parameter group 1 has no parameters"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              SGD({{"f", &frozen}});
            }).find("'f' is not a leaf Variable"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              SGD({{"c", &computed}});
            }).find("'c' is not a leaf Variable"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] {
        SGD(std::vector<ParamGroupOptions>{{{{"a", &t.a}}, {}, {}}, {{{"a2", &t.a}}, {}, {}}});
      }).find("'a2' appears twice"),
      std::string::npos);
  EXPECT_NE(error_of([&] {
              SGD({{"a", &t.a}, {"a", &t.b}});
            }).find("'a' appears twice"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              Adam(std::vector<ParamGroupOptions>{{{{"a", &t.a}}, -1.0, {}}});
            }).find("parameter group 0: lr is -1"),
            std::string::npos);
  EXPECT_THROW(AdamW(t.groups(), AdamWOptions{1e-3, 1.0}), InvalidArgument);
  EXPECT_THROW(SGD(t.groups(), SgdOptions{0.1, 0, 0, 0, true}), InvalidArgument);
}

TEST(Optim, ZeroGradSetsToNoneOrToZeros) {
  Two t;
  Adam adam(t.groups(), AdamOptions{});
  t.grads(5);
  const Tensor held = t.a.grad();
  const auto before = held.to_vector<float>();
  adam.zero_grad(false);
  EXPECT_EQ(t.a.grad().to_vector<float>(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(held.to_vector<float>(), before);  // a new zero tensor, not written in place
  t.b.set_grad(Tensor());
  adam.zero_grad(false);
  EXPECT_FALSE(t.b.grad().defined());  // no gradient stays none
  adam.zero_grad();
  EXPECT_FALSE(t.a.grad().defined());
}

TEST(Optim, ZeroGradLeavesAGradientSharedWithAnotherLeafAlone) {
  // backward() of a + b gives both leaves one gradient tensor; zeroing a's must not zero b's.
  Variable a(Tensor::from(random_values(4, 1), {4}, &cpu()), true);
  Variable b(Tensor::from(random_values(4, 2), {4}, &cpu()), true);
  add(a, b).backward(Tensor::full({4}, 2.0, DType::f32, &cpu()));
  SGD sgd({{"a", &a}});
  sgd.zero_grad(false);
  EXPECT_EQ(a.grad().to_vector<float>(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(b.grad().to_vector<float>(), std::vector<float>(4, 2.0f));
}

TEST(Optim, StateRoundTripsWithGroupsAndResumesBitIdentically) {
  for (const char* kind : {"sgd", "adam", "adamw"}) {
    SCOPED_TRACE(kind);
    auto make = [&](Two& t) -> std::unique_ptr<Optimizer> {
      if (std::string(kind) == "sgd")
        return std::make_unique<SGD>(t.groups(), SgdOptions{0.1, 0.9});
      if (std::string(kind) == "adam") return std::make_unique<Adam>(t.groups(), AdamOptions{});
      return std::make_unique<AdamW>(t.groups(), AdamWOptions{});
    };
    Two straight, resumed;
    auto s = make(straight), r = make(resumed);
    for (int i = 0; i < 2; ++i) {
      straight.grads(10 + i);
      s->step();
    }
    s->set_lr(1, 0.125);
    s->set_weight_decay(0, 0.0625);
    s->set_momentum(0.75);
    resumed.a.set_value(copy(straight.a.value()));
    resumed.b.set_value(copy(straight.b.value()));
    r->load_state(s->state());
    EXPECT_EQ(r->param_groups()[1].lr, 0.125);
    EXPECT_EQ(r->param_groups()[0].weight_decay, 0.0625);
    EXPECT_EQ(*r->momentum(), 0.75);
    EXPECT_EQ(r->state().values, s->state().values);
    for (int i = 2; i < 4; ++i) {
      straight.grads(10 + i);
      resumed.grads(10 + i);
      s->step();
      r->step();
    }
    EXPECT_EQ(resumed.a.value().to_vector<float>(), straight.a.value().to_vector<float>());
    EXPECT_EQ(resumed.b.value().to_vector<float>(), straight.b.value().to_vector<float>());
  }
}

TEST(Optim, AdamStateOfAParameterThatNeverHadAGradientLoads) {
  Two t;
  Adam adam(t.groups(), AdamOptions{});
  t.a.set_grad(Tensor::from(random_values(6, 3), {2, 3}, &cpu()));
  adam.step();  // b has no gradient: no moments
  const OptimizerState s = adam.state();
  EXPECT_EQ(s.tensors.size(), 2u);
  Two u;
  Adam fresh(u.groups(), AdamOptions{});
  fresh.load_state(s);
  EXPECT_EQ(fresh.state().values.at("step"), "1");
}

TEST(Optim, LoadStateRefusesEveryBadEntryAndChangesNothing) {
  Two t;
  Adam adam(t.groups(), AdamOptions{});
  t.grads(3);
  adam.step();
  SGD sgd(t.groups(), SgdOptions{0.1, 0.9});
  sgd.step();
  auto expect = [&](Optimizer& o, const std::string& what, auto edit) {
    OptimizerState bad = o.state();
    edit(bad);
    const OptimizerState before = o.state();
    EXPECT_NE(error_of([&] { o.load_state(bad); }).find(what), std::string::npos)
        << "expected '" << what << "' in: " << error_of([&] { o.load_state(bad); });
    EXPECT_EQ(o.state().values, before.values) << what;
  };
  using S = OptimizerState;
  expect(adam, "optimizer value 'param_groups.1.lr' is missing",
         [](S& s) { s.values.erase("param_groups.1.lr"); });
  expect(adam, "optimizer value 'param_groups.0.lr' is '-1', expected a finite number in [0, inf)",
         [](S& s) { s.values["param_groups.0.lr"] = "-1"; });
  expect(adam, "optimizer value 'param_groups.1.weight_decay' is 'x'",
         [](S& s) { s.values["param_groups.1.weight_decay"] = "x"; });
  expect(adam,
         "optimizer value 'param_groups.0.params' is 'a,b', but group 0 of this optimizer "
         "holds 'a'",
         [](S& s) { s.values["param_groups.0.params"] = "a,b"; });
  expect(adam, "optimizer value 'param_groups.2.lr' is not a value of this optimizer",
         [](S& s) { s.values["param_groups.2.lr"] = "0.1"; });
  expect(adam, "optimizer value 'beta1' is '1', expected a finite number in [0, 1)",
         [](S& s) { s.values["beta1"] = "1"; });
  expect(adam, "optimizer value 'beta1' is missing", [](S& s) { s.values.erase("beta1"); });
  expect(adam, "optimizer value 'step' is 0 but", [](S& s) { s.values["step"] = "0"; });
  expect(adam, "'step' is 1 but the state holds no moments", [](S& s) { s.tensors.clear(); });
  expect(adam, "optimizer state 'b.exp_avg_sq' is missing", [](S& s) {
    std::erase_if(s.tensors, [](const auto& p) { return p.first == "b.exp_avg_sq"; });
  });
  expect(adam, "optimizer state 'a.exp_avg' is f32 [6], its parameter f32 [2,3]",
         [](S& s) { s.tensors[0].second = Tensor::full({6}, 0.0, DType::f32, &cpu()); });
  expect(adam, "optimizer state 'a.exp_avg' appears twice",
         [](S& s) { s.tensors.push_back(s.tensors[0]); });
  expect(sgd, "optimizer value 'momentum' is '-0.5'", [](S& s) { s.values["momentum"] = "-0.5"; });
  expect(sgd, "optimizer value 'step' is not a value of this optimizer",
         [](S& s) { s.values["step"] = "1"; });
  expect(sgd, "optimizer state 'a.exp_avg' is not a state of this optimizer",
         [](S& s) { s.tensors.emplace_back("a.exp_avg", s.tensors[0].second); });
  SGD nesterov(t.groups(), SgdOptions{0.1, 0.9, 0, 0, true});
  expect(nesterov, "'momentum' is '0', but this SGD uses Nesterov",
         [](S& s) { s.values["momentum"] = "0"; });
}
