// tessera-devices: which plugins loaded (and why others did not), which devices exist, which one
// is the default and what the fallback chain is. Like `vulkaninfo --summary` or `clinfo -l`.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>

#include <fmt/format.h>
#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "tessera/tessera.h"

namespace po = boost::program_options;
using json = nlohmann::ordered_json;
using namespace tessera;

namespace {

int ops_covered(const Device& d) {
  int n = 0;
  for (const OpDef& op : op_defs()) n += d.kernel(op.id) != nullptr;
  return n;
}

std::vector<std::string> missing_ops(const Device& d) {
  std::vector<std::string> out;
  for (const OpDef& op : op_defs())
    if (!d.kernel(op.id)) out.emplace_back(op.name);
  return out;
}

// One --check: a 256x192 @ 192x128 matmul on |d| against the same on cpu:0 (f64 when there is no
// cpu device), on fresh random inputs.
json check_device(Device& d) {
  json r{{"device", d.id()}};
  try {
    constexpr std::int64_t m = 256, k = 192, n = 128;
    std::mt19937 rng(std::random_device{}());
    std::normal_distribution<float> dist;
    std::vector<float> a(m * k), b(k * n);
    for (float& v : a) v = dist(rng);
    for (float& v : b) v = dist(rng);
    std::vector<double> ref(m * n, 0.0);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t p = 0; p < k; ++p)
        for (std::int64_t j = 0; j < n; ++j) ref[i * n + j] += double(a[i * k + p]) * b[p * n + j];
    const Tensor ta = Tensor::from(a, {m, k}, &d), tb = Tensor::from(b, {k, n}, &d);
    (void)matmul(ta, tb).to_vector<float>();  // warm-up: pipelines, kernels, caches
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<float> out = matmul(ta, tb).to_vector<float>();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    double num = 0, den = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
      num += (out[i] - ref[i]) * (out[i] - ref[i]);
      den += ref[i] * ref[i];
    }
    const double err = std::sqrt(num / den);
    r["ms"] = ms;
    r["error"] = err;
    r["ok"] = std::isfinite(err) && err < 1e-4;
  } catch (const std::exception& e) {
    r["ok"] = false;
    r["message"] = e.what();
  }
  return r;
}

json device_json(Device& d, bool verbose) {
  const DeviceInfo& info = d.info();
  const MemoryInfo mem = d.allocator().memory();
  json j{{"id", d.id()},
         {"plugin", d.plugin_name()},
         {"type", device_type_name(info.type)},
         {"name", info.name},
         {"vendor", info.vendor},
         {"driver", info.driver},
         {"memory_total", mem.total},
         {"memory_free", mem.free},
         {"compute_units", info.compute_units},
         {"score", info.score},
         {"ops_supported", ops_covered(d)},
         {"ops_total", kNumOps}};
  if (verbose) {
    json props = json::object();
    for (const auto& [k, v] : info.properties) props[k] = v;
    j["properties"] = props;
    j["missing_ops"] = missing_ops(d);
  }
  return j;
}

