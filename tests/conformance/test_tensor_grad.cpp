// Gradient checks of the tensor API's differentiable views and copies (narrow, slice, select,
// permute, unsqueeze, squeeze, expand, flatten, cat, stack, split, chunk, index_select) against
// central finite differences, on every device: for L = <f(x), w> with random w and a random
// direction v, <dL/dx, v> must match (L(x + eps v) - L(x - eps v)) / (2 eps).
#include <gtest/gtest.h>

#include <cmath>

#include "cases.h"
#include "gradcheck.h"
#include "tessera/tessera.h"
#include "tessera/train/autograd.h"

using namespace tessera;
using namespace tessera::conformance;
namespace tt = tessera::train;

namespace {

using Fn = GradFn;

// These functions are linear in their inputs, so the difference quotient is exact up to rounding:
// a large step and a tight tolerance.
void gradcheck(Device& d, const std::vector<Shape>& shapes, const Fn& f) {
  std::vector<GradInput> inputs;
  for (const Shape& s : shapes) inputs.push_back({s, randn(s.numel())});
  conformance::gradcheck(d, inputs, f, 1e-2, 1e-3);
}

Case grad(const std::string& name, OpId op, std::vector<Shape> shapes, Fn f) {
  return {"grad_" + name, op, [=](Device& d) { gradcheck(d, shapes, f); }};
}

}  // namespace

std::vector<Case> tessera::conformance::tensor_grad_cases() {
  std::vector<Case> c;
  c.push_back(grad("narrow", OpId::copy_into, {{3, 7, 2}},
                   [](auto& v) { return tt::narrow(v[0], 1, -5, 3); }));
  c.push_back(grad("slice_step", OpId::copy_into, {{3, 7, 2}},
                   [](auto& v) { return tt::slice(v[0], -2, 1, 7, 2); }));
  c.push_back(grad("select", OpId::copy_into, {{3, 7, 2}},
                   [](auto& v) { return tt::select(v[0], 0, -1); }));
  c.push_back(grad("permute", OpId::copy, {{3, 4, 5}}, [](auto& v) {
    // A non-contiguous result used by an op that copies it: gradients pass back through permute.
    return tt::copy(tt::permute(v[0], {2, 0, 1}));
  }));
  c.push_back(grad("unsqueeze_squeeze_flatten", OpId::copy, {{3, 1, 4}}, [](auto& v) {
    return tt::flatten(tt::unsqueeze(tt::squeeze(v[0], 1), -1), 0, 1);
  }));
  c.push_back(grad("expand", OpId::add, {{3, 1}, {4, 3, 5}}, [](auto& v) {
    return tt::add(tt::expand(v[0], {4, 3, 5}), v[1]);
  }));
  c.push_back(grad("cat", OpId::copy_into, {{2, 3}, {2, 1}, {2, 4}}, [](auto& v) {
    return tt::cat({v[0], v[1], v[2]}, 1);
  }));
  c.push_back(grad("stack", OpId::copy_into, {{3, 4}, {3, 4}}, [](auto& v) {
    return tt::stack({v[0], v[1]}, -1);
  }));
  c.push_back(grad("split_chunk", OpId::copy_into, {{7, 3}}, [](auto& v) {
    const auto parts = tt::split(v[0], 3, 0);   // 3, 3, 1 rows
    const auto halves = tt::chunk(v[0], 2, 1);  // 2, 1 columns
    return tt::cat({tt::flatten(parts[2]), tt::flatten(parts[0]), tt::flatten(halves[1])}, 0);
  }));
  c.push_back(grad("index_select", OpId::index_select, {{4, 5, 3}}, [](auto& v) {
    const Tensor idx = Tensor::from<std::int64_t>(std::vector<std::int64_t>{4, 0, 4, 2, 4}, {5},
                                                  &v[0].value().device());
    return tt::index_select(v[0], 1, idx);
  }));
  return c;
}
