// The oracle's cases for the tensor API: casts, factories, views (through the differentiable
// view functions, so that their gradients are compared too), cat, stack, split, chunk and
// index_select. compare.py's CASES has the torch side of each, under the same name.
#include "oracle.h"
#include "tessera/ops.h"

namespace tessera::oracle {

namespace tt = tessera::train;
using tt::Variable;

std::vector<Case> tensor_cases() {
  return {
      {"cast_i32",
       OpId::cast,
       {constant({4, 9})},
       [](const Vars& x) { return Variable(mul_scalar(x[0].value(), 3.0).to(DType::i32)); }},
      {"cast_i64_view",
       OpId::cast,
       {constant({5, 4})},
       [](const Vars& x) { return Variable(mul_scalar(x[0].value(), 3.0).t().to(DType::i64)); }},
      {"cast_bool_f32",
       OpId::cast,
       {constant({3, 7})},
       [](const Vars& x) { return Variable(gt(x[0].value(), 0.0).to(DType::f32)); }},
      {"copy_broadcast",
       OpId::copy_into,
       {constant({3, 1, 5})},
       [](const Vars& x) {
         Tensor dst = zeros({3, 4, 5});
         copy_(dst.narrow(1, 1, 2), x[0].value());
         return Variable(dst);
       }},
      {"arange", OpId::arange, {}, [](const Vars&) { return Variable(arange(-1.5, 7.25, 0.75)); }},
      {"arange_i64",
       OpId::arange,
       {},
       [](const Vars&) { return Variable(arange(10, -7, -3, DType::i64)); }},
      {"narrow",
       OpId::copy,
       {randn({5, 8})},
       [](const Vars& x) { return tt::narrow(x[0], 1, 2, 5); }},
      {"slice_step",
       OpId::copy,
       {randn({6, 9})},
       [](const Vars& x) { return tt::slice(x[0], 1, 1, 8, 3); }},
      {"select",
       OpId::copy,
       {randn({3, 4, 5})},
       [](const Vars& x) { return tt::select(x[0], 1, -1); }},
      {"permute",
       OpId::copy,
       {randn({2, 3, 4, 5})},
       [](const Vars& x) {
         return tt::permute(x[0], {2, 0, 3, 1});
       }},
      {"unsqueeze_squeeze",
       OpId::copy,
       {randn({3, 1, 4})},
       [](const Vars& x) { return tt::unsqueeze(tt::squeeze(x[0], 1), 0); }},
      {"expand",
       OpId::copy,
       {randn({3, 1})},
       [](const Vars& x) {
         return tt::expand(x[0], {2, 3, 4});
       }},
      {"flatten",
       OpId::copy,
       {randn({2, 3, 4})},
       [](const Vars& x) {
         return tt::flatten(tt::permute(x[0], {1, 0, 2}), 1);
       }},
      {"cat",
       OpId::copy_into,
       {randn({2, 3}), randn({2, 5}), randn({2, 1})},
       [](const Vars& x) {
         return tt::cat({x[0], x[1], x[2]}, 1);
       }},
      {"stack",
       OpId::copy_into,
       {randn({3, 4}), randn({3, 4})},
       [](const Vars& x) {
         return tt::stack({x[0], x[1]}, 1);
       }},
      {"split",
       OpId::copy,
       {randn({7, 3})},
       [](const Vars& x) { return tt::split(x[0], 3, 0)[2]; }},
      {"chunk",
       OpId::copy,
       {randn({4, 10})},
       [](const Vars& x) { return tt::chunk(x[0], 3, 1)[1]; }},
      {"index_select",
       OpId::index_select,
       {randn({6, 4}), labels({9}, 6)},
       [](const Vars& x) { return tt::index_select(x[0], 0, x[1].value()); }},
      {"index_select_i64",
       OpId::index_select,
       {randn({3, 7, 2}), labels64({5}, 7)},
       [](const Vars& x) { return tt::index_select(x[0], 1, x[1].value()); }},
  };
}

}  // namespace tessera::oracle
