// Launch geometry of the first ops that moved into the portable layer.
#include "geometry.h"
#include "ops.h"

namespace tessera::common {
namespace {

// kOp: the V0 of kernels/unary.tk.
template <int kOp>
void unary(const OpCall& call, Launcher& l) {
  const Tensor& y = call.out(0);
  const bool backward = kOp == 7;  // relu_backward: (grad, x)
  const Tensor& x = backward ? call.in(1) : call.in(0);
  Launch(l, "unary", {kOp})
      .in(x)
      .out(y)
      .in(backward ? call.in(0) : x)
      .i(y.numel())
      .f(scalar_of(call))
      .run(y.numel());
}

}  // namespace

void add_base_ops(PortableOps& ops) {
  ops.add(OpId::add_scalar, unary<0>);
  ops.add(OpId::mul_scalar, unary<1>);
  ops.add(OpId::relu, unary<2>);
  ops.add(OpId::exp, unary<3>);
  ops.add(OpId::log, unary<4>);
  ops.add(OpId::tanh, unary<5>);
  ops.add(OpId::sigmoid, unary<6>);
  ops.add(OpId::relu_backward, unary<7>);
}

}  // namespace tessera::common
