#include "bench_ops.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <optional>
#include <random>

#include <fmt/format.h>

#include "tessera/profiler.h"
#include "tessera/tessera.h"

namespace tessera::bench {

namespace {

using Clock = std::chrono::steady_clock;

// One op case: its extents at full size and at the smoke test's size, and how to set it up on a
// device (returns the call to time and fills in the result's own fields).
struct OpCase {
  std::string name;
  std::vector<std::int64_t> full, tiny;
  std::function<std::function<void()>(Device&, const std::vector<std::int64_t>&, DType, json&)>
      setup;
};

std::mt19937& rng() {
  static std::mt19937 r(std::random_device{}());
  return r;
}

Tensor randn(const Shape& shape, Device& dev) {
  std::normal_distribution<float> d;
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  for (float& x : v) x = d(rng());
  return Tensor::from(v, shape, &dev);
}

std::function<void()> setup_bmm(Device& dev, const std::vector<std::int64_t>& s, DType, json& r) {
  const std::int64_t b = s[0], m = s[1], k = s[2], n = s[3];
  r["shape"] = fmt::format("[{}, {}, {}] x [{}, {}, {}]", b, m, k, b, k, n);
  r["flop"] = 2.0 * double(b) * double(m) * double(n) * double(k);
  const Tensor x = randn({b, m, k}, dev), y = randn({b, k, n}, dev);
  return [x, y] { (void)bmm(x, y); };
}

std::function<void()> setup_layer_norm(Device& dev, const std::vector<std::int64_t>& s, DType,
                                       json& r) {
  const std::int64_t rows = s[0], cols = s[1];
  r["shape"] = fmt::format("[{}, {}], normalized_shape [{}], weight and bias", rows, cols, cols);
  r["call"] = "layer_norm + layer_norm_backward";
  const Tensor x = randn({rows, cols}, dev), w = randn({cols}, dev), b = randn({cols}, dev);
  const Tensor g = randn({rows, cols}, dev);
  return [x, w, b, g, cols] {
    const LayerNormResult y = layer_norm(x, {cols}, w, b, 1e-5);
    (void)layer_norm_backward(g, x, {cols}, y.mean, y.rstd, w, 1e-5);
  };
}

std::function<void()> setup_attention(Device& dev, const std::vector<std::int64_t>& s, DType dtype,
                                      json& r) {
  const Shape shape{s[0], s[1], s[2], s[3]};
  r["shape"] =
      fmt::format("batch {}, heads {}, tokens {}, head dim {}, causal", s[0], s[1], s[2], s[3]);
  r["dtype"] = dtype_name(dtype);
  r["call"] = "scaled_dot_product_attention_forward + _backward";
  const Tensor q = randn(shape, dev).to(dtype), k = randn(shape, dev).to(dtype),
               v = randn(shape, dev).to(dtype), g = randn(shape, dev).to(dtype);
  AttentionAttrs attrs;
  attrs.is_causal = true;
  return [q, k, v, g, attrs] {
    const auto [out, lse] = scaled_dot_product_attention_forward(q, k, v, attrs);
    (void)scaled_dot_product_attention_backward(g, q, k, v, out, lse, attrs);
  };
}

std::function<void()> setup_embedding_backward(Device& dev, const std::vector<std::int64_t>& s,
                                               DType, json& r) {
  const std::int64_t n = s[0], vocab = s[1], dim = s[2];
  r["shape"] = fmt::format("{} int64 indices uniform in [0, {}), grad [{}, {}] -> [{}, {}]", n,
                           vocab, n, dim, vocab, dim);
  std::uniform_int_distribution<std::int64_t> d(0, vocab - 1);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  for (auto& i : idx) i = d(rng());
  const Tensor indices =
      Tensor::from_bytes(idx.data(), idx.size() * sizeof(std::int64_t), {n}, DType::i64, &dev);
  const Tensor g = randn({n, dim}, dev);
  return [g, indices, vocab] { (void)embedding_backward(g, indices, vocab); };
}

std::function<void()> setup_transpose(Device& dev, const std::vector<std::int64_t>& s, DType,
                                      json& r) {
  const std::int64_t rows = s[0], cols = s[1];
  r["shape"] = fmt::format("[{}, {}] -> [{}, {}]", rows, cols, cols, rows);
  r["call"] = "x.t().contiguous()";
  r["bytes"] = 8.0 * double(rows) * double(cols);  // each element read and written once
  const Tensor x = randn({rows, cols}, dev);
  return [x] { (void)x.t().contiguous(); };
}

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases{
      {"bmm", {64, 256, 256, 256}, {2, 8, 8, 8}, setup_bmm},
      {"layer_norm", {8192, 1024}, {4, 16}, setup_layer_norm},
      {"attention", {8, 8, 512, 64}, {1, 2, 8, 4}, setup_attention},
      // V = 50257: GPT-2's vocabulary.
      {"embedding_backward", {32768, 50257, 512}, {16, 50, 8}, setup_embedding_backward},
      // A GPT's activations [batch x tokens, width], the GEMM's copies of them (ops_gemm.cpp).
      {"transpose", {16384, 1536}, {40, 36}, setup_transpose},
  };
  return cases;
}

double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Seconds per call of |fn|: the median of |repeat| runs of |calls| calls and one synchronisation,
// after one warm-up run.
double seconds_per_call(Device& dev, int calls, int repeat, const std::function<void()>& fn) {
  auto run = [&] {
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) fn();
    dev.queue().synchronize();
    return std::chrono::duration<double>(Clock::now() - t0).count() / calls;
  };
  run();
  std::vector<double> t;
  for (int i = 0; i < repeat; ++i) t.push_back(run());
  return median(t);
}

