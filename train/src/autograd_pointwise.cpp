// Gradient rules of the element-wise math and selection ops (contracts in autograd.h).
#include <cmath>
#include <numbers>
#include <string>

#include "tessera/ops.h"
#include "tessera/train/autograd.h"

namespace tessera::train {
namespace {

using Grads = std::vector<Tensor>;

bool wants(const Variable& v) {
  return v.defined() && v.requires_grad();
}

Tensor zeros_like(const Tensor& t) {
  return Tensor::full(t.shape(), 0.0, t.dtype(), &t.device());
}

// The gradient of minimum (|smaller| = true) or maximum for operand |self| against |other|: the
// whole gradient where self wins, half of it on ties, none where other wins (as PyTorch).
Tensor min_max_grad(const Tensor& g, const Tensor& self, const Tensor& other, bool smaller) {
  const Tensor loses = smaller ? tessera::gt(self, other) : tessera::lt(self, other);
  return tessera::where(tessera::eq(self, other), tessera::mul_scalar(g, 0.5),
                        tessera::masked_fill(g, loses, 0.0));
}

Variable min_max(const Variable& a, const Variable& b, bool smaller) {
  Tensor y =
      smaller ? tessera::minimum(a.value(), b.value()) : tessera::maximum(a.value(), b.value());
  return make_result(y, {a, b}, [a, b, smaller](const Tensor& g) -> Grads {
    Tensor ga, gb;
    if (wants(a)) ga = sum_to(min_max_grad(g, a.value(), b.value(), smaller), a.shape());
    if (wants(b)) gb = sum_to(min_max_grad(g, b.value(), a.value(), smaller), b.shape());
    return {ga, gb};
  });
}

}  // namespace

Variable neg(const Variable& x) {
  return make_result(tessera::neg(x.value()), {x},
                     [](const Tensor& g) -> Grads { return {tessera::neg(g)}; });
}

Variable abs(const Variable& x) {
  return make_result(tessera::abs(x.value()), {x}, [x](const Tensor& g) -> Grads {
    return {tessera::mul(g, tessera::sign(x.value()))};
  });
}

Variable sqrt(const Variable& x) {
  Tensor y = tessera::sqrt(x.value());
  return make_result(y, {x}, [y](const Tensor& g) -> Grads {
    return {tessera::div(tessera::mul_scalar(g, 0.5), y)};  // g / (2 sqrt x)
  });
}

Variable rsqrt(const Variable& x) {
  Tensor y = tessera::rsqrt(x.value());
  return make_result(y, {x}, [y](const Tensor& g) -> Grads {
    return {tessera::mul(g, tessera::mul_scalar(tessera::pow(y, 3.0), -0.5))};  // -y^3 / 2
  });
}

Variable pow(const Variable& x, double exponent) {
  return make_result(
      tessera::pow(x.value(), exponent), {x}, [x, exponent](const Tensor& g) -> Grads {
        if (exponent == 0) return {zeros_like(g)};
        const Tensor d =
            tessera::mul_scalar(tessera::pow(x.value(), exponent - 1), exponent);  // p x^(p-1)
        return {tessera::mul(g, d)};
      });
}

Variable clamp(const Variable& x, std::optional<double> min, std::optional<double> max) {
  return make_result(tessera::clamp(x.value(), min, max), {x},
                     [x, min, max](const Tensor& g) -> Grads {
                       Tensor gx = g;
                       if (min) gx = tessera::masked_fill(gx, tessera::lt(x.value(), *min), 0.0);
                       if (max) gx = tessera::masked_fill(gx, tessera::gt(x.value(), *max), 0.0);
                       return {gx};
                     });
}

Variable gelu(const Variable& x, std::string_view approximate) {
  return make_result(tessera::gelu(x.value(), approximate), {x},
                     [x, form = std::string(approximate)](const Tensor& g) -> Grads {
                       return {tessera::gelu_backward(g, x.value(), form)};
                     });
}

Variable silu(const Variable& x) {
  return make_result(tessera::silu(x.value()), {x}, [x](const Tensor& g) -> Grads {
    return {tessera::silu_backward(g, x.value())};
  });
}

Variable erf(const Variable& x) {
  return make_result(tessera::erf(x.value()), {x}, [x](const Tensor& g) -> Grads {
    // g * 2/sqrt(pi) * exp(-x^2)
    const Tensor e = tessera::exp(tessera::neg(tessera::mul(x.value(), x.value())));
    return {tessera::mul(g, tessera::mul_scalar(e, std::numbers::inv_sqrtpi * 2))};
  });
}

Variable minimum(const Variable& a, const Variable& b) {
  return min_max(a, b, true);
}

Variable maximum(const Variable& a, const Variable& b) {
  return min_max(a, b, false);
}

Variable where(const Tensor& cond, const Variable& a, const Variable& b) {
  return make_result(tessera::where(cond, a.value(), b.value()), {a, b},
                     [cond, a, b](const Tensor& g) -> Grads {
                       Tensor ga, gb;
                       if (wants(a)) ga = sum_to(tessera::where(cond, g, 0.0), a.shape());
                       if (wants(b)) gb = sum_to(tessera::where(cond, 0.0, g), b.shape());
                       return {ga, gb};
                     });
}

Variable masked_fill(const Variable& x, const Tensor& mask, double value) {
  return make_result(tessera::masked_fill(x.value(), mask, value), {x},
                     [mask, s = x.shape()](const Tensor& g) -> Grads {
                       return {sum_to(tessera::masked_fill(g, mask, 0.0), s)};
                     });
}

}  // namespace tessera::train
