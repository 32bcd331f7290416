#include "tessera/train/modules.h"

#include <algorithm>
#include <cstdlib>
#include <ostream>
#include <set>
#include <typeinfo>

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/generator.h"
#include "tessera/ops.h"
#include "type_name.h"

namespace tessera::train {

Generator& default_init_generator() {
  thread_local Generator gen(0);
  return gen;
}

void seed_everything(std::uint64_t seed) {
  default_init_generator() = Generator(seed);
  tessera::manual_seed(seed);
}

Variable Module::forward(const Variable&) {
  throw InvalidArgument(fmt::format("{} has no forward(Variable); call its own forward", name()));
}

void Module::check_name(const std::string& n, const char* what) const {
  if (n.empty() || n.find('.') != std::string::npos)
    throw InvalidArgument(fmt::format(
        "{}.register_{}: name '{}' must be non-empty and must not contain '.'", name(), what, n));
  auto used = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& e) { return e.first == n; });
  };
  const char* kind = used(params_)     ? "a parameter"
                     : used(buffers_)  ? "a buffer"
                     : used(children_) ? "a module"
                                       : nullptr;
  if (kind)
    throw InvalidArgument(
        fmt::format("{}.register_{}: '{}' is already registered as {}", name(), what, n, kind));
}

Variable& Module::register_parameter(std::string n, Tensor value, bool requires_grad) {
  check_name(n, "parameter");
  auto v = std::make_unique<Variable>();
  if (value.defined()) *v = Variable(std::move(value), requires_grad);
  params_.emplace_back(std::move(n), std::move(v));
  return *params_.back().second;
}

Tensor& Module::register_buffer(std::string n, Tensor value) {
  check_name(n, "buffer");
  buffers_.emplace_back(std::move(n), std::make_unique<Tensor>(std::move(value)));
  return *buffers_.back().second;
}

void Module::add_child(std::string n, std::shared_ptr<Module> module) {
  check_name(n, "module");
  if (!module) throw InvalidArgument(fmt::format("{}.register_module: '{}' is null", name(), n));
  children_.emplace_back(std::move(n), std::move(module));
}

void Module::collect(const std::string& prefix, bool recurse, std::vector<Slot>& out) const {
  for (const auto& [n, v] : params_)
    if (v->defined()) out.push_back({prefix + n, v.get(), nullptr});
  for (const auto& [n, t] : buffers_)
    if (t->defined()) out.push_back({prefix + n, nullptr, t.get()});
  if (recurse)
    for (const auto& [n, c] : children_) c->collect(prefix + n + ".", true, out);
}

std::vector<NamedParameter> Module::named_parameters(bool recurse) {
  std::vector<Slot> slots;
  collect("", recurse, slots);
  std::vector<NamedParameter> out;
  std::set<const Node*> seen;  // a tied parameter is listed once
  for (const Slot& s : slots)
    if (s.param && seen.insert(s.param->node().get()).second) out.push_back({s.name, s.param});
  return out;
}

std::vector<Variable> Module::parameters(bool recurse) {
  std::vector<Variable> out;
  for (const NamedParameter& p : named_parameters(recurse)) out.push_back(*p.variable);
  return out;
}

std::vector<NamedBuffer> Module::named_buffers(bool recurse) {
  std::vector<Slot> slots;
  collect("", recurse, slots);
  std::vector<NamedBuffer> out;
  for (const Slot& s : slots)
    if (s.buffer) out.push_back({s.name, s.buffer});
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) {
  std::vector<Tensor> out;
  for (const NamedBuffer& b : named_buffers(recurse)) out.push_back(*b.tensor);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  return children_;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& c : children_) out.push_back(c.second);
  return out;
}

namespace {
void walk(const std::string& prefix, Module* m, std::set<Module*>& seen,
          std::vector<std::pair<std::string, Module*>>& out) {
  if (!seen.insert(m).second) return;
  out.emplace_back(prefix, m);
  for (const auto& [n, c] : m->named_children())
    walk(prefix.empty() ? n : prefix + "." + n, c.get(), seen, out);
}
}  // namespace

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  std::set<Module*> seen;
  walk("", this, seen, out);
  return out;
}

