// Fuzz target: the environment parsers (fuzz_targets.h states the contract). The cpu plugin's
// TESSERA_CPU_THREADS and TESSERA_CPU_GEMM are parsed inside the plugin (plugins/cpu/device.cpp,
// blas.cpp) by functions it does not export, so they are not fuzzed here.
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fuzz_targets.h"
#include "tessera/config.h"
#include "tessera/errors.h"

namespace tessera::fuzz {

namespace {

template <typename T>
std::string joined(const std::vector<T>& items) {
  std::string s;
  for (const T& item : items) {
    if (!s.empty()) s += ',';
    if constexpr (std::is_same_v<T, DeviceSpec>)
      s += item.str();
    else
      s += item;
  }
  return s;
}

// Each parser, checking the promise its accepted values keep. Returns false when it refused the
// value.
bool device_list(std::string_view value) {
  const auto specs = parse_device_list(value);
  if (specs.empty()) finding("env", fmt::format("TESSERA_DEVICE='{}' gave no device", value));
  if (parse_device_list(joined(specs)) != specs)
    finding("env", fmt::format("TESSERA_DEVICE='{}' gave '{}', which parses to something else",
                               value, joined(specs)));
  return true;
}

bool fallback(std::string_view value) {
  const auto specs = parse_fallback(value);
  if (!specs.empty() && parse_fallback(joined(specs)) != specs)
    finding("env", fmt::format("TESSERA_FALLBACK='{}' gave '{}', which parses to something else",
                               value, joined(specs)));
  return true;
}

bool name_list(std::string_view value) {
  const auto names = parse_name_list(value, "TESSERA_DISABLE_PLUGINS");
  if (!names.empty() && parse_name_list(joined(names), "TESSERA_DISABLE_PLUGINS") != names)
    finding("env", fmt::format("TESSERA_DISABLE_PLUGINS='{}' gave '{}', which parses to something "
                               "else",
                               value, joined(names)));
  return true;
}

bool path_list(std::string_view value) {
  for (const auto& p : parse_path_list(value))
    if (p.empty())
      finding("env", fmt::format("TESSERA_PLUGIN_PATH='{}' gave an empty path", value));
  return true;
}

bool log_level(std::string_view value) {
  const int level = parse_log_level(value);
  if (level < 0 || level > 6)
    finding("env", fmt::format("TESSERA_LOG_LEVEL='{}' gave level {}", value, level));
  return true;
}

struct Parser {
  std::string_view variable;
  bool (*parse)(std::string_view);
};
constexpr Parser kParsers[] = {{"TESSERA_DEVICE", device_list},
                               {"TESSERA_FALLBACK", fallback},
                               {"TESSERA_DISABLE_PLUGINS", name_list},
                               {"TESSERA_PLUGIN_PATH", path_list},
                               {"TESSERA_LOG_LEVEL", log_level}};

bool accepts(const Parser& p, std::string_view value) {
  try {
    return p.parse(value);
  } catch (const Error&) {
    return false;
  }
}

// Config::from_env with |variable| set to |value| (up to its first NUL, as the environment holds
// it), then the variable as it was.
bool from_env(std::string_view variable, std::string_view value) {
  const std::string name(variable);
  const char* old = std::getenv(name.c_str());
  const std::optional<std::string> before = old ? std::optional<std::string>(old) : std::nullopt;
  ::setenv(name.c_str(), std::string(value.substr(0, value.find('\0'))).c_str(), 1);
  bool ok = true;
  try {
    (void)Config::from_env();
  } catch (const Error&) {
    ok = false;
  }
  if (before)
    ::setenv(name.c_str(), before->c_str(), 1);
  else
    ::unsetenv(name.c_str());
  return ok;
}

}  // namespace

bool env(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t eq = input.find('=');
  for (const Parser& p : kParsers)
    if (eq != std::string_view::npos && input.substr(0, eq) == p.variable) {
      const std::string_view value = input.substr(eq + 1);
      const bool accepted = accepts(p, value);
      from_env(p.variable, value);
      return accepted;
    }
  bool accepted = false;
  for (const Parser& p : kParsers) accepted = accepts(p, input) || accepted;
  return accepted;
}

}  // namespace tessera::fuzz
