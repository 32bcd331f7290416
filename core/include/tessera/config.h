// Parsing of Tessera's environment variables (docs/user-guide.md and the README's "Choosing the
// device" list them). Every parser is strict: a malformed value throws ConfigError naming the
// variable, the value and what is accepted.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

// One item of TESSERA_DEVICE or TESSERA_FALLBACK: "auto", "cpu", "vulkan:1".
struct DeviceSpec {
  std::string name;          // plugin name, or "auto"
  std::optional<int> index;  // device index within the plugin
  bool is_auto() const { return name == "auto"; }
  std::string str() const;
  bool operator==(const DeviceSpec&) const = default;
};

// "auto" or a comma list of name[:index] (names: lower-case letters, digits, '_' and '-', starting
// with a letter). Whitespace around items is ignored; empty items, duplicates and "auto" inside a
// list are errors. An empty value means "auto".
std::vector<DeviceSpec> parse_device_list(std::string_view value,
                                          std::string_view variable = "TESSERA_DEVICE");

// TESSERA_FALLBACK: "0"/"off"/"false"/"" -> empty chain; "1"/"on"/"true" -> {cpu}; otherwise a
// device list as above ("opencl,cpu"; "auto" is not allowed).
std::vector<DeviceSpec> parse_fallback(std::string_view value);

// TESSERA_DISABLE_PLUGINS: comma list of plugin names.
std::vector<std::string> parse_name_list(std::string_view value, std::string_view variable);

// TESSERA_PLUGIN_PATH: ':'-separated directories; empty items are skipped; relative paths are
// made absolute against the working directory.
std::vector<std::filesystem::path> parse_path_list(std::string_view value);

// TESSERA_LOG_LEVEL: trace, debug, info, warn, error, critical, off (case-insensitive). Returns the
// spdlog level as an int (spdlog::level::level_enum).
int parse_log_level(std::string_view value);

// TESSERA_CACHE_DIR, else $XDG_CACHE_HOME/tessera, else ~/.cache/tessera, else a directory under
// the system's temporary directory.
std::filesystem::path cache_directory_from_env();

// The effective configuration of a process, read from the environment when the runtime starts.
struct Config {
  // TESSERA_DEVICE as given; parsed when the default device is first needed, so that a malformed
  // value fails the calls that depend on it and not, say, tessera-devices listing the plugins.
  std::string device;
  std::vector<DeviceSpec> fallback;
  std::string fallback_value;  // TESSERA_FALLBACK as given, for messages
  std::vector<std::filesystem::path> plugin_path;
  std::vector<std::string> disabled_plugins;
  int log_level = 3;  // warn
  std::filesystem::path cache_dir;

  // Reads every TESSERA_* variable; throws ConfigError on the first malformed one (other than
  // TESSERA_DEVICE, see above).
  static Config from_env();
};

}  // namespace tessera
