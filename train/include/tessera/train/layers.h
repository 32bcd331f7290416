// Layers (torch.nn's modules): a Module owns its parameters as leaf Variables and computes
// forward(); backward comes from autograd. Parameters are created on the default device (or the
// one given) and move with to().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/train/autograd.h"
#include "tessera/train/random.h"

namespace tessera::train {

// A parameter and its state_dict name ("0.weight"). The pointer stays valid while the module
// lives.
struct NamedParameter {
  std::string name;
  Variable* variable;
};

// How a layer initialises its weight. torch_default is torch.nn.Linear/Conv2d's own
// (kaiming_uniform with a = sqrt(5), bias uniform in +-1/sqrt(fan_in)); the others use the
// init.h function with ReLU's gain (Kaiming) or gain 1 (Xavier) and a zero bias.
enum class Init { torch_default, kaiming_uniform, kaiming_normal, xavier_uniform, xavier_normal };

// The base of every layer. Not thread-safe: one training loop uses a module at a time.
class Module {
 public:
  virtual ~Module() = default;

  virtual Variable forward(const Variable& x) = 0;
  Variable operator()(const Variable& x) { return forward(x); }
  // "Linear(in_features=784, out_features=512)", children on their own lines for containers.
  virtual std::string describe() const = 0;

  // Parameters of this module and its children, in PyTorch's state_dict order and names.
  std::vector<NamedParameter> named_parameters();
  std::int64_t num_parameters();
  // Training mode (dropout active, the default) or evaluation mode, for this module and its
  // children.
  virtual void train(bool on = true) { training_ = on; }
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves every parameter to |device|; gradients are dropped.
  void to(Device& device);

  // Appends this module's parameters with |prefix| ("" or "0.") before their names; containers
  // call it on their children.
  virtual void collect_parameters(const std::string& prefix, std::vector<NamedParameter>& out);

 protected:
  bool training_ = true;
};

// y = x @ weight^T + bias; weight [out, in] as in PyTorch.
class Linear final : public Module {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, Generator& gen, bool bias = true,
         Init init = Init::torch_default);
  Variable forward(const Variable& x) override;
  std::string describe() const override;
  Variable weight, bias;

  void collect_parameters(const std::string& prefix, std::vector<NamedParameter>& out) override;

 private:
  std::int64_t in_, out_;
};

// 2-D convolution of [N,C,H,W] with weight [O,C,KH,KW] and bias [O].
class Conv2d final : public Module {
 public:
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size,
         Generator& gen, int stride = 1, int padding = 0, bool bias = true,
         Init init = Init::torch_default);
  Variable forward(const Variable& x) override;
  std::string describe() const override;
  Variable weight, bias;

  void collect_parameters(const std::string& prefix, std::vector<NamedParameter>& out) override;

 private:
  Conv2dAttrs attrs_;
};

class ReLU final : public Module {
 public:
  Variable forward(const Variable& x) override { return relu(x); }
  std::string describe() const override { return "ReLU()"; }
};

class MaxPool2d final : public Module {
 public:
  explicit MaxPool2d(int kernel_size, int stride = 0);  // stride 0: the kernel size
  Variable forward(const Variable& x) override { return max_pool2d(x, attrs_); }
  std::string describe() const override;

 private:
  Pool2dAttrs attrs_;
};

// [N, ...] -> [N, prod(...)].
class Flatten final : public Module {
 public:
  Variable forward(const Variable& x) override;
  std::string describe() const override { return "Flatten()"; }
};

// Zeroes each element with probability p in training mode and scales the rest by 1/(1-p);
// the identity in evaluation mode. The mask is a pure function of (the dropout seed and step
// set by set_dropout_step, this layer's stream), so a resumed run draws the same masks.
class Dropout final : public Module {
 public:
  // |stream| tells apart the Dropout layers of one model; by default each new layer of the
  // process takes the next number.
  explicit Dropout(float p = 0.5f, std::int64_t stream = -1);
  Variable forward(const Variable& x) override;
  std::string describe() const override;

 private:
  float p_;
  std::uint64_t stream_;
};

// Sets the seed and step that Dropout layers on this thread draw their masks from (the Trainer
// sets them before each training step).
void set_dropout_step(std::uint64_t seed, std::uint64_t step);

// Runs its children in order; names them "0", "1", ... like torch.nn.Sequential.
class Sequential final : public Module {
 public:
  Sequential() = default;
  Sequential& add(std::unique_ptr<Module> m);
  template <typename M, typename... Args>
  Sequential& emplace(Args&&... args) {
    return add(std::make_unique<M>(std::forward<Args>(args)...));
  }
  Variable forward(const Variable& x) override;
  std::string describe() const override;
  void train(bool on = true) override;
  std::size_t size() const { return children_.size(); }
  Module& operator[](std::size_t i) { return *children_.at(i); }

  void collect_parameters(const std::string& prefix, std::vector<NamedParameter>& out) override;

 private:
  std::vector<std::unique_ptr<Module>> children_;
};

}  // namespace tessera::train
