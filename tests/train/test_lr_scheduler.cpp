// The schedulers of lr_scheduler.h against torch.optim.lr_scheduler (PyTorch 1.13): every lr
// (and OneCycleLR's momentum) over 30 steps, then state round trips and every error.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>

#include "tessera/tessera.h"
#include "tessera/train/train.h"
#include "torch_peer.h"

using namespace tessera;
using namespace tessera::train;
using nlohmann::json;

namespace {

constexpr int kSteps = 30;

// Each case builds its optimizer and scheduler; the recorded values are get_last_lr() after
// construction and after each of 30 steps, and the optimizer's momentum alongside.
const char* kPeer = R"PY(
import json, math, sys, warnings
import torch
from torch.optim import lr_scheduler as S
warnings.filterwarnings("ignore")

def params(n):
    return [torch.nn.Parameter(torch.zeros(1)) for _ in range(n)]

def sgd(momentum=0.0):
    p = params(2)
    return torch.optim.SGD([{"params": [p[0]]}, {"params": [p[1]], "lr": 0.02}], lr=0.1,
                           momentum=momentum)

def adam():
    return torch.optim.Adam(params(1), lr=1e-3, betas=(0.9, 0.99))

def cases():
    o = sgd(); yield "step", o, S.StepLR(o, step_size=7, gamma=0.5)
    o = sgd(); yield "multistep", o, S.MultiStepLR(o, milestones=[12, 5, 12, 20], gamma=0.3)
    o = sgd(); yield "cosine", o, S.CosineAnnealingLR(o, T_max=10, eta_min=0.001)
    o = sgd(); yield "linear_default", o, S.LinearLR(o)
    o = sgd(); yield "linear", o, S.LinearLR(o, start_factor=0.1, end_factor=0.9, total_iters=8)
    o = sgd(0.9); yield "onecycle_sgd", o, S.OneCycleLR(o, max_lr=[0.5, 0.2], total_steps=30)
    o = adam(); yield "onecycle_adam", o, S.OneCycleLR(
        o, max_lr=0.01, total_steps=32, pct_start=0.25, anneal_strategy="linear",
        three_phase=True, div_factor=10.0, final_div_factor=100.0, base_momentum=0.8,
        max_momentum=0.9)
    o = sgd(); yield "sequential", o, S.SequentialLR(
        o, [S.LinearLR(o, start_factor=0.1, total_iters=5),
            S.CosineAnnealingLR(o, T_max=20, eta_min=0.0)], milestones=[5])
    o = sgd()
    yield "sequential3", o, S.SequentialLR(
        o, [S.LinearLR(o, start_factor=0.25, total_iters=4), S.StepLR(o, 3, 0.5),
            S.CosineAnnealingLR(o, T_max=10)], milestones=[4, 12])
    o = sgd()
    yield "lambda", o, S.LambdaLR(o, [lambda e: 0.95 ** e, lambda e: e // 3 + 1])

def momentum(o):
    g = o.param_groups[0]
    return g["betas"][0] if "betas" in g else g["momentum"]

out = {}
for name, o, s in cases():
    lr, m = [s.get_last_lr()], [momentum(o)]
    for _ in range(30):
        o.step()
        s.step()
        lr.append(s.get_last_lr())
        m.append(momentum(o))
    out[name] = {"lr": lr, "momentum": m}
print(json.dumps(out))
)PY";

struct Case {
  std::vector<std::unique_ptr<Variable>> params;
  std::unique_ptr<Optimizer> opt;
  std::shared_ptr<LRScheduler> sched;
};

Device& cpu() {
  return device("cpu");
}

std::unique_ptr<Variable> scalar_param() {
  return std::make_unique<Variable>(Tensor::full({1}, 0.0, DType::f32, &cpu()), true);
}

// Two groups: lr 0.1 and 0.02, as the peer's sgd().
void make_sgd(Case& c, double momentum = 0) {
  c.params.push_back(scalar_param());
  c.params.push_back(scalar_param());
  std::vector<ParamGroupOptions> groups{{{{"a", c.params[0].get()}}, {}, {}},
                                        {{{"b", c.params[1].get()}}, 0.02, {}}};
  c.opt = std::make_unique<SGD>(std::move(groups), SgdOptions{0.1, momentum});
}

Case make_case(const std::string& name) {
  Case c;
  if (name == "onecycle_adam") {
    c.params.push_back(scalar_param());
    c.opt = std::make_unique<Adam>(std::vector<NamedParameter>{{"a", c.params[0].get()}},
                                   AdamOptions{1e-3, 0.9, 0.99});
  } else {
    make_sgd(c, name == "onecycle_sgd" ? 0.9 : 0);
  }
  Optimizer& o = *c.opt;
  if (name == "step") c.sched = std::make_shared<StepLR>(o, 7, 0.5);
  if (name == "multistep")
    c.sched = std::make_shared<MultiStepLR>(o, std::vector<std::int64_t>{12, 5, 12, 20}, 0.3);
  if (name == "cosine") c.sched = std::make_shared<CosineAnnealingLR>(o, 10, 0.001);
  if (name == "linear_default") c.sched = std::make_shared<LinearLR>(o);
  if (name == "linear") c.sched = std::make_shared<LinearLR>(o, 0.1, 0.9, 8);
  if (name == "onecycle_sgd")
    c.sched = std::make_shared<OneCycleLR>(o, std::vector<double>{0.5, 0.2}, 30);
  if (name == "onecycle_adam") {
    OneCycleLROptions opts;
    opts.pct_start = 0.25;
    opts.anneal_strategy = "linear";
    opts.three_phase = true;
    opts.div_factor = 10;
    opts.final_div_factor = 100;
    opts.base_momentum = 0.8;
    opts.max_momentum = 0.9;
    c.sched = std::make_shared<OneCycleLR>(o, 0.01, 32, opts);
  }
  if (name == "sequential") {
    auto warm = std::make_shared<LinearLR>(o, 0.1, 1.0, 5);
    auto cos = std::make_shared<CosineAnnealingLR>(o, 20, 0.0);
    c.sched = std::make_shared<SequentialLR>(
        o, std::vector<std::shared_ptr<LRScheduler>>{warm, cos}, std::vector<std::int64_t>{5});
  }
  if (name == "sequential3") {
    auto warm = std::make_shared<LinearLR>(o, 0.25, 1.0, 4);
    auto step = std::make_shared<StepLR>(o, 3, 0.5);
    auto cos = std::make_shared<CosineAnnealingLR>(o, 10);
    c.sched = std::make_shared<SequentialLR>(
        o, std::vector<std::shared_ptr<LRScheduler>>{warm, step, cos},
        std::vector<std::int64_t>{4, 12});
  }
  if (name == "lambda")
    c.sched = std::make_shared<LambdaLR>(
        o, std::vector<LambdaLR::Lambda>{[](std::int64_t e) { return std::pow(0.95, e); },
                                         [](std::int64_t e) { return double(e / 3 + 1); }});
  return c;
}

const json& peer() {
  static const json j = torch_peer::run_torch(kPeer, json::object());
  return j;
}

void expect_close(double got, double want, const std::string& what) {
  EXPECT_LE(std::abs(got - want), 1e-6 * std::abs(want) + 1e-15)
      << what << ": got " << got << ", PyTorch " << want;
}

}  // namespace

class SchedulerVsTorch : public ::testing::TestWithParam<std::string> {};

TEST_P(SchedulerVsTorch, EveryLrAndMomentumEqualsPyTorchs) {
  TESSERA_REQUIRE_TORCH();
  const json& want = peer().at(GetParam());
  Case c = make_case(GetParam());
  ASSERT_TRUE(c.sched);
  for (int step = 0; step <= kSteps; ++step) {
    if (step > 0) c.sched->step();
    const auto lrs = want["lr"][step].get<std::vector<double>>();
    ASSERT_EQ(c.sched->get_last_lr().size(), lrs.size());
    for (std::size_t g = 0; g < lrs.size(); ++g) {
      expect_close(c.sched->get_last_lr()[g], lrs[g], fmt::format("step {} group {}", step, g));
      expect_close(c.opt->param_groups()[g].lr, lrs[g], fmt::format("optimizer lr {}", step));
    }
    expect_close(*c.opt->momentum(), want["momentum"][step].get<double>(),
                 fmt::format("momentum at step {}", step));
    EXPECT_EQ(c.sched->last_epoch(), step);
  }
}

INSTANTIATE_TEST_SUITE_P(Schedulers, SchedulerVsTorch,
                         ::testing::Values("step", "multistep", "cosine", "linear_default",
                                           "linear", "onecycle_sgd", "onecycle_adam", "sequential",
                                           "sequential3", "lambda"));

TEST(OneCycleLR, StartsAtMaxLrOverDivFactorAndStepsAtMostTotalStepsAsPyTorch) {
  Case c;
  make_sgd(c, 0.9);
  OneCycleLR s(*c.opt, 1.0, 10);
  EXPECT_NEAR(c.opt->param_groups()[0].lr, 1.0 / 25, 1e-15);
  EXPECT_DOUBLE_EQ(*c.opt->param_groups()[1].initial_lr, 1.0 / 25);
  EXPECT_DOUBLE_EQ(*c.opt->momentum(), 0.95);
  for (int i = 0; i < 10; ++i) s.step();  // torch takes last_epoch == total_steps too
  const auto before = s.state();
  try {
    s.step();
    ADD_FAILURE() << "no error past total_steps";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "tried to step 12 times. The specified number of total steps is 10"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(s.state(), before);  // nothing changed
  EXPECT_EQ(s.last_epoch(), 10);
}

TEST(OneCycleLR, RefusesWhatPyTorchRefuses) {
  Case c;
  make_sgd(c, 0.9);
  Optimizer& o = *c.opt;
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { OneCycleLR(o, 0.1, 0); }).find("total_steps, but got 0"),
            std::string::npos);
  OneCycleLROptions bad;
  bad.pct_start = 1.5;
  EXPECT_NE(message([&] { OneCycleLR(o, 0.1, 10, bad); }).find("pct_start, but got 1.5"),
            std::string::npos);
  bad = {};
  bad.anneal_strategy = "cosine";
  EXPECT_NE(message([&] { OneCycleLR(o, 0.1, 10, bad); }).find("instead got 'cosine'"),
            std::string::npos);
  EXPECT_NE(message([&] {
              OneCycleLR(o, std::vector<double>{0.1}, 10);
            }).find("expected 2 values for max_lr, got 1"),
            std::string::npos);
  bad = {};
  bad.div_factor = 0;
  EXPECT_NE(message([&] { OneCycleLR(o, 0.1, 10, bad); }).find("div_factor (0)"),
            std::string::npos);
  // pct_start * total_steps == 1: the first phase has no steps (torch: ZeroDivisionError).
  bad = {};
  bad.pct_start = 0.1;
  EXPECT_NE(message([&] { OneCycleLR(o, 0.1, 10, bad); }).find("has no steps"), std::string::npos);
  // Adam's beta1 must stay below 1; the momentum is left as it was.
  Variable p(Tensor::full({1}, 0.0, DType::f32, &cpu()), true);
  Adam adam({{"p", &p}}, AdamOptions{});
  bad = {};
  bad.max_momentum = 1.0;
  EXPECT_NE(message([&] { OneCycleLR(adam, 0.1, 10, bad); }).find("beta1 1 is outside [0, 1)"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(*adam.momentum(), 0.9);
  OneCycleLROptions no_cycle;
  no_cycle.cycle_momentum = false;
  OneCycleLR fine(adam, 0.1, 10, no_cycle);
  EXPECT_DOUBLE_EQ(*adam.momentum(), 0.9);
}

TEST(LRScheduler, ConstructorsRefuseBadSettings) {
  Case c;
  make_sgd(c);
  Optimizer& o = *c.opt;
  EXPECT_THROW(StepLR(o, 0), InvalidArgument);
  EXPECT_THROW(StepLR(o, 3, -0.1), InvalidArgument);
  EXPECT_THROW(MultiStepLR(o, {-1, 3}), InvalidArgument);
  EXPECT_THROW(CosineAnnealingLR(o, 0), InvalidArgument);
  EXPECT_THROW(CosineAnnealingLR(o, 5, -1), InvalidArgument);
  EXPECT_THROW(LinearLR(o, 0.0), InvalidArgument);
  EXPECT_THROW(LinearLR(o, 0.5, 1.5), InvalidArgument);
  EXPECT_THROW(LinearLR(o, 0.5, 1.0, 0), InvalidArgument);
  EXPECT_THROW(LambdaLR(o, std::vector<LambdaLR::Lambda>{[](std::int64_t) { return 1.0; }}),
               InvalidArgument);
  EXPECT_THROW(LambdaLR(o, LambdaLR::Lambda{}), InvalidArgument);
  auto a = std::make_shared<StepLR>(o, 3);
  Case other;
  make_sgd(other);
  auto b = std::make_shared<StepLR>(*other.opt, 3);
  using List = std::vector<std::shared_ptr<LRScheduler>>;
  EXPECT_THROW(SequentialLR(o, List{a, b}, {2}), InvalidArgument);  // another optimizer
  EXPECT_THROW(SequentialLR(o, List{a, a}, {}), InvalidArgument);   // milestone count
  EXPECT_THROW(SequentialLR(o, List{a, a, a}, {3, 3}), InvalidArgument);
  EXPECT_THROW(SequentialLR(o, List{}, {}), InvalidArgument);
  EXPECT_THROW(SequentialLR(o, List{nullptr}, {}), InvalidArgument);
}

TEST(LRScheduler, ALambdaGivingANegativeLrThrowsAndChangesNothing) {
  Case c;
  make_sgd(c);
  LambdaLR s(*c.opt, [](std::int64_t e) { return 1.0 - 0.5 * double(e); });
  s.step();
  s.step();  // lr 0
  EXPECT_THROW(s.step(), InvalidArgument);
  EXPECT_EQ(s.last_epoch(), 2);
  EXPECT_EQ(c.opt->param_groups()[0].lr, 0.0);
}

TEST(LRScheduler, StateRoundTripsAndResumesTheSameSchedule) {
  for (const char* name : {"step", "multistep", "cosine", "linear", "onecycle_sgd", "onecycle_adam",
                           "sequential3", "lambda"})
    for (int steps : {3, 13}) {  // sequential3: before and after its milestones' schedulers start
      SCOPED_TRACE(fmt::format("{} after {} steps", name, steps));
      Case straight = make_case(name);
      Case first = make_case(name);
      for (int i = 0; i < steps; ++i) {
        straight.sched->step();
        first.sched->step();
      }
      // Resume: a fresh optimizer and scheduler, then both states.
      Case resumed = make_case(name);
      resumed.opt->load_state(first.opt->state());
      resumed.sched->load_state(first.sched->state());
      EXPECT_EQ(resumed.sched->state(), first.sched->state());
      for (int i = 0; i < 10; ++i) {
        straight.sched->step();
        resumed.sched->step();
        EXPECT_EQ(resumed.sched->get_last_lr(), straight.sched->get_last_lr()) << i;
        EXPECT_EQ(resumed.opt->momentum(), straight.opt->momentum());
      }
    }
}

TEST(LRScheduler, LoadStateRefusesEveryBadEntryAndChangesNothing) {
  Case c = make_case("sequential3");
  for (int i = 0; i < 6; ++i) c.sched->step();
  Case other = make_case("onecycle_sgd");
  const SchedulerState good = c.sched->state();
  auto expect = [&](const std::string& what, auto edit, LRScheduler* s = nullptr) {
    LRScheduler& target = s ? *s : *c.sched;
    SchedulerState bad = s ? s->state() : good;
    edit(bad);
    const SchedulerState before = target.state();
    try {
      target.load_state(bad);
      ADD_FAILURE() << "no error for " << what;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos)
          << "expected '" << what << "' in: " << e.what();
    }
    EXPECT_EQ(target.state(), before) << what;
  };
  expect("'type' is 'StepLR'", [](SchedulerState& s) { s["type"] = "StepLR"; });
  expect("'last_epoch' is missing", [](SchedulerState& s) { s.erase("last_epoch"); });
  expect("'last_epoch' is '-2'", [](SchedulerState& s) { s["last_epoch"] = "-2"; });
  expect("'last_epoch' is '6x'", [](SchedulerState& s) { s["last_epoch"] = "6x"; });
  expect("'step_count' is '0'", [](SchedulerState& s) { s["step_count"] = "0"; });
  expect("'base_lrs.1' is 'nan'", [](SchedulerState& s) { s["base_lrs.1"] = "nan"; });
  expect("'last_lr.0' is '-0.5'", [](SchedulerState& s) { s["last_lr.0"] = "-0.5"; });
  expect("'last_lr.2' is not part of this scheduler's state",
         [](SchedulerState& s) { s["last_lr.2"] = "0.1"; });
  expect("'milestones' is '4,13', this scheduler's is '4,12'",
         [](SchedulerState& s) { s["milestones"] = "4,13"; });
  expect("scheduler 1 ('schedulers.1.*'): StepLR state: 'gamma' is '0.25'",
         [](SchedulerState& s) { s["schedulers.1.gamma"] = "0.25"; });
  expect("scheduler 2 ('schedulers.2.*'): CosineAnnealingLR state: 'last_epoch' is missing",
         [](SchedulerState& s) { s.erase("schedulers.2.last_epoch"); });
  expect("scheduler 0 ('schedulers.0.*'): LinearLR state: 'extra' is not part",
         [](SchedulerState& s) { s["schedulers.0.extra"] = "1"; });
  expect(
      "'total_steps' is '31', this scheduler's is '30'",
      [](SchedulerState& s) { s["total_steps"] = "31"; }, other.sched.get());
  expect(
      "'max_lr.1' is '0.3'", [](SchedulerState& s) { s["max_lr.1"] = "0.3"; }, other.sched.get());
}
