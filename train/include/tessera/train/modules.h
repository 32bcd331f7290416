// Modules as LibTorch's C++ frontend (torch::nn::Module) has them: a module registers its
// parameters, buffers and child modules by name in its constructor, and everything else follows
// from those registrations: named_parameters(), state_dict() and load_state_dict() with
// PyTorch's names and order, train()/eval() and to(device) recurse by themselves.
//
//     struct Block : Module {
//       Block(int c)
//           : conv(register_module("conv", std::make_shared<Conv2d>(c, c, 3, 1, 1))),
//             bn(register_module("bn", std::make_shared<BatchNorm2d>(c))) {}
//       Variable forward(const Variable& x) override { return add(relu((*bn)((*conv)(x))), x); }
//       std::shared_ptr<Conv2d> conv;
//       std::shared_ptr<BatchNorm2d> bn;
//     };
//
// Not thread-safe: one thread uses a module at a time.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <utility>
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

// A buffer (BatchNorm2d's running_mean) and its state_dict name. The pointer stays valid while
// the module lives.
struct NamedBuffer {
  std::string name;
  Tensor* tensor;
};

// An ordered state dict, as torch's OrderedDict: names to the module's own tensors.
using StateDict = std::vector<std::pair<std::string, Tensor>>;

// What a non-strict load_state_dict skipped (torch's _IncompatibleKeys). LoadResult is the same
// type (tessera::LoadResult, the plugin loader's, has the name too: spell this one
// IncompatibleKeys where both namespaces are used).
struct IncompatibleKeys {
  std::vector<std::string> missing_keys, unexpected_keys;
};
using LoadResult = IncompatibleKeys;

// The per-thread Generator that layer constructors draw their initial weights from when they
// are given none (torch's default CPU generator; one per thread here). Starts from seed 0.
// (tessera::default_generator() and tessera::manual_seed() are the TensorGenerator's of rand and
// randn: these names differ so that code using both namespaces stays unambiguous.)
Generator& default_init_generator();
// Lightning's seed_everything: reseeds this thread's default_init_generator() and the tensor
// generator of rand/randn (tessera::manual_seed), so that a program's initial weights and random
// tensors repeat.
void seed_everything(std::uint64_t seed);

