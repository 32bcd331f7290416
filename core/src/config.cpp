#include "tessera/config.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>

#include <fmt/format.h>
#include <spdlog/common.h>

#include "tessera/errors.h"

namespace tessera {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t pos = s.find(sep, start);
    out.push_back(trim(s.substr(start, pos == std::string_view::npos ? pos : pos - start)));
    if (pos == std::string_view::npos) return out;
    start = pos + 1;
  }
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool valid_name(std::string_view name) {
  if (name.empty() || !std::islower(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::islower(static_cast<unsigned char>(c)) ||
           std::isdigit(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

[[noreturn]] void bad(std::string_view variable, std::string_view value, std::string_view what,
                      std::string_view accepted) {
  throw ConfigError(fmt::format("{}='{}' is not valid: {}. {}", variable, value, what, accepted));
}

constexpr std::string_view kDeviceHelp =
    "Use auto, a plugin name (cpu, vulkan, opencl), name:index (vulkan:1), or a comma list in "
    "order of preference (vulkan,cpu).";

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

std::string DeviceSpec::str() const {
  return index ? fmt::format("{}:{}", name, *index) : name;
}

std::vector<DeviceSpec> parse_device_list(std::string_view value, std::string_view variable) {
  const std::string_view v = trim(value);
  if (v.empty()) return {DeviceSpec{"auto", std::nullopt}};
  std::vector<DeviceSpec> specs;
  const auto items = split(v, ',');
  for (std::string_view item : items) {
    if (item.empty()) bad(variable, value, "it has an empty item", kDeviceHelp);
    DeviceSpec spec;
    const std::size_t colon = item.find(':');
    const std::string name = lower(trim(item.substr(0, colon)));
    if (!valid_name(name))
      bad(variable, value, fmt::format("'{}' is not a device name", item.substr(0, colon)),
          kDeviceHelp);
    spec.name = name;
    if (colon != std::string_view::npos) {
      const std::string_view idx = trim(item.substr(colon + 1));
      int n = -1;
      const auto [end, ec] = std::from_chars(idx.data(), idx.data() + idx.size(), n);
      if (idx.empty() || ec != std::errc() || end != idx.data() + idx.size() || n < 0)
        bad(variable, value, fmt::format("'{}' is not a device index (0, 1, ...)", idx),
            kDeviceHelp);
      if (spec.is_auto()) bad(variable, value, "auto takes no index", kDeviceHelp);
      spec.index = n;
    }
    if (spec.is_auto() && items.size() > 1)
      bad(variable, value, "auto can not be part of a list", kDeviceHelp);
    if (std::find(specs.begin(), specs.end(), spec) != specs.end())
      bad(variable, value, fmt::format("'{}' is listed twice", spec.str()), kDeviceHelp);
    specs.push_back(spec);
  }
  return specs;
}

std::vector<DeviceSpec> parse_fallback(std::string_view value) {
  const std::string v = lower(trim(value));
  if (v.empty() || v == "0" || v == "off" || v == "false" || v == "no") return {};
  if (v == "1" || v == "on" || v == "true" || v == "yes") return {DeviceSpec{"cpu", std::nullopt}};
  auto specs = parse_device_list(value, "TESSERA_FALLBACK");
  if (specs.size() == 1 && specs[0].is_auto())
    bad("TESSERA_FALLBACK", value, "auto is not a fallback device",
        "Use 0, 1 (the CPU), or a comma list of devices to try in order (opencl,cpu).");
  return specs;
}

std::vector<std::string> parse_name_list(std::string_view value, std::string_view variable) {
  std::vector<std::string> names;
  if (trim(value).empty()) return names;
  for (std::string_view item : split(value, ',')) {
    const std::string name = lower(item);
    if (!valid_name(name))
      bad(variable, value, fmt::format("'{}' is not a plugin name", item),
          "Use a comma list of plugin names (opencl,vulkan).");
    names.push_back(name);
  }
  return names;
}

std::vector<std::filesystem::path> parse_path_list(std::string_view value) {
  std::vector<std::filesystem::path> dirs;
  for (std::string_view item : split(value, ':')) {
    if (item.empty()) continue;
    std::error_code ec;
    auto p = std::filesystem::absolute(std::filesystem::path(item), ec);
    dirs.push_back(ec ? std::filesystem::path(item) : p.lexically_normal());
  }
  return dirs;
}

int parse_log_level(std::string_view value) {
  const std::string v = lower(trim(value));
  if (v.empty()) return spdlog::level::warn;
  static constexpr std::pair<std::string_view, spdlog::level::level_enum> kLevels[] = {
      {"trace", spdlog::level::trace},       {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},         {"warn", spdlog::level::warn},
      {"warning", spdlog::level::warn},      {"error", spdlog::level::err},
      {"critical", spdlog::level::critical}, {"off", spdlog::level::off}};
  for (const auto& [name, level] : kLevels)
    if (v == name) return level;
  bad("TESSERA_LOG_LEVEL", value, "unknown level",
      "Use one of trace, debug, info, warn, error, critical, off.");
}

Config Config::from_env() {
  Config c;
  c.device = env("TESSERA_DEVICE");
  c.fallback_value = env("TESSERA_FALLBACK");
  c.fallback = parse_fallback(c.fallback_value);
  c.plugin_path = parse_path_list(env("TESSERA_PLUGIN_PATH"));
  c.disabled_plugins = parse_name_list(env("TESSERA_DISABLE_PLUGINS"), "TESSERA_DISABLE_PLUGINS");
  c.log_level = parse_log_level(env("TESSERA_LOG_LEVEL"));
  c.cache_dir = cache_directory_from_env();
  return c;
}

std::filesystem::path cache_directory_from_env() {
  if (const char* dir = env("TESSERA_CACHE_DIR"); *dir) return dir;
  if (const char* xdg = env("XDG_CACHE_HOME"); *xdg) return std::filesystem::path(xdg) / "tessera";
  if (const char* home = env("HOME"); *home)
    return std::filesystem::path(home) / ".cache" / "tessera";
  return std::filesystem::temp_directory_path() / "tessera-cache";
}

}  // namespace tessera
