// The oracle's cases for the element-wise math, comparisons and selection ops (neg ... where,
// masked_fill). compare.py's CASES has the torch side of each, under the same name.
#include "oracle.h"
#include "tessera/ops.h"

namespace tessera::oracle {

namespace tt = tessera::train;
using tt::Variable;

std::vector<Case> pointwise_cases() {
  return {
      {"neg", OpId::neg, {randn({3, 17})}, [](const Vars& x) { return tt::neg(x[0]); }},
      {"abs", OpId::abs, {randn({3, 17})}, [](const Vars& x) { return tt::abs(x[0]); }},
      {"sign",
       OpId::sign,
       {constant({3, 17})},
       [](const Vars& x) { return Variable(sign(x[0].value())); }},
      {"sqrt", OpId::sqrt, {positive({3, 17})}, [](const Vars& x) { return tt::sqrt(x[0]); }},
      {"rsqrt", OpId::rsqrt, {positive({3, 17})}, [](const Vars& x) { return tt::rsqrt(x[0]); }},
      {"pow_3", OpId::pow, {randn({3, 17})}, [](const Vars& x) { return tt::pow(x[0], 3.0); }},
      {"pow_half",
       OpId::pow,
       {positive({3, 17})},
       [](const Vars& x) { return tt::pow(x[0], 0.5); }},
      {"clamp",
       OpId::clamp,
       {randn({5, 13})},
       [](const Vars& x) { return tt::clamp(x[0], -0.5, 0.7); }},
      {"clamp_min",
       OpId::clamp,
       {randn({5, 13})},
       [](const Vars& x) { return tt::clamp(x[0], 0.1); }},
      {"gelu", OpId::gelu, {randn({4, 33})}, [](const Vars& x) { return tt::gelu(x[0]); }},
      {"gelu_tanh",
       OpId::gelu,
       {randn({4, 33})},
       [](const Vars& x) { return tt::gelu(x[0], "tanh"); }},
      {"silu", OpId::silu, {randn({4, 33})}, [](const Vars& x) { return tt::silu(x[0]); }},
      {"erf", OpId::erf, {randn({4, 33})}, [](const Vars& x) { return tt::erf(x[0]); }},
      {"minimum",
       OpId::minimum,
       {randn({4, 5}), randn({4, 5})},
       [](const Vars& x) { return tt::minimum(x[0], x[1]); }},
      {"maximum_broadcast",
       OpId::maximum,
       {randn({3, 1, 5}), randn({4, 5})},
       [](const Vars& x) { return tt::maximum(x[0], x[1]); }},
      // Comparisons give masks (bool, stored as u8): compared exactly.
      {"lt",
       OpId::lt,
       {constant({4, 6}), constant({4, 6})},
       [](const Vars& x) { return Variable(lt(x[0].value(), x[1].value())); }},
      {"ge_broadcast",
       OpId::ge,
       {constant({4, 6}), constant({6})},
       [](const Vars& x) { return Variable(ge(x[0].value(), x[1].value())); }},
      {"gt_scalar",
       OpId::gt,
       {constant({4, 6})},
       [](const Vars& x) { return Variable(gt(x[0].value(), 0.25)); }},
      // eq/ne against a transposed view of the same values: equal on the diagonal.
      {"eq_view",
       OpId::eq,
       {constant({5, 5})},
       [](const Vars& x) { return Variable(eq(x[0].value(), x[0].value().t())); }},
      {"ne_view",
       OpId::ne,
       {constant({5, 5})},
       [](const Vars& x) { return Variable(ne(x[0].value(), x[0].value().t())); }},
      {"le_scalar",
       OpId::le,
       {constant({7})},
       [](const Vars& x) { return Variable(le(x[0].value(), -0.1)); }},
      // where and masked_fill on the mask c > 0 of a constant input c.
      {"where",
       OpId::where,
       {constant({4, 5}), randn({4, 5}), randn({4, 5})},
       [](const Vars& x) { return tt::where(gt(x[0].value(), 0.0), x[1], x[2]); }},
      {"where_broadcast",
       OpId::where,
       {constant({4, 1}), randn({4, 5}), randn({5})},
       [](const Vars& x) { return tt::where(gt(x[0].value(), 0.0), x[1], x[2]); }},
      {"masked_fill",
       OpId::masked_fill,
       {constant({3, 8}), randn({3, 8})},
       [](const Vars& x) { return tt::masked_fill(x[1], gt(x[0].value(), 0.0), -2.5); }},
  };
}

}  // namespace tessera::oracle
