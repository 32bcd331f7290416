// tessera_oracle: runs every case of the PyTorch oracle (oracle.h) on every device and writes what
// it saw for compare.py to check against torch: one safetensors file per case and device with the
// inputs (in0, in1, ...), the output (out), the random upstream gradient (grad_out) and the
// gradient of each input that requires one (grad_in0, ...), and manifest.json listing each
// (case, device) as a file, a skip (no kernel on that device for the case's op, or for another op
// it runs, such as its backward) or an error.
//
// Usage: tessera_oracle --out DIR [--devices cpu:0,vulkan:0] [--seed N] [--cases a,b]
// The inputs are fresh on every run; the seed is printed (TESSERA_TEST_SEED or --seed repeats it)
// and the same for every device, so that all devices see the same inputs of a case.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "oracle.h"
#include "tessera/tessera.h"
#include "tessera/train/safetensors.h"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using namespace tessera;
using namespace tessera::oracle;
namespace tt = tessera::train;

namespace {

std::vector<Case> all_cases() {
  std::vector<Case> all = base_cases();
  for (auto group : {tensor_cases, pointwise_cases, reduce_cases, nn_cases, attention_cases}) {
    std::vector<Case> more = group();
    all.insert(all.end(), more.begin(), more.end());
  }
  return all;
}

// Ops that have no case of their own, and why: each other op needs one (an op added without a case
// fails the test, listed as uncovered). Backward ops (named *_backward*) need none: they run in the
// gradients of their op's cases.
const std::map<std::string, std::string>& not_cased() {
  static const std::map<std::string, std::string> ops{
      {"fill", "runs in every Tensor::full and zero gradient"},
      {"dropout_mask",
       "Tessera's counter-based stream, not torch's (the conformance suite checks its bits; "
       "dropout's case applies it)"},
      {"rand",
       "Tessera's counter-based stream, not torch's (the conformance suite checks its bits)"},
      {"randn",
       "Tessera's counter-based stream, not torch's (the conformance suite checks its bits)"},
      {"randint", "Tessera's counter-based stream, not torch's (the conformance suite checks it)"},
  };
  return ops;
}

// The ops that neither a case nor not_cased() covers.
std::vector<std::string> uncovered_ops(const std::vector<Case>& cases) {
  std::set<OpId> cased;
  for (const Case& c : cases) cased.insert(c.op);
  std::vector<std::string> out;
  for (int i = 0; i < kNumOps; ++i) {
    const auto op = static_cast<OpId>(i);
    const std::string name(op_name(op));
    if (!cased.count(op) && name.find("_backward") == std::string::npos && !not_cased().count(name))
      out.push_back(name);
  }
  return out;
}

// The generator of |name|'s inputs: the run's seed and the case's name, so that every device of
// a run gets the same inputs and a case's inputs do not depend on the cases before it.
std::mt19937 case_rng(unsigned seed, const std::string& name) {
  std::seed_seq seq{seed, static_cast<unsigned>(std::hash<std::string>{}(name))};
  return std::mt19937(seq);
}

Tensor draw(const Input& in, std::mt19937& rng, Device& dev) {
  const auto n = static_cast<std::size_t>(in.shape.numel());
  if (in.draw == Draw::labels) {
    std::uniform_int_distribution<int> d(0, in.classes - 1);
    std::vector<std::int32_t> v(n);
    for (auto& x : v) x = d(rng);
    return Tensor::from<std::int32_t>(v, in.shape, &dev);
  }
  if (in.draw == Draw::labels64) {
    std::uniform_int_distribution<std::int64_t> d(0, in.classes - 1);
    std::vector<std::int64_t> v(n);
    for (auto& x : v) x = d(rng);
    return Tensor::from_bytes(v.data(), v.size() * sizeof(std::int64_t), in.shape, DType::i64,
                              &dev);
  }
  std::vector<float> v(n);
  if (in.draw == Draw::positive) {
    std::uniform_real_distribution<float> d(0.5f, 2.0f);
    for (float& x : v) x = d(rng);
  } else {
    std::normal_distribution<float> d;
    for (float& x : v) x = d(rng);
  }
  return Tensor::from(v, in.shape, &dev);
}

// |t| as safetensors can hold it, on the host: i64 as i32 (the values are indices) and bool as
// u8; |dtype| gets Tessera's own dtype name for the metadata.
Tensor storable(const Tensor& t, std::string& dtype) {
  dtype = std::string(dtype_name(t.dtype()));
  if (t.dtype() != DType::i64 && t.dtype() != DType::boolean) return t;
  std::vector<std::uint8_t> bytes(t.nbytes());
  t.copy_to_host(bytes.data(), bytes.size(), t.dtype());
  if (t.dtype() == DType::boolean)
    return Tensor::from_bytes(bytes.data(), bytes.size(), t.shape(), DType::u8);
  std::vector<std::int32_t> narrow(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < narrow.size(); ++i) {
    std::int64_t v = 0;
    std::memcpy(&v, bytes.data() + i * 8, 8);
    narrow[i] = static_cast<std::int32_t>(v);
  }
  return Tensor::from<std::int32_t>(narrow, t.shape());
}

// Runs |c| on |dev| and writes its file; returns the file's name.
std::string run_case(const Case& c, Device& dev, unsigned seed, const fs::path& dir) {
  DeviceGuard guard(dev);
  std::mt19937 rng = case_rng(seed, c.name);
  Vars leaves;
  for (const Input& in : c.inputs) {
    Tensor t = draw(in, rng, dev);
    const bool grad = in.grad && t.dtype() == DType::f32;
    leaves.emplace_back(std::move(t), grad);
  }
  const tt::Variable out = c.run(leaves);
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> meta{{"case", c.name},
                                          {"device", dev.id()},
                                          {"seed", std::to_string(seed)},
                                          {"inputs", std::to_string(leaves.size())}};
  auto put = [&](const std::string& name, const Tensor& t) {
    std::string dtype;
    tensors.emplace_back(name, storable(t.contiguous(), dtype));
    meta["dtype." + name] = dtype;
  };
  for (std::size_t i = 0; i < leaves.size(); ++i) put(fmt::format("in{}", i), leaves[i].value());
  put("out", out.value());
  if (out.requires_grad()) {
    std::vector<float> g(static_cast<std::size_t>(out.value().numel()));
    std::normal_distribution<float> d;
    for (float& x : g) x = d(rng);
    const Tensor grad_out = Tensor::from(g, out.shape(), &dev);
    out.backward(grad_out);
    put("grad_out", grad_out);
    for (std::size_t i = 0; i < leaves.size(); ++i)
      if (leaves[i].requires_grad()) {
        // An input the result does not depend on has no gradient: zeros, as torch's
        // autograd.grad(allow_unused=True) is read by compare.py.
        const Tensor gi = leaves[i].grad().defined()
                              ? leaves[i].grad()
                              : Tensor::full(leaves[i].shape(), 0.0, DType::f32, &dev);
        put(fmt::format("grad_in{}", i), gi);
      }
  }
  std::string dev_name = dev.id();
  std::replace(dev_name.begin(), dev_name.end(), ':', '_');
  const std::string file = fmt::format("{}.{}.safetensors", c.name, dev_name);
  tt::save_safetensors(dir / file, tensors, meta);
  return file;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir, device_list = "all", only;
  const char* env_seed = std::getenv("TESSERA_TEST_SEED");
  unsigned seed = env_seed ? static_cast<unsigned>(std::strtoul(env_seed, nullptr, 10))
                           : std::random_device{}();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--out") {
      out_dir = argv[i + 1];
    } else if (flag == "--devices") {
      device_list = argv[i + 1];
    } else if (flag == "--seed") {
      seed = static_cast<unsigned>(std::strtoul(argv[i + 1], nullptr, 10));
    } else if (flag == "--cases") {
      only = argv[i + 1];
    } else {
      std::cerr << "tessera_oracle: unknown option " << flag << "\n";
      return 2;
    }
  }
  if (out_dir.empty() || argc % 2 == 0) {
    std::cerr << "usage: tessera_oracle --out DIR [--devices LIST] [--seed N] [--cases a,b]\n";
    return 2;
  }
  std::printf("oracle inputs: TESSERA_TEST_SEED=%u\n", seed);
  try {
    std::vector<Device*> targets;
    if (device_list == "all") {
      targets = devices();
    } else {
      for (const DeviceSpec& spec : parse_device_list(device_list, "--devices"))
        targets.push_back(&device(spec.str()));
    }
    if (targets.empty()) throw Error("no Tessera device found; run tessera-devices");
    std::set<std::string> wanted;
    for (std::size_t at = 0; at < only.size();) {
      const std::size_t end = std::min(only.find(',', at), only.size());
      wanted.insert(only.substr(at, end - at));
      at = end + 1;
    }
    fs::create_directories(out_dir);
    json manifest{
        {"seed", seed},
        {"devices", json::array()},
        {"filtered", !wanted.empty()},
        {"uncovered_ops", wanted.empty() ? json(uncovered_ops(all_cases())) : json::array()},
        {"results", json::array()}};
    for (Device* d : targets) manifest["devices"].push_back(d->id());
    for (const Case& c : all_cases()) {
      if (!wanted.empty() && !wanted.count(c.name)) continue;
      for (Device* d : targets) {
        json r{{"case", c.name}, {"device", d->id()}};
        if (!d->kernel(c.op)) {
          r["skipped"] = fmt::format("{} is not implemented on {}", op_name(c.op), d->id());
        } else {
          try {
            r["file"] = run_case(c, *d, seed, out_dir);
          } catch (const UnsupportedOperation& e) {
            // Another op of the case (its backward, usually) has no kernel on this device: a
            // skip, as in the conformance suite, which reports the missing kernel itself.
            r["skipped"] = e.what();
          } catch (const std::exception& e) {
            r["error"] = e.what();
            std::cerr << c.name << " on " << d->id() << ": " << e.what() << "\n";
          }
        }
        manifest["results"].push_back(std::move(r));
      }
    }
    std::ofstream(fs::path(out_dir) / "manifest.json") << manifest.dump(1) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "tessera_oracle: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
