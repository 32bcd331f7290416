// PluginLoader: finds, checks and loads plugin shared objects, recording every attempt.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tessera/backend.h"

namespace tessera {

// Where an attempt to load a plugin ended.
enum class LoadStage {
  permissions,  // the file or its directory is writable by others: refused before loading
  format,       // not a regular file, or not an ELF shared object
  open,         // dlopen failed (a missing dependency, an undefined symbol, wrong architecture)
  entry_point,  // no tessera_plugin_entry symbol, or it returned null
  abi,          // ABI version, descriptor size, toolchain or name mismatch
  create,       // the plugin's create function failed or threw
  devices,      // loaded, but the backend has no device
  ready,        // loaded with at least one device
};

enum class LoadOutcome { loaded, failed, disabled, shadowed };

std::string_view load_stage_name(LoadStage stage);
std::string_view load_outcome_name(LoadOutcome outcome);

// One attempt, as tessera-devices shows it.
struct PluginRecord {
  std::filesystem::path path;
  std::string name;     // from the file name (libtessera-plugin-NAME.so)
  std::string version;  // from the descriptor, once read
  LoadOutcome outcome = LoadOutcome::failed;
  LoadStage stage = LoadStage::format;
  std::string reason;  // why it failed, or the backend's status note
};

// A loaded plugin: its backend keeps the library loaded for as long as it lives.
struct LoadedPlugin {
  std::string name;
  std::string version;
  std::filesystem::path path;
  std::shared_ptr<Backend> backend;
};

struct LoadResult {
  std::vector<PluginRecord> records;  // every attempt, in search order
  std::vector<LoadedPlugin> plugins;  // loaded plugins (with or without devices), in search order
};

// Loads every libtessera-plugin-*.so of |dirs| in order (files of one directory sorted by name).
// A plugin whose name is in |disabled| is recorded as disabled without being opened; a name that
// was already loaded from an earlier directory is recorded as shadowed. Nothing a plugin does at
// load or create time can throw out of this function. Not thread-safe; the runtime calls it once.
LoadResult load_plugins(const std::vector<std::filesystem::path>& dirs,
                        const std::vector<std::string>& disabled);

// The built-in plugin directories: <prefix>/lib/tessera/plugins relative to libtessera_core.so,
// and, when the core runs from its build tree, the build tree's plugin directory.
std::vector<std::filesystem::path> builtin_plugin_dirs();

// Why |path| (a plugin file) must not be loaded because others than its owner and root may write
// it or its directory; empty when it is safe. Group write counts unless the group is root's or the
// owner's own private group.
std::string unsafe_permissions(const std::filesystem::path& path);

}  // namespace tessera
