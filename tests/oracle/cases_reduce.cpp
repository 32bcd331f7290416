// The oracle's cases for the reductions, normalisations, losses and optimizer steps of the op set
// (min, var, std, prod, sum/mean over several axes, layer_norm, batch_norm, cross_entropy with
// ignore_index and label smoothing, mse_loss, the gradient norm, AdamW). compare.py's CASES has
// the torch side of each, under the same name.
#include "oracle.h"
#include "tessera/ops.h"

namespace tessera::oracle {

namespace tt = tessera::train;
using tt::Variable;

namespace {

// One AdamW step on copies of (param, grad, m, v): the change of the parameter.
Variable adamw_step(const Vars& x) {
  AdamAttrs a;
  a.lr = 0.1f;
  a.weight_decay = 0.1f;
  a.step = 3;
  Tensor p = copy(x[0].value()), m = copy(x[2].value()), v = copy(x[3].value());
  adamw_update_(p, x[1].value(), m, v, a);
  return Variable(sub(p, x[0].value()));
}

}  // namespace

std::vector<Case> reduce_cases() {
  return {
      {"sum_dims",
       OpId::sum,
       {randn({3, 4, 5})},
       [](const Vars& x) {
         return tt::sum(x[0], {0, 2});
       }},
      {"mean_dims_keepdim",
       OpId::mean,
       {randn({3, 4, 5})},
       [](const Vars& x) {
         return tt::mean(x[0], {1, 2}, true);
       }},
      {"min_1", OpId::min, {randn({5, 9})}, [](const Vars& x) { return tt::min(x[0], 1); }},
      {"var_1", OpId::var, {randn({4, 127})}, [](const Vars& x) { return tt::var(x[0], 1); }},
      {"var_0_biased",
       OpId::var,
       {randn({6, 3})},
       [](const Vars& x) { return tt::var(x[0], 0, 0.0, true); }},
      {"std_1", OpId::std, {randn({4, 33})}, [](const Vars& x) { return tt::std(x[0], 1); }},
      {"prod_1", OpId::prod, {randn({4, 5})}, [](const Vars& x) { return tt::prod(x[0], 1); }},
      {"layer_norm",
       OpId::layer_norm,
       {randn({4, 33}), randn({33}), randn({33})},
       [](const Vars& x) { return tt::layer_norm(x[0], {33}, x[1], x[2], 1e-5); }},
      {"layer_norm_2d",
       OpId::layer_norm,
       {randn({3, 4, 5}), randn({4, 5}), randn({4, 5})},
       [](const Vars& x) {
         return tt::layer_norm(x[0], {4, 5}, x[1], x[2], 1e-5);
       }},
      {"batch_norm_train",
       OpId::batch_norm,
       {randn({4, 3, 5, 5}), randn({3}), randn({3})},
       [](const Vars& x) {
         return tt::batch_norm(x[0], x[1], x[2], Tensor(), Tensor(), true, 0.1, 1e-5);
       }},
      {"batch_norm_eval",
       OpId::batch_norm,
       {randn({4, 3, 5, 5}),
        randn({3}),
        randn({3}),
        constant({3}),
        {{3}, Draw::positive, 0, false}},
       [](const Vars& x) {
         return tt::batch_norm(x[0], x[1], x[2], x[3].value(), x[4].value(), false, 0.1, 1e-5);
       }},
      {"cross_entropy_ignore_smooth",
       OpId::cross_entropy,
       {randn({16, 4}), labels({16}, 4)},
       [](const Vars& x) {
         return tt::cross_entropy(x[0], x[1].value(), CrossEntropyAttrs{0, 0.1f});
       }},
      {"cross_entropy_seq",
       OpId::cross_entropy,
       {randn({2, 5, 7}), labels({2, 5}, 7)},
       [](const Vars& x) { return tt::cross_entropy(x[0], x[1].value()); }},
      {"mse_loss",
       OpId::mse_loss,
       {randn({4, 6}), randn({4, 6})},
       [](const Vars& x) { return tt::mse_loss(x[0], x[1]); }},
      {"mse_loss_sum",
       OpId::mse_loss,
       {randn({4, 6}), randn({4, 6})},
       [](const Vars& x) { return tt::mse_loss(x[0], x[1], Reduction::sum); }},
      {"mse_loss_none",
       OpId::mse_loss,
       {randn({4, 6}), randn({4, 6})},
       [](const Vars& x) { return tt::mse_loss(x[0], x[1], Reduction::none); }},
      {"total_norm",
       OpId::sum_squares,
       {constant({5, 7}), constant({13})},
       [](const Vars& x) {
         return Variable(total_norm(std::vector<Tensor>{x[0].value(), x[1].value()}));
       }},
      {"adamw_step",
       OpId::adamw_update,
       {constant({6, 5}), constant({6, 5}), constant({6, 5}), {{6, 5}, Draw::positive, 0, false}},
       adamw_step},
  };
}

}  // namespace tessera::oracle
