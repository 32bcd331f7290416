#include "tessera/train/autograd.h"

#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>

#include "autograd_nn.h"
#include "tessera/device.h"
#include "tessera/errors.h"
#include "tessera/ops.h"
#include "tessera/train/autocast.h"

namespace tessera::train {

// One value of the graph. A leaf has no backward rule; a non-leaf keeps its inputs and the rule
// until backward() has passed through it (a non-leaf without a rule was freed).
struct Node {
  Tensor value;
  Tensor grad;  // leaves only
  bool requires_grad = false;
  bool leaf = true;
  std::vector<Variable> inputs;
  std::function<std::vector<Tensor>(const Tensor&)> backward;
  // Leaves only: post-accumulate-grad hooks by id, in registration order.
  std::vector<std::pair<std::uint64_t, std::function<void(Variable&)>>> hooks;
  std::uint64_t next_hook = 1;
};

namespace {

thread_local bool g_grad_enabled = true;

Node& node_of(const Variable& v) {
  if (!v.defined()) throw InvalidArgument("use of an undefined Variable");
  return *v.node();
}

// Nodes reachable from |root| that require grad, each after every node that uses it. The owning
// pointers keep every node alive while backward() frees the graph's edges.
std::vector<std::shared_ptr<Node>> topo_order(const std::shared_ptr<Node>& root) {
  std::vector<std::shared_ptr<Node>> order;
  std::unordered_map<Node*, bool> seen;
  std::vector<std::pair<std::shared_ptr<Node>, std::size_t>> stack{{root, 0}};
  seen[root.get()] = true;
  while (!stack.empty()) {
    auto& [n, next] = stack.back();
    if (next < n->inputs.size()) {
      const std::shared_ptr<Node>& in = n->inputs[next++].node();
      if (in && in->requires_grad && !seen[in.get()]) {
        seen[in.get()] = true;
        stack.push_back({in, 0});
      }
    } else {
      order.push_back(n);
      stack.pop_back();
    }
  }
  std::reverse(order.begin(), order.end());
  return order;
}

Tensor accumulate(const Tensor& acc, const Tensor& g) {
  return acc.defined() ? tessera::add(acc, g) : g;
}

}  // namespace

Variable::Variable(Tensor value, bool requires_grad) : node_(std::make_shared<Node>()) {
  if (!value.defined()) throw InvalidArgument("a Variable needs a defined tensor");
  node_->value = std::move(value);
  node_->requires_grad = requires_grad;
}

const Tensor& Variable::value() const {
  return node_of(*this).value;
}
bool Variable::requires_grad() const {
  return node_of(*this).requires_grad;
}
bool Variable::is_leaf() const {
  return node_of(*this).leaf;
}
const Tensor& Variable::grad() const {
  return node_of(*this).grad;
}
void Variable::zero_grad() {
  node_of(*this).grad = Tensor();
}

void Variable::set_grad(Tensor grad) {
  Node& n = node_of(*this);
  if (!n.leaf)
    throw InvalidArgument(
        "set_grad: only a leaf Variable keeps a gradient; this one was computed by an op");
  if (grad.defined()) {
    if (!(grad.shape() == n.value.shape()))
      throw InvalidArgument(fmt::format("set_grad: gradient shape {} differs from the value's {}",
                                        grad.shape().str(), n.value.shape().str()));
    if (grad.dtype() != n.value.dtype())
      throw InvalidArgument(fmt::format("set_grad: gradient dtype {} differs from the value's {}",
                                        dtype_name(grad.dtype()), dtype_name(n.value.dtype())));
    if (&grad.device() != &n.value.device())
      throw InvalidArgument(fmt::format("set_grad: gradient on {} but the value is on {}",
                                        grad.device().id(), n.value.device().id()));
  }
  n.grad = std::move(grad);
}

Tensor& Variable::mutable_grad() {
  Node& n = node_of(*this);
  if (!n.leaf)
    throw InvalidArgument(
        "mutable_grad: only a leaf Variable keeps a gradient; this one was computed by an op");
  return n.grad;
}

void Variable::set_value(Tensor value) {
  Node& n = node_of(*this);
  if (!n.leaf) throw InvalidArgument("set_value: only a leaf Variable's value can be replaced");
  if (!(value.shape() == n.value.shape()))
    throw InvalidArgument(fmt::format("set_value: shape {} does not match the Variable's {}",
                                      value.shape().str(), n.value.shape().str()));
  n.value = std::move(value);
  if (n.grad.defined() && &n.grad.device() != &n.value.device()) n.grad = Tensor();
}

Variable::HookHandle Variable::register_post_accumulate_grad_hook(
    std::function<void(Variable&)> hook) {
  Node& n = node_of(*this);
  if (!n.leaf || !n.requires_grad)
    throw InvalidArgument(
        "register_post_accumulate_grad_hook: only a leaf Variable that requires grad accumulates "
        "a gradient");
  if (!hook) throw InvalidArgument("register_post_accumulate_grad_hook: the hook is empty");
  const std::uint64_t id = n.next_hook++;
  n.hooks.emplace_back(id, std::move(hook));
  return HookHandle(node_, id);
}

void Variable::HookHandle::remove() {
  if (auto n = node_.lock())
    std::erase_if(n->hooks, [this](const auto& h) { return h.first == id_; });
  node_.reset();
}

void Variable::backward() const {
  const Tensor& v = value();
  if (v.numel() != 1)
    throw InvalidArgument(
        fmt::format("backward() without a gradient needs a one-element result, got shape {}; "
                    "pass the gradient of the result",
                    v.shape().str()));
  backward(Tensor::full(v.shape(), 1.0, v.dtype(), &v.device()));
}

void Variable::backward(const Tensor& grad) const {
  Node& root = node_of(*this);
  if (!root.requires_grad)
    throw InvalidArgument(
        "backward() on a result that does not require grad: no input of its graph has "
        "requires_grad, or it was computed under NoGradGuard");
  if (!(grad.shape() == root.value.shape()))
    throw InvalidArgument(fmt::format("backward(): gradient shape {} does not match result {}",
                                      grad.shape().str(), root.value.shape().str()));

  std::unordered_map<Node*, Tensor> pending{{&root, grad}};
  for (const std::shared_ptr<Node>& n : topo_order(node_)) {
    auto it = pending.find(n.get());
    if (it == pending.end()) continue;
    const Tensor g = std::move(it->second);
    pending.erase(it);
    if (n->leaf) {
      n->grad = accumulate(n->grad, g);
      if (!n->hooks.empty()) {
        Variable leaf(n);
        // A copy, so that a hook may remove itself (or another) while they run.
        const auto hooks = n->hooks;
        for (const auto& [id, hook] : hooks) hook(leaf);
      }
      continue;
    }
    if (!n->backward)
      throw InvalidArgument("backward() through a graph that an earlier backward() already freed");
    std::vector<Tensor> grads = n->backward(g);
    for (std::size_t i = 0; i < n->inputs.size(); ++i) {
      Node* in = n->inputs[i].node().get();
      if (!in || !in->requires_grad || i >= grads.size() || !grads[i].defined()) continue;
      Tensor& slot = pending[in];
      slot = accumulate(slot, grads[i]);
    }
    n->backward = nullptr;
    n->inputs.clear();
  }
}

bool grad_enabled() {
  return g_grad_enabled;
}

NoGradGuard::NoGradGuard() : previous_(g_grad_enabled) {
  g_grad_enabled = false;
}
NoGradGuard::~NoGradGuard() {
  g_grad_enabled = previous_;
}

Variable make_result(Tensor value, std::vector<Variable> inputs,
                     std::function<std::vector<Tensor>(const Tensor&)> backward) {
  auto node = std::make_shared<Node>();
  node->value = std::move(value);
  const bool needs = g_grad_enabled && std::any_of(inputs.begin(), inputs.end(), [](auto& v) {
                       return v.defined() && v.requires_grad();
                     });
  if (needs) {
    node->requires_grad = true;
    node->leaf = false;
    node->inputs = std::move(inputs);
    node->backward = std::move(backward);
  }
  return Variable(std::move(node));
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  // Runs of adjacent dimensions that are all summed (or all kept) merge into one, so that a conv
  // bias gradient ([N,C,H,W] to [C,1,1]) is two sums over [N, C, H*W] instead of three passes,
  // the first over lines of W elements. Innermost first: each sum then shrinks the next.
  const int lead = grad.rank() - shape.rank();
  Shape merged;
  std::vector<bool> summed;
  for (int d = 0; d < grad.rank(); ++d) {
    if (grad.dim(d) == 1) continue;  // size-1 dimensions go either way
    const bool sum = d < lead || shape[d - lead] == 1;
    if (!summed.empty() && summed.back() == sum) {
      merged[merged.rank() - 1] *= grad.dim(d);
    } else {
      merged.push_back(grad.dim(d));
      summed.push_back(sum);
    }
  }
  Tensor g = grad.reshape(merged);  // copies a non-contiguous gradient first
  for (int d = merged.rank() - 1; d >= 0; --d)
    if (summed[static_cast<std::size_t>(d)]) g = tessera::sum(g, d);
  return g.reshape(shape);
}

namespace {

using Grads = std::vector<Tensor>;

// Only what the rules below need: which inputs want a gradient.
bool wants(const Variable& v) {
  return v.defined() && v.requires_grad();
}

Shape keepdim_shape(const Shape& s, int axis) {
  Shape r = s;
  r[axis] = 1;
  return r;
}

// |g| of a reduction along |axis| spread back over |shape| (a stride-0 view made contiguous).
Tensor spread(const Tensor& g, const Shape& shape, int axis) {
  return tessera::copy(g.reshape(keepdim_shape(shape, axis)).expand(shape));
}

}  // namespace

Variable matmul(const Variable& a, const Variable& b, bool ta, bool tb) {
  if (a.shape().rank() != 2 || b.shape().rank() != 2) return matmul_nd(a, b, ta, tb);
  if (const auto lo = autocast_for(a, b))  // autocast.h
    return autocast_product(a, b, Variable(), ta, tb, *lo);
  return make_result(tessera::matmul(a.value(), b.value(), ta, tb), {a, b},
                     [a, b, ta, tb](const Tensor& g) -> Grads {
                       Tensor ga, gb;
                       if (wants(a))
                         ga = ta ? tessera::matmul(b.value(), g, tb, true)
                                 : tessera::matmul(g, b.value(), false, !tb);
                       if (wants(b))
                         gb = tb ? tessera::matmul(g, a.value(), true, ta)
                                 : tessera::matmul(a.value(), g, !ta, false);
                       return {ga, gb};
                     });
}

Variable add(const Variable& a, const Variable& b) {
  return make_result(tessera::add(a.value(), b.value()), {a, b},
                     [sa = a.shape(), sb = b.shape()](const Tensor& g) -> Grads {
                       return {sum_to(g, sa), sum_to(g, sb)};
                     });
}

Variable sub(const Variable& a, const Variable& b) {
  return make_result(tessera::sub(a.value(), b.value()), {a, b},
                     [sa = a.shape(), sb = b.shape()](const Tensor& g) -> Grads {
                       return {sum_to(g, sa), sum_to(tessera::mul_scalar(g, -1.0), sb)};
                     });
}

Variable mul(const Variable& a, const Variable& b) {
  return make_result(tessera::mul(a.value(), b.value()), {a, b}, [a, b](const Tensor& g) -> Grads {
    Tensor ga, gb;
    if (wants(a)) ga = sum_to(tessera::mul(g, b.value()), a.shape());
    if (wants(b)) gb = sum_to(tessera::mul(g, a.value()), b.shape());
    return {ga, gb};
  });
}

Variable div(const Variable& a, const Variable& b) {
  Tensor y = tessera::div(a.value(), b.value());
  return make_result(y, {a, b}, [a, b, y](const Tensor& g) -> Grads {
    Tensor ga, gb;
    if (wants(a)) ga = sum_to(tessera::div(g, b.value()), a.shape());
    if (wants(b))
      gb =
          sum_to(tessera::mul_scalar(tessera::div(tessera::mul(g, y), b.value()), -1.0), b.shape());
    return {ga, gb};
  });
}

Variable add_scalar(const Variable& a, double s) {
  return make_result(tessera::add_scalar(a.value(), s), {a},
                     [](const Tensor& g) -> Grads { return {g}; });
}

Variable mul_scalar(const Variable& a, double s) {
  return make_result(tessera::mul_scalar(a.value(), s), {a},
                     [s](const Tensor& g) -> Grads { return {tessera::mul_scalar(g, s)}; });
}

Variable relu(const Variable& x) {
  return make_result(tessera::relu(x.value()), {x}, [x](const Tensor& g) -> Grads {
    return {tessera::relu_backward(g, x.value())};
  });
}

Variable exp(const Variable& x) {
  Tensor y = tessera::exp(x.value());
  return make_result(y, {x}, [y](const Tensor& g) -> Grads { return {tessera::mul(g, y)}; });
}

Variable log(const Variable& x) {
  return make_result(tessera::log(x.value()), {x},
                     [x](const Tensor& g) -> Grads { return {tessera::div(g, x.value())}; });
}

Variable tanh(const Variable& x) {
  Tensor y = tessera::tanh(x.value());
  return make_result(y, {x}, [y](const Tensor& g) -> Grads {
    // g * (1 - y^2)
    const Tensor one_minus =
        tessera::add_scalar(tessera::mul_scalar(tessera::mul(y, y), -1.0), 1.0);
    return {tessera::mul(g, one_minus)};
  });
}

Variable sigmoid(const Variable& x) {
  Tensor y = tessera::sigmoid(x.value());
  return make_result(y, {x}, [y](const Tensor& g) -> Grads {
    // g * y * (1 - y)
    const Tensor one_minus = tessera::add_scalar(tessera::mul_scalar(y, -1.0), 1.0);
    return {tessera::mul(g, tessera::mul(y, one_minus))};
  });
}

Variable sum(const Variable& x, int axis, bool keepdim) {
  const int ax = x.shape().normalize_axis(axis);
  return make_result(tessera::sum(x.value(), ax, keepdim), {x},
                     [s = x.shape(), ax](const Tensor& g) -> Grads { return {spread(g, s, ax)}; });
}

Variable mean(const Variable& x, int axis, bool keepdim) {
  const int ax = x.shape().normalize_axis(axis);
  return make_result(tessera::mean(x.value(), ax, keepdim), {x},
                     [s = x.shape(), ax](const Tensor& g) -> Grads {
                       const double inv = 1.0 / static_cast<double>(s[ax]);
                       return {tessera::mul_scalar(spread(g, s, ax), inv)};
                     });
}

Variable max(const Variable& x, int axis, bool keepdim) {
  const int ax = x.shape().normalize_axis(axis);
  return make_result(tessera::max(x.value(), ax, keepdim), {x}, [x, ax](const Tensor& g) -> Grads {
    return {tessera::max_backward(g, x.value(), ax)};
  });
}

Variable softmax(const Variable& x, int axis) {
  const int ax = x.shape().normalize_axis(axis);
  Tensor y = tessera::softmax(x.value(), ax);
  return make_result(
      y, {x}, [y, ax](const Tensor& g) -> Grads { return {tessera::softmax_backward(g, y, ax)}; });
}

Variable log_softmax(const Variable& x, int axis) {
  const int ax = x.shape().normalize_axis(axis);
  Tensor y = tessera::log_softmax(x.value(), ax);
  return make_result(y, {x}, [y, ax](const Tensor& g) -> Grads {
    return {tessera::log_softmax_backward(g, y, ax)};
  });
}

Variable cross_entropy(const Variable& logits, const Tensor& labels, CrossEntropyAttrs attrs) {
  return make_result(tessera::cross_entropy(logits.value(), labels, attrs), {logits},
                     [logits, labels, attrs](const Tensor& g) -> Grads {
                       return {tessera::cross_entropy_backward(logits.value(), labels, g, attrs)};
                     });
}

Variable conv2d(const Variable& x, const Variable& w, Conv2dAttrs attrs) {
  return make_result(tessera::conv2d(x.value(), w.value(), attrs), {x, w},
                     [x, w, attrs](const Tensor& g) -> Grads {
                       Tensor gx, gw;
                       if (wants(x))
                         gx = tessera::conv2d_backward_input(g, w.value(), x.shape(), attrs);
                       if (wants(w))
                         gw = tessera::conv2d_backward_weight(g, x.value(), w.shape(), attrs);
                       return {gx, gw};
                     });
}

Variable max_pool2d(const Variable& x, Pool2dAttrs attrs) {
  auto [y, indices] = tessera::max_pool2d(x.value(), attrs);
  return make_result(y, {x}, [indices = indices, s = x.shape(), attrs](const Tensor& g) -> Grads {
    return {tessera::max_pool2d_backward(g, indices, s, attrs)};
  });
}

Variable reshape(const Variable& x, const Shape& shape) {
  return make_result(x.value().reshape(shape), {x},
                     [s = x.shape()](const Tensor& g) -> Grads { return {g.reshape(s)}; });
}

Variable copy(const Variable& x) {
  return make_result(tessera::copy(x.value()), {x}, [](const Tensor& g) -> Grads { return {g}; });
}

Variable to(const Variable& x, DType dtype) {
  const DType from = x.value().dtype();
  if (!is_floating_point(from) || !is_floating_point(dtype))
    throw InvalidArgument(fmt::format(
        "to: a Variable converts between f32, f64, f16 and bf16 (gradients are floats), not {} to "
        "{}; convert the tensor with Tensor::to",
        dtype_name(from), dtype_name(dtype)));
  if (from == dtype) return x;
  return make_result(x.value().to(dtype), {x},
                     [from](const Tensor& g) -> Grads { return {g.to(from)}; });
}

std::optional<DType> autocast_for(const Variable& a, const Variable& b) {
  const std::optional<DType> lo = autocast_dtype();
  if (!lo || a.value().dtype() != DType::f32 || b.value().dtype() != DType::f32)
    return std::nullopt;
  return lo;
}

Variable autocast_product(const Variable& a, const Variable& b, const Variable& bias, bool ta,
                          bool tb, DType lo) {
  const Tensor al = a.value().to(lo), bl = b.value().to(lo);
  const bool matrices = al.rank() == 2 && bl.rank() == 2;
  auto product = [matrices](const Tensor& x, const Tensor& y, bool tx, bool ty) {
    return matrices ? tessera::matmul(x, y, tx, ty, DType::f32)
                    : tessera::bmm(x, y, tx, ty, DType::f32);
  };
  const Tensor y = bias.defined() ? tessera::addmm(al, bl, bias.value(), ta, tb, DType::f32)
                                  : product(al, bl, ta, tb);
  return make_result(y, {a, b, bias},
                     [a, b, bias, al, bl, ta, tb, lo, product](const Tensor& g) -> Grads {
                       const Tensor gl = g.to(lo);
                       Tensor ga, gb, gbias;
                       if (wants(a))
                         ga = ta ? product(bl, gl, tb, true) : product(gl, bl, false, !tb);
                       if (wants(b))
                         gb = tb ? product(gl, al, true, ta) : product(al, gl, !ta, false);
                       if (wants(bias)) gbias = tessera::sum(g, 0);
                       return {ga, gb, gbias};
                     });
}

Variable transpose(const Variable& x, int dim0, int dim1) {
  return make_result(x.value().transpose(dim0, dim1), {x},
                     [dim0, dim1](const Tensor& g) -> Grads { return {g.transpose(dim0, dim1)}; });
}

Variable linear(const Variable& x, const Variable& w, const Variable& b) {
  // Autocast: the product in the low dtype, the bias (an f32 one) added to its f32 sums.
  if (const auto lo = autocast_for(x, w); lo && x.shape().rank() == 2 && w.shape().rank() == 2 &&
                                          (!b.defined() || b.value().dtype() == DType::f32))
    return autocast_product(x, w, b, false, true, *lo);
  const Tensor y = b.defined() ? tessera::addmm(x.value(), w.value(), b.value(), false, true)
                               : tessera::matmul(x.value(), w.value(), false, true);
  return make_result(y, {x, w, b}, [x, w, b](const Tensor& g) -> Grads {
    Tensor gx, gw, gb;
    if (wants(x)) gx = tessera::matmul(g, w.value());
    if (wants(w)) gw = tessera::matmul(g, x.value(), true, false);
    if (wants(b)) gb = tessera::sum(g, 0);
    return {gx, gw, gb};
  });
}

Variable dropout(const Variable& x, float p, std::uint64_t seed) {
  // The mask is a pure function of (seed, element): the backward applies it to the gradient
  // again, so that none is kept between them.
  const DropoutAttrs attrs{p, seed};
  return make_result(tessera::dropout(x.value(), attrs), {x},
                     [attrs](const Tensor& g) -> Grads { return {tessera::dropout(g, attrs)}; });
}

}  // namespace tessera::train
