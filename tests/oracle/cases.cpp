// The oracle's cases for the ops Tessera had before the op-set work: matmul, addmm, element-wise
// arithmetic with broadcast, activations, reductions, softmax, cross-entropy, convolution, pooling
// and dropout. compare.py's CASES has the torch side of each, under the same name.
#include "oracle.h"
#include "tessera/ops.h"

namespace tessera::oracle {

namespace tt = tessera::train;
using tt::Variable;

namespace {

// One optimizer step on copies of (param, grad, state...): the change of the parameter (the
// parameter itself would hide the step's error in its own magnitude).
Variable sgd_step(const Vars& x) {
  Tensor p = copy(x[0].value()), buf = copy(x[2].value());
  sgd_update_(p, x[1].value(), buf, SgdAttrs{0.1f, 0.9f, 0, 0.01f, false, false});
  return Variable(sub(p, x[0].value()));
}

Variable adam_step(const Vars& x) {
  AdamAttrs a;
  a.lr = 0.1f;
  a.weight_decay = 0.1f;
  a.step = 3;
  Tensor p = copy(x[0].value()), m = copy(x[2].value()), v = copy(x[3].value());
  adam_update_(p, x[1].value(), m, v, a);
  return Variable(sub(p, x[0].value()));
}

}  // namespace

std::vector<Case> base_cases() {
  return {
      // --- matmul, addmm, linear ---
      {"matmul",
       OpId::matmul,
       {randn({5, 7}), randn({7, 3})},
       [](const Vars& x) { return tt::matmul(x[0], x[1]); }},
      {"matmul_trans",
       OpId::matmul,
       {randn({7, 5}), randn({3, 7})},
       [](const Vars& x) { return tt::matmul(x[0], x[1], true, true); }},
      {"matmul_odd",
       OpId::matmul,
       {randn({3, 1025}), randn({1025, 1})},
       [](const Vars& x) { return tt::matmul(x[0], x[1]); }},
      {"matmul_view",
       OpId::matmul,
       {randn({4, 6}), randn({5, 6})},
       [](const Vars& x) { return tt::matmul(x[0], tt::transpose(x[1], 0, 1)); }},
      {"addmm",
       OpId::addmm,
       {constant({6, 9}), constant({4, 9}), constant({4})},
       [](const Vars& x) {
         return Variable(addmm(x[0].value(), x[1].value(), x[2].value(), false, true));
       }},
      {"linear",
       OpId::addmm,
       {randn({6, 9}), randn({4, 9}), randn({4})},
       [](const Vars& x) { return tt::linear(x[0], x[1], x[2]); }},

      // --- element-wise arithmetic: same shape, broadcast both ways, scalars ---
      {"add",
       OpId::add,
       {randn({4, 5}), randn({4, 5})},
       [](const Vars& x) { return tt::add(x[0], x[1]); }},
      {"add_broadcast",
       OpId::add,
       {randn({3, 1, 5}), randn({4, 5})},
       [](const Vars& x) { return tt::add(x[0], x[1]); }},
      {"add_empty",
       OpId::add,
       {randn({0, 5}), randn({5})},
       [](const Vars& x) { return tt::add(x[0], x[1]); }},
      {"sub",
       OpId::sub,
       {randn({127}), randn({127})},
       [](const Vars& x) { return tt::sub(x[0], x[1]); }},
      {"sub_broadcast",
       OpId::sub,
       {randn({4, 1}), randn({1, 6})},
       [](const Vars& x) { return tt::sub(x[0], x[1]); }},
      {"mul",
       OpId::mul,
       {randn({3, 7}), randn({3, 7})},
       [](const Vars& x) { return tt::mul(x[0], x[1]); }},
      {"mul_broadcast",
       OpId::mul,
       {randn({2, 3, 4}), randn({3, 1})},
       [](const Vars& x) { return tt::mul(x[0], x[1]); }},
      {"div",
       OpId::div,
       {randn({5, 6}), positive({5, 6})},
       [](const Vars& x) { return tt::div(x[0], x[1]); }},
      {"div_broadcast",
       OpId::div,
       {randn({5, 6}), positive({6})},
       [](const Vars& x) { return tt::div(x[0], x[1]); }},
      {"add_scalar",
       OpId::add_scalar,
       {randn({3, 5})},
       [](const Vars& x) { return tt::add_scalar(x[0], -1.25); }},
      {"mul_scalar",
       OpId::mul_scalar,
       {randn({3, 5})},
       [](const Vars& x) { return tt::mul_scalar(x[0], 2.5); }},

      // --- activations and pointwise math ---
      {"relu", OpId::relu, {randn({3, 41})}, [](const Vars& x) { return tt::relu(x[0]); }},
      {"exp", OpId::exp, {randn({3, 41})}, [](const Vars& x) { return tt::exp(x[0]); }},
      {"log", OpId::log, {positive({3, 41})}, [](const Vars& x) { return tt::log(x[0]); }},
      {"tanh", OpId::tanh, {randn({3, 41})}, [](const Vars& x) { return tt::tanh(x[0]); }},
      {"sigmoid", OpId::sigmoid, {randn({3, 41})}, [](const Vars& x) { return tt::sigmoid(x[0]); }},

      // --- reductions ---
      {"sum_0", OpId::sum, {randn({6, 5})}, [](const Vars& x) { return tt::sum(x[0], 0); }},
      {"sum_1_keepdim",
       OpId::sum,
       {randn({4, 127})},
       [](const Vars& x) { return tt::sum(x[0], 1, true); }},
      {"mean_1", OpId::mean, {randn({3, 4, 5})}, [](const Vars& x) { return tt::mean(x[0], 1); }},
      {"max_1", OpId::max, {randn({5, 9})}, [](const Vars& x) { return tt::max(x[0], 1); }},
      {"max_0_keepdim",
       OpId::max,
       {randn({7, 3})},
       [](const Vars& x) { return tt::max(x[0], 0, true); }},
      {"argmax_1",
       OpId::argmax,
       {constant({6, 11})},
       [](const Vars& x) { return Variable(argmax(x[0].value(), 1)); }},

      // --- softmax, log_softmax, cross-entropy ---
      {"softmax",
       OpId::softmax,
       {randn({4, 10})},
       [](const Vars& x) { return tt::softmax(x[0], -1); }},
      {"softmax_0",
       OpId::softmax,
       {randn({5, 3})},
       [](const Vars& x) { return tt::softmax(x[0], 0); }},
      {"log_softmax",
       OpId::log_softmax,
       {randn({4, 10})},
       [](const Vars& x) { return tt::log_softmax(x[0], -1); }},
      {"cross_entropy",
       OpId::cross_entropy,
       {randn({8, 5}), labels({8}, 5)},
       [](const Vars& x) { return tt::cross_entropy(x[0], x[1].value()); }},

      // --- convolution, pooling, dropout ---
      {"conv2d",
       OpId::conv2d,
       {randn({2, 3, 9, 9}), randn({4, 3, 3, 3})},
       [](const Vars& x) { return tt::conv2d(x[0], x[1]); }},
      {"conv2d_stride2_pad1",
       OpId::conv2d,
       {randn({2, 2, 8, 7}), randn({3, 2, 3, 3})},
       [](const Vars& x) {
         return tt::conv2d(x[0], x[1], Conv2dAttrs{2, 2, 1, 1});
       }},
      {"max_pool2d",
       OpId::max_pool2d,
       {randn({2, 3, 8, 8})},
       [](const Vars& x) { return tt::max_pool2d(x[0]); }},
      {"max_pool2d_k3_s2",
       OpId::max_pool2d,
       {randn({1, 2, 9, 9})},
       [](const Vars& x) {
         return tt::max_pool2d(x[0], Pool2dAttrs{3, 3, 2, 2});
       }},
      // Tessera's mask is not torch's random stream: compare.py checks the kept share and that
      // the kept elements (and their gradients) are scaled by 1 / (1 - p), as torch's dropout.
      {"dropout",
       OpId::dropout,
       {randn({64, 64})},
       [](const Vars& x) { return tt::dropout(x[0], 0.3f, 1234); }},

      // --- optimizer steps (torch.optim's own step from the same state) ---
      {"sgd_step",
       OpId::sgd_update,
       {constant({6, 5}), constant({6, 5}), constant({6, 5})},
       sgd_step},
      {"adam_step",
       OpId::adam_update,
       {constant({6, 5}), constant({6, 5}), constant({6, 5}), {{6, 5}, Draw::positive, 0, false}},
       adam_step},

      // --- views and copies ---
      {"reshape",
       OpId::copy,
       {randn({4, 6})},
       [](const Vars& x) {
         return tt::reshape(x[0], {2, 3, 4});
       }},
      {"transpose_copy",
       OpId::copy,
       {randn({3, 5})},
       [](const Vars& x) { return tt::copy(tt::transpose(x[0], 0, 1)); }},
  };
}

}  // namespace tessera::oracle