void print_text(const json& j, bool verbose) {
  fmt::print("Plugins (in search order):\n");
  if (j["plugins"].empty()) fmt::print("  none found\n");
  for (const auto& p : j["plugins"]) {
    fmt::print("  {:<10} {:<8} {:<9} {}\n", p["name"].get<std::string>(),
               p["version"].get<std::string>().empty() ? "-" : p["version"].get<std::string>(),
               p["status"].get<std::string>(), p["path"].get<std::string>());
    if (!p["reason"].get<std::string>().empty())
      fmt::print("  {:<10} {}{}\n", "",
                 p["status"] == "failed" ? fmt::format("[{}] ", p["stage"].get<std::string>()) : "",
                 p["reason"].get<std::string>());
  }
  fmt::print("\nDevices:\n");
  if (j["devices"].empty()) fmt::print("  none\n");
  for (const auto& d : j["devices"]) {
    fmt::print("  {:<9} {:<14} {}\n", d["id"].get<std::string>(), d["type"].get<std::string>(),
               d["name"].get<std::string>());
    fmt::print("  {:<9} driver {}, memory {} total / {} free, {} compute units, ops {}/{}\n", "",
               d["driver"].get<std::string>(), format_bytes(d["memory_total"]),
               format_bytes(d["memory_free"]), d["compute_units"].get<int>(),
               d["ops_supported"].get<int>(), d["ops_total"].get<int>());
    if (verbose) {
      for (const auto& [k, v] : d["properties"].items())
        fmt::print("  {:<9} {}: {}\n", "", k, v.get<std::string>());
      if (!d["missing_ops"].empty())
        fmt::print("  {:<9} missing ops: {}\n", "",
                   fmt::join(d["missing_ops"].get<std::vector<std::string>>(), ", "));
    }
  }
  fmt::print("\n");
  if (j["default_device"].contains("error"))
    fmt::print("Default device: none\n  {}\n", j["default_device"]["error"].get<std::string>());
  else
    fmt::print("Default device: {} ({})\n", j["default_device"]["id"].get<std::string>(),
               j["default_device"]["reason"].get<std::string>());
  const auto chain = j["fallback"].get<std::vector<std::string>>();
  fmt::print("Fallback: {}\n",
             chain.empty()
                 ? "off (unsupported ops are errors; TESSERA_FALLBACK=1 runs them on the CPU)"
                 : fmt::format("{}", fmt::join(chain, " -> ")));
  if (j.contains("check")) {
    fmt::print("\nCheck (256x192 @ 192x128 matmul against an f64 reference):\n");
    for (const auto& c : j["check"]) {
      if (c.contains("error"))
        fmt::print("  {:<9} {:<4} {:8.3f} ms  error {:.2e}\n", c["device"].get<std::string>(),
                   c["ok"].get<bool>() ? "ok" : "FAIL", c["ms"].get<double>(),
                   c["error"].get<double>());
      else
        fmt::print("  {:<9} FAIL {}\n", c["device"].get<std::string>(),
                   c["message"].get<std::string>());
    }
  }
  for (const auto& r : j["fallback_routes"])
    fmt::print("Fell back: {} -> {}: {} ops, {} moved\n", r["from"].get<std::string>(),
               r["to"].get<std::string>(), r["ops"].get<std::uint64_t>(),
               format_bytes(r["bytes"].get<std::size_t>()));
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description opts(
      "Usage: tessera-devices [options]\n\nLists Tessera's plugins and devices.\n\nOptions");
  opts.add_options()("help,h", "show this help")(
      "json", "print JSON (keys documented in docs/tessera-devices.md)")(
      "verbose,v", "also show features, limits and the ops each device lacks")(
      "check", "run a small matmul on every device and compare it with a reference")(
      "isolate",
      "load each plugin in a child process first, so that one that crashes while loading is "
      "reported (and skipped) instead of ending tessera-devices");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "tessera-devices: " << e.what() << "\n" << opts;
    return 2;
  }
  if (vm.count("help")) {
    std::cout << opts
              << "\nExit status: 0 when at least one device works (and --check passed), 1 when "
                 "none does or a check failed, 2 for bad options, a malformed TESSERA_* variable "
                 "or a requested device (TESSERA_DEVICE) that can not run.\n"
                 "A plugin that crashes the process while loading is named on stderr; "
                 "TESSERA_DISABLE_PLUGINS=NAME skips it.\n";
    return 0;
  }
  const bool verbose = vm.count("verbose") > 0, as_json = vm.count("json") > 0;
  if (vm.count("isolate")) isolate_plugin_loading();  // before the runtime starts
  json j;
  j["version"] = "0.1.0";
  try {
    j["plugins"] = json::array();
    for (const PluginRecord& r : plugin_records())
      j["plugins"].push_back({{"name", r.name},
                              {"version", r.version},
                              {"path", r.path.string()},
                              {"status", load_outcome_name(r.outcome)},
                              {"stage", load_stage_name(r.stage)},
                              {"reason", r.reason}});
    j["devices"] = json::array();
    for (Device* d : devices()) j["devices"].push_back(device_json(*d, verbose));
    j["fallback"] = json::array();
    for (Device* d : fallback_chain()) j["fallback"].push_back(d->id());
  } catch (const Error& e) {
    fmt::print(stderr, "tessera-devices: {}\n", e.what());
    return 2;
  }
  // 2: a malformed variable, or a device the user named that can not run; 1: auto found none.
  int default_status = 0;
  try {
    Device& d = default_device();
    j["default_device"] = {{"id", d.id()}, {"reason", default_device_reason()}};
  } catch (const ConfigError& e) {
    default_status = 2;
    j["default_device"] = {{"error", e.what()}};
  } catch (const Error& e) {
    const auto specs = parse_device_list(config().device);
    default_status = specs.size() == 1 && specs[0].is_auto() ? 1 : 2;
    j["default_device"] = {{"error", e.what()}};
  }
  bool checks_ok = true;
  if (vm.count("check")) {
    j["check"] = json::array();
    for (Device* d : devices()) {
      json c = check_device(*d);
      checks_ok = checks_ok && c["ok"].get<bool>();
      j["check"].push_back(c);
    }
  }
  j["fallback_routes"] = json::array();
  for (const FallbackRoute& r : fallback_stats())
    j["fallback_routes"].push_back(
        {{"from", r.from}, {"to", r.to}, {"ops", r.ops}, {"bytes", r.bytes}});
  if (as_json)
    std::cout << j.dump(2) << "\n";
  else
    print_text(j, verbose);
  if (default_status != 0) return default_status;
  if (j["devices"].empty() || !checks_ok) return 1;
  return 0;
}