class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  virtual ~Module() = default;
  // Registered entries are held by pointer: a module is neither copied nor moved.
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The computation. The default throws InvalidArgument "<Name> has no forward(Variable); call
  // its own forward" (containers without one, modules with several inputs).
  virtual Variable forward(const Variable& x);
  Variable operator()(const Variable& x) { return forward(x); }

  // --- registration (call from the constructor, as in LibTorch) ---
  // Registers a parameter: a leaf Variable holding |value| (requires_grad as given). An undefined
  // |value| registers a None parameter (torch's register_parameter(name, None)): listed nowhere.
  // The reference stays valid while the module lives; keep a copy of the Variable (copies share
  // their node) to use it in forward. Throws InvalidArgument for an empty name, one containing
  // '.', or one already used by a parameter, buffer or child of this module.
  Variable& register_parameter(std::string name, Tensor value, bool requires_grad = true);
  // Registers a persistent buffer (in state_dict, moved by to(), never trained); an undefined
  // |value| registers a None buffer. The reference stays valid while the module lives, and
  // to()/load_state_dict() assign through it (keep the reference, not a copy). Same errors.
  Tensor& register_buffer(std::string name, Tensor value);
  // Registers a child module (its state_dict names get the prefix "name."). Throws
  // InvalidArgument for a null module or a bad name, as above.
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    add_child(std::move(name), module);
    return module;
  }

  // --- traversal, in PyTorch's order: each module's own parameters, then its own buffers, then
  // its children's, pre-order; names joined by '.' ---
  // A parameter shared by two modules (tied weights) is listed once, under its first name, as
  // torch's named_parameters() does; state_dict() lists it under both.
  std::vector<NamedParameter> named_parameters(bool recurse = true);
  std::vector<Variable> parameters(bool recurse = true);
  std::vector<NamedBuffer> named_buffers(bool recurse = true);
  std::vector<Tensor> buffers(bool recurse = true);
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  std::vector<std::shared_ptr<Module>> children() const;
  // Every module of the tree in pre-order, this one first (named "") as a non-owning pointer
  // (this module may not be owned by a shared_ptr).
  std::vector<std::pair<std::string, Module*>> named_modules();
  std::vector<Module*> modules();
  // The number of parameter elements (each shared parameter counted once).
  std::int64_t num_parameters();

  // --- state ---
  // Parameters and buffers by their names (PyTorch's state_dict keys and order); the values are
  // the module's own tensors, not copies.
  StateDict state_dict() const;
  // Copies |state| into the module's parameters and buffers, each onto the device of the tensor
  // it replaces (parameters keep their gradients; members holding a copy of a parameter's
  // Variable see the new value). Every entry is checked first: a key given twice or holding an
  // undefined tensor, a shape or dtype that differs from the module's, different values for the
  // two names of one tied parameter (GPT's transformer.wte.weight and lm_head.weight; always
  // errors), and in strict mode missing and unexpected keys. Any problem throws InvalidArgument
  // listing all of them, as torch does ("Error(s) in loading state_dict for Net:\n\tMissing key(s)
  // in state_dict: \"fc.bias\". ..."), and changes nothing. Returns the keys skipped (non-strict).
  IncompatibleKeys load_state_dict(const StateDict& state, bool strict = true);

  // --- mode, device, gradients ---
  // Training mode (Dropout active, BatchNorm on batch statistics; the default) or evaluation
  // mode, for this module and every descendant. Override to react to it, calling Module::train.
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves every parameter and buffer of the tree to |device| in place (the registered objects
  // are updated); gradients are dropped.
  void to(Device& device);
  // Drops every parameter's gradient (set_to_none, torch's default), or fills the existing ones
  // with zeros.
  void zero_grad(bool set_to_none = true);

  // --- printing ---
  // The type name ("Linear"): the demangled class name without namespaces unless overridden.
  virtual std::string name() const;
  // What torch's extra_repr gives: "in_features=3, out_features=2, bias=True" ("" by default).
  virtual std::string extra_repr() const { return ""; }
  // One line: name() + "(" + extra_repr() + ")".
  virtual std::string describe() const;

 protected:
  bool training_ = true;

 private:
  void add_child(std::string name, std::shared_ptr<Module> module);
  void check_name(const std::string& name, const char* what) const;
  struct Slot {
    std::string name;
    Variable* param;  // one of the two is set
    Tensor* buffer;
  };
  // Every defined parameter and buffer with its full name, in state_dict order.
  void collect(const std::string& prefix, bool recurse, std::vector<Slot>& out) const;

  std::vector<std::pair<std::string, std::unique_ptr<Variable>>> params_;
  std::vector<std::pair<std::string, std::unique_ptr<Tensor>>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

// Prints the module tree as torch's repr does:
//     Sequential(
//       (0): Linear(in_features=4, out_features=3, bias=True)
//       (1): ReLU()
//     )
std::ostream& operator<<(std::ostream& os, const Module& m);
// The same text as a string.
std::string repr(const Module& m);

// Runs its children in order; names them "0", "1", ... like torch.nn.Sequential.
class Sequential : public Module {
 public:
  Sequential() = default;
  // Appends |m| as child str(size()); throws InvalidArgument for null.
  Sequential& add(std::shared_ptr<Module> m);
  Sequential& push_back(std::shared_ptr<Module> m) { return add(std::move(m)); }
  template <typename M, typename... Args>
  Sequential& emplace(Args&&... args) {
    return add(std::make_shared<M>(std::forward<Args>(args)...));
  }
  Variable forward(const Variable& x) override;
  std::size_t size() const { return items_.size(); }
  // The i-th module; throws std::out_of_range past the end.
  Module& operator[](std::size_t i) { return *items_.at(i); }
  const std::shared_ptr<Module>& ptr(std::size_t i) const { return items_.at(i); }

 private:
  std::vector<std::shared_ptr<Module>> items_;
};

// A list of modules registered as "0".."n-1" (torch.nn.ModuleList); no forward.
class ModuleList : public Module {
 public:
  ModuleList() = default;
  void push_back(std::shared_ptr<Module> m);
  template <typename M, typename... Args>
  std::shared_ptr<M> emplace_back(Args&&... args) {
    auto m = std::make_shared<M>(std::forward<Args>(args)...);
    push_back(m);
    return m;
  }
  std::size_t size() const { return items_.size(); }
  // The i-th module; throws std::out_of_range past the end.
  Module& operator[](std::size_t i) { return *items_.at(i); }
  const std::shared_ptr<Module>& ptr(std::size_t i) const { return items_.at(i); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> items_;
};

// Modules by name in insertion order (torch.nn.ModuleDict); no forward.
class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  // Adds |m| as child |key|; throws InvalidArgument for null, a bad or an existing key.
  void insert(std::string key, std::shared_ptr<Module> m);
  bool contains(const std::string& key) const { return index_.count(key) != 0; }
  // The module under |key|; throws InvalidArgument naming the key and the known ones.
  Module& operator[](const std::string& key) { return *ptr(key); }
  const std::shared_ptr<Module>& ptr(const std::string& key) const;
  std::size_t size() const { return index_.size(); }
  std::vector<std::string> keys() const;

 private:
  std::map<std::string, std::shared_ptr<Module>> index_;
};

}  // namespace tessera::train