std::string size_list(const std::vector<std::int64_t>& s) {
  std::string out;
  for (std::int64_t x : s) out += fmt::format("{}{}", out.empty() ? "" : ",", x);
  return out;
}

}  // namespace

const std::vector<std::string>& op_case_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const OpCase& c : op_cases()) n.push_back(c.name);
    return n;
  }();
  return names;
}

json profile_kernels(Device& dev, int calls, const std::function<void()>& fn,
                     const std::string& title) {
  std::optional<Profiler> prof;
  try {
    prof.emplace(dev);
  } catch (const UnsupportedOperation&) {
    return nullptr;
  }
  fn();
  const std::vector<KernelTime> times = prof->stop();
  std::cerr << fmt::format("{}: device time of {} calls\n", title, calls)
            << format_kernel_times(times);
  json out = json::array();
  for (const KernelTime& t : times)
    out.push_back({{"kernel", t.name},
                   {"launches", static_cast<double>(t.calls) / calls},
                   {"seconds", t.seconds / calls}});
  return out;
}

std::vector<json> bench_op_cases(Device& dev, const std::vector<std::string>& cases,
                                 const OpCaseOptions& options, std::map<std::string, json>& peers) {
  const bool gpu = dev.info().type != DeviceType::cpu;
  const std::string torch_device = gpu ? "cuda" : "cpu";
  const int calls = gpu ? 10 : 1;
  std::vector<const OpCase*> chosen;
  for (const OpCase& c : op_cases())
    if (std::find(cases.begin(), cases.end(), c.name) != cases.end()) chosen.push_back(&c);
  json& peer = peers[torch_device];
  if (peer.is_null()) {
    json sizes = json::object();
    std::string names;
    for (const OpCase* c : chosen) {
      sizes[c->name] = options.tiny ? c->tiny : c->full;
      names += (names.empty() ? "" : ",") + c->name;
    }
    peer = options.run_peer({"--device", torch_device, "--cases", names, "--sizes", sizes.dump(),
                             "--iters", std::to_string(calls), "--repeat",
                             std::to_string(options.repeat), "--dtype",
                             std::string(dtype_name(options.dtype))});
  }
  std::vector<json> results;
  for (const OpCase* c : chosen) {
    const std::vector<std::int64_t>& size = options.tiny ? c->tiny : c->full;
    json r{{"case", c->name}, {"device", dev.id()}, {"size", options.tiny ? "tiny" : "full"}};
    DeviceGuard guard(dev);
    const std::function<void()> fn = c->setup(dev, size, options.dtype, r);
    const double s = seconds_per_call(dev, calls, options.repeat, fn);
    r["seconds"] = s;
    if (options.profile)
      r["kernels"] = profile_kernels(
          dev, calls,
          [&] {
            for (int i = 0; i < calls; ++i) fn();
          },
          fmt::format("{} on {}", c->name, dev.id()));
    if (r.contains("flop")) r["gflops"] = r["flop"].get<double>() / s / 1e9;
    if (r.contains("bytes")) r["gb_per_s"] = r["bytes"].get<double>() / s / 1e9;
    if (peer.contains("error")) {
      r["peer_error"] = peer["error"];
    } else if (peer.contains("results") && peer["results"].contains(c->name)) {
      const json& p = peer["results"][c->name];
      r["peer"] = fmt::format("{} {} on {} ({} threads)", peer["peer"].get<std::string>(),
                              p["call"].get<std::string>(), peer["device_name"].get<std::string>(),
                              peer["threads"].get<int>());
      if (p.contains("fused")) r["peer_fused"] = p["fused"];
      r["peer_seconds"] = p["seconds"];
      r["ratio"] = p["seconds"].get<double>() / s;
    } else {
      r["peer_error"] =
          fmt::format("the peer reported no result for {} (sizes {})", c->name, size_list(size));
    }
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace tessera::bench