std::vector<Module*> Module::modules() {
  std::vector<Module*> out;
  for (const auto& m : named_modules()) out.push_back(m.second);
  return out;
}

std::int64_t Module::num_parameters() {
  std::int64_t n = 0;
  for (const NamedParameter& p : named_parameters()) n += p.variable->value().numel();
  return n;
}

StateDict Module::state_dict() const {
  std::vector<Slot> slots;
  collect("", true, slots);
  StateDict out;
  for (const Slot& s : slots) out.emplace_back(s.name, s.param ? s.param->value() : *s.buffer);
  return out;
}

namespace {

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (int i = 0; i < s.rank(); ++i) out += fmt::format("{}{}", i ? ", " : "", s[i]);
  return out + "]";
}

std::string quoted(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& k : keys) out += fmt::format("{}\"{}\"", out.empty() ? "" : ", ", k);
  return out;
}

// |src| on |device| in storage of its own (a loaded value never aliases the caller's tensor).
Tensor own_copy(const Tensor& src, Device& device) {
  Tensor t = src.to(device);
  return t.shares_storage(src) ? tessera::copy(t) : t;
}

}  // namespace

IncompatibleKeys Module::load_state_dict(const StateDict& state, bool strict) {
  std::vector<Slot> slots;
  collect("", true, slots);
  std::map<std::string, const Tensor*> given;
  std::vector<std::string> problems, repeated;
  for (const auto& [k, t] : state) {
    if (!given.emplace(k, &t).second) repeated.push_back(k);
    if (!t.defined()) problems.push_back(fmt::format("the value of {} is undefined", k));
  }
  IncompatibleKeys result;
  std::set<std::string> known;
  for (const Slot& s : slots) {
    known.insert(s.name);
    const auto it = given.find(s.name);
    if (it == given.end()) {
      result.missing_keys.push_back(s.name);
      continue;
    }
    const Tensor& src = *it->second;
    const Tensor& dst = s.param ? s.param->value() : *s.buffer;
    if (!src.defined()) continue;
    if (!(src.shape() == dst.shape()))
      problems.push_back(fmt::format(
          "size mismatch for {}: copying a param with shape {} from checkpoint, the shape in "
          "current model is {}.",
          s.name, shape_str(src.shape()), shape_str(dst.shape())));
    else if (src.dtype() != dst.dtype())
      problems.push_back(fmt::format(
          "dtype mismatch for {}: copying a param of dtype {} from checkpoint, the dtype in "
          "current model is {}.",
          s.name, dtype_name(src.dtype()), dtype_name(dst.dtype())));
  }
  // Tied parameters (one Variable under two names, as GPT's transformer.wte.weight and
  // lm_head.weight): the values given for both must be equal, else one would silently win.
  std::map<const Node*, std::string> first_name;
  for (const Slot& s : slots) {
    if (!s.param) continue;
    const auto [first, fresh] = first_name.emplace(s.param->node().get(), s.name);
    const auto a = given.find(first->second), b = given.find(s.name);
    if (fresh || a == given.end() || b == given.end() || !a->second->defined() ||
        !b->second->defined() || !(a->second->shape() == b->second->shape()) ||
        a->second->dtype() != b->second->dtype())
      continue;
    auto bytes = [](const Tensor& t) {
      std::vector<unsigned char> v(t.nbytes());
      t.copy_to_host(v.data(), v.size(), t.dtype());
      return v;
    };
    if (bytes(*a->second) != bytes(*b->second))
      problems.push_back(fmt::format(
          "{} and {} are one tied parameter in the current model, but the values given for them "
          "differ.",
          first->second, s.name));
  }
  for (const auto& [k, t] : state)
    if (!known.count(k) && std::find(result.unexpected_keys.begin(), result.unexpected_keys.end(),
                                     k) == result.unexpected_keys.end())
      result.unexpected_keys.push_back(k);
  if (!repeated.empty())
    problems.insert(problems.begin(),
                    fmt::format("Repeated key(s) in state_dict: {}.", quoted(repeated)));
  if (strict) {
    if (!result.unexpected_keys.empty())
      problems.insert(problems.begin(), fmt::format("Unexpected key(s) in state_dict: {}.",
                                                    quoted(result.unexpected_keys)));
    if (!result.missing_keys.empty())
      problems.insert(problems.begin(), fmt::format("Missing key(s) in state_dict: {}.",
                                                    quoted(result.missing_keys)));
  }
  if (!problems.empty()) {
    std::string msg = fmt::format("Error(s) in loading state_dict for {}:", name());
    for (const std::string& p : problems) msg += "\n\t" + p;
    throw InvalidArgument(msg);
  }
  for (const Slot& s : slots) {
    const auto it = given.find(s.name);
    if (it == given.end()) continue;
    if (s.param)
      s.param->set_value(own_copy(*it->second, s.param->value().device()));
    else
      *s.buffer = own_copy(*it->second, s.buffer->device());
  }
  return result;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_) c.second->train(on);
}

void Module::to(Device& device) {
  std::vector<Slot> slots;
  collect("", true, slots);
  for (const Slot& s : slots) {
    if (s.param) {
      s.param->set_value(s.param->value().to(device));
      s.param->zero_grad();
    } else {
      *s.buffer = s.buffer->to(device);
    }
  }
}

void Module::zero_grad(bool set_to_none) {
  for (const NamedParameter& p : named_parameters()) {
    if (set_to_none || !p.variable->grad().defined()) {
      p.variable->zero_grad();
    } else {
      Tensor g = p.variable->grad();  // shares the gradient's storage
      fill_(g, 0.0);
    }
  }
}

std::string Module::name() const {
  const std::string full = detail::type_name(typeid(*this));
  const std::size_t colon = full.rfind("::", full.find('<'));
  return colon == std::string::npos ? full : full.substr(colon + 2);
}

std::string Module::describe() const {
  return fmt::format("{}({})", name(), extra_repr());
}

namespace {
// Indents every line after the first by two spaces (torch's _addindent).
std::string indent(const std::string& s) {
  std::string out;
  for (char c : s) {
    out += c;
    if (c == '\n') out += "  ";
  }
  return out;
}
}  // namespace

std::string repr(const Module& m) {
  const auto kids = m.named_children();
  if (kids.empty()) return m.describe();
  std::string s = m.name() + "(\n";
  if (const std::string extra = m.extra_repr(); !extra.empty()) s += "  " + indent(extra) + "\n";
  for (const auto& [n, c] : kids) s += fmt::format("  ({}): {}\n", n, indent(repr(*c)));
  return s + ")";
}

std::ostream& operator<<(std::ostream& os, const Module& m) {
  return os << repr(m);
}

// --- containers ---

Sequential& Sequential::add(std::shared_ptr<Module> m) {
  if (!m) throw InvalidArgument("Sequential::add: null module");
  register_module(std::to_string(items_.size()), m);
  items_.push_back(std::move(m));
  return *this;
}

Variable Sequential::forward(const Variable& x) {
  Variable y = x;
  for (auto& c : items_) y = c->forward(y);
  return y;
}

void ModuleList::push_back(std::shared_ptr<Module> m) {
  if (!m) throw InvalidArgument("ModuleList::push_back: null module");
  register_module(std::to_string(items_.size()), m);
  items_.push_back(std::move(m));
}

void ModuleDict::insert(std::string key, std::shared_ptr<Module> m) {
  if (!m) throw InvalidArgument(fmt::format("ModuleDict::insert: module '{}' is null", key));
  register_module(key, m);
  index_.emplace(std::move(key), std::move(m));
}

const std::shared_ptr<Module>& ModuleDict::ptr(const std::string& key) const {
  const auto it = index_.find(key);
  if (it == index_.end()) {
    std::string known;
    for (const std::string& k : keys()) known += (known.empty() ? "" : ", ") + k;
    throw InvalidArgument(
        fmt::format("ModuleDict: no module '{}' (keys: {})", key, known.empty() ? "none" : known));
  }
  return it->second;
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& c : named_children()) out.push_back(c.first);
  return out;
}

}  // namespace tessera::train
